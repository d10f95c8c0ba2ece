"""POST /v1/responses (OpenAI Responses API): every `function_call` output item judged and enforced.

Tool calls come as output items of type `function_call` (`name`, `call_id`, `arguments` as a JSON string),
whole in `output` or streamed as `response.output_item.added` -> `response.function_call_arguments.delta`
... `.done` -> `response.output_item.done`, and the stream ends with `response.completed` carrying the whole
response. A rejected call goes back to the model as the `function_call` item itself plus a
`function_call_output` item with the reasons, appended to `input`.

Streaming in enforce mode: events of text, reasoning and other items pass live; the events of a
`function_call` item and the closing `response.completed` are held until the attempt is judged. The client
must see one response, so its `sequence_number` and `output_index` count on across attempts (events are
re-encoded only where a number changes), a retry's `response.created` / `response.in_progress` are dropped,
and the closing `response.completed` lists the items the client actually received, with the usage of every
attempt.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from starlette.requests import Request
from starlette.responses import Response

from proxy.dialect_relay import Dialect, DialectExchange, DialectStream, IndexMap, handle
from proxy.errors import BadRequest
from proxy.record import Usage
from proxy.sse import SSEEvent
from proxy.state import ProxyState
from proxy.toolcalls import ToolCall
from proxy.toolcalls.openai import structured_call

__all__ = ["ResponsesDialect", "create_response"]

_COMPACT = (",", ":")
_TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})
_TEXT_DELTAS = frozenset({"response.output_text.delta", "response.reasoning_text.delta"})


async def create_response(request: Request, state: ProxyState) -> Response:
    return await handle(request, state, ResponsesDialect())


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text") or "") for p in content if isinstance(p, dict))
    return ""


def item_message(item: Any) -> dict[str, Any] | None:
    """One input or output item as a chat message (lineage only); reasoning and other items are skipped."""
    if not isinstance(item, dict):
        return None
    kind = item.get("type")
    if kind == "function_call":
        return {"role": "assistant", "content": None,
                "tool_calls": [{"function": {"name": item.get("name"), "arguments": item.get("arguments")}}]}
    if kind == "function_call_output":
        return {"role": "tool", "content": _text(item.get("output")), "tool_call_id": item.get("call_id")}
    if kind in (None, "message") and isinstance(item.get("role"), str):
        return {"role": item["role"], "content": _text(item.get("content"))}
    return None


def _usage(usage: Any) -> dict[str, Any] | None:
    if not isinstance(usage, dict):
        return None
    details = usage.get("input_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return {"prompt_tokens": usage.get("input_tokens"), "completion_tokens": usage.get("output_tokens"),
            "prompt_tokens_details": {"cached_tokens": cached}}


def _with_usage(response: dict[str, Any], usage: Usage) -> None:
    current = response.get("usage")
    summed = dict(current) if isinstance(current, dict) else {}
    summed.update(input_tokens=usage.prompt_tokens, output_tokens=usage.completion_tokens,
                  total_tokens=usage.prompt_tokens + usage.completion_tokens)
    details = summed.get("input_tokens_details")
    summed["input_tokens_details"] = {**(details if isinstance(details, dict) else {}),
                                      "cached_tokens": usage.cached_tokens}
    response["usage"] = summed


def _message_item(text: str, *, status: str = "completed") -> dict[str, Any]:
    part = {"annotations": [], "text": text, "type": "output_text", "logprobs": None}
    return {"id": f"msg_{uuid.uuid4().hex}", "content": [part] if text else [], "role": "assistant",
            "status": status, "type": "message"}


class ResponsesDialect(Dialect):
    route: ClassVar[str] = "responses"
    path: ClassVar[str] = "/responses"
    history_key: ClassVar[str] = "input"

    def validate(self, payload: dict[str, Any]) -> None:
        value = payload.get("input")
        if not (isinstance(value, str) or (isinstance(value, list) and value)):
            raise BadRequest("`input` must be a string or a non-empty list of items", param="input")

    def offered(self, payload: dict[str, Any]) -> set[str]:
        tools = payload.get("tools")
        return {t["name"] for t in tools if isinstance(t, dict) and t.get("type") == "function"
                and isinstance(t.get("name"), str)} if isinstance(tools, list) else set()

    def history(self, payload: dict[str, Any]) -> list[Any]:
        value = payload.get("input")
        if isinstance(value, str):  # a bare string is one user message; retries need the list form
            return [{"type": "message", "role": "user", "content": value}]
        return list(value) if isinstance(value, list) else []

    def conversation(self, payload: dict[str, Any]) -> list[dict[str, Any]]:
        messages = [{"role": "system", "content": payload["instructions"]}] \
            if isinstance(payload.get("instructions"), str) else []
        return messages + [m for m in map(item_message, self.history(payload)) if m is not None]

    def calls(self, obj: dict[str, Any]) -> list[ToolCall]:
        output = obj.get("output")
        items = [i for i in output if isinstance(i, dict) and i.get("type") == "function_call"] \
            if isinstance(output, list) else []
        return [structured_call(name=i.get("name"), arguments=i.get("arguments"), call_id=i.get("call_id"), index=k)
                for k, i in enumerate(items)]

    def text(self, obj: dict[str, Any]) -> str:
        output = obj.get("output")
        return "".join(_text(i.get("content")) for i in output if isinstance(i, dict) and i.get("type") == "message") \
            if isinstance(output, list) else ""

    def usage(self, obj: dict[str, Any] | None) -> dict[str, Any] | None:
        return _usage(obj)

    def set_usage(self, obj: dict[str, Any], usage: Usage) -> None:
        _with_usage(obj, usage)

    def set_blocked(self, obj: dict[str, Any], text: str) -> None:
        obj["output"] = [_message_item(text)]
        obj["status"] = "completed"
        obj["incomplete_details"] = None

    def retry_items(self, turn: list[dict[str, Any]]) -> list[dict[str, Any]]:
        assistant, results = turn[0], turn[1:]
        items: list[dict[str, Any]] = []
        if assistant.get("content"):
            items.append({"type": "message", "role": "assistant", "content": assistant["content"]})
        for call in assistant.get("tool_calls") or []:
            items.append({"type": "function_call", "call_id": call["id"], "name": call["function"]["name"],
                          "arguments": call["function"]["arguments"]})
        items += [{"type": "function_call_output", "call_id": r["tool_call_id"], "output": r["content"]}
                  for r in results]
        return items

    def reply(self, obj: dict[str, Any]) -> list[dict[str, Any]]:
        output = obj.get("output")
        return [m for m in map(item_message, output) if m is not None] if isinstance(output, list) else []

    def stream(self, ex: DialectExchange) -> DialectStream:
        return _ResponsesStream(ex)


@dataclass
class _HeldCall:
    """The events of one function_call item of the current attempt, kept until the attempt is judged."""

    item: dict[str, Any]
    events: list[tuple[dict[str, Any], bytes]] = field(default_factory=list)
    parts: list[str] = field(default_factory=list)
    arguments: str | None = None  # from response.function_call_arguments.done
    done: dict[str, Any] | None = None  # the item of response.output_item.done

    def call(self, index: int) -> ToolCall:
        item = self.done or self.item
        arguments = item.get("arguments") if self.done is not None else self.arguments
        if not isinstance(arguments, str):
            arguments = "".join(self.parts)
        return structured_call(name=item.get("name"), arguments=arguments, call_id=item.get("call_id"), index=index)


class _ResponsesStream(DialectStream):
    def __init__(self, ex: DialectExchange) -> None:
        super().__init__(ex)
        self.sequence = 0  # the next sequence_number the client sees
        self.positions = IndexMap()
        self.identical = True  # every event so far went out with its own numbers, so its bytes are vLLM's
        self.created: dict[str, Any] | None = None  # the response of the first response.created
        self.items: dict[int, dict[str, Any]] = {}  # client output_index -> the item as the client has it
        self.held: dict[Hashable, _HeldCall] = {}
        self.held_ids: dict[str, _HeldCall] = {}
        self.completed: tuple[dict[str, Any], bytes] | None = None
        self.attempt_text = ""

    def begin_attempt(self) -> None:
        super().begin_attempt()
        self.positions.new_attempt()
        self.held = {}
        self.held_ids = {}
        self.completed = None
        self.attempt_text = ""

    # -- upstream events

    def event(self, event: SSEEvent) -> bytes | None:
        if event.data is None:
            return event.raw  # comments and keep-alives
        try:
            obj = json.loads(event.data)
        except ValueError:
            return event.raw
        if not isinstance(obj, dict):
            return event.raw
        kind = obj.get("type") or event.event or ""
        if kind == "error":
            self.fail(json.dumps(obj)[:1000])
            return event.raw if not self.enforce else self._send(obj, event.raw)
        if kind in _TERMINAL:
            response = obj.get("response")
            self.attempt_usage = _usage(response.get("usage")) if isinstance(response, dict) else None
            self.completed = (obj, event.raw)
            return event.raw if not self.enforce else None
        if kind in ("response.created", "response.in_progress"):
            if self.attempt > 1:
                return None  # the client's response began with the first attempt
            if self.created is None and isinstance(obj.get("response"), dict):
                self.created = obj["response"]
            return event.raw if not self.enforce else self._send(obj, event.raw)
        if kind in _TEXT_DELTAS:
            self.ex.record.mark_first_token()
            if kind == "response.output_text.delta" and isinstance(obj.get("delta"), str):
                self.attempt_text += obj["delta"]
        position = obj.get("output_index")
        item = obj.get("item") if isinstance(obj.get("item"), dict) else None
        if not self.enforce and item is not None and isinstance(position, int):
            self.items[position] = item  # observe mode: one attempt, positions as vLLM gave them
        held = self._held_for(kind, obj, position, item)
        if held is not None:
            self.ex.record.mark_first_token()
            held.events.append((obj, event.raw))
            if kind == "response.function_call_arguments.delta" and isinstance(obj.get("delta"), str):
                held.parts.append(obj["delta"])
            elif kind == "response.function_call_arguments.done" and isinstance(obj.get("arguments"), str):
                held.arguments = obj["arguments"]
            elif kind == "response.output_item.done" and item is not None:
                held.done = item
            return event.raw if not self.enforce else None
        return event.raw if not self.enforce else self._send(obj, event.raw)

    def _held_for(self, kind: str, obj: dict[str, Any], position: Any, item: dict[str, Any] | None) -> _HeldCall | None:
        """The function call an event belongs to, found by output_index, else by item id. An event of a call
        that was never announced is held all the same, as a call of its own: a stream vLLM would not send
        must not get a call past the judge."""
        item_id = obj.get("item_id") or (item.get("id") if item is not None else None)
        key: Hashable = position if isinstance(position, int) else ("item", item_id)
        found = self.held.get(key) or (self.held_ids.get(item_id) if isinstance(item_id, str) else None)
        is_call = (item is not None and item.get("type") == "function_call") or \
            kind.startswith("response.function_call_arguments.")
        if found is None and is_call:
            found = self.held[key] = _HeldCall(item if item is not None else
                                               {"type": "function_call", "id": item_id, "name": obj.get("name")})
            if isinstance(item_id, str):
                self.held_ids[item_id] = found
        return found

    def _send(self, obj: dict[str, Any], raw: bytes | None, *, placed: bool = False) -> bytes:
        """An event as the client sees it: numbered on from the events before it, re-encoded if that changed it.

        `placed`: the event's output_index is already the client's (a synthesized event)."""
        changed = raw is None
        if obj.get("sequence_number") != self.sequence:
            obj = {**obj, "sequence_number": self.sequence}
            changed = True
        self.sequence += 1
        position = obj.get("output_index")
        if isinstance(position, int):
            mine = position if placed else self.positions.client(position)
            if mine != position:
                obj = {**obj, "output_index": mine}
                changed = True
            if isinstance(obj.get("item"), dict):
                self.items[mine] = obj["item"]
        if not changed and raw is not None:
            return raw
        self.identical = False
        kind = str(obj.get("type") or "message")
        return b"event: " + kind.encode() + b"\ndata: " + json.dumps(obj, ensure_ascii=False,
                                                                      separators=_COMPACT).encode() + b"\n\n"

    # -- the end of an attempt

    def calls(self) -> list[ToolCall]:
        return [held.call(k) for k, held in enumerate(self.held.values())]

    def text(self) -> str:
        return self.attempt_text

    def release(self) -> list[bytes]:
        out = [self._send(obj, raw) for held in self.held.values() for obj, raw in held.events]
        out.append(self._completion())
        return out

    def blocked(self, text: str) -> list[bytes]:
        item = _message_item(text, status="in_progress")
        position = ("blocked", self.attempt)  # a position of its own, after everything sent so far
        part = {"annotations": [], "text": "", "type": "output_text", "logprobs": []}
        done_part = {**part, "text": text, "logprobs": None}
        common = {"item_id": item["id"], "output_index": position}
        events = [
            {"item": item, "output_index": position, "type": "response.output_item.added"},
            {"content_index": 0, **common, "part": part, "type": "response.content_part.added"},
            {"content_index": 0, "delta": text, **common, "logprobs": [], "type": "response.output_text.delta"},
            {"content_index": 0, **common, "logprobs": [], "text": text, "type": "response.output_text.done"},
            {"content_index": 0, **common, "part": done_part, "type": "response.content_part.done"},
            {"item": {**item, "content": [done_part], "status": "completed"}, "output_index": position,
             "type": "response.output_item.done"},
        ]
        out = [self._send(self._placed(e), None, placed=True) for e in events]
        out.append(self._completion(status="completed"))
        return out

    def _placed(self, obj: dict[str, Any]) -> dict[str, Any]:
        """A synthesized event: its position key becomes a client position, its number the next one."""
        position = self.positions.client(obj.pop("output_index"))
        return {**obj, "output_index": position, "sequence_number": self.sequence}

    def _completion(self, status: str | None = None) -> bytes:
        if self.completed is not None and self.attempt == 1 and self.identical and status is None:
            return self._send(*self.completed)  # the client saw exactly vLLM's events: its closing one fits too
        base = self.completed[0] if self.completed is not None else {"type": "response.completed"}
        response = dict(base.get("response") or self.created or {})
        if self.created is not None:
            response["id"] = self.created.get("id", response.get("id"))  # the id the client was given
        response["output"] = [self.items[k] for k in sorted(self.items)]
        response["status"] = status or response.get("status") or "completed"
        if response["status"] == "in_progress":
            response["status"] = "incomplete"  # the stream ended without vLLM closing the response
        _with_usage(response, self.ex.record.usage)
        kind = base.get("type") if self.completed is not None and status is None else "response.completed"
        return self._send({"response": response, "sequence_number": self.sequence, "type": kind}, None)

    def error(self, message: str, type_: str, code: Any) -> bytes:
        return self._send({"code": code if code is not None else type_, "message": message, "param": None,
                           "sequence_number": self.sequence, "type": "error"}, None)

    def reply(self) -> list[dict[str, Any]]:
        return [m for m in (item_message(self.items[k]) for k in sorted(self.items)) if m is not None]
