"""vLLM logs generated from known windows, in the formats different vLLM versions and log collectors write.

The seed's author read these tables off real logs by hand; here the windows are fixed first and
the expected cells worked out by hand from them (see the test modules), so an import that
reproduces the cells reproduces the method.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta


@dataclass(frozen=True)
class SeedWindow:
    running: int
    prompt: float
    gen: float
    completions: int = 0  # 2xx chat completions logged inside this window
    spec: tuple[float, float] | None = None  # (mean acceptance length, draft acceptance rate %)


def _level(c: int, prompts: Sequence[float], gens: Sequence[float], done: Sequence[int]) -> list[SeedWindow]:
    return [SeedWindow(c, p, g, k) for p, g, k in zip(prompts, gens, done, strict=True)]


# Qwen3.5-27B, worked out by hand:
#   c=1: gen (97.0+97.2+96.8+98.0+96.0+97.5+97.5+0.0)/8 = 85.0 (an idle window included);
#        prefill 4000/8 = 500.0, active 4000/3 = 1333.3; 2 requests / (8*10 s) = 1.5 per minute
#   c=2: gen 150.0 (6); prefill 600/6 = 100.0, active 600.0 (1); 3 requests / 1 min = 3.0
#   c=3: gen 600.5/3 = 200.1666 -> 200.2; prefill 30/3 = 10.0, active 15.0 (2); 2 / 0.5 min = 4.0
#   c=4: gen (210.2+210.3)/2 = 210.25 -> 210.3 (halves round up); prefill 0.0, active none; 0.0
#   c=5: never reached -> "-"
#   c=6: gen 240.0 (1); prefill 5000.0, active 5000.0 (1); 1 / (10 s) = 6.0
#   spec decode: mean acceptance length (2.41+2.59)/2 = 2.50, draft acceptance rate (61.2+70.0)/2 = 65.6
QWEN_27B: list[SeedWindow] = [
    SeedWindow(0, 0.0, 0.0),
    *_level(1, [1200.0, 0.0, 0.0, 350.5], [97.0, 97.2, 96.8, 98.0], [1, 0, 0, 0]),
    *_level(2, [0.0, 0.0, 0.0], [150.0, 152.5, 147.5], [1, 0, 1]),
    *_level(3, [10.0, 20.0, 0.0], [200.1, 200.2, 200.2], [0, 2, 0]),
    *_level(4, [0.0, 0.0], [210.2, 210.3], [0, 0]),
    SeedWindow(6, 5000.0, 240.0, 1, spec=(2.41, 61.2)),
    *_level(2, [0.0, 0.0, 600.0], [151.0, 149.0, 150.0], [0, 0, 1]),
    SeedWindow(0, 0.0, 0.0, 1),  # a request finishing as the server goes idle: not in any table
    *_level(1, [0.0, 0.0, 0.0, 2449.5], [96.0, 97.5, 97.5, 0.0], [0, 0, 0, 1]),
    SeedWindow(0, 0.0, 0.0, spec=(2.59, 70.0)),
]

# Qwen3.5-9B: c=1 gen (140.0+140.5)/2 = 140.25 -> 140.3, prefill 50.0, active 100.0 (1),
# 2 requests / (20 s) = 6.0 per minute; c=2 one window.
QWEN_9B: list[SeedWindow] = [
    *_level(1, [100.0, 0.0], [140.0, 140.5], [1, 1]),
    SeedWindow(2, 0.0, 260.0, 0),
]

START = datetime(2025, 12, 1, 10, 0, 0, tzinfo=UTC)

FORMATS = (
    "v1_engine",  # vLLM >= 0.9: "[loggers.py:N] Engine 000: ... Waiting: N reqs, ... Prefix cache hit rate"
    "v1_plain",  # early V1: no engine prefix, "Running: N reqs, Waiting: N reqs " and nothing after
    "v0",  # vLLM <= 0.7: "metrics.py:N] ... Swapped: 0 reqs, Pending: 0 reqs, ... CPU KV cache usage: 0.0%."
    "v0_brackets",  # vLLM 0.8 V0 engine: "[metrics.py:N]"
    "apiserver",  # vLLM >= 0.11: "(APIServer pid=1) " before every line, in ANSI colours
    "docker_timestamps",  # docker logs --timestamps: RFC3339 with nanoseconds before every line
    "compose",  # docker compose logs: "service-1  | " before every line
    "desktop",  # Docker Desktop copy: "2025-12-01 10:00:05.123 | "
    "crlf",  # a log saved on Windows
)


def _vllm_stamp(t: datetime) -> str:
    return t.strftime("%m-%d %H:%M:%S")


def _stats(fmt: str, t: datetime, w: SeedWindow) -> str:
    head = f"INFO {_vllm_stamp(t)}"
    nums = f"Avg prompt throughput: {w.prompt:.1f} tokens/s, Avg generation throughput: {w.gen:.1f} tokens/s"
    if fmt in ("v0", "v0_brackets"):
        where = "metrics.py:406]" if fmt == "v0" else "[metrics.py:417]"
        return (f"{head} {where} {nums}, Running: {w.running} reqs, Swapped: 0 reqs, Pending: 0 reqs, "
                "GPU KV cache usage: 9.2%, CPU KV cache usage: 0.0%.")
    if fmt == "v1_plain":
        return f"{head} [loggers.py:80] {nums}, Running: {w.running} reqs, Waiting: 0 reqs "
    return (f"{head} [loggers.py:123] Engine 000: {nums}, Running: {w.running} reqs, Waiting: 0 reqs, "
            "GPU KV cache usage: 3.1%, Prefix cache hit rate: 45.0%")


def _spec(t: datetime, length: float, rate: float) -> str:
    return (
        f"INFO {_vllm_stamp(t)} [metrics.py:91] SpecDecoding metrics: "
        f"Mean acceptance length: {length:.2f}, Accepted throughput: 12.50 tokens/s, "
        "Drafted throughput: 20.00 tokens/s, Accepted: 125 tokens, Drafted: 200 tokens, "
        f"Per-position acceptance rate: 0.700, 0.550, Avg Draft acceptance rate: {rate:.1f}%"
    )


def _access(method: str, path: str, status: int, port: int = 40000) -> str:
    phrase = {200: "OK", 400: "Bad Request", 500: "Internal Server Error"}[status]
    return f'INFO:     127.0.0.1:{port} - "{method} {path} HTTP/1.1" {status} {phrase}'


def _wrap(fmt: str, t: datetime, line: str) -> str:
    """The collector's prefix; `t` is when the line reached it."""
    if fmt == "apiserver":
        return f"\x1b[1;36m(APIServer pid=1)\x1b[0;0m {line}"
    if fmt == "docker_timestamps":
        return f"{t.strftime('%Y-%m-%dT%H:%M:%S')}.{t.microsecond:06d}123Z {line}"
    if fmt == "compose":
        return f"vllm-qwen-1  | {line}"
    if fmt == "desktop":
        return f"{t.strftime('%Y-%m-%d %H:%M:%S')}.{t.microsecond // 1000:03d} | {line}"
    return line


