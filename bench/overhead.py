"""Overhead of the proxy over a direct connection, side by side with a bare FastAPI+httpx passthrough
(and LiteLLM's proxy when installed), interleaved in one run on the same scripted upstream.

    python bench/overhead.py [--requests N] [--levels 1,8,32,128] [--chunks 200] [--audit-levels 1,6,32]

LiteLLM is looked for at $LITELLM_BIN, else `litellm` on PATH; install it in a virtual environment of its
own (`python3 -m venv /tmp/litellm-venv && /tmp/litellm-venv/bin/pip install 'litellm[proxy]'`).

Per concurrency level and target: added latency p50/p99 (target minus direct, per pair of requests sent
back to back by one worker), the requests/s ratio, for streams the chunks/s ratio, the added time to
first byte, the target's CPU time per request (what the added latency becomes once the CPUs are busy,
and steadier than latency on a small shared machine), and the target's peak RSS while the level ran
(sampled every 20 ms; `--levels 200` with streaming gives the RSS at 200 concurrent streams).

Audit before release: then every answer carries one allowed tool call, so each waits in enforce mode until its
rows are committed; printed per level are the proxy's added p50/p99 over direct, the calls released per second,
and the release wait itself (mean, from the proxy's allowlist_proxy_release_wait_seconds histogram).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _servers import Servers, free_port, rss_mb, wait_ready

# LiteLLM refuses to start without a strong master key; every target gets the same header.
KEY = "sk-" + "5f0c3a9e" * 8
BODY = {"model": "qwen3.5-27b", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 16}
HERE = Path(__file__).resolve().parent
# The tool the audit-before-release answers call (an offered tool; the call is one the strict policy allows).
BASH_TOOL = {"type": "function", "function": {"name": "bash", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def one(client: httpx.AsyncClient, base: str, stream: bool,
              extra: dict | None = None) -> tuple[float, float, int]:
    body = dict(BODY, stream=stream, **(extra or {}))
    start = time.perf_counter()
    first = None
    chunks = 0
    if stream:
        async with client.stream("POST", base + "/chat/completions", json=body) as response:
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    chunks += 1
                    if first is None:
                        first = time.perf_counter() - start
    else:
        response = await client.post(base + "/chat/completions", json=body)
        response.raise_for_status()
        first = time.perf_counter() - start
    return time.perf_counter() - start, first or 0.0, chunks


async def level(direct: str, targets: dict[str, tuple[str, int]], concurrency: int, requests: int,
                stream: bool, extra: dict | None = None) -> dict[str, dict[str, float]]:
    limits = httpx.Limits(max_connections=concurrency * 4, max_keepalive_connections=concurrency * 4)
    headers = {"authorization": f"Bearer {KEY}"}
    peak = {name: 0.0 for name in targets}
    sampler = asyncio.create_task(sample_rss(targets, peak))
    async with httpx.AsyncClient(limits=limits, timeout=120, headers=headers) as client:
        for base in [direct, *(url for url, _ in targets.values())]:  # warm every pool
            await asyncio.gather(*(one(client, base, stream, extra) for _ in range(concurrency)))
        added = {name: [] for name in targets}
        cpu_before = {name: cpu_seconds(pid) for name, (_, pid) in targets.items()}
        added_first = {name: [] for name in targets}
        totals = {name: 0.0 for name in [*targets, "direct"]}
        chunks = {name: 0 for name in [*targets, "direct"]}
        remaining = [requests]

        async def worker() -> None:
            while remaining[0] > 0:
                remaining[0] -= 1
                d_total, d_first, d_chunks = await one(client, direct, stream, extra)
                totals["direct"] += d_total
                chunks["direct"] += d_chunks
                for name, (url, _) in targets.items():
                    total, first, n = await one(client, url, stream, extra)
                    added[name].append((total - d_total) * 1000)
                    added_first[name].append((first - d_first) * 1000)
                    totals[name] += total
                    chunks[name] += n

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        cpu = {name: cpu_seconds(pid) - cpu_before[name] for name, (_, pid) in targets.items()}
    sampler.cancel()
    out = {}
    for name, (_, pid) in targets.items():
        row = {"p50": statistics.median(added[name]), "p99": pct(added[name], 0.99),
               "rps": totals["direct"] / totals[name], "ttfb": statistics.median(added_first[name]),
               "cpu": cpu[name] * 1000 / requests, "rss": max(peak[name], rss_mb(pid)),
               # answers per second the target sustains at this concurrency: workers over the mean latency
               "calls": concurrency * requests / totals[name]}
        if stream:
            row["chunks"] = (chunks[name] / totals[name]) / (chunks["direct"] / totals["direct"])
        out[name] = row
    return out


def cpu_seconds(pid: int) -> float:
    """User and system CPU time the process has used so far."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def sample_rss(targets: dict[str, tuple[str, int]], peak: dict[str, float]) -> None:
    """The RSS after a level is what the process kept; the peak under load is what it needed."""
    while True:
        for name, (_, pid) in targets.items():
            peak[name] = max(peak[name], rss_mb(pid))
        await asyncio.sleep(0.02)


