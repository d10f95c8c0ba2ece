"""Capture the tools an installed agent CLI offers in its first request, through a capture server on
127.0.0.1 (the scripted upstream, which answers with plain text), into a client_tools catalogue.

    python scripts/capture_client_tools.py opencode OUT.json [--binary PATH]
    python scripts/capture_client_tools.py kilo OUT.json --binary PATH

OpenCode and its fork Kilo read the same `opencode.json` provider config (tests/e2e/harness.py).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from proxy.testing.scripted_upstream import Reply, ScriptedUpstream  # noqa: E402
from proxy.testing.server import ServerThread  # noqa: E402
from tests.e2e.harness import OpenCodeWorld, find_opencode  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("client", choices=["opencode", "kilo"])
    parser.add_argument("out", type=Path)
    parser.add_argument("--binary", type=Path)
    args = parser.parse_args()
    binary = args.binary or find_opencode()[0]
    if binary is None:
        raise SystemExit("no binary: pass --binary")
    version = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60,
                             env={"HOME": tempfile.mkdtemp(), "PATH": "/usr/bin:/bin"}).stdout.strip()
    upstream = ScriptedUpstream(models=[OpenCodeWorld.model])
    upstream.script(*[Reply(content="done.") for _ in range(4)])
    with ServerThread(upstream.app) as server, tempfile.TemporaryDirectory() as root:
        world = OpenCodeWorld(Path(root), binary)
        world.configure(server.url + "/v1")
        run = world.run("say done", timeout=180)
    offered = [r for r in upstream.requests if r.get("tools")]
    if not offered:
        raise SystemExit(f"{args.client} sent no tools\n{run.stderr[-2000:]}")
    request = offered[0]
    headers = upstream.headers[-1] if getattr(upstream, "headers", None) else {}
    record = {
        "client": f"{args.client} {version}",
        "route": "chat",
        "user_agent": headers.get("user-agent") if isinstance(headers, dict) else None,
        "session_header": None,
        "note": f"Captured from {args.client} {version} (its first request with tools, through "
                "scripts/capture_client_tools.py); descriptions cut to 300 characters.",
        "tools": [_cut(t) for t in request["tools"]],
    }
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"{args.client} {version}: {len(record['tools'])} tools -> {args.out}")
    return 0


def _cut(tool: dict) -> dict:
    spec = tool.get("function")
    if isinstance(spec, dict) and isinstance(spec.get("description"), str):
        spec["description"] = spec["description"][:300]
    return tool


if __name__ == "__main__":
    raise SystemExit(main())
