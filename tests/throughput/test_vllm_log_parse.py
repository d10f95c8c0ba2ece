"""vllm_log.parse_line on lines as vLLM versions and log collectors really write them."""

from __future__ import annotations

import calendar
import math

import pytest

from proxy.throughput.vllm_log import (
    AccessLine,
    Malformed,
    ModelName,
    SpecLine,
    Stamp,
    StatsLine,
    parse_line,
)

V1 = ("INFO 12-01 10:00:05 [loggers.py:123] Engine 000: Avg prompt throughput: 1234.5 tokens/s, "
      "Avg generation throughput: 85.2 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 3.1%, "
      "Prefix cache hit rate: 45.0%")
V1_NO_ENGINE = ("INFO 02-10 09:15:00 [loggers.py:80] Avg prompt throughput: 1234.5 tokens/s, "
                "Avg generation throughput: 85.2 tokens/s, Running: 1 reqs, Waiting: 3 reqs ")
V0 = ("INFO 08-27 15:21:10 metrics.py:406] Avg prompt throughput: 1234.5 tokens/s, "
      "Avg generation throughput: 85.2 tokens/s, Running: 1 reqs, Swapped: 0 reqs, Pending: 2 reqs, "
      "GPU KV cache usage: 9.2%, CPU KV cache usage: 0.0%.")
V0_BRACKETS = ("INFO 08-05 11:33:17 [metrics.py:417] Avg prompt throughput: 1234.5 tokens/s, Avg generation "
               "throughput: 85.2 tokens/s, Running: 1 reqs, Swapped: 0 reqs, Pending: 0 reqs, "
               "GPU KV cache usage: 35.1%, CPU KV cache usage: 0.0%.")
AGGREGATED = ("(APIServer pid=7) INFO 12-01 10:00:05 [loggers.py:310] 2 Engines Aggregated: "
              "Avg prompt throughput: 1234.5 tokens/s, Avg generation throughput: 85.2 tokens/s, "
              "Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 1.0%, Prefix cache hit rate: 0.0%, "
              "MM cache hit rate: 0.0%")


@pytest.mark.parametrize(("line", "engine", "waiting"), [
    (V1, "000", 0),
    (V1_NO_ENGINE, "", 3),
    (V0, "", 2),
    (V0_BRACKETS, "", 0),
    (AGGREGATED, "aggregated", 0),
    ("(APIServer pid=3402897) " + V1.replace("Engine 000", "Engine 001"), "001", 0),
    ("\x1b[1;36m(APIServer pid=1554)\x1b[0;0m " + V1, "000", 0),
    ("2025-12-01T10:00:05.123456789Z " + V1, "000", 0),
    ("vllm-qwen-1  | 2025-12-01T10:00:05.123456789Z " + V1, "000", 0),
    ("2026-05-01 18:50:31.839 | (APIServer pid=1) " + V1, "000", 0),
    ("DEBUG 12-01 10:00:05 [loggers.py:123] Engine 000: " + V1.split("Engine 000: ")[1], "000", 0),
])
def test_stats_lines_of_every_version_and_collector(line: str, engine: str, waiting: int) -> None:
    parsed = parse_line(line)
    assert parsed is not None
    assert parsed.event == StatsLine(engine, 1234.5, 85.2, 1, waiting)


@pytest.mark.parametrize(("line", "stamp"), [
    (V1, Stamp("vllm", float(335 * 86400 + 10 * 3600 + 5))),  # Dec 1 in a leap-year calendar
    ("INFO 02-29 00:00:01 [loggers.py:1] " + V1.split("] ")[1], Stamp("vllm", float(59 * 86400 + 1))),
    ("2025-12-01T10:00:05.250000000Z " + V1,
     Stamp("docker", calendar.timegm((2025, 12, 1, 10, 0, 5, 0, 0, 0)) + 0.25)),
    ("2025-12-01T12:00:05+02:00 " + V1,
     Stamp("docker", float(calendar.timegm((2025, 12, 1, 10, 0, 5, 0, 0, 0))))),
    ("2026-05-01 18:50:31.839 | " + V1,
     Stamp("docker", calendar.timegm((2026, 5, 1, 18, 50, 31, 0, 0, 0)) + 0.839)),
    ('INFO:     127.0.0.1:5555 - "POST /v1/chat/completions HTTP/1.1" 200 OK', None),
])
def test_stamps_prefer_the_collectors_full_date(line: str, stamp: Stamp | None) -> None:
    parsed = parse_line(line)
    assert parsed is not None
    if stamp is None:
        assert parsed.stamp is None
    else:
        assert parsed.stamp is not None
        assert parsed.stamp.clock == stamp.clock
        assert parsed.stamp.seconds == pytest.approx(stamp.seconds)


