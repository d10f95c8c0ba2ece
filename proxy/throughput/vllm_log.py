"""One line of a vLLM server log -> the event the throughput import needs, or None.

Lines come plain or as `docker logs` / `docker compose logs` / `kubectl logs` output, so the
message is searched for anywhere in the line instead of anchored after a known prefix:

    INFO 12-01 10:00:05 [loggers.py:123] Engine 000: Avg prompt throughput: 1234.5 tokens/s, ...
    (APIServer pid=1) INFO 12-01 10:00:05 [loggers.py:123] Engine 000: Avg prompt throughput: ...
    INFO 08-27 15:21:10 metrics.py:406] Avg prompt throughput: ..., Running: 6 reqs, Swapped: 0 reqs, ...
    2024-12-01T10:00:05.123456789Z INFO:     127.0.0.1:5555 - "POST /v1/chat/completions HTTP/1.1" 200 OK
    vllm-1  | 2024-12-01T10:00:05.123Z INFO 12-01 10:00:05 [metrics.py:91] SpecDecoding metrics: ...
    [pod/vllm-7d9f-x2k/vllm] INFO 12-01 10:00:05 [loggers.py:123] Engine 000: Avg prompt throughput: ...

Fields are read one by one, so a version that adds or reorders fields still parses. A line that
carries a stats or spec-decode marker but lacks its numbers becomes `Malformed`, never an error.
"""

from __future__ import annotations

import calendar
import functools
import math
import re
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "COMPLETION_PATHS",
    "AccessLine",
    "Event",
    "Malformed",
    "ModelName",
    "Parsed",
    "SpecLine",
    "Stamp",
    "StatsLine",
    "parse_line",
]

# Endpoints whose requests occupy the engine; /tokenize, /health, /metrics and the like do not.
COMPLETION_PATHS = frozenset({"/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages"})


@dataclass(frozen=True, slots=True)
class Stamp:
    """When a line was logged.

    clock "docker": POSIX seconds from an RFC3339 prefix (docker/kubectl, full date, UTC).
    clock "vllm": vLLM's own `MM-DD HH:MM:SS`, which has no year: seconds from Jan 1 in a 366-day
    calendar, so ordering holds within a year; the importer adds the year rollovers.
    Stamps of different clocks are not comparable.
    """

    clock: Literal["docker", "vllm"]
    seconds: float


@dataclass(frozen=True, slots=True)
class StatsLine:
    engine: str  # "000" per engine, "aggregated" for "N Engines Aggregated", "" when unprefixed
    prompt_tps: float
    generation_tps: float
    running: int
    waiting: int | None


@dataclass(frozen=True, slots=True)
class SpecLine:
    mean_acceptance_length: float | None
    draft_acceptance_rate: float | None  # percent
    accepted_tokens: int | None  # per interval (v1); None where the log gives running totals (v0)
    drafted_tokens: int | None


@dataclass(frozen=True, slots=True)
class AccessLine:
    method: str
    path: str
    status: int

    @property
    def is_completion(self) -> bool:
        return self.method == "POST" and self.path.split("?", 1)[0] in COMPLETION_PATHS

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


@dataclass(frozen=True, slots=True)
class ModelName:
    """The served model, from the engine's start-up config line."""

    name: str


@dataclass(frozen=True, slots=True)
class Malformed:
    kind: Literal["stats", "spec_decode"]


Event = StatsLine | SpecLine | AccessLine | ModelName | Malformed


@dataclass(frozen=True, slots=True)
class Parsed:
    event: Event
    stamp: Stamp | None  # read only where binning needs it: stats lines and 2xx completions
    source: str  # docker compose service or kubectl "POD/CONTAINER", "" when the line has none


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_COMPOSE = re.compile(r"([A-Za-z0-9][\w.-]*)\s+\| ")
# `kubectl logs --prefix`: "[pod/NAME/CONTAINER] " before every line; each pod/container is its own server.
_KUBECTL = re.compile(r"\[pod/([^/\]\s]+)/([^\]\s]+)\] ")
_RFC3339 = re.compile(r"(\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d)(?:[.,](\d{1,9}))?(Z|[+-]\d\d:?\d\d)?")
_VLLM_STAMP = re.compile(r"\b(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)\b")

