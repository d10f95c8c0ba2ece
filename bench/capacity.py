"""How many streams one core relays: the proxy, the bare FastAPI+httpx passthrough and LiteLLM (where installed),
each pinned to one CPU, swept over the number of concurrent streams on one paced scripted upstream.

    python bench/capacity.py [--levels 8,16,32,48,64,96] [--rate 95] [--tokens 300] [--answers 2]
                             [--gpu-tokens-per-second 3000] [--workers] [--pg URL]

Each stream asks for OpenCode-like turns (bench/realistic.py's bodies, 20-80 KB, ten tools) answered with
`--tokens` tokens at `--rate` tokens/s, one token a chunk, ending in one allowed bash call. Per level and target:
the inter-token gap p99 the client sees, added over the same level sent directly to the upstream (measured
interleaved, in the same run), the tokens/s delivered, and the target's CPU per 1,000 tokens. A target's capacity
is the largest level whose added inter-token p99 is <= 5 ms (`--max-added-ms`); the tokens/s it delivers there,
divided by `--gpu-tokens-per-second` (a GPU's generation rate at high concurrency: an H100 serving a 30B-A3B MoE
makes roughly 2,000-5,000), is how many such GPUs one core fronts.

`--workers`: whether workers contend. At one load (`--contend-streams`, default the proxy's capacity), the proxy
with `--workers 1` and `--workers 2` (SQLite, unpinned: two processes need two CPUs), and on Postgres one replica
and two replicas behind a round-robin balancer (a TCP one in this bench, a connection per replica in turn): the
proxy's CPU per token (all its processes) and its release wait p50/p99 (its histogram, all processes summed),
2 against 1. Within 1.1x, nothing shared serialises them.

The machine this was written on has 2 CPUs, shared by the load generator and the upstream (pinned to the other
CPU) and by other people's work: read ratios within one run, and the load average printed with them.
LiteLLM: $LITELLM_BIN, else `litellm` on PATH, else ~/.cache/allowlist-proxy-bench/litellm/bin/litellm.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _servers import ROOT, free_port, rss_mb, stop_processes, wait_ready
from overhead import KEY, cpu_seconds, start_bare, start_litellm
from realistic import UPSTREAM_SCRIPT, body, histogram, quantile_bound
from store_bench import _pg_database

TARGET_CPU = 0  # the target relays on this CPU; the upstream and the load generator on the others
LITELLM_CACHE = Path.home() / ".cache" / "allowlist-proxy-bench" / "litellm" / "bin" / "litellm"


def _pin(pid: int, cpus: set[int]) -> None:
    """Every thread of the process and of its children (affinity is a thread's; new threads inherit it)."""
    for member in _family(pid):
        with contextlib.suppress(OSError):
            for task in os.listdir(f"/proc/{member}/task"):
                with contextlib.suppress(OSError):
                    os.sched_setaffinity(int(task), cpus)


def _others() -> set[int]:
    cpus = set(os.sched_getaffinity(0))
    return (cpus - {TARGET_CPU}) or cpus


def _family(pid: int) -> list[int]:
    """The process and its children, grandchildren included (a proxy's workers, LiteLLM's)."""
    found, queue = [], [pid]
    while queue:
        current = queue.pop()
        found.append(current)
        with contextlib.suppress(OSError):
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children") as children:
                    queue += [int(c) for c in children.read().split()]
    return found


def _cpu(pid: int) -> float:
    total = 0.0
    for member in _family(pid):
        with contextlib.suppress(OSError, IndexError, ValueError):
            total += cpu_seconds(member)
    return total


async def _stream(client: httpx.AsyncClient, url: str, payload: bytes, gaps: list[float], tokens: list[int]) -> None:
    """One streamed answer; the gaps between its token chunks as they arrive (raw reads: the client stays cheap)."""
    last = None
    async with client.stream("POST", url + "/chat/completions", content=payload,
                             headers={"content-type": "application/json"}) as response:
        response.raise_for_status()
        async for piece in response.aiter_raw():
            now = time.perf_counter()
            count = piece.count(b'"content":"') + piece.count(b'"reasoning":"')
            if not count:
                continue
            if last is not None:
                gaps.append(now - last)
                gaps.extend([0.0] * (count - 1))  # chunks read together arrived together
            last = now
            tokens[0] += count


async def _level(url: str, streams: int, answers: int, payloads: list[bytes]) -> tuple[list[float], int, float]:
    """`streams` concurrent sessions of `answers` answers each: the inter-token gaps, tokens seen, seconds."""
    gaps: list[float] = []
    tokens = [0]
    limits = httpx.Limits(max_connections=streams * 2, max_keepalive_connections=streams * 2)
    async with httpx.AsyncClient(limits=limits, timeout=300, headers={"authorization": f"Bearer {KEY}"}) as client:
        async def session(n: int) -> None:
            await asyncio.sleep(n * 0.003)  # not all in one instant: agents' turns do not start together
            for i in range(answers):
                with contextlib.suppress(httpx.HTTPError):
                    await _stream(client, url, payloads[(n + i) % len(payloads)], gaps, tokens)

        start = time.perf_counter()
        await asyncio.gather(*(session(n) for n in range(streams)))
        elapsed = time.perf_counter() - start
    return gaps, tokens[0], elapsed


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1000 if ordered else float("nan")


def _load() -> str:
    one, *_ = os.getloadavg()
    return f"load average {one:.1f} on {os.cpu_count()} CPUs"


def _proxy(upstream: str, db: str, *, workers: int = 1, extra: tuple[str, ...] = ()) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "proxy", "serve", "--port", str(port), "--upstream", upstream, "--db", db,
         "--policy", "policies/strict.yaml", "--log-level", "warning", "--workers", str(workers), *extra],
        cwd=ROOT, stderr=subprocess.DEVNULL, env={**os.environ, "ALLOWLIST_PROXY_LOG_LEVEL": "warning"})
    base = f"http://127.0.0.1:{port}"
    wait_ready(base + "/health", timeout=180)
    deadline = time.monotonic() + 180
    while workers > 1 and time.monotonic() < deadline:
        if httpx.get(base + "/health", timeout=5).json().get("workers") == workers:
            break
        time.sleep(0.5)
    return proc, base + "/v1"


