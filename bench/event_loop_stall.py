"""The event-loop stall one oversized request causes for every other client (issue 26).

Serves the proxy in front of the scripted upstream, measures the loop's worst lateness (a 5 ms ticker on the
proxy's own loop) while a 25 MB request offering 100,000 tools arrives, and prints it with the answer's
status. Run: python -m bench.event_loop_stall
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from pathlib import Path

import httpx

from proxy.config import Settings
from proxy.http.app import create_app
from proxy.http.connections import server_options
from proxy.testing.scripted_upstream import ScriptedUpstream
from proxy.testing.server import ServerThread

ROOT = Path(__file__).resolve().parents[1]


async def _ticker(stop: asyncio.Event, worst: list[float]) -> None:
    while not stop.is_set():
        started = time.perf_counter()
        await asyncio.sleep(0.005)
        worst[0] = max(worst[0], time.perf_counter() - started - 0.005)


def _big_request(tools: int) -> bytes:
    schema = {"type": "object", "properties": {"command": {"type": "string", "description": "x" * 150}}}
    offered = [{"type": "function", "function": {"name": f"tool_{i}", "description": "d" * 20, "parameters": schema}}
               for i in range(tools)]
    return json.dumps({"model": "qwen3.5-27b", "messages": [{"role": "user", "content": "hi"}],
                       "tools": offered}).encode()


def main() -> None:
    body = _big_request(100_000)
    scripted = ScriptedUpstream(models=["qwen3.5-27b"])
    with tempfile.TemporaryDirectory() as tmp, ServerThread(scripted.app) as upstream:
        settings = Settings(upstream=upstream.url + "/v1", db=f"sqlite:///{tmp}/bench.db",
                            policy=ROOT / "policies" / "strict.yaml", log_level="error",
                            max_body_bytes=64 * 1024 * 1024)
        app = create_app(settings)
        with ServerThread(app, options=server_options(settings)) as proxy:
            stop, worst = asyncio.Event(), [0.0]
            ticker = asyncio.run_coroutine_threadsafe(_ticker(stop, worst), app.state.loop)
            time.sleep(0.1)
            started = time.perf_counter()
            answer = httpx.post(proxy.url + "/v1/chat/completions", content=body, timeout=120,
                                headers={"content-type": "application/json"})
            took = time.perf_counter() - started
            app.state.loop.call_soon_threadsafe(stop.set)
            ticker.result(10)
    print(f"request of {len(body) / 1e6:.1f} MB offering 100,000 tools: HTTP {answer.status_code} in {took:.2f} s; "
          f"worst event-loop stall {worst[0] * 1000:.0f} ms")


if __name__ == "__main__":
    main()