_PROMPT = re.compile(r"Avg prompt throughput: (\S+) tokens/s")
_GENERATION = re.compile(r"Avg generation throughput: (\S+) tokens/s")
_RUNNING = re.compile(r"Running: (\S+) reqs")
_WAITING = re.compile(r"(?:Waiting|Pending): (\d+) reqs")
_ENGINE = re.compile(r"(?:Engine (\d+)|(\d+) Engines Aggregated): *Avg prompt throughput")

_SPEC_MARKER = re.compile(r"SpecDecoding metrics|Speculative metrics")
_MEAN_LENGTH = re.compile(r"Mean acceptance length: ([^\s,]+)")
# "Total draft acceptance rate" (a running total some builds add) must not be taken for the interval's.
_RATE = re.compile(r"(?<!Total )(?<!total )(?:Avg )?[Dd]raft acceptance rate: ([^\s,%]+)(%?)")
_ACCEPTED = re.compile(r"\bAccepted: (\d+) tokens")
_DRAFTED = re.compile(r"\bDrafted: (\d+) tokens")

_ACCESS = re.compile(r'"([A-Z]+) (\S+) HTTP/[\d.]+" (\d{3})\b')
_SERVED_NAME = re.compile(r"served_model_name=([^,\s]+)")
_CONFIG_MODEL = re.compile(r"\bmodel='([^']+)'")

# Stamps sit in the prefix; compose service + RFC3339 + "(APIServer pid=N) INFO MM-DD ..." fit in this.
_PREFIX_CHARS = 200

# Cumulative day counts of a leap year: Feb 29 must parse, whatever year the log was written in.
_DAYS_BEFORE_MONTH = (0, 31, 60, 91, 121, 152, 182, 213, 244, 274, 305, 335)


def parse_line(line: str) -> Parsed | None:
    """The event on this line, or None when the line is irrelevant to throughput."""
    # Cheap substring tests first: nearly every line of a real log is irrelevant.
    if "throughput" in line:
        kind = "stats" if "Avg prompt throughput" in line or "Avg generation throughput" in line else ""
    else:
        kind = ""
    if not kind:
        if "acceptance" in line and _SPEC_MARKER.search(line):
            kind = "spec"
        elif "HTTP/" in line:
            kind = "access"
        elif "with config:" in line:
            kind = "config"
        else:
            return None
    line = _ANSI.sub("", line) if "\x1b" in line else line
    event: Event | None
    if kind == "stats":
        event = _stats(line)
    elif kind == "spec":
        event = _spec(line)
    elif kind == "access":
        event = _access(line)
    else:
        event = _model(line)
    if event is None:
        return None
    # Reading a stamp is the costliest step, and only windows and the requests binned into them use one.
    timed = isinstance(event, StatsLine) or (
        isinstance(event, AccessLine) and event.is_completion and event.ok
    )
    return Parsed(event, _stamp(line[:_PREFIX_CHARS]) if timed else None, _source(line))


def _number(text: str) -> float | None:
    try:
        value = float(text.rstrip(","))
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def _stats(line: str) -> StatsLine | Malformed:
    prompt, gen, running = _PROMPT.search(line), _GENERATION.search(line), _RUNNING.search(line)
    if not (prompt and gen and running) or not running.group(1).isdigit():
        return Malformed("stats")
    prompt_tps, generation_tps = _number(prompt.group(1)), _number(gen.group(1))
    if prompt_tps is None or generation_tps is None:
        return Malformed("stats")
    waiting = _WAITING.search(line)
    engine = _ENGINE.search(line)
    engine_key = "" if engine is None else (engine.group(1) if engine.group(1) is not None else "aggregated")
    return StatsLine(
        engine=engine_key,
        prompt_tps=prompt_tps,
        generation_tps=generation_tps,
        running=int(running.group(1)),
        waiting=int(waiting.group(1)) if waiting else None,
    )