class Balancer:
    """Round robin over replicas, a TCP connection at a time (what an L4 balancer does)."""

    def __init__(self) -> None:
        self.port = free_port()  # the replicas are told it: the Host clients send names the balancer
        self._next: Iterator[int] = iter(())

    def over(self, ports: list[int]) -> None:
        self._next = itertools.cycle(ports)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        with contextlib.suppress(OSError):
            writer.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", next(self._next))
        except OSError:
            writer.close()
            return
        with contextlib.suppress(asyncio.CancelledError):  # the bench is over: its connections go with it
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

    async def serve(self) -> asyncio.Server:
        return await asyncio.start_server(self._accept, "127.0.0.1", self.port)


@contextlib.contextmanager
def _upstream(args: argparse.Namespace) -> Iterator[tuple[str, subprocess.Popen]]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", UPSTREAM_SCRIPT, str(port), str(args.tokens), str(args.rate)],
                            cwd=ROOT)
    _pin(proc.pid, _others())
    try:
        wait_ready(f"http://127.0.0.1:{port}/health")
        yield f"http://127.0.0.1:{port}/v1", proc
    finally:
        proc.terminate()
        proc.wait(20)


def sweep(args: argparse.Namespace, upstream: str, tmp: str, payloads: list[bytes]) -> dict[str, int]:
    procs: list[subprocess.Popen] = []
    try:
        bare, bare_url = start_bare(upstream)
        procs.append(bare)
        targets = {"bare": (bare_url, bare.pid)}
        proxy, proxy_url = _proxy(upstream, f"sqlite:///{tmp}/capacity.db")
        procs.append(proxy)
        targets["proxy"] = (proxy_url, proxy.pid)
        if not os.environ.get("LITELLM_BIN") and LITELLM_CACHE.exists():
            os.environ["LITELLM_BIN"] = str(LITELLM_CACHE)
        litellm, litellm_url = start_litellm(upstream, tmp)
        if litellm is not None:
            procs.append(litellm)
            targets["litellm"] = (litellm_url, litellm.pid)
        else:
            print(litellm_url)
        if not args.no_pin:
            for _url, pid in targets.values():
                _pin(pid, {TARGET_CPU})
            with contextlib.suppress(OSError):
                os.sched_setaffinity(0, _others())  # the load generator beside the upstream
        idle = {name: rss_mb(pid) for name, (_, pid) in targets.items()}
        where = "not pinned" if args.no_pin else f"each target pinned to CPU {TARGET_CPU}"
        print(f"\nstreams per core: {where}; {args.rate:g} tokens/s a stream, {args.tokens} tokens an answer "
              f"({_load()})")
        print(f"{'streams':>7} {'target':<8} {'gap p99 ms':>10} {'added p99':>10} {'tokens/s':>9} "
              f"{'CPU ms/1k tok':>13} {'RSS MB':>7}")
        capacity: dict[str, int] = {}
        delivered: dict[str, float] = {}
        cpu_per_token: dict[str, dict[int, float]] = {name: {} for name in targets}  # level -> ms CPU / 1k tokens
        over: set[str] = set()  # past its capacity: not asked at higher levels
        for streams in [int(x) for x in args.levels.split(",")]:
            direct_gaps, _, _ = asyncio.run(_level(upstream, streams, args.answers, payloads))
            direct_p99 = _p99(direct_gaps)
            print(f"{streams:>7} {'direct':<8} {direct_p99:>10.2f}")
            for name, (url, pid) in targets.items():
                if name in over:
                    continue
                before = _cpu(pid)
                gaps, tokens, elapsed = asyncio.run(_level(url, streams, args.answers, payloads))
                cpu = (_cpu(pid) - before) * 1e6 / max(1, tokens)
                added = _p99(gaps) - direct_p99
                rate = tokens / elapsed
                if tokens:
                    cpu_per_token[name][streams] = cpu
                print(f"{streams:>7} {name:<8} {_p99(gaps):>10.2f} {added:>10.2f} {rate:>9,.0f} {cpu:>13.1f} "
                      f"{rss_mb(pid):>7.1f}")
                if added <= args.max_added_ms:
                    capacity[name] = streams
                    delivered[name] = rate
                else:
                    over.add(name)
        print(f"\ncapacity of one core (added inter-token p99 <= {args.max_added_ms:g} ms; {_load()}):")
        for name in targets:
            streams = max(capacity.get(name, 0), 0)
            rate = delivered.get(name, 0.0)
            gpus = rate / args.gpu_tokens_per_second
            print(f"  {name:<8} {streams:>4} streams  {rate:>8,.0f} tokens/s  fronts {gpus:4.1f} GPUs of "
                  f"{args.gpu_tokens_per_second:,.0f} tokens/s   idle RSS {idle[name]:.1f} MB "
                  f"({idle[name] / idle['bare']:.2f}x bare)")
        # What a core could carry were it the target's alone: a second of CPU over its CPU per token. Read from CPU
        # time, so other people's load on the machine moves it little (it moves the latencies above a lot).
        print("CPU-bound ceiling of one core (a CPU-second over the CPU each token cost, median over the levels "
              "measured; against bare at the same levels):")
        bare = cpu_per_token["bare"]
        for name, costs in cpu_per_token.items():
            if not costs:
                continue
            per_1k = statistics.median(costs.values())
            common = [level for level in costs if level in bare]
            ratio = (statistics.median(costs[level] / bare[level] for level in common) if common else float("nan"))
            ceiling = 1e6 / per_1k
            print(f"  {name:<8} {per_1k:7.1f} ms CPU / 1k tokens ({ratio:.2f}x bare)  {ceiling:>8,.0f} tokens/s  = "
                  f"{ceiling / args.rate:5.0f} streams of {args.rate:g}  fronts "
                  f"{ceiling / args.gpu_tokens_per_second:4.1f} GPUs")
        return capacity
    finally:
        stop_processes(procs, wait=40)


