"""What an idle proxy costs (issue 27): wake-ups and CPU per second of every thread, side by side with the bare
FastAPI+httpx passthrough, with no request in flight. On a machine where each wake-up from idle costs ~100 us,
a timer that fires while nobody uses the proxy is CPU taken from whatever else runs there.

Read from /proc/<pid>/task/*/status (voluntary and involuntary context switches) and .../schedstat (time on
CPU), over the same seconds for every process (Linux only).

Run: python -m bench.idle [--seconds 20] [--variant NAME=CHECKOUT ...]
(each variant serves `python -m proxy serve` from that checkout, e.g. main=../main; default: this one)
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench._servers import ROOT, free_port, wait_ready
from bench.overhead import start_bare

UPSTREAM = "http://127.0.0.1:9/v1"  # nothing listens: idle means no upstream traffic either


def threads(pid: int) -> dict[str, tuple[str, int, int]]:
    """Thread id -> (name, context switches, ns on CPU)."""
    found = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            switches = sum(int(line.split()[1]) for line in (task / "status").read_text().splitlines()
                           if "ctxt_switches" in line)  # fmt: skip
            on_cpu = int((task / "schedstat").read_text().split()[0])
        except OSError:
            continue  # the thread ended
        found[task.name] = (name, switches, on_cpu)
    return found


def serve(checkout: Path, db: str) -> subprocess.Popen[bytes]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "proxy", "serve", "--port", str(port), "--upstream", UPSTREAM,
                             "--db", db, "--policy", "policies/strict.yaml", "--log-level", "warning"],
                            cwd=checkout, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    wait_ready(f"http://127.0.0.1:{port}/health")
    return proc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--settle", type=float, default=5.0, help="seconds after start-up before measuring")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=CHECKOUT")
    args = parser.parse_args()
    variants = [tuple(v.split("=", 1)) for v in args.variant] or [("proxy", str(ROOT))]
    with tempfile.TemporaryDirectory() as tmp:
        bare, _ = start_bare(UPSTREAM)
        procs = [("bare", bare)]
        procs += [(name, serve(Path(checkout).resolve(), f"sqlite:///{tmp}/{name}.db")) for name, checkout in variants]
        try:
            time.sleep(args.settle)
            before = {name: threads(proc.pid) for name, proc in procs}
            time.sleep(args.seconds)
            after = {name: threads(proc.pid) for name, proc in procs}
        finally:
            for _, proc in procs:
                proc.terminate()
            for _, proc in procs:
                proc.wait()
    print(f"idle for {args.seconds:.0f} s, per second (load {Path('/proc/loadavg').read_text().split()[0]})")
    print(f"{'':10} {'thread':18} {'wake-ups':>9} {'cpu ms':>8}")
    for name, _ in procs:
        total_wakes = total_cpu = 0.0
        for tid, (comm, switches, on_cpu) in sorted(after[name].items()):
            _, switches0, on_cpu0 = before[name].get(tid, (comm, 0, 0))
            wakes, cpu = (switches - switches0) / args.seconds, (on_cpu - on_cpu0) / 1e6 / args.seconds
            total_wakes, total_cpu = total_wakes + wakes, total_cpu + cpu
            if wakes or cpu:
                print(f"{name:10} {comm + ' ' + tid:18} {wakes:9.1f} {cpu:8.3f}")
        print(f"{name:10} {'all threads':18} {total_wakes:9.1f} {total_cpu:8.3f}")


if __name__ == "__main__":
    main()
