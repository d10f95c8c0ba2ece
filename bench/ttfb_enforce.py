"""Time to first content byte of a stream with enforcement on (strict policy) and off (observe policy),
through the proxy, on the same scripted upstream: enforcement holds tool calls back, never text.

    python bench/ttfb_enforce.py [--requests N]

Each reply is text followed by an allowed tool call, as an agent's turn is; the figure is the time from
sending the request to the first `content` delta, and to the end of the stream.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _servers import Servers

TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}]
BODY = {"model": "qwen3.5-27b", "messages": [{"role": "user", "content": "hello"}], "tools": TOOLS, "stream": True}


def measure(client: httpx.Client, url: str) -> tuple[float, float]:
    start = time.perf_counter()
    first = None
    with client.stream("POST", url + "/chat/completions", json=BODY) as response:
        for line in response.iter_lines():
            if first is None and line.startswith("data: {"):
                choices = json.loads(line[6:]).get("choices") or [{}]
                if choices[0].get("delta", {}).get("content"):
                    first = time.perf_counter() - start
    return (first or float("nan")) * 1000, (time.perf_counter() - start) * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    results: dict[str, tuple[list[float], list[float]]] = {}
    with Servers(chunks=100, policy="policies/strict.yaml", tool_call=True) as enforce, \
            Servers(chunks=100, policy="policies/observe.yaml", tool_call=True) as observe, \
            httpx.Client(timeout=60) as client:
        targets = {"enforce (strict.yaml)": enforce.proxy, "observe (observe.yaml)": observe.proxy,
                   "direct": enforce.upstream}
        for name in targets:
            results[name] = ([], [])
        for _ in range(args.requests):  # interleaved, so drift hits every column alike
            for name, url in targets.items():
                first, total = measure(client, url)
                results[name][0].append(first)
                results[name][1].append(total)
    print(f"{'target':<24} {'first content p50 ms':>21} {'p90 ms':>8} {'whole stream p50 ms':>20}")
    for name, (firsts, totals) in results.items():
        firsts.sort()
        print(f"{name:<24} {statistics.median(firsts):>21.2f} {firsts[int(0.9 * len(firsts))]:>8.2f} "
              f"{statistics.median(totals):>20.2f}")


if __name__ == "__main__":
    main()