async def _contend_level(url: str, metrics_bases: list[str], pids: list[int], streams: int, answers: int,
                         payloads: list[bytes]) -> tuple[float, float, float]:
    """CPU ms per 1,000 tokens of `pids` (and their children), release wait p50/p99 summed over `metrics_bases`."""
    before_hist = [histogram(base) for base in metrics_bases]
    before_cpu = sum(_cpu(pid) for pid in pids)
    _, tokens, _ = await _level(url, streams, answers, payloads)
    cpu = (sum(_cpu(pid) for pid in pids) - before_cpu) * 1e6 / max(1, tokens)
    after_hist = [histogram(base) for base in metrics_bases]
    summed_before: dict[float, float] = {}
    summed_after: dict[float, float] = {}
    for b, a in zip(before_hist, after_hist, strict=True):
        for bound, n in b.items():
            summed_before[bound] = summed_before.get(bound, 0.0) + n
        for bound, n in a.items():
            summed_after[bound] = summed_after.get(bound, 0.0) + n
    return cpu, quantile_bound(summed_before, summed_after, 0.5), quantile_bound(summed_before, summed_after, 0.99)


def contend(args: argparse.Namespace, upstream: str, tmp: str, payloads: list[bytes], streams: int) -> None:
    print(f"\nworkers and replicas at {streams} streams (unpinned; {_load()})")
    print(f"{'setup':<32} {'CPU ms/1k tok':>13} {'release p50':>12} {'release p99':>12}")
    rows: dict[str, tuple[float, float, float]] = {}
    for count in (1, 2):
        proc, url = _proxy(upstream, f"sqlite:///{tmp}/workers-{count}.db", workers=count)
        try:
            asyncio.run(_level(url, min(streams, 8), 1, payloads))  # warm every worker
            rows[f"sqlite, {count} worker(s)"] = asyncio.run(_contend_level(
                url, [url.removesuffix("/v1")], [proc.pid], streams, args.contend_answers, payloads))
        finally:
            stop_processes([proc], wait=40)
    if args.pg:
        name = f"bench_{uuid.uuid4().hex[:8]}"
        asyncio.run(_pg_database(args.pg, True, name))
        try:
            db = f"{args.pg.rsplit('/', 1)[0]}/{name}"
            for count in (1, 2):
                balancer = Balancer()
                replicas = [_proxy(upstream, db, extra=("--allowed-hosts", f"127.0.0.1:{balancer.port}"))
                            for _ in range(count)]
                try:
                    rows[f"postgres, {count} replica(s), balanced"] = asyncio.run(_balanced(
                        balancer, replicas, streams, args.contend_answers, payloads))
                finally:
                    stop_processes([proc for proc, _ in replicas], wait=40)
        finally:
            asyncio.run(_pg_database(args.pg, False, name))
    for setup, (cpu, p50, p99) in rows.items():
        print(f"{setup:<32} {cpu:>13.1f} {'<=' + format(p50, 'g'):>12} {'<=' + format(p99, 'g'):>12}")
    print("2 against 1 (within 1.1x: nothing shared serialises them):")
    for kind, one, two in (("sqlite workers", "sqlite, 1 worker(s)", "sqlite, 2 worker(s)"),
                           ("postgres replicas", "postgres, 1 replica(s), balanced",
                            "postgres, 2 replica(s), balanced")):
        if one in rows and two in rows and all(rows[one]):
            a, b = rows[one], rows[two]
            print(f"  {kind:<18} CPU per token {b[0] / a[0]:.2f}x   release p50 {b[1] / a[1]:.2f}x   "
                  f"release p99 {b[2] / a[2]:.2f}x")


