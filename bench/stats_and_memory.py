"""`/stats/models` over a large store while streams are relayed, and the memory of many concurrent streams,
side by side with a bare FastAPI+httpx passthrough (issue 27).

    python bench/stats_and_memory.py [--calls 1000000] [--runs 5] [--rounds 3] [--rss-streams 64]
                                     [--baseline DIR] [--keep DIR] [--only-rss]

1. A store of `--calls` tool calls (sessions, requests, reasons: `stats_bench.seed`, one bulk insert) made by
   each checkout's own migrations and rollup rebuild (`db upgrade`, `db rebuild-rollups`); `--keep DIR` keeps
   the stores there and reuses them on the next run.
2. Each proxy in this process's children with a ticker on its own event loop: how late the loop runs while
   `/stats/models` is asked back to back (what a relayed stream waits for on the proxy's side, apart from
   whatever else loads the machine), beside the same loop idle.
3. Each proxy serves its store in front of a paced scripted upstream (`realistic.py`'s: reasoning then
   content then one allowed bash call). Per proxy: `GET /stats/models` alone (median of `--runs`); six
   streams alone, then six streams while `/stats/models` is asked back to back (`--rounds` of each,
   interleaved): the stats' time with the streams running, and how much later each stream ended than the
   median of the streams alone (its end delay), with the longest pause between two chunks.
4. Fresh processes of the bare passthrough and each proxy (on a store already at head, as at every start but
   the first after an upgrade): RSS at idle and its peak while `--rss-streams` streams of 250 KB bodies run
   at once, and the ratio to the bare passthrough's peak.

`--baseline DIR` runs another checkout of the proxy (e.g. `git archive main | tar -x -C DIR`) beside this
one, on a store built the same way by its own migrations, as `base`. `--only-rss` runs part 4 alone (no large
store is built).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _servers import ROOT, free_port, rss_mb, wait_ready
from overhead import start_bare
from realistic import UPSTREAM_SCRIPT, body, load, rss
from stats_bench import seed

STREAMS = 6

# Serves the proxy of the checkout on PYTHONPATH in this process, with a 2 ms ticker on its event loop: the
# loop's worst lateness idle, then while /stats/models is asked back to back (what every relayed stream waits
# on the proxy's side, whatever else loads the machine). Prints one JSON line.
STALL_SCRIPT = """
import asyncio, json, sys, time, httpx
from pathlib import Path
from proxy.config import Settings
from proxy.http.app import create_app
from proxy.testing.server import ServerThread

async def ticker(stop, worst):
    while not stop.is_set():
        started = time.perf_counter()
        await asyncio.sleep(0.002)
        worst.append(time.perf_counter() - started - 0.002)

def watch(app, seconds, work):
    stop, worst = asyncio.Event(), []
    done = asyncio.run_coroutine_threadsafe(ticker(stop, worst), app.state.loop)
    ended = time.perf_counter() + seconds
    while time.perf_counter() < ended:
        work()
    app.state.loop.call_soon_threadsafe(stop.set)
    done.result(10)
    return sorted(worst)

settings = Settings(upstream="http://127.0.0.1:9/v1", db=sys.argv[1], policy=Path("policies/strict.yaml").resolve(),
                    log_level="error")
app = create_app(settings)
app.state.own_process = True  # as `serve` runs it
with ServerThread(app) as proxy, httpx.Client(timeout=60) as client:
    client.get(proxy.url + "/stats/models").raise_for_status()
    idle = watch(app, 2.0, lambda: time.sleep(0.05))
    took = []
    def ask():
        started = time.perf_counter()
        client.get(proxy.url + "/stats/models").raise_for_status()
        took.append(time.perf_counter() - started)
    busy = watch(app, 4.0, ask)
