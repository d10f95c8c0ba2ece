"""What OpenTelemetry tracing costs a request: two proxies side by side on one scripted upstream, one untraced and
one exporting every span to an OTLP/HTTP collector (a local receiver that decodes nothing and answers 200),
driven interleaved in one run: each round sends the same batch to one then the other, alternating which goes
first.

    python bench/tracing.py [--requests 400] [--concurrency 1,6] [--chunks 50] [--rounds 4]

Each answer carries one tool call the strict policy allows, so a traced request has all its spans: the request,
one upstream attempt, one judged call and one release wait. Printed per concurrency and answer kind (streamed
and whole): CPU time per request of each proxy process (utime + stime from /proc, steadier than latency on a
shared machine), latency p50 and p99, and the ratios traced / untraced. Needs the [otel] extra.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _servers import ROOT, UPSTREAM_SCRIPT, free_port, stop_processes, wait_ready

BASH_TOOL = {"type": "function", "function": {"name": "bash", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}
COLLECTOR = """
import sys, uvicorn
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    headers = [(b"content-type", b"application/x-protobuf")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": b""})
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="error", access_log=False, lifespan="off")
"""


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def start_proxy(upstream: str, tmp: str, name: str, collector: str | None) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "ALLOWLIST_PROXY_"))}
    argv = [sys.executable, "-m", "proxy", "serve", "--port", str(port), "--upstream", upstream,
            "--db", f"sqlite:///{tmp}/{name}.db", "--policy", "policies/strict.yaml", "--log-level", "warning",
            "--no-figures-process"]
    if collector:
        argv += ["--otel-endpoint", collector]
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stderr=subprocess.DEVNULL)
    wait_ready(f"http://127.0.0.1:{port}/health")
    return proc, f"http://127.0.0.1:{port}/v1"


async def batch(base: str, stream: bool, concurrency: int, requests: int) -> list[float]:
    body = {"model": "qwen3.5-27b", "messages": [{"role": "user", "content": "go"}], "tools": [BASH_TOOL],
            "stream": stream}
    latencies: list[float] = []
    queue = iter(range(requests))
    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=concurrency)) as client:
        async def worker() -> None:
            for index in queue:
                started = time.perf_counter()
                headers = {"x-session-id": f"ses_bench_{index % 50}"}
                if stream:
                    async with client.stream("POST", base + "/chat/completions", json=body, headers=headers) as r:
                        async for _ in r.aiter_raw():
                            pass
                else:
                    r = await client.post(base + "/chat/completions", json=body, headers=headers)
                assert r.status_code == 200, r.status_code
                latencies.append((time.perf_counter() - started) * 1000)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies


async def measure(targets: dict[str, tuple[int, str]], stream: bool, concurrency: int, requests: int,
                  rounds: int) -> dict[str, dict[str, float]]:
    cpu = {name: 0.0 for name in targets}
    latencies: dict[str, list[float]] = {name: [] for name in targets}
    names = list(targets)
    per_round = max(1, requests // rounds)
    for name in names:  # warm both (connections, caches, the first spans' exporter start)
        await batch(targets[name][1], stream, concurrency, min(20, per_round))
    for round_ in range(rounds):
        for name in (names if round_ % 2 == 0 else list(reversed(names))):
            pid, base = targets[name]
            before = cpu_seconds(pid)
            latencies[name] += await batch(base, stream, concurrency, per_round)
            cpu[name] += cpu_seconds(pid) - before
    done = per_round * rounds
    return {name: {"cpu_ms": cpu[name] * 1000 / done, "p50": statistics.median(latencies[name]),
                   "p99": pct(latencies[name], 0.99)} for name in names}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=400, help="requests per proxy, per level and kind")
    parser.add_argument("--concurrency", default="1,6")
    parser.add_argument("--chunks", type=int, default=50, help="text chunks per streamed answer")
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    procs: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory() as tmp:
        try:
            up_port, collector_port = free_port(), free_port()
            upstream = f"http://127.0.0.1:{up_port}/v1"
            procs.append(subprocess.Popen([sys.executable, "-c", UPSTREAM_SCRIPT, str(up_port), str(args.chunks), "1"],
                                          cwd=ROOT))
            procs.append(subprocess.Popen([sys.executable, "-c", COLLECTOR, str(collector_port)], cwd=ROOT))
            wait_ready(upstream.removesuffix("/v1") + "/health")
            collector = f"http://127.0.0.1:{collector_port}"
            wait_ready(collector + "/")
            plain, plain_url = start_proxy(upstream, tmp, "untraced", None)
            traced, traced_url = start_proxy(upstream, tmp, "traced", collector)
            procs += [plain, traced]
            targets = {"untraced": (plain.pid, plain_url), "traced": (traced.pid, traced_url)}
            print(f"load average {os.getloadavg()[0]:.2f}; {args.requests} requests per proxy and row, "
                  f"{args.rounds} interleaved rounds")
            print(f"{'kind':>8} {'c':>3} | {'cpu ms/req off':>14} {'on':>7} {'ratio':>6} | "
                  f"{'p50 ms off':>10} {'on':>7} {'ratio':>6} | {'p99 ms off':>10} {'on':>7}")
            for concurrency in (int(c) for c in args.concurrency.split(",")):
                for stream in (True, False):
                    r = await measure(targets, stream, concurrency, args.requests, args.rounds)
                    off, on = r["untraced"], r["traced"]
                    print(f"{'stream' if stream else 'whole':>8} {concurrency:>3} | {off['cpu_ms']:>14.2f} "
                          f"{on['cpu_ms']:>7.2f} {on['cpu_ms'] / off['cpu_ms']:>6.2f} | {off['p50']:>10.2f} "
                          f"{on['p50']:>7.2f} {on['p50'] / off['p50']:>6.2f} | {off['p99']:>10.2f} {on['p99']:>7.2f}")
            print(f"load average {os.getloadavg()[0]:.2f} at the end")
        finally:
            stop_processes(procs)


if __name__ == "__main__":
    asyncio.run(main())