async def _balanced(balancer: Balancer, replicas: list[tuple[subprocess.Popen, str]], streams: int, answers: int,
                    payloads: list[bytes]) -> tuple[float, float, float]:
    balancer.over([int(url.rsplit(":", 1)[1].split("/")[0]) for _, url in replicas])
    server = await balancer.serve()
    try:
        url = f"http://127.0.0.1:{balancer.port}/v1"
        await _level(url, min(streams, 8), 1, payloads)  # warm
        return await _contend_level(url, [u.removesuffix("/v1") for _, u in replicas],
                                    [proc.pid for proc, _ in replicas], streams, answers, payloads)
    finally:
        server.close()
        await server.wait_closed()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--levels", default="8,16,32,48,64,96")
    parser.add_argument("--rate", type=float, default=95.0, help="tokens per second of each stream")
    parser.add_argument("--tokens", type=int, default=300, help="tokens an answer")
    parser.add_argument("--answers", type=int, default=2, help="answers per stream and level")
    parser.add_argument("--sizes", default="20000,40000,80000", help="request body sizes, bytes")
    parser.add_argument("--max-added-ms", type=float, default=5.0)
    parser.add_argument("--gpu-tokens-per-second", type=float, default=3000.0)
    parser.add_argument("--workers", action="store_true", help="also compare 2 workers with 1, 2 replicas with 1")
    parser.add_argument("--contend-streams", type=int, default=0, help="the load of --workers (0: the proxy's "
                        "capacity)")
    parser.add_argument("--contend-answers", type=int, default=6, help="answers per stream in each --workers run")
    parser.add_argument("--no-pin", action="store_true", help="let the scheduler place every process")
    parser.add_argument("--no-sweep", action="store_true", help="only --workers")
    parser.add_argument("--pg", default=os.environ.get("ALLOWLIST_PROXY_TEST_PG", ""))
    args = parser.parse_args()
    payloads = [json.dumps(body(size, "mixed", True)).encode() for size in (int(s) for s in args.sizes.split(","))]
    print(f"{args.tokens}-token answers at {args.rate:g} tokens/s; {_load()}")
    with tempfile.TemporaryDirectory() as tmp, _upstream(args) as (upstream, _):
        capacity = {} if args.no_sweep else sweep(args, upstream, tmp, payloads)
        if args.workers:
            streams = args.contend_streams or max(8, capacity.get("proxy", 0)) or 16
            contend(args, upstream, tmp, payloads, streams)
    print(f"\n{_load()}")


if __name__ == "__main__":
    main()
