"""The one shape every tool-call format is turned into, and the interface each format implements.

A format reads one assistant message whole (`extract`) or the deltas of one streamed choice
(`stream`), and reports calls in the same shapes: `ToolCall` for a call, `TextDelta` for text that
may go to the client now, `CompletedCall` for a call that is complete and ready to judge.
"""

from __future__ import annotations

import json
import math
import os
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

from proxy.strict import MAX_EXACT_INT, lone_surrogate, unique_object

__all__ = [
    "STRUCTURED_SOURCE",
    "CompletedCall",
    "Event",
    "ExtractionResult",
    "FormatStream",
    "Schemas",
    "TextDelta",
    "ToolCall",
    "ToolCallFormat",
    "dumps",
    "loads_strict",
    "new_call_id",
]

# The `source` of a call the upstream sent as a structured `tool_calls` entry (the `openai` format).
STRUCTURED_SOURCE = "openai"

# Tool name -> that tool's `parameters` JSON schema, as the request offered it.
Schemas = dict[str, dict[str, Any]]


@dataclass(slots=True)
class ToolCall:
    """One tool call as the model made it, whatever format carried it.

    `arguments` is None exactly when the call is malformed; `error` then says why.
    `index` is the upstream's tool index for structured calls, and the running number of the
    content calls of the choice for calls found in content (malformed ones included), so the
    order of `tool_calls` and `malformed` together can be restored.
    `raw` is the call's text as the model wrote it (content calls), or the arguments text of a
    malformed structured call.
    """

    name: str
    arguments_text: str
    arguments: dict[str, Any] | None
    source: str  # a format's name ("openai", "qwen3_coder", "hermes"), or what the proxy made it from
    id: str | None = None
    index: int = 0
    error: str | None = None
    raw: str | None = None

    @property
    def malformed(self) -> bool:
        return self.arguments is None

    @property
    def structured(self) -> bool:
        """The upstream sent it as a structured OpenAI `tool_calls` entry (not written in content, nor
        made by the proxy): its arguments text is the upstream's own and is relayed as it came."""
        return self.source == STRUCTURED_SOURCE


@dataclass(slots=True)
class ExtractionResult:
    content: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    malformed: list[ToolCall] = field(default_factory=list)

    def add(self, call: ToolCall) -> None:
        (self.malformed if call.malformed else self.tool_calls).append(call)


@dataclass(slots=True)
class TextDelta:
    """Text that is safe to send to the client now.

    `field` is the delta field it came in: "content", "reasoning" or "reasoning_content".
    """

    field: str
    text: str


@dataclass(slots=True)
class CompletedCall:
    """A whole call (structured, or found in content), complete and ready to judge."""

    call: ToolCall


Event = TextDelta | CompletedCall


def new_call_id() -> str:
    """A fresh call id shaped like vLLM's (`chatcmpl-tool-` + 32 hex digits)."""
    return f"chatcmpl-tool-{os.urandom(16).hex()}"  # uuid4's randomness, without the UUID object


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    number = float(text)
    if number in (math.inf, -math.inf):
        raise ValueError(f"{text} overflows a float")
    return number


# One decoder and one encoder, built once: `json.loads` / `json.dumps` with options build a new
# one on every call, which costs more than the work itself for small arguments.
def _exact_int(text: str) -> int:
    number = int(text)
    if abs(number) > MAX_EXACT_INT:
        raise ValueError(f"{text[:40]} is beyond 2**53: JavaScript clients read another number")
    return number


_STRICT_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float,
                                   parse_int=_exact_int, object_pairs_hook=unique_object)
_ENCODER = json.JSONEncoder(ensure_ascii=False)


def dumps(value: Any) -> str:
    """`json.dumps(value, ensure_ascii=False)`, the form vLLM gives arguments in."""
    return _ENCODER.encode(value)


def loads_strict(text: str) -> Any:
    """`json.loads` that refuses NaN and Infinity (also `1e999`, which Python reads as inf).

    Python accepts them, but they are not JSON: a client such as OpenCode (JSON.parse) fails on
    the arguments we would hand it, so they count as invalid here. So do arguments a client could read
    as another object than the judged one: a key written twice (first-key-wins readers take the other
    value), an integer beyond 2**53 (JavaScript rounds it), an unpaired surrogate escape.
    """
    value = _STRICT_DECODER.decode(text)
    if lone_surrogate(text, value):
        raise ValueError("a string holds an unpaired UTF-16 surrogate escape")
    return value


class FormatStream(ABC):
    """Incremental extraction of one format over the deltas of ONE choice."""

    @abstractmethod
    def feed(self, delta: dict[str, Any]) -> list[Event]:
        """Read one `choices[i].delta`; return what is known now."""

    @abstractmethod
    def feed_value(self, value: Any) -> list[Event]:
        """Read the value of the format's own delta field (`ToolCallFormat.field`) straight: what `feed`
        does with a delta, without building one (the per-chunk hot path)."""

    @abstractmethod
    def finish(self) -> list[Event]:
        """The choice ended: flush held text and complete open calls."""


class ToolCallFormat(ABC):
    """One way a model's tool calls travel (registered by `name`).

    Both directions read the same input shape, an assistant message or a stream delta, so one
    test suite drives every format and checks that streamed equals whole.
    """

    name: ClassVar[str]
    # The message (and delta) field its calls travel in: "content" for the formats written in text,
    # read together by one scanner; any other field is read by one format alone.
    field: ClassVar[str]

    @abstractmethod
    def extract(self, message: dict[str, Any], schemas: Schemas) -> ExtractionResult:
        """Whole: this format's calls in one assistant message."""

    @abstractmethod
    def stream(self, schemas: Schemas) -> FormatStream:
        """Incremental: a fresh parser for the deltas of one choice."""
