"""Overhead of the proxy over a direct connection, interleaved in one run on the same upstream.

    python bench/overhead.py [--requests N] [--levels 1,8,32,128]

Prints, per concurrency level: added latency p50/p99 (proxy minus direct, per pair of requests
sent back to back), the requests/s ratio, for streams the chunks/s ratio and the added time to
first byte, and the proxy's RSS.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _servers import Servers, rss_mb

BODY = {"model": "qwen3.5-27b", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 16}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def one(client: httpx.AsyncClient, base: str, stream: bool) -> tuple[float, float, int]:
    body = dict(BODY, stream=stream)
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


async def level(servers: Servers, concurrency: int, requests: int, stream: bool) -> dict[str, float]:
    limits = httpx.Limits(max_connections=concurrency * 2, max_keepalive_connections=concurrency * 2)
    async with httpx.AsyncClient(limits=limits, timeout=60) as client:
        for base in (servers.upstream, servers.proxy):  # warm both pools
            await asyncio.gather(*(one(client, base, stream) for _ in range(concurrency)))
        added: list[float] = []
        added_ttfb: list[float] = []
        totals = {"direct": 0.0, "proxy": 0.0}
        chunk_counts = {"direct": 0, "proxy": 0}
        queue = asyncio.Queue[int]()
        for i in range(requests):
            queue.put_nowait(i)

        async def worker() -> None:
            while True:
                try:
                    queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                d_total, d_first, d_chunks = await one(client, servers.upstream, stream)
                p_total, p_first, p_chunks = await one(client, servers.proxy, stream)
                added.append((p_total - d_total) * 1000)
                added_ttfb.append((p_first - d_first) * 1000)
                totals["direct"] += d_total
                totals["proxy"] += p_total
                chunk_counts["direct"] += d_chunks
                chunk_counts["proxy"] += p_chunks

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        rss = rss_mb(servers.proxy_pid)
    result = {
        "added_p50_ms": statistics.median(added), "added_p99_ms": pct(added, 0.99),
        "rps_ratio": totals["direct"] / totals["proxy"], "ttfb_added_p50_ms": statistics.median(added_ttfb),
        "rss_mb": rss,
    }
    if stream:
        result["chunks_per_s_ratio"] = (chunk_counts["proxy"] / totals["proxy"]) / (
            chunk_counts["direct"] / totals["direct"])
    return result


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--levels", default="1,8,32,128")
    parser.add_argument("--chunks", type=int, default=200)
    args = parser.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    with Servers(chunks=args.chunks) as servers:
        for stream in (False, True):
            kind = f"streaming ({args.chunks} chunks)" if stream else "non-streaming"
            print(f"\n{kind}: proxy vs direct, same scripted upstream, interleaved pairs")
            print(f"{'conc':>5} {'added p50 ms':>13} {'added p99 ms':>13} {'req/s ratio':>12} "
                  f"{'ttfb +p50 ms':>13} {'chunks/s ratio':>15} {'proxy RSS MB':>13}")
            for concurrency in levels:
                r = await level(servers, concurrency, max(args.requests, concurrency * 4), stream)
                print(f"{concurrency:>5} {r['added_p50_ms']:>13.2f} {r['added_p99_ms']:>13.2f} "
                      f"{r['rps_ratio']:>12.2f} {r['ttfb_added_p50_ms']:>13.2f} "
                      f"{r.get('chunks_per_s_ratio', float('nan')):>15.2f} {r['rss_mb']:>13.1f}")


if __name__ == "__main__":
    asyncio.run(main())
