"""Judging time per bash command over the corpus: median and p99, decision only and with explanation.

    python bench/policy_bench.py [--corpus tests/bash-allowlist.jsonl] [--repeat 200] [--against DIR]

`--against DIR` runs the same measurements on the `proxy` package of another checkout (e.g. main) in a
child process, on this branch's corpus, and prints the two side by side. Besides bash commands it times
the per-request tool path: choosing the profiles of a client's offered tools (cached per tool list) and
judging one call of each kind (shell, file, web fetch, a tool no profile knows).

Each command is judged `--repeat` times, in 5 batches; its time per call is the mean of its fastest batch
(the timer is too coarse for one call, and the best batch is the one least disturbed by other load on the
machine). The figures are the median and p99 of those times over the commands.
Targets (issue 4): decision median <= 10 us; with explanation (rejects) median <= 60 us.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if "--root" in sys.argv:  # measure another checkout's package (a child of `--against`)
    ROOT = Path(sys.argv[sys.argv.index("--root") + 1]).resolve()
sys.path.insert(0, str(ROOT))
HERE = Path(__file__).resolve().parents[1]

from proxy.policy import Policy, judge_call, judge_command  # noqa: E402
from proxy.policy.shell.matcher import matcher_for  # noqa: E402
from proxy.policy.tools.profiles import ToolSet  # noqa: E402

POLICY = {
    "name": "bench",
    "bash": {"scripts": {"search": {"flags": ["--max-results"]}, "fetch_page": {}, "summarize": {}}},
}


def per_call_us(fn: Callable[[str], object], command: str, repeat: int, batches: int = 5) -> float:
    size = max(1, repeat // batches)
    best = float("inf")
    for _ in range(batches):
        start = time.perf_counter()
        for _ in range(size):
            fn(command)
        best = min(best, (time.perf_counter() - start) / size)
    return best * 1e6


def summary(label: str, samples: list[float]) -> str:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return f"{label:<44} n={len(samples):<4} median {statistics.median(samples):7.2f} us   p99 {p99:8.2f} us"


def tool_figures(policy: Policy, repeat: int) -> dict[str, float]:
    """Microseconds per call of the per-request tool path, over OpenCode's and Qwen Code's tool lists plus a
    tool no profile knows."""
    clients = HERE / "tests" / "policy" / "client_tools"
    unknown = {"type": "function", "function": {"name": "mystery_fetch", "parameters": {
        "type": "object", "properties": {"target": {"type": "string"}, "depth": {"type": "integer"}}}}}
    payload = {"tools": [*json.loads((clients / "opencode.json").read_text())["tools"], unknown]}
    headers = {"user-agent": "opencode/1.18.33"}
    tools = ToolSet.for_request(policy, payload, headers)
    offered = set(tools.offered or {})
    calls = {
        "judge_call bash (allowed)": ("bash", {"command": 'uv run scripts/search.py "rust async"'}),
        "judge_call read": ("read", {"filePath": "src/main.py"}),
        "judge_call webfetch": ("webfetch", {"url": "https://docs.rs/tokio/latest"}),
        "judge_call unknown tool": ("mystery_fetch", {"target": "notes.txt", "depth": 2}),
        "judge_call grep include (a repeated filter)": ("grep", {"pattern": "TODO", "include": "*.{ts,tsx}"}),
        "judge_call glob pattern (a repeated filter)": ("glob", {"pattern": "src/**/*.py"}),
    }
    out = {"ToolSet.for_request (OpenCode, cached)": per_call_us(
        lambda _: ToolSet.for_request(policy, payload, headers), "", repeat)}
    for label, (name, arguments) in calls.items():
        def one(_: str, name: str = name, arguments: dict[str, object] = arguments) -> object:
            return judge_call(policy, name, arguments, offered_tools=offered, tools=tools)
        out[label] = per_call_us(one, "", repeat)
    fresh = iter(range(10**9))

    def new_filter(_: str) -> object:  # a filter not seen before: the glob is read and compared
        return judge_call(policy, "grep", {"pattern": "x", "include": f"src{next(fresh)}/**/*.{{ts,tsx}}"},
                          offered_tools=offered, tools=tools)
    out["judge_call grep include (a new filter)"] = per_call_us(new_filter, "", max(5, repeat // 20))
    # A grep over this checkout as a project on this machine: the protected reads below it are listed (kept
    # a few seconds), then the filter is compared with each.
    rooted = policy.model_copy(update={"paths": policy.paths.model_copy(update={"project_root": [str(HERE)]})})
    rooted_tools = ToolSet.for_request(rooted, payload, headers)
    # A first write judged outside an event loop waits for what the checkout's environment imports to be read
    # (a child process): nothing measured below runs beside that reading.
    judge_call(rooted, "write", {"filePath": "src/app/x.py", "content": "x"}, offered_tools=offered, tools=rooted_tools)

    def search(_: str) -> object:
        return judge_call(rooted, "grep", {"pattern": "TODO", "path": "proxy"}, offered_tools=offered,
                          tools=rooted_tools)
    out["judge_call grep over proxy/ (listing kept)"] = per_call_us(search, "", repeat)
    # Writes judged against this checkout's environment (its `.venv`, read once: what its imports could
    # resolve to), and against a project not on this machine (its layout only).
    for label, chosen, chosen_tools, path in (
            ("judge_call write, project here", rooted, rooted_tools, "src/app/new_module.py"),
            ("judge_call write top-level module, project here", rooted, rooted_tools, "bench_new_module.py"),
            ("judge_call write, project not here", policy, tools, "src/app/new_module.py")):
        def write(_: str, chosen: Policy = chosen, chosen_tools: ToolSet = chosen_tools, path: str = path) -> object:
            return judge_call(chosen, "write", {"filePath": path, "content": "x = 1"}, offered_tools=offered,
                              tools=chosen_tools)
        write("")
        out[label] = per_call_us(write, "", repeat)
    return out


def measure(corpus: Path, repeat: int) -> dict[str, list[float]]:
    cases = [json.loads(line) for line in corpus.read_text(encoding="utf-8").splitlines() if line.strip()]
    policy = Policy.model_validate(POLICY)
    matcher = matcher_for(policy)
    for case in cases:  # warm up: compile, create the tree-sitter parser, fill caches
        judge_command(policy, case["cmd"])
    commands = [c["cmd"] for c in cases]
    rejected = [c["cmd"] for c in cases if c["expect"] == "reject"]
    allowed = [c["cmd"] for c in cases if c["expect"] == "allow"]
    figures = {
        "decision only (all commands)": [per_call_us(matcher.argv, cmd, repeat) for cmd in commands],
        "decision only (allowed commands)": [per_call_us(matcher.argv, c, repeat) for c in allowed],
        "judge_command, allowed commands": [per_call_us(lambda c: judge_command(policy, c), c, repeat)
                                            for c in allowed],
        "judge_command with explanation (rejects)": [per_call_us(lambda c: judge_command(policy, c), c, repeat)
                                                     for c in rejected],
        "judge_command, all commands": [per_call_us(lambda c: judge_command(policy, c), c, repeat)
                                        for c in commands],
    }
    for label, value in tool_figures(policy, repeat * 5).items():
        figures[label] = [value]
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--corpus", type=Path, default=HERE / "tests" / "bash-allowlist.jsonl")
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--against", type=Path, help="another checkout to measure beside this one")
    parser.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.json:
        print(json.dumps(measure(args.corpus, args.repeat)))
        return 0
    mine = measure(args.corpus, args.repeat)
    if args.against is None:
        print(f"policy judging over the corpus ({args.repeat} calls each) and the per-request tool path")
        for label, samples in mine.items():
            print(summary(label, samples))
        return 0
    child = subprocess.run([sys.executable, __file__, "--root", str(args.against), "--json", "--corpus",
                            str(args.corpus), "--repeat", str(args.repeat)], capture_output=True, text=True,
                           check=True)
    theirs = json.loads(child.stdout)
    print(f"median us per call; {args.against} beside this checkout ({HERE})")
    print(f"{'':<44} {'against':>10} {'this':>10} {'change':>8}")
    for label, samples in mine.items():
        if label not in theirs:
            continue
        a, b = statistics.median(theirs[label]), statistics.median(samples)
        print(f"{label:<44} {a:10.2f} {b:10.2f} {b / a:7.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