ms = lambda v: round(v * 1000, 1)
print(json.dumps({"idle_max": ms(idle[-1]), "busy_max": ms(busy[-1]), "busy_p99": ms(busy[int(0.99 * (len(busy) - 1))]),
                  "asked": len(took), "stats_p50": ms(sorted(took)[len(took) // 2])}))
"""


def _proxy_env(checkout: Path) -> dict[str, str]:
    return {**os.environ, "ALLOWLIST_PROXY_LOG_LEVEL": "warning", "PYTHONPATH": str(checkout)}


def _cli(checkout: Path, *args: str) -> None:
    subprocess.run([sys.executable, "-m", "proxy", *args], cwd=checkout, env=_proxy_env(checkout), check=True,
                   stdout=subprocess.DEVNULL)


def build_store(checkout: Path, path: Path, calls: int) -> None:
    """The checkout's own schema, the rows in one bulk insert, then its own rollups built from them."""
    if path.exists():
        print(f"  {path.name}: kept from an earlier run")
        return
    started = time.perf_counter()
    url = f"sqlite:///{path}"
    _cli(checkout, "db", "upgrade", "--db", url)
    seed(path, calls, rng=random.Random(7))
    _cli(checkout, "db", "rebuild-rollups", "--db", url)
    print(f"  {path.name}: {calls:,} calls in {time.perf_counter() - started:.0f} s, "
          f"{path.stat().st_size / 1e6:.0f} MB")


@contextmanager
def serving(checkout: Path, db: str, upstream: str) -> Iterator[tuple[str, int]]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "proxy", "serve", "--port", str(port), "--upstream", upstream, "--db", db,
         "--policy", "policies/strict.yaml", "--log-level", "warning"],
        cwd=checkout, env=_proxy_env(checkout), stderr=subprocess.DEVNULL)
    try:
        wait_ready(f"http://127.0.0.1:{port}/health", timeout=120)
        yield f"http://127.0.0.1:{port}", proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()


async def stats_once(client: httpx.AsyncClient, base: str) -> float:
    started = time.perf_counter()
    answer = await client.get(base + "/stats/models")
    answer.raise_for_status()
    return (time.perf_counter() - started) * 1000


async def stream(client: httpx.AsyncClient, base: str, payload: bytes) -> tuple[float, float]:
    """(ms from the request to the stream's end, the longest pause between two chunks in ms)."""
    started = time.perf_counter()
    last, gap = started, 0.0
    async with client.stream("POST", base + "/v1/chat/completions", content=payload,
                             headers={"content-type": "application/json"}) as response:
        response.raise_for_status()
        async for _ in response.aiter_raw():
            now = time.perf_counter()
            gap, last = max(gap, now - last), now
    return (time.perf_counter() - started) * 1000, gap * 1000


async def streams_and_stats(base: str, runs: int, rounds: int) -> dict[str, float]:
    payload = json.dumps(body(20_000, "mixed", True)).encode()
    async with httpx.AsyncClient(timeout=300, limits=httpx.Limits(max_connections=32)) as client:
        await stats_once(client, base)  # warms the store's pages, as a running proxy's are
        alone_stats = [await stats_once(client, base) for _ in range(runs)]
        await asyncio.gather(*(stream(client, base, payload) for _ in range(STREAMS)))
        quiet: list[tuple[float, float]] = []
        busy: list[tuple[float, float]] = []
        busy_stats: list[float] = []
        for _ in range(rounds):
            quiet += await asyncio.gather(*(stream(client, base, payload) for _ in range(STREAMS)))
            relayed = asyncio.gather(*(stream(client, base, payload) for _ in range(STREAMS)))
            await asyncio.sleep(0.05)  # the streams are under way
            while not relayed.done():
                busy_stats.append(await stats_once(client, base))
            busy += await relayed
    usual = statistics.median(total for total, _ in quiet)
    delays = [total - usual for total, _ in busy]
    return {"alone": statistics.median(alone_stats), "busy": statistics.median(busy_stats),
            "asked": len(busy_stats) / rounds, "delay50": statistics.median(delays), "delay_max": max(delays),
            "quiet_spread": max(total for total, _ in quiet) - usual,
            "gap_quiet": max(gap for _, gap in quiet), "gap_busy": max(gap for _, gap in busy)}


def loop_stall(checkout: Path, db: str) -> dict[str, float]:
    found = subprocess.run([sys.executable, "-c", STALL_SCRIPT, db], cwd=checkout, env=_proxy_env(checkout),
                           check=True, capture_output=True, text=True).stdout
    return dict(json.loads(found.strip().splitlines()[-1]))


def memory(checkouts: dict[str, Path], upstream: str, tmp: Path, streams: int) -> dict[str, tuple[float, float]]:
    """name -> (idle RSS, peak RSS) in MB of fresh processes, `streams` streams of 250 KB bodies at once."""
    found: dict[str, tuple[float, float]] = {}
    bare, bare_url = start_bare(upstream)
    try:
        idle = rss_mb(bare.pid)
        asyncio.run(rss({"bare": (bare_url, bare.pid)}, 4))  # warm, as every target is
        found["bare"] = (idle, asyncio.run(rss({"bare": (bare_url, bare.pid)}, streams))["bare"])
    finally:
        bare.terminate()
        bare.wait(20)
    for name, checkout in checkouts.items():
        db = f"sqlite:///{tmp}/rss-{name}.db"
        _cli(checkout, "db", "upgrade", "--db", db)
        with serving(checkout, db, upstream) as (base, pid):
            time.sleep(0.5)
            idle = rss_mb(pid)
            asyncio.run(rss({name: (base + "/v1", pid)}, 4))
            found[name] = (idle, asyncio.run(rss({name: (base + "/v1", pid)}, streams))[name])
    return found


def stats_and_stalls(checkouts: dict[str, Path], stores: Path, upstream: str, args: argparse.Namespace) -> None:
    """Parts 2 and 3, printed."""
    timing = {}
    for name, checkout in checkouts.items():
        with serving(checkout, f"sqlite:///{stores / f'{name}-{args.calls}.db'}", upstream) as (base, _pid):
            timing[name] = asyncio.run(streams_and_stats(base, args.runs, args.rounds))
    stalls = {name: loop_stall(checkout, f"sqlite:///{stores / f'{name}-{args.calls}.db'}")
              for name, checkout in checkouts.items()}
    print(f"\n/stats/models asked back to back for 4 s, the proxy's own event loop (a 2 ms ticker) ({load()})")
    print(f"{'target':<8} {'stats p50':>10} {'asked':>6} {'loop late max, idle':>20} {'while asked: p99':>17} "
          f"{'max':>8}")
    for name, t in stalls.items():
        print(f"{name:<8} {t['stats_p50']:>8.0f}ms {t['asked']:>6} {t['idle_max']:>18.1f}ms "
              f"{t['busy_p99']:>15.1f}ms {t['busy_max']:>6.1f}ms")
    print(f"\n/stats/models over {args.calls:,} calls, and {STREAMS} streams relayed meanwhile ({load()})")
    print(f"{'target':<8} {'alone p50':>10} {'streaming p50':>14} {'asked/round':>12} {'end delay p50':>14} "
          f"{'end delay max':>14} {'(quiet spread)':>15} {'gap quiet':>10} {'gap busy':>9}")
    for name, t in timing.items():
        print(f"{name:<8} {t['alone']:>8.0f}ms {t['busy']:>12.0f}ms {t['asked']:>12.1f} {t['delay50']:>12.1f}ms "
              f"{t['delay_max']:>12.1f}ms {t['quiet_spread']:>13.1f}ms {t['gap_quiet']:>8.1f}ms "
              f"{t['gap_busy']:>7.1f}ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5, help="/stats/models alone: the median of this many")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of six streams alone and with stats")
    parser.add_argument("--tokens", type=int, default=300)
    parser.add_argument("--rate", type=float, default=300.0, help="tokens per second")
    parser.add_argument("--rss-streams", type=int, default=64)
    parser.add_argument("--baseline", default="", help="another checkout to run beside this one (base)")
    parser.add_argument("--keep", default="", help="a directory to keep the stores in and reuse them from")
    parser.add_argument("--only-rss", action="store_true", help="only the RSS of concurrent streams (part 4)")
    args = parser.parse_args()
    checkouts = {"proxy": ROOT, **({"base": Path(args.baseline).resolve()} if args.baseline else {})}
    print(f"{args.calls:,} calls; six streams of {args.tokens} tokens at {args.rate:g} tokens/s; {load()}"
          if not args.only_rss else load())
    tmp = Path(tempfile.mkdtemp(prefix="stats-memory-"))
    stores = Path(args.keep) if args.keep else tmp
    stores.mkdir(parents=True, exist_ok=True)
    upstream_proc = None
    try:
        if not args.only_rss:
            for name, checkout in checkouts.items():
                build_store(checkout, stores / f"{name}-{args.calls}.db", args.calls)
        port = free_port()
        upstream_proc = subprocess.Popen([sys.executable, "-c", UPSTREAM_SCRIPT, str(port), str(args.tokens),
                                          str(args.rate)], cwd=ROOT)
        upstream = f"http://127.0.0.1:{port}/v1"
        wait_ready(upstream.removesuffix("/v1") + "/health")
        if not args.only_rss:
            stats_and_stalls(checkouts, stores, upstream, args)
        peaks = memory(checkouts, upstream, tmp, args.rss_streams)
        print(f"\nRSS, fresh processes, {args.rss_streams} concurrent streams of 250 KB bodies ({load()})")
        print(f"{'target':<8} {'idle':>8} {'peak':>8} {'peak/bare':>10}")
        for name, (idle, peak) in peaks.items():
            print(f"{name:<8} {idle:>6.0f}MB {peak:>6.0f}MB {peak / peaks['bare'][1]:>10.2f}")
    finally:
        if upstream_proc is not None:
            upstream_proc.terminate()
            upstream_proc.wait(20)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
