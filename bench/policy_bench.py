"""Judging time per bash command over the corpus: median and p99, decision only and with explanation.

    python bench/policy_bench.py [--corpus tests/bash-allowlist.jsonl] [--repeat 200]

Each command is judged `--repeat` times, in 5 batches; its time per call is the mean of its fastest batch
(the timer is too coarse for one call, and the best batch is the one least disturbed by other load on the
machine). The figures are the median and p99 of those times over the commands.
Targets (issue 4): decision median <= 10 us; with explanation (rejects) median <= 60 us.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from proxy.policy import Policy, judge_command  # noqa: E402
from proxy.policy.matcher import matcher_for  # noqa: E402

POLICY = {
    "name": "bench",
    "bash": {"scripts": {"search": {"flags": ["--max-results"]}, "fetch_page": {}, "summarize": {}}},
}


def per_call_us(fn: Callable[[str], object], command: str, repeat: int, batches: int = 5) -> float:
    size = max(1, repeat // batches)
    best = float("inf")
    for _ in range(batches):
        start = time.perf_counter()
        for _ in range(size):
            fn(command)
        best = min(best, (time.perf_counter() - start) / size)
    return best * 1e6


def summary(label: str, samples: list[float]) -> str:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return f"{label:<44} n={len(samples):<4} median {statistics.median(samples):7.2f} us   p99 {p99:8.2f} us"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--corpus", type=Path, default=ROOT / "tests" / "bash-allowlist.jsonl")
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()

    cases = [json.loads(line) for line in args.corpus.read_text(encoding="utf-8").splitlines() if line.strip()]
    policy = Policy.model_validate(POLICY)
    matcher = matcher_for(policy)
    for case in cases:  # warm up: compile, create the tree-sitter parser, fill caches
        judge_command(policy, case["cmd"])

    commands = [c["cmd"] for c in cases]
    rejected = [c["cmd"] for c in cases if c["expect"] == "reject"]
    allowed = [c["cmd"] for c in cases if c["expect"] == "allow"]
    decision = [per_call_us(matcher.argv, cmd, args.repeat) for cmd in commands]
    full = [per_call_us(lambda c: judge_command(policy, c), cmd, args.repeat) for cmd in commands]
    explained = [per_call_us(lambda c: judge_command(policy, c), cmd, args.repeat) for cmd in rejected]
    allowed_full = [per_call_us(lambda c: judge_command(policy, c), cmd, args.repeat) for cmd in allowed]

    print(
        f"policy judging over {len(commands)} corpus commands ({len(allowed)} allowed, {len(rejected)} rejected),"
        f" {args.repeat} calls each"
    )
    print(summary("decision only (all commands)", decision))
    print(summary("decision only (allowed commands)", [per_call_us(matcher.argv, c, args.repeat) for c in allowed]))
    print(summary("judge_command, allowed commands", allowed_full))
    print(summary("judge_command with explanation (rejects)", explained))
    print(summary("judge_command, all commands", full))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
