"""What a project key costs a request: the same requests with and without a key, side by side in one run.

    python bench/keyed_requests.py [--rounds 10] [--batch 50] [--stream] [--baseline DIR]

Variants, interleaved round by round on one scripted upstream (each proxy in a process of its own):
- `unkeyed`: this checkout, no key presented (the quick start's way);
- `keyed`: the same proxy process, `Authorization: Bearer <project key>` (the key found in its cache: the
  steady state, `key_cache_seconds` 5);
- `keyed-miss`: another proxy of this checkout with `key_cache_seconds: 0`, so every request reads the key from
  the store (the one request per key and process every `key_cache_seconds` that pays the read);
- `before` (with `--baseline DIR`, another checkout such as the commit before keys: `git archive HASH | tar -x -C
  DIR`): unkeyed, as the proxy was.

Printed per variant: the client's latency p50 and p99 (one request at a time) and the proxy process's CPU time
per request (from /proc, steadier than latency on a small shared machine), and each one's ratio to `unkeyed`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _servers import ROOT, UPSTREAM_SCRIPT, free_port, wait_ready

BODY = {"model": "qwen3.5-27b", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 16}


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_proxy(checkout: Path, upstream: str, db: str, **settings: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {**os.environ, "ALLOWLIST_PROXY_LOG_LEVEL": "warning", "PYTHONPATH": str(checkout),
           **{f"ALLOWLIST_PROXY_{k.upper()}": v for k, v in settings.items()}}
    proc = subprocess.Popen([sys.executable, "-m", "proxy", "serve", "--port", str(port), "--upstream", upstream,
                             "--db", db, "--policy", "policies/strict.yaml", "--log-level", "warning"],
                            cwd=checkout, env=env, stderr=subprocess.DEVNULL)
    wait_ready(f"http://127.0.0.1:{port}/health")
    return proc, f"http://127.0.0.1:{port}/v1"


def make_key(db: str, root: str) -> str:
    done = subprocess.run([sys.executable, "-m", "proxy", "keys", "create", "--root", root, "--db", db],
                          cwd=ROOT, capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    return done.stdout.strip()


def send(client: httpx.Client, url: str, headers: dict[str, str], stream: bool) -> float:
    started = time.perf_counter()
    if stream:
        with client.stream("POST", url + "/chat/completions", json={**BODY, "stream": True}, headers=headers) as r:
            r.raise_for_status()
            for _ in r.iter_bytes():
                pass
    else:
        client.post(url + "/chat/completions", json=BODY, headers=headers).raise_for_status()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--batch", type=int, default=50, help="requests per variant and round")
    parser.add_argument("--stream", action="store_true", help="streamed answers (default whole)")
    parser.add_argument("--chunks", type=int, default=20, help="characters (one chunk each) per answer")
    parser.add_argument("--baseline", type=Path, help="another checkout, run unkeyed as `before`")
    args = parser.parse_args()
    procs: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp) / "project"
        project.mkdir()
        try:
            port = free_port()
            procs.append(subprocess.Popen([sys.executable, "-c", UPSTREAM_SCRIPT, str(port), str(args.chunks), "0"],
                                          cwd=ROOT))
            upstream = f"http://127.0.0.1:{port}/v1"
            wait_ready(upstream.removesuffix("/v1") + "/health")
            db, db_miss = f"sqlite:///{tmp}/keys.db", f"sqlite:///{tmp}/miss.db"
            key, key_miss = make_key(db, str(project)), make_key(db_miss, str(project))
            this, this_url = start_proxy(ROOT, upstream, db)
            miss, miss_url = start_proxy(ROOT, upstream, db_miss, key_cache_seconds="0")
            procs += [this, miss]
            variants = {"unkeyed": (this_url, this.pid, {}),
                        "keyed": (this_url, this.pid, {"authorization": f"Bearer {key}"}),
                        "keyed-miss": (miss_url, miss.pid, {"authorization": f"Bearer {key_miss}"})}
            if args.baseline:
                before, before_url = start_proxy(args.baseline, upstream, f"sqlite:///{tmp}/before.db")
                procs.append(before)
                variants = {"before": (before_url, before.pid, {}), **variants}
            latency: dict[str, list[float]] = {name: [] for name in variants}
            cpu: dict[str, float] = dict.fromkeys(variants, 0.0)
            with httpx.Client(timeout=60) as client:
                for url, _, headers in variants.values():  # warm each path
                    for _ in range(20):
                        send(client, url, headers, args.stream)
                for _ in range(args.rounds):
                    for name, (url, pid, headers) in variants.items():
                        spent = cpu_seconds(pid)
                        latency[name] += [send(client, url, headers, args.stream) for _ in range(args.batch)]
                        cpu[name] += cpu_seconds(pid) - spent
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                proc.wait(15)
    n = args.rounds * args.batch
    ref_p50 = statistics.median(latency["unkeyed"]) * 1000
    ref_cpu = cpu["unkeyed"] * 1000 / n
    load = os.getloadavg()[0]
    print(f"{n} requests per variant ({'streamed' if args.stream else 'whole'}, {args.chunks} chunks), "
          f"interleaved in {args.rounds} rounds; load average {load:.2f}")
    print(f"{'variant':<11} {'p50 ms':>8} {'p99 ms':>8} {'cpu ms/req':>11} {'p50 ratio':>10} {'cpu ratio':>10}")
    for name in variants:
        ordered = sorted(latency[name])
        p50, p99 = statistics.median(ordered) * 1000, ordered[int(0.99 * (len(ordered) - 1))] * 1000
        per = cpu[name] * 1000 / n
        print(f"{name:<11} {p50:>8.2f} {p99:>8.2f} {per:>11.3f} {p50 / ref_p50:>10.3f} {per / ref_cpu:>10.3f}")


if __name__ == "__main__":
    main()