def _float_or_nan(text: str) -> float | None:
    """Like _number, but NaN (vLLM prints nan% when nothing was drafted) is kept as a valid reading."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isnan(value) or (math.isfinite(value) and value >= 0) else None


def _spec(line: str) -> SpecLine | Malformed:
    length_m, rate_m = _MEAN_LENGTH.search(line), _RATE.search(line)
    length = _float_or_nan(length_m.group(1)) if length_m else None
    rate = _float_or_nan(rate_m.group(1)) if rate_m else None
    if length is None and rate is None:
        return Malformed("spec_decode")
    # v0 ("Speculative metrics") prints the rate as a fraction and token counts as running totals.
    if rate is not None and rate_m is not None and not rate_m.group(2):
        rate *= 100
    accepted, drafted = _ACCEPTED.search(line), _DRAFTED.search(line)
    return SpecLine(
        mean_acceptance_length=length,
        draft_acceptance_rate=rate,
        accepted_tokens=int(accepted.group(1)) if accepted and drafted else None,
        drafted_tokens=int(drafted.group(1)) if accepted and drafted else None,
    )


def _access(line: str) -> AccessLine | None:
    m = _ACCESS.search(line)
    return AccessLine(m.group(1), m.group(2), int(m.group(3))) if m else None


def _model(line: str) -> ModelName | None:
    m = _SERVED_NAME.search(line) or _CONFIG_MODEL.search(line)
    if not m:
        return None
    name = m.group(1).strip("'\"")
    # A local path names the model by its last part; a hub id ("Qwen/Qwen3-8B") stays whole.
    if name.startswith(("/", "./", "~")):
        name = name.rstrip("/").rsplit("/", 1)[-1]
    return ModelName(name) if name and name.lower() != "none" else None


def _stamp(line: str) -> Stamp | None:
    # The outer (docker) stamp wins: access lines only ever carry that one, and both must compare.
    m = _RFC3339.search(line)
    if m:
        seconds = _posix_seconds(m.group(1))
        if seconds is not None:
            frac = float("0." + m.group(2)) if m.group(2) else 0.0
            return Stamp("docker", seconds - _utc_offset(m.group(3)) + frac)
    m = _VLLM_STAMP.search(line)
    if m:
        month, day, hour, minute, second = (int(g) for g in m.groups())
        if 1 <= month <= 12 and 1 <= day <= 31:
            days = _DAYS_BEFORE_MONTH[month - 1] + day - 1
            return Stamp("vllm", float(days * 86400 + hour * 3600 + minute * 60 + second))
    return None


def _posix_seconds(text: str) -> int | None:
    """'YYYY-MM-DD?HH:MM:SS' -> POSIX seconds."""
    day = _posix_day(text[:10])
    hour, minute, second = int(text[11:13]), int(text[14:16]), int(text[17:19])
    if day is None or hour > 23 or minute > 59 or second > 60:
        return None
    return day + hour * 3600 + minute * 60 + second


@functools.lru_cache(maxsize=64)
def _posix_day(date: str) -> int | None:
    """Cached: a log spans few days, and this is the one costly step of reading a stamp."""
    year, month, day = int(date[:4]), int(date[5:7]), int(date[8:10])
    if not (1 <= month <= 12 and 1 <= day <= 31):
        return None
    return calendar.timegm((year, month, day, 0, 0, 0, 0, 0, 0))


def _utc_offset(zone: str | None) -> int:
    if not zone or zone == "Z":
        return 0
    sign = -1 if zone[0] == "-" else 1
    digits = zone[1:].replace(":", "")
    return sign * (int(digits[:2]) * 3600 + int(digits[2:4]) * 60)


def _source(line: str) -> str:
    if line.startswith("[pod/"):
        k = _KUBECTL.match(line)
        if k:
            return f"{k.group(1)}/{k.group(2)}"
    m = _COMPOSE.match(line) if " | " in line else None
    return m.group(1) if m else ""
