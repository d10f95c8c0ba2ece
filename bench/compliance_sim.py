"""How much feedback that names the allowed command, and opt-in repair, shorten a MoE model's retry loops.

A scripted MoE-like model (the seed's finding: it retries the blocked shape in variants) runs tasks through
the real proxy three times, under three policies:
- `plain`: the shipped rules with the old feedback (reasons and the script list, no `{suggestion}`);
- `suggestions`: the shipped policy (its feedback names the nearest allowed command);
- `repair`: the shipped policy plus `repair: [output_filters, stderr_redirect, timeout, cd_workdir]`.

The model: each task starts with one blocked form (`| head -5`, `timeout 30`, `2>&1`, `cd docs &&`,
`curl -s URL`). After a refusal it follows a concrete command named in the feedback with probability
`--follow` (default 0.6), finds the allowed form by itself with probability `--self` (default 0.15), and
otherwise proposes the next variant of its blocked shape. Each client turn allows `retry_budget + 1`
upstream attempts; a blocked turn is followed by another turn of the same task, up to `--max-turns`.

Printed per policy: tasks that complied, turns to compliance (mean, and the share done in the first turn),
upstream attempts per turn and per task. Run: `python bench/compliance_sim.py [--tasks 200] [--seed 1]`.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from proxy.config import Settings  # noqa: E402
from proxy.http.app import create_app  # noqa: E402
from proxy.testing.characters import OPENCODE_TOOLS  # noqa: E402
from proxy.testing.scripted_upstream import Reply, ScriptedUpstream  # noqa: E402
from proxy.testing.server import ServerThread  # noqa: E402

MODEL = "qwen3.6-35b-a3b"
SEARCH = 'uv run scripts/search.py "{q}"'
# Each kind: the variants a looping model cycles through, and the allowed form it may find by itself.
KINDS: dict[str, tuple[list[str], str]] = {
    "pipe": ([SEARCH + " | head -5", SEARCH + " | head -10", SEARCH + " | tail -3", SEARCH + " | grep -i {q}"],
             SEARCH),
    "timeout": (["timeout 30 " + SEARCH, "timeout 60 " + SEARCH, "timeout 30 " + SEARCH + " 2>&1"], SEARCH),
    "stderr": ([SEARCH + " 2>&1", SEARCH + " 2>&1 | head -20", SEARCH + " 2>&1 | tail -5"], SEARCH),
    "cd": (["cd docs && " + SEARCH, "cd src && " + SEARCH, "cd docs && " + SEARCH + " | head -5"], SEARCH),
    "curl": (["curl -s https://docs.example.org/{q}", "curl -sL https://docs.example.org/{q}",
              "curl -s https://docs.example.org/{q} | head -50", "wget -qO- https://docs.example.org/{q}"],
             "uv run scripts/fetch_page.py https://docs.example.org/{q}"),
}
_SUGGESTED = re.compile(r"`(uv run scripts/[^`]+)`")
_TASK = re.compile(r"task (\d+) \((\w+)\): (\S+)")


@dataclass
class Knobs:
    follow: float
    self_fix: float
    seed: int


def _refused(message: dict[str, Any]) -> bool:
    return str(message.get("content") or "").startswith(("Rejected", "Not run"))


def model(knobs: Knobs):
    """The scripted MoE-like model, stateless: everything it needs is in the conversation it is sent."""

    def respond(body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        task, kind, query = _TASK.search(messages[0]["content"]).groups()  # type: ignore[union-attr]
        variants, allowed = KINDS[kind]
        if messages[-1]["role"] == "tool" and not _refused(messages[-1]):
            return Reply(content="Here is what I found.")
        tries = sum(1 for m in messages if m["role"] == "tool" and _refused(m))
        turns = sum(1 for m in messages if m["role"] == "assistant" and str(m.get("content") or "")
                    .startswith("allowlist-proxy blocked"))
        step = tries + turns * 4
        rng = random.Random(f"{knobs.seed}:{task}:{step}")
        command = variants[step % len(variants)].format(q=query)
        if step:
            feedback = str(messages[-1].get("content") or "") if messages[-1]["role"] == "tool" else ""
            suggested = _SUGGESTED.findall(feedback)
            concrete = [s for s in suggested if "<" not in s and not s.endswith(".py")] or []
            if concrete and rng.random() < knobs.follow:
                command = concrete[-1]
            elif rng.random() < knobs.self_fix:
                command = allowed.format(q=query)
        return Reply(content="Let me look that up.", tool_calls=[("bash", {"command": command})])

    return respond


def _policy(folder: Path, name: str) -> Path:
    text = (ROOT / "policies" / "strict.yaml").read_text().replace("name: strict-uv-scripts", f"name: sim-{name}")
    if name == "plain":
        text = text.replace(" {suggestion}\"", "\"")
    if name == "repair":
        # Beside `name:`, not appended: the shipped file ends with YAML's `...` end-of-document marker.
        repair = "repair: [output_filters, stderr_redirect, timeout, cd_workdir]"
        text = text.replace(f"name: sim-{name}", f"name: sim-{name}\n{repair}")
    path = folder / name / "policy.yaml"
    path.parent.mkdir()
    path.write_text(text)
    return path


def run_policy(name: str, tasks: list[tuple[int, str, str]], knobs: Knobs, max_turns: int,
               folder: Path) -> dict[str, float]:
    upstream = ScriptedUpstream(models=[MODEL], responder=model(knobs))
    with ServerThread(upstream.app) as up:
        settings = Settings(upstream=up.url + "/v1", db=f"sqlite:///{folder / (name + '.db')}",
                            policy=str(_policy(folder, name)), log_level="warning")
        with ServerThread(create_app(settings)) as proxy, httpx.Client(base_url=proxy.url, timeout=60) as client:
            complied, turns_needed, first_turn, turns_total = 0, [], 0, 0
            for task, kind, query in tasks:
                messages: list[dict[str, Any]] = [
                    {"role": "user", "content": f"task {task} ({kind}): {query}"}]
                for turn in range(1, max_turns + 1):
                    turns_total += 1
                    reply = client.post("/v1/chat/completions", headers={"x-session-id": f"ses_{name}_{task}"},
                                        json={"model": MODEL, "messages": messages, "tools": OPENCODE_TOOLS})
                    message = reply.json()["choices"][0]["message"]
                    if message.get("tool_calls"):
                        complied += 1
                        turns_needed.append(turn)
                        first_turn += turn == 1
                        break
                    messages += [{"role": "assistant", "content": message["content"]},
                                 {"role": "user", "content": "Please go on."}]
            attempts = len(upstream.requests)
    n = len(tasks)
    return {
        "complied": complied / n,
        "turns_to_compliance": sum(turns_needed) / len(turns_needed) if turns_needed else float("nan"),
        "first_turn": first_turn / n,
        "attempts_per_turn": attempts / turns_total,
        "attempts_per_task": attempts / n,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--follow", type=float, default=0.6, help="chance to follow a concrete suggestion")
    parser.add_argument("--self", dest="self_fix", type=float, default=0.15,
                        help="chance to find the allowed form without help")
    parser.add_argument("--max-turns", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    knobs = Knobs(args.follow, args.self_fix, args.seed)
    kinds = sorted(KINDS)
    tasks = [(i, kinds[i % len(kinds)], f"q{i}") for i in range(args.tasks)]
    print(f"{args.tasks} tasks ({', '.join(kinds)} in turn), follow {knobs.follow}, self-fix {knobs.self_fix}, "
          f"retry_budget 3, up to {args.max_turns} turns per task, seed {args.seed}")
    header = f"{'policy':<12} {'complied':>9} {'turns to compliance':>20} {'done in turn 1':>15} " \
             f"{'attempts/turn':>14} {'attempts/task':>14}"
    print(header)
    print("-" * len(header))
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("plain", "suggestions", "repair"):
            r = run_policy(name, tasks, knobs, args.max_turns, Path(tmp))
            print(f"{name:<12} {r['complied']:>8.1%} {r['turns_to_compliance']:>20.2f} {r['first_turn']:>14.1%} "
                  f"{r['attempts_per_turn']:>14.2f} {r['attempts_per_task']:>14.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
