"""Captures what each real agent CLI writes into its first request about its working directory: the system
prompt (chat, Messages), the instructions and the leading input items (Responses: Codex's
`<environment_context>`), into tests/sessions_data/<client>.json, the project path replaced by `{cwd}` and
the HOME by `{home}`. Run after scripts/install-agent-clis.sh (and scripts/install-opencode.sh for OpenCode):
`python scripts/capture_client_prompts.py [--versioned] [client ...]`.

`--versioned` writes `<client>-<version>.json` beside the releases already captured (a new release keeps the old
one's data as a test case), with the tools the client offered (descriptions dropped) and its User-Agent."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from proxy.testing.scripted_upstream import Reply, ScriptedUpstream  # noqa: E402
from proxy.testing.server import ServerThread  # noqa: E402
from tests.e2e.clients import CLIENTS, MODEL, AgentWorld, find_client  # noqa: E402
from tests.e2e.harness import OpenCodeWorld, find_opencode  # noqa: E402

OUT = ROOT / "tests" / "sessions_data"
# A first user message that carries what the client writes: Qwen Code's context preamble, Kilo's
# `<environment_details>` block appended to the user's prompt.
_CONTEXT_MARKERS = ("working in the directory", "<environment_details>")


def _client_part(body: dict, route: str) -> dict:
    """The parts of a request the client writes itself and puts first: never the model's or a tool's."""
    if route == "responses":
        leading = []
        for item in body.get("input") or []:
            if item.get("type") not in (None, "message") or item.get("role") == "assistant":
                break
            leading.append(item)
        return {"instructions": body.get("instructions"), "input": leading[:-1]}
    if route == "messages":
        # Claude Code 2.1.332 writes its environment block as a `role: "system"` message after the user's first
        # one: the whole opening of a first request (it holds nothing the model wrote yet) is kept.
        opening = []
        for message in body.get("messages") or []:
            if message.get("role") == "assistant":
                break
            opening.append(message)
        return {"system": body.get("system"), "messages": opening}
    messages = body.get("messages") or []
    leading = []
    for message in messages:
        leading.append(message)
        if message.get("role") not in ("system", "developer"):
            text = json.dumps(message)
            if message.get("role") != "user" or not any(m in text for m in _CONTEXT_MARKERS):
                leading.pop()  # the user's own prompt; a context message the client writes first is kept
            break
    return {"messages": leading}


def _world(name: str, tmp: Path) -> tuple[AgentWorld | OpenCodeWorld, str] | None:
    """The client's throw-away world and its version, or None (reported) where the client is not installed."""
    if name == "opencode":
        opencode, version = find_opencode()
        if opencode is None:
            print(f"{name}: {version}", file=sys.stderr)
            return None
        return OpenCodeWorld(tmp, opencode), version
    spec = CLIENTS[name]
    binary, why = find_client(spec)
    if binary is None:
        print(f"{name}: {why}", file=sys.stderr)
        return None
    return AgentWorld(tmp, spec, binary), spec.version


def _tools(body: dict) -> list[dict]:
    """The offered tools as they were sent, descriptions dropped (tests/policy/client_tools' form)."""
    out = []
    for tool in body.get("tools") or []:
        tool = json.loads(json.dumps(tool))
        for holder in (tool, tool.get("function") if isinstance(tool.get("function"), dict) else {}):
            holder.pop("description", None)
        out.append(tool)
    return out


def capture(name: str, *, versioned: bool = False) -> dict | None:
    upstream = ScriptedUpstream(models=[MODEL], responder=lambda body: Reply(content="Done."))
    with ServerThread(upstream.app) as server, tempfile.TemporaryDirectory() as tmp:
        base = server.url + "/v1"
        found = _world(name, Path(tmp))
        if found is None:
            return None
        world, version = found
        world.configure(base)
        if isinstance(world, OpenCodeWorld):
            world.run("say hello", timeout=120)
        else:
            world.run(base, "say hello", timeout=120)
        route = json.loads((ROOT / "tests" / "policy" / "client_tools" / f"{name}.json").read_text())["route"]
        bodies = [b for b in upstream.requests if b.get("tools")] or upstream.requests
        first = upstream.requests.index(bodies[0])
        found = {"part": _client_part(bodies[0], route)}
        if versioned:
            found["user_agent"] = upstream.headers[first].get("user-agent") if first < len(upstream.headers) else None
            found["tools"] = _tools(bodies[0])
        text = json.dumps(found, ensure_ascii=False)
        for real, placeholder in ((str(world.project.resolve()), "{cwd}"), (str(world.project), "{cwd}"),
                                  (str(world.home), "{home}"), (tmp, "{tmp}")):
            text = text.replace(json.dumps(real)[1:-1], placeholder)
        return {"client": name, "version": version, "route": route, **json.loads(text)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--versioned", action="store_true",
                        help="write <client>-<version>.json, with the offered tools and the User-Agent")
    parser.add_argument("clients", nargs="*", default=[*CLIENTS, "opencode"])
    args = parser.parse_args()
    OUT.mkdir(exist_ok=True)
    for name in args.clients:
        found = capture(name, versioned=args.versioned)
        if found is not None:
            file = f"{name}-{found['version']}.json" if args.versioned else f"{name}.json"
            (OUT / file).write_text(json.dumps(found, ensure_ascii=False, indent=1) + "\n")
            print(f"{name}: captured into {file}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