def start_bare(upstream: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(HERE / "bare_passthrough.py"), str(port), upstream])
    wait_ready(f"http://127.0.0.1:{port}/health")
    return proc, f"http://127.0.0.1:{port}/v1"


def start_litellm(upstream: str, tmp: str) -> tuple[subprocess.Popen[bytes] | None, str]:
    binary = os.environ.get("LITELLM_BIN") or shutil.which("litellm")
    if not binary or not Path(binary).exists():
        return None, "LiteLLM not installed (set LITELLM_BIN): no LiteLLM column"
    config = Path(tmp) / "litellm.yaml"
    config.write_text(f"""model_list:
  - model_name: qwen3.5-27b
    litellm_params:
      model: openai/qwen3.5-27b
      api_base: {upstream}
      api_key: sk-bench
general_settings:
  master_key: {KEY}
litellm_settings:
  drop_params: true
""")
    port = free_port()
    proc = subprocess.Popen([binary, "--config", str(config), "--port", str(port), "--host", "127.0.0.1",
                             "--num_workers", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready(f"http://127.0.0.1:{port}/health/liveliness", timeout=120)
    except TimeoutError:
        proc.kill()
        return None, "LiteLLM did not start within 120 s: no LiteLLM column"
    return proc, f"http://127.0.0.1:{port}/v1"


def release_wait(proxy: str) -> tuple[float, float]:
    """(sum of seconds, count) of the proxy's release-wait histogram so far."""
    text = httpx.get(proxy.removesuffix("/v1") + "/metrics", timeout=10).text
    values = {}
    for line in text.splitlines():
        if line.startswith(("allowlist_proxy_release_wait_seconds_sum", "allowlist_proxy_release_wait_seconds_count")):
            name, value = line.split()
            values[name.rsplit("_", 1)[1]] = float(value)
    return values.get("sum", 0.0), values.get("count", 0.0)


async def audit_before_release(chunks: int, levels: list[int], requests: int) -> None:
    with Servers(chunks=chunks, tool_call=True) as servers:
        targets = {"allowlist-proxy": (servers.proxy, servers.proxy_pid)}
        for stream in (False, True):
            kind = "streaming" if stream else "non-streaming"
            print(f"\naudit before release ({kind}, one allowed tool call per answer, SQLite store)")
            print(f"{'conc':>5} {'added p50 ms':>13} {'added p99 ms':>13} {'calls/s':>9} {'release wait ms':>16}")
            for concurrency in levels:
                before = release_wait(servers.proxy)
                result = (await level(servers.upstream, targets, concurrency, max(requests, concurrency * 4),
                                      stream, {"tools": [BASH_TOOL]}))["allowlist-proxy"]
                after = release_wait(servers.proxy)
                count = after[1] - before[1]
                wait = (after[0] - before[0]) / count * 1000 if count else float("nan")
                print(f"{concurrency:>5} {result['p50']:>13.2f} {result['p99']:>13.2f} {result['calls']:>9.0f} "
                      f"{wait:>16.2f}")


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--levels", default="1,8,32,128")
    parser.add_argument("--chunks", type=int, default=200)
    parser.add_argument("--audit-levels", default="1,6,32")
    args = parser.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    await audit_before_release(args.chunks, [int(x) for x in args.audit_levels.split(",")], args.requests)
    with Servers(chunks=args.chunks) as servers, tempfile.TemporaryDirectory() as tmp:
        bare, bare_url = start_bare(servers.upstream)
        litellm, litellm_url = start_litellm(servers.upstream, tmp)
        targets = {"allowlist-proxy": (servers.proxy, servers.proxy_pid), "bare fastapi+httpx": (bare_url, bare.pid)}
        if litellm is not None:
            targets["litellm"] = (litellm_url, litellm.pid)
        else:
            print(litellm_url)
        try:
            for stream in (False, True):
                kind = f"streaming ({args.chunks} chunks)" if stream else "non-streaming"
                print(f"\n{kind}: added over direct, same scripted upstream, interleaved")
                print(f"{'conc':>5} {'target':<20} {'added p50 ms':>13} {'added p99 ms':>13} {'req/s ratio':>12} "
                      f"{'ttfb +p50 ms':>13} {'chunks/s ratio':>15} {'CPU ms/req':>11} {'peak RSS MB':>12}")
                for concurrency in levels:
                    result = await level(servers.upstream, targets, concurrency,
                                         max(args.requests, concurrency * 4), stream)
                    for name, r in result.items():
                        print(f"{concurrency:>5} {name:<20} {r['p50']:>13.2f} {r['p99']:>13.2f} {r['rps']:>12.2f} "
                              f"{r['ttfb']:>13.2f} {r.get('chunks', float('nan')):>15.2f} {r['cpu']:>11.2f} "
                              f"{r['rss']:>12.1f}")
        finally:
            for proc in (bare, litellm):
                if proc is not None:
                    proc.terminate()
                    proc.wait(20)


if __name__ == "__main__":
    asyncio.run(main())
