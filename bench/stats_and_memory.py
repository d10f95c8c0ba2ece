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
   interleaved): the stats' time with the streams running, and how much later the streams ended than the
   same streams alone (their end delay, medians), how late their latest text chunk came against the
   upstream's schedule, and their longest tail (from the last text chunk to the end: the held call streams
   in, is judged, recorded and released). The upstream paces its chunks as a GPU does (`Reply.steady`): a
   chunk the busy machine sends late does not delay the ones after it, so a delay is the relay's, not the
   scripted upstream's sleeps adding up. The targets compare the streams with the figures asked to the same
   streams without: what the figures add, beyond what six streams on a shared machine already wait.
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


async def stream(client: httpx.AsyncClient, base: str, payload: bytes, delay: float) -> tuple[float, float, float]:
    """(ms from the request to the stream's end; how late its latest text chunk came, in ms, against the
    upstream's schedule as the stream's least late chunk places it; the tail: from the last text chunk to the
    end, where the held call waits for its release, in ms).

    The upstream sends its n-th text chunk `delay * n` after its first (`Reply.steady`), so a chunk that
    comes later than that, beyond the least late one, was held up on the way: by the proxy, or by the
    machine the three processes share."""
    started = time.perf_counter()
    offsets: list[float] = []  # arrival of text chunk n, less its place in the schedule
    last_text = started
    async with client.stream("POST", base + "/v1/chat/completions", content=payload,
                             headers={"content-type": "application/json"}) as response:
        response.raise_for_status()
        async for chunk in response.aiter_raw():
            now = time.perf_counter()
            for event in chunk.split(b"\n\n"):
                if b'"tool_calls"' not in event and (b'"reasoning"' in event or b'"content"' in event):
                    offsets.append(now - len(offsets) * delay)
                    last_text = now
    end = time.perf_counter()
    late = max(offsets) - min(offsets) if offsets else 0.0
    return (end - started) * 1000, late * 1000, (end - last_text) * 1000


async def streams_and_stats(base: str, runs: int, rounds: int, delay: float) -> dict[str, float]:
    payload = json.dumps(body(20_000, "mixed", True)).encode()
    async with httpx.AsyncClient(timeout=300, limits=httpx.Limits(max_connections=32)) as client:
        await stats_once(client, base)  # warms the store's pages, as a running proxy's are
        alone_stats = [await stats_once(client, base) for _ in range(runs)]
        await asyncio.gather(*(stream(client, base, payload, delay) for _ in range(STREAMS)))
        quiet: list[tuple[float, float, float]] = []
        busy: list[tuple[float, float, float]] = []
        busy_stats: list[float] = []
        for _ in range(rounds):
            quiet += await asyncio.gather(*(stream(client, base, payload, delay) for _ in range(STREAMS)))
            relayed = asyncio.gather(*(stream(client, base, payload, delay) for _ in range(STREAMS)))
            await asyncio.sleep(0.05)  # the streams are under way
            while not relayed.done():
                busy_stats.append(await stats_once(client, base))
            busy += await relayed
    quiet_totals = [total for total, _, _ in quiet]
    busy_totals = [total for total, _, _ in busy]
    usual = statistics.median(quiet_totals)
    return {"alone": statistics.median(alone_stats), "busy": statistics.median(busy_stats),
            "asked": len(busy_stats) / rounds, "delay50": statistics.median(busy_totals) - usual,
            "quiet_spread": max(quiet_totals) - usual,
            "late_quiet": max(late for _, late, _ in quiet), "late_busy": max(late for _, late, _ in busy),
            "tail_quiet": max(tail for _, _, tail in quiet), "tail_busy": max(tail for _, _, tail in busy)}


def check(what: str, value: float, limit: float, unit: str = "ms") -> None:
    verdict = "met    " if value <= limit else "NOT MET"
    print(f"{verdict}  {what}: {value:.1f}{unit} (target <= {limit:g}{unit})")


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
            timing[name] = asyncio.run(streams_and_stats(base, args.runs, args.rounds, 1 / args.rate))
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
          f"{'(quiet spread)':>15} {'latest chunk: quiet':>20} {'busy':>7} {'tail: quiet':>12} {'busy':>7}")
    for name, t in timing.items():
        print(f"{name:<8} {t['alone']:>8.0f}ms {t['busy']:>12.0f}ms {t['asked']:>12.1f} {t['delay50']:>12.1f}ms "
              f"{t['quiet_spread']:>13.1f}ms {t['late_quiet']:>18.1f}ms {t['late_busy']:>5.1f}ms "
              f"{t['tail_quiet']:>10.1f}ms {t['tail_busy']:>5.1f}ms")
    print()
    t = timing["proxy"]
    check(f"/stats/models over {args.calls:,} calls", t["alone"], 200)
    check("six streams' end while /stats/models is asked, p50 (over the same streams alone)", t["delay50"], 5)
    check("the latest text chunk (against its schedule) of six streams while /stats/models is asked, over the "
          "same streams' alone", t["late_busy"] - t["late_quiet"], 5)
    check("the longest tail (the held call's release) of six streams while /stats/models is asked, over the "
          "same streams' alone", t["tail_busy"] - t["tail_quiet"], 5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5, help="/stats/models alone: the median of this many")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of six streams alone and with stats")
    parser.add_argument("--tokens", type=int, default=300)
    parser.add_argument("--rate", type=float, default=300.0, help="tokens per second")
    parser.add_argument("--rss-streams", type=int, default=64, help="0: no RSS part")
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
        if not args.rss_streams:
            return
        peaks = memory(checkouts, upstream, tmp, args.rss_streams)
        print(f"\nRSS, fresh processes, {args.rss_streams} concurrent streams of 250 KB bodies ({load()})")
        print(f"{'target':<8} {'idle':>8} {'peak':>8} {'peak/bare':>10}")
        for name, (idle, peak) in peaks.items():
            print(f"{name:<8} {idle:>6.0f}MB {peak:>6.0f}MB {peak / peaks['bare'][1]:>10.2f}")
        print()
        check(f"RSS of {args.rss_streams} concurrent streams of 250 KB bodies, over the bare passthrough's",
              peaks["proxy"][1] / peaks["bare"][1], 1.5, "x")
    finally:
        if upstream_proc is not None:
            upstream_proc.terminate()
            upstream_proc.wait(20)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
