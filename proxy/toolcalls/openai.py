"""Structured OpenAI `tool_calls`: a whole message's array, or assembled from stream deltas.

vLLM streams a call as deltas under `tool_calls`: the first delta of an index carries `id`,
`type` and `function.name` (and often `arguments: ""`), later ones carry argument fragments.
Calls stream one after another, so a call is complete when the next one begins or the choice
ends. A new call is recognised by a new `index`, or by a new `id` on the same index (some
servers number every call 0), so neither shape merges two calls into one.

Arguments must be a JSON object in a string; anything else is a malformed call, kept with its
text. A few servers send the arguments as an object rather than a string; that is accepted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from proxy.toolcalls.base import (
    STRUCTURED_SOURCE,
    CompletedCall,
    Event,
    ExtractionResult,
    FormatStream,
    Schemas,
    ToolCall,
    ToolCallFormat,
    dumps,
    loads_strict,
)
from proxy.toolcalls.scanner import message_text

if TYPE_CHECKING:
    from typing_extensions import TypeIs  # typing.TypeIs is Python 3.13+

__all__ = ["OpenAIFormat", "StructuredStream", "structured_call"]

SOURCE = STRUCTURED_SOURCE


class OpenAIFormat(ToolCallFormat):
    name: ClassVar[str] = SOURCE
    field: ClassVar[str] = "tool_calls"

    def extract(self, message: dict[str, Any], schemas: Schemas) -> ExtractionResult:
        result = ExtractionResult(content=message_text(message))
        entries = message.get("tool_calls") if isinstance(message, dict) else None
        if not isinstance(entries, list):
            return result
        for position, entry in enumerate(entries):
            if not isinstance(entry, dict):
                entry = {}
            function = entry.get("function")
            function = function if isinstance(function, dict) else {}
            index = entry.get("index")
            result.add(
                structured_call(
                    name=function.get("name"),
                    arguments=function.get("arguments"),
                    call_id=entry.get("id"),
                    index=index if _is_int(index) else position,
                )
            )
        return result

    def stream(self, schemas: Schemas) -> StructuredStream:
        return StructuredStream()


def structured_call(*, name: Any, arguments: Any, call_id: Any, index: int) -> ToolCall:
    """One structured call, checked: a name, and arguments that are a JSON object."""
    if isinstance(arguments, str):
        text = arguments
    elif arguments is None:
        text = ""
    else:
        text = _dumps(arguments)
    call = ToolCall(
        name=name if isinstance(name, str) else "",
        arguments_text=text,
        arguments=None,
        source=SOURCE,
        id=call_id if isinstance(call_id, str) and call_id else None,
        index=index,
    )
    if not call.name:
        return _malformed(call, "tool call has no function name")
    try:
        parsed = loads_strict(text)  # a dict too: round-tripped so it is strict JSON
    except (ValueError, RecursionError) as exc:
        return _malformed(call, f"arguments are not valid JSON: {exc}")
    if not isinstance(parsed, dict):
        return _malformed(call, "arguments are not a JSON object")
    call.arguments = parsed
    return call


class _Open:
    __slots__ = ("call_id", "index", "name", "parts")

    def __init__(self, index: int) -> None:
        self.index = index
        self.call_id = ""
        self.name = ""
        self.parts: list[str] = []


class StructuredStream(FormatStream):
    """Accumulates the `tool_calls` deltas of one choice into whole calls."""

    def __init__(self) -> None:
        self._open: _Open | None = None
        self._next_index = 0

    def feed(self, delta: dict[str, Any]) -> list[Event]:
        fragments = delta.get("tool_calls") if isinstance(delta, dict) else None
        return self.feed_value(fragments) if fragments else []

    def feed_value(self, fragments: Any) -> list[Event]:
        if type(fragments) is not list:
            return []
        # Hot path: one more argument fragment of the open, named call (what most deltas are).
        # Anything unusual (no index, an id, odd types) raises or fails a test and takes the
        # general path below; try costs nothing when nothing is raised.
        current = self._open
        if current is not None and current.name and len(fragments) == 1:
            fragment = fragments[0]
            try:
                if fragment["index"] == current.index and "id" not in fragment:
                    arguments = fragment["function"]["arguments"]
                    if type(arguments) is str:
                        current.parts.append(arguments)
                        return []
            except (KeyError, TypeError, IndexError):
                pass
        events: list[Event] = []
        for fragment in fragments:
            if not isinstance(fragment, dict):
                continue
            index = fragment.get("index")
            call_id = fragment.get("id")
            call_id = call_id if isinstance(call_id, str) else ""
            current = self._open
            if not _is_int(index):
                index = current.index if current is not None and not call_id else self._next_index
            new_id = bool(call_id) and current is not None and bool(current.call_id) and call_id != current.call_id
            if current is None or index != current.index or new_id:
                if current is not None:
                    events.append(CompletedCall(self._complete(current)))
                current = self._open = _Open(index)
                self._next_index = max(self._next_index, index + 1)
            if call_id and not current.call_id:
                current.call_id = call_id
            function = fragment.get("function")
            if isinstance(function, dict):
                name = function.get("name")
                if isinstance(name, str) and name and not current.name:
                    current.name = name
                arguments = function.get("arguments")
                if isinstance(arguments, str):
                    current.parts.append(arguments)
                elif isinstance(arguments, dict):
                    current.parts.append(_dumps(arguments))
        return events

    def finish(self) -> list[Event]:
        current, self._open = self._open, None
        return [CompletedCall(self._complete(current))] if current is not None else []

    @staticmethod
    def _complete(current: _Open) -> ToolCall:
        return structured_call(
            name=current.name,
            arguments="".join(current.parts),
            call_id=current.call_id,
            index=current.index,
        )


def _dumps(value: Any) -> str:
    try:
        return dumps(value)
    except (ValueError, TypeError, RecursionError):  # not JSON at all: keep something to show
        return repr(value)


def _is_int(value: Any) -> TypeIs[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _malformed(call: ToolCall, error: str) -> ToolCall:
    call.error = error
    call.raw = call.arguments_text
    return call