@pytest.mark.parametrize(("line", "access", "completion", "ok"), [
    ('INFO:     127.0.0.1:5555 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
     AccessLine("POST", "/v1/chat/completions", 200), True, True),
    ('(APIServer pid=1) INFO:     10.0.0.7:41234 - "POST /v1/completions HTTP/1.0" 201 Created',
     AccessLine("POST", "/v1/completions", 201), True, True),
    ('INFO:     127.0.0.1:5555 - "POST /v1/chat/completions?x=1 HTTP/1.1" 500 Internal Server Error',
     AccessLine("POST", "/v1/chat/completions?x=1", 500), True, False),
    ('INFO:     127.0.0.1:5555 - "POST /tokenize HTTP/1.1" 200 OK',
     AccessLine("POST", "/tokenize", 200), False, True),
    ('INFO:     127.0.0.1:5555 - "GET /v1/chat/completions HTTP/1.1" 405 Method Not Allowed',
     AccessLine("GET", "/v1/chat/completions", 405), False, False),
    ('INFO:     127.0.0.1:5555 - "GET /metrics HTTP/2" 200 OK',
     AccessLine("GET", "/metrics", 200), False, True),
])
def test_access_lines(line: str, access: AccessLine, completion: bool, ok: bool) -> None:
    parsed = parse_line(line)
    assert parsed is not None and parsed.event == access
    assert (access.is_completion, access.ok) == (completion, ok)


@pytest.mark.parametrize(("line", "length", "rate", "accepted", "drafted"), [
    # vLLM >= 0.9 (v1)
    ("INFO 12-01 10:00:05 [metrics.py:91] SpecDecoding metrics: Mean acceptance length: 2.41, "
     "Accepted throughput: 12.50 tokens/s, Drafted throughput: 20.00 tokens/s, Accepted: 125 tokens, "
     "Drafted: 200 tokens, Per-position acceptance rate: 0.700, 0.550, Avg Draft acceptance rate: 61.2%",
     2.41, 61.2, 125, 200),
    # early v1
    ("INFO 03-20 10:00:05 [metrics.py:80] SpecDecoding metrics: Draft acceptance rate: 61.2%, Accepted: 125 "
     "tokens, Drafted: 200 tokens", None, 61.2, 125, 200),
    # v0: rate as a fraction, counts are running totals (not summed)
    ("INFO 10-16 19:05:47 metrics.py:367] Speculative metrics: Draft acceptance rate: 0.642, "
     "System efficiency: 0.598, Number of speculative tokens: 3, Number of accepted tokens: 8547, "
     "Number of draft tokens: 13311, Number of emitted tokens: 10616.", None, 64.2, None, None),
    # a build that adds running totals after the interval's figures
    ("INFO 12-01 10:00:05 [spec.py:1] SpecDecoding metrics: Draft acceptance rate: 55.0%, "
     "Accepted: 11 tokens, Drafted: 20 tokens, Total draft acceptance rate: 40.0%, "
     "Total accepted: 40 tokens, Total drafted: 100 tokens",
     None, 55.0, 11, 20),
])
def test_spec_decode_lines(line: str, length: float | None, rate: float, accepted: int | None,
                           drafted: int | None) -> None:
    parsed = parse_line(line)
    assert parsed is not None and isinstance(parsed.event, SpecLine)
    event = parsed.event
    assert event.mean_acceptance_length == length
    assert event.draft_acceptance_rate == pytest.approx(rate)
    assert (event.accepted_tokens, event.drafted_tokens) == (accepted, drafted)