def render_log(windows: Sequence[SeedWindow], fmt: str, *, start: datetime = START,
               model: str | None = None, noise: bool = True) -> str:
    """One stats line every 10 s; a window's access lines lie inside it, before its stats line."""
    out: list[str] = []
    if model:
        out.append(_wrap(fmt, start, (
            f"INFO {_vllm_stamp(start)} [core.py:77] Initializing a V1 LLM engine (v0.11.0) with config: "
            f"model='/models/{model}', speculative_config=None, tokenizer='/models/{model}', "
            f"served_model_name={model}, enable_prefix_caching=True"
        )))
    for i, w in enumerate(windows):
        t_end = start + timedelta(seconds=10 * (i + 1))
        inside = [t_end - timedelta(seconds=9.5 - 1.5 * k) for k in range(w.completions + 3)]
        for k in range(w.completions):
            out.append(_wrap(fmt, inside[k], _access("POST", "/v1/chat/completions", 200, 40000 + k)))
        if noise:
            out.append(_wrap(fmt, inside[-3], _access("GET", "/health", 200)))
            out.append(_wrap(fmt, inside[-2], _access("POST", "/tokenize", 200)))
            if i % 4 == 1:
                out.append(_wrap(fmt, inside[-1], _access("POST", "/v1/chat/completions", 400)))
            chatter = f"INFO {_vllm_stamp(inside[-1])} [chat_utils.py:470] Detected the chat template content"
            out.append(_wrap(fmt, inside[-1], chatter + " format to be 'string'."))
        out.append(_wrap(fmt, t_end, _stats(fmt, t_end, w)))
        if w.spec:
            out.append(_wrap(fmt, t_end, _spec(t_end, *w.spec)))
    end = "\r\n" if fmt == "crlf" else "\n"
    return end.join(out) + end
