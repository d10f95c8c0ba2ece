"""Reading results in a form two extractions can be compared by (call ids are random)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from proxy.toolcalls import CompletedCall, ExtractionResult, TextDelta
from proxy.toolcalls.base import Event

from .toolcall_cases import Case, deltas


def summary(result: ExtractionResult) -> tuple[Any, ...]:
    return (
        result.content,
        [(c.name, c.arguments, c.arguments_text, c.source, c.index, c.raw) for c in result.tool_calls],
        [(c.name, c.error, c.arguments_text, c.source, c.index, c.raw) for c in result.malformed],
    )


def collect(events: Iterable[Event]) -> ExtractionResult:
    result = ExtractionResult(content="")
    pieces = []
    for event in events:
        if isinstance(event, CompletedCall):
            result.add(event.call)
        else:
            assert isinstance(event, TextDelta)
            if event.field == "content":
                pieces.append(event.text)
    result.content = "".join(pieces)
    return result


def run_stream(stream: Any, message: dict[str, Any], cut: Callable[[str], list[int]]) -> ExtractionResult:
    events: list[Event] = []
    for delta in deltas(message, cut):
        events += stream.feed(delta)
    events += stream.finish()
    return collect(events)


def check_expected(case: Case, result: ExtractionResult) -> None:
    assert [(c.name, c.arguments) for c in result.tool_calls] == case.calls
    errors = [c.error for c in result.malformed]
    assert len(errors) == len(case.malformed), errors
    for error, expected in zip(errors, case.malformed, strict=True):
        assert error and expected in error
    for call in result.malformed:
        assert call.arguments is None and call.malformed and call.raw is not None
    for call in result.tool_calls:
        assert call.error is None and not call.malformed
        # arguments_text is the JSON of exactly these arguments
        assert json.loads(call.arguments_text) == call.arguments
    if case.content is not None:
        assert result.content == case.content