def test_spec_decode_nan_rate_is_a_reading_not_an_error() -> None:
    parsed = parse_line("INFO 12-01 10:00:05 [metrics.py:91] SpecDecoding metrics: "
                        "Mean acceptance length: 1.00, Accepted: 0 tokens, Drafted: 0 tokens, "
                        "Avg Draft acceptance rate: nan%")
    assert parsed is not None and isinstance(parsed.event, SpecLine)
    assert parsed.event.mean_acceptance_length == 1.0
    assert parsed.event.draft_acceptance_rate is not None and math.isnan(parsed.event.draft_acceptance_rate)


@pytest.mark.parametrize("line", [
    "INFO 12-01 10:00:05 [loggers.py:123] Engine 000: Avg prompt throughput: abc tokens/s, Avg generation "
    "throughput: 85.2 tokens/s, Running: 1 reqs, Waiting: 0 reqs",
    "INFO 12-01 10:00:05 [loggers.py:123] Engine 000: Avg prompt throughput: 1234.5 tokens/s, Avg gener",
    "INFO 12-01 10:00:05 [loggers.py:123] Engine 000: Avg prompt throughput: 1.0 tokens/s, Avg generation "
    "throughput: 2.0 tokens/s, Running: -1 reqs",
    "INFO 12-01 10:00:05 [loggers.py:123] Avg prompt throughput: inf tokens/s, Avg generation throughput: "
    "2.0 tokens/s, Running: 1 reqs",
    "Avg generation throughput: 2.0 tokens/s",
])
def test_stats_looking_lines_that_do_not_parse_are_malformed(line: str) -> None:
    parsed = parse_line(line)
    assert parsed is not None and parsed.event == Malformed("stats")


def test_spec_looking_line_without_figures_is_malformed() -> None:
    parsed = parse_line("INFO 12-01 10:00:05 [metrics.py:91] SpecDecoding metrics: "
                        "Mean acceptance length: ?, Avg Draft acceptance rate: ?")
    assert parsed is not None and parsed.event == Malformed("spec_decode")


@pytest.mark.parametrize("line", [
    "",
    "garbage \x00\x01\ufffd\ufffd",
    "INFO 12-01 10:00:05 [api_server.py:1] Starting vLLM API server 0 on http://0.0.0.0:8000",
    "Loading safetensors checkpoint shards: 100% Completed | 7/7 [00:06<00:00,  1.10it/s]",
    "INFO 12-01 10:00:05 [gpu_model_runner.py:1] Model loading took 51.2 GiB and 30.1 seconds",
    'HTTP Request: POST http://127.0.0.1:8000/v1/chat/completions "HTTP/1.1 200 OK"',  # an httpx client log
    "Throughput: 12.5 requests/s",
    "INFO 12-01 10:00:05 [metrics.py:1] Prefix cache hit rate: GPU: 94.35%, CPU: 0.00%",
])
def test_irrelevant_lines(line: str) -> None:
    assert parse_line(line) is None


@pytest.mark.parametrize(("line", "name"), [
    ("(EngineCore_DP0 pid=12) INFO 10-23 18:38:46 [core.py:77] Initializing a V1 LLM engine (v0.11.0) "
     "with config: model='Qwen/Qwen3.5-27B', speculative_config=None, tokenizer='Qwen/Qwen3.5-27B', "
     "skip_tokenizer_init=False, served_model_name=Qwen/Qwen3.5-27B, enable_prefix_caching=True",
     "Qwen/Qwen3.5-27B"),
    ("INFO 10-16 19:00:00 llm_engine.py:237] Initializing an LLM engine (v0.6.3) with config: model='/models/"
     "Qwen3.5-9B', speculative_config=None, served_model_name=/models/Qwen3.5-9B, use_v2_block_manager=True",
     "Qwen3.5-9B"),
    ("(EngineCore pid=1) INFO 09-30 15:27:10 [core.py:105] Initializing a V1 LLM engine (v0.19.1) "
     "with config: model='Qwen/Qwen3-8B'", "Qwen/Qwen3-8B"),
])
def test_served_model_name_from_the_engine_start_up_line(line: str, name: str) -> None:
    parsed = parse_line(line)
    assert parsed is not None and parsed.event == ModelName(name)


def test_compose_service_prefix_is_the_source() -> None:
    parsed = parse_line("qwen3.5-9b  | (APIServer pid=1) " + V1)
    assert parsed is not None and parsed.source == "qwen3.5-9b"
    desktop = parse_line("2026-05-01 18:50:31.839 | " + V1)
    assert desktop is not None and desktop.source == ""
