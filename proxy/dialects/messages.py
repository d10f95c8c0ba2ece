"""POST /v1/messages (Anthropic Messages API, as vLLM serves it): every `tool_use` block judged and enforced.

Tool calls come as content blocks `{"type": "tool_use", "id", "name", "input": {...}}` (the input is already
an object), whole in `content` or streamed as `content_block_start` (the block, `input: {}`) ->
`content_block_delta` with `input_json_delta` fragments -> `content_block_stop`, the message closing with
`message_delta` (`stop_reason: tool_use`, usage) and `message_stop`. A rejected call goes back to the model as
the assistant turn with its `tool_use` blocks and a user message of `tool_result` blocks with `is_error: true`.

Streaming in enforce mode: the first attempt's text and thinking blocks pass live; a `tool_use` block's
events, a retry's text and thinking blocks and the closing `message_delta` / `message_stop` are held until the
attempt is judged; a delivered retry's blocks go out without the text the client already has (a block of it
all dropped, one cut in part rewritten), then a text block of the proxy's that says what was refused. Clients
file a block under its `index` in the order blocks start, so indexes count on across attempts and are given
when a block's events are sent: blocks held and released later, or dropped with a rejected attempt, leave no
gap. A retry's `message_start` is dropped.
A repaired call's block carries its judged input, in one `input_json_delta`.
Errors on this route, the proxy's own included, have Anthropic's shape: `{"type": "error", "error": {"type",
"message"}}`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from starlette.responses import JSONResponse, Response

from proxy import strict
from proxy.dialects.base import DialectExchange
from proxy.dialects.structured import DialectStream, StructuredDialect, cuts
from proxy.enforce.actions import unjudgeable_call
from proxy.enforce.feedback_turns import blocked_message
from proxy.errors import BadRequest, BlockedTurn, ProxyError
from proxy.record import JudgedCall, Usage
from proxy.sessions.project_root import ClientText, client_parts
from proxy.toolcalls import ToolCall
from proxy.toolcalls.openai import structured_call
from proxy.upstream.sse import SSEEvent

__all__ = ["MessagesDialect", "anthropic_error", "anthropic_error_type"]

_TEXT_BLOCKS = frozenset({"text", "thinking", "redacted_thinking"})
_BLOCK_EVENTS = frozenset({"content_block_start", "content_block_delta", "content_block_stop"})
_DELTAS = frozenset({"text_delta", "thinking_delta", "signature_delta", "input_json_delta", "citations_delta"})
# Anthropic's error types by HTTP status (https://docs.anthropic.com/en/api/errors).
_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 413: "request_too_large", 422: "invalid_request_error", 429: "rate_limit_error",
                504: "timeout_error"}


def anthropic_error_type(status: int) -> str:
    return _ERROR_TYPES.get(status, "api_error")


def anthropic_error(message: str, status: int) -> JSONResponse:
    return JSONResponse({"type": "error", "error": {"type": anthropic_error_type(status), "message": message}},
                        status_code=status)


# The key of a text delta's text, by the delta's type.
_TEXT_KEYS = {"text_delta": "text", "thinking_delta": "thinking"}


def _with_text(obj: dict[str, Any], text: str) -> dict[str, Any]:
    """A text event (a text or thinking delta, a block started with text) saying `text` instead."""
    delta = obj.get("delta")
    if isinstance(delta, dict):
        return {**obj, "delta": {**delta, _TEXT_KEYS[delta["type"]]: text}}
    block = obj["content_block"]
    return {**obj, "content_block": {**block, block["type"]: text}}


def _sse(obj: dict[str, Any]) -> bytes:
    return strict.encode_event(obj, str(obj.get("type") or "message"))


def _usage(usage: Any) -> dict[str, Any] | None:
    if not isinstance(usage, dict):
        return None
    return {"prompt_tokens": usage.get("input_tokens"), "completion_tokens": usage.get("output_tokens"),
            "prompt_tokens_details": {"cached_tokens": usage.get("cache_read_input_tokens")}}


def _summed(usage: Any, total: Usage) -> dict[str, Any]:
    return {**(usage if isinstance(usage, dict) else {}), "input_tokens": total.prompt_tokens,
            "output_tokens": total.completion_tokens}


def _block_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(b.get("text") or "") for b in content if isinstance(b, dict) and b.get("type") == "text")
    return ""


def message_chat(message: Any) -> list[dict[str, Any]]:
    """One Anthropic message as chat messages (lineage only): text and tool_use blocks make the message,
    each tool_result block a tool message; thinking blocks are skipped."""
    if not isinstance(message, dict):
        return []
    role, content = message.get("role"), message.get("content")
    if not isinstance(content, list):
        return [{"role": role, "content": _block_text(content)}]
    calls = [{"id": b.get("id"), "function": {"name": b.get("name"), "arguments": b.get("input")}}
             for b in content if isinstance(b, dict) and b.get("type") == "tool_use"]
    results = [{"role": "tool", "tool_call_id": b.get("tool_use_id"), "content": _block_text(b.get("content"))}
               for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
    text = _block_text(content)
    main = [{"role": role, "content": text, "tool_calls": calls}] if text or calls or not results else []
    return main + results


class MessagesDialect(StructuredDialect, route="messages", path="/messages", history_key="messages",
                      output_key="content"):

    def validate(self, payload: dict[str, Any]) -> None:
        messages = payload.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("`messages` must be a non-empty list", param="messages")

    def offered(self, payload: dict[str, Any]) -> set[str]:
        tools = payload.get("tools")
        return {t["name"] for t in tools if isinstance(t, dict) and isinstance(t.get("name"), str)} \
            if isinstance(tools, list) else set()

    def conversation(self, payload: dict[str, Any]) -> list[dict[str, Any]]:
        system = payload.get("system")
        messages = [{"role": "system", "content": _block_text(system)}] if system else []
        for message in self.history(payload):
            messages += message_chat(message)
        return messages

    def client_texts(self, payload: dict[str, Any]) -> Iterable[ClientText]:
        # The system prompt is a field of its own; a system message follows the first user turn (Claude Code).
        return client_parts([payload.get("system")], payload.get("messages"), system_messages=False)

    def calls(self, obj: dict[str, Any]) -> list[ToolCall]:
        content = obj.get("content")
        if content is None or isinstance(content, str):
            return []
        if not isinstance(content, list):
            return [unjudgeable_call("content", "`content` that is not a list", content)]
        calls: list[ToolCall] = []
        for k, block in enumerate(content):
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "tool_use":
                calls.append(structured_call(name=block.get("name"), arguments=block.get("input"),
                                             call_id=block.get("id"), index=k))
            elif kind not in _TEXT_BLOCKS:
                calls.append(unjudgeable_call(str(kind)[:80] if kind else "block",
                                              "a content block the proxy does not know", block))
        return calls

    def text(self, obj: dict[str, Any]) -> str:
        return _block_text(obj.get("content"))

    def usage(self, obj: dict[str, Any] | None) -> dict[str, Any] | None:
        return _usage(obj)

    def set_usage(self, obj: dict[str, Any], usage: Usage) -> None:
        obj["usage"] = _summed(obj.get("usage"), usage)

    def set_blocked(self, obj: dict[str, Any], text: str) -> None:
        obj["content"] = [{"type": "text", "text": text}]
        obj["stop_reason"] = "end_turn"

    def retry_items(self, turn: list[dict[str, Any]]) -> list[dict[str, Any]]:
        assistant, results = turn[0], turn[1:]
        blocks: list[dict[str, Any]] = [{"type": "text", "text": assistant["content"]}] \
            if assistant.get("content") else []
        for call in assistant.get("tool_calls") or []:
            try:
                arguments = json.loads(call["function"]["arguments"])
            except ValueError:
                arguments = {}
            blocks.append({"type": "tool_use", "id": call["id"], "name": call["function"]["name"],
                           "input": arguments if isinstance(arguments, dict) else {}})
        # Every call of the held turn is answered, the allowed siblings too: they were not run either. What
        # happened to the actions written in the text (a user message of retry_messages) follows as text.
        answers: list[dict[str, Any]] = [
            {"type": "tool_result", "tool_use_id": r["tool_call_id"], "content": r["content"], "is_error": True}
            if r["role"] == "tool" else {"type": "text", "text": r["content"]} for r in results]
        return [{"role": "assistant", "content": blocks}, {"role": "user", "content": answers}]

    def reply(self, obj: dict[str, Any]) -> list[dict[str, Any]]:
        return message_chat({"role": "assistant", "content": obj.get("content")})

    def is_text_item(self, item: Any) -> bool:
        return isinstance(item, dict) and item.get("type") in _TEXT_BLOCKS

    def append_note(self, items: list[Any], line: str) -> bool:
        texts = [b for b in items if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)]
        if texts:
            texts[-1]["text"] += line
        return bool(texts)

    def note_item(self, text: str) -> dict[str, Any]:
        return {"type": "text", "text": text}

    def repaired_fields(self, call: ToolCall) -> dict[str, Any]:
        return {"input": call.arguments}

    def stream(self, ex: DialectExchange) -> DialectStream[Any]:
        return _MessagesStream(ex)

    def error_response(self, exc: ProxyError) -> Response:
        # Before the response started too: the app would answer in OpenAI's shape.
        return anthropic_error(exc.message, exc.status_code)


@dataclass
class _HeldBlock:
    """One tool_use block of the current attempt, kept until the attempt is judged."""

    block: dict[str, Any]
    events: list[tuple[dict[str, Any], bytes]] = field(default_factory=list)
    parts: list[str] = field(default_factory=list)

    def call(self, index: int) -> ToolCall:
        # No input_json_delta at all: the input is what the start gave (vLLM's `{}` for a call without arguments).
        # Both a start input and deltas: clients differ on which wins, so the proxy judges neither.
        if self.parts and self.block.get("input") not in (None, {}):
            return unjudgeable_call("tool_use", "a tool_use block with both a start input and input deltas",
                                    self.block)
        arguments: Any = "".join(self.parts) if self.parts else self.block.get("input")
        return structured_call(name=self.block.get("name"), arguments=arguments, call_id=self.block.get("id"),
                               index=index)

    def repaired(self, call: ToolCall) -> list[dict[str, Any]]:
        """The held events again, carrying a repaired call's judged input: in the start block when the input
        came there, else as one `input_json_delta` (the model's fragments dropped)."""
        out: list[dict[str, Any]] = []
        sent = False
        for obj, _ in self.events:
            kind = obj.get("type")
            if kind == "content_block_start" and obj["content_block"].get("input") not in (None, {}):
                obj, sent = {**obj, "content_block": {**obj["content_block"], "input": call.arguments}}, True
            elif kind == "content_block_delta":
                if sent:
                    continue
                obj, sent = {**obj, "delta": {**obj["delta"], "partial_json": call.arguments_text}}, True
            elif kind == "content_block_stop" and not sent:
                out.append({"type": "content_block_delta", "index": obj["index"],
                            "delta": {"type": "input_json_delta", "partial_json": call.arguments_text}})
                sent = True
            out.append(obj)
        return out


class _MessagesStream(DialectStream[_HeldBlock]):
    answer_kind = "text"

    def __init__(self, ex: DialectExchange) -> None:
        super().__init__(ex)
        self.closing: tuple[dict[str, Any], bytes] | None = None  # message_delta
        self.stop: bytes | None = None  # message_stop
        self.started: dict[int, str] = {}  # this attempt's block indexes -> their types
        self.refused: set[int] = set()  # blocks the proxy cannot judge
        self.text_sent = ""  # every text the client received, for the lineage
        self.calls_sent: list[dict[str, Any]] = []

    def begin_attempt(self) -> None:
        super().begin_attempt()
        self.closing = None
        self.stop = None
        self.started = {}
        self.refused = set()

    # -- upstream events

    def encode_error(self, obj: dict[str, Any]) -> bytes:
        return _sse(obj)  # as it came: no block index to place, no text for the lineage

    def ended(self) -> str | None:
        return "message_stop" if self.stop is not None else None

    def typed_event(self, event: SSEEvent, obj: dict[str, Any], kind: Any) -> bytes | None:
        observe = not self.enforce
        if kind == "ping":
            return event.raw if observe else _sse({"type": "ping"})
        if kind == "message_start":
            message = obj.get("message")
            if not isinstance(message, dict) or message.get("content"):
                return self.drop(event, "a message_start whose message already holds content", obj)
            if self.attempt == 1:
                self.attempt_usage = _usage(message.get("usage"))
                return event.raw if observe else _sse(obj)
            return None  # the client's message began with the first attempt
        if kind == "message_delta":
            delta = obj.get("delta")
            if delta is not None and not isinstance(delta, dict):
                return self.drop(event, "a message_delta whose delta is not an object", obj)
            self.attempt_usage = _usage(obj.get("usage")) or self.attempt_usage
            self.closing = (obj, event.raw)
            return event.raw if observe else None
        if kind == "message_stop":
            self.stop = event.raw if observe else _sse(obj)
            return event.raw if observe else None
        if kind not in _BLOCK_EVENTS:
            return self.drop(event, f"an event of a type the proxy does not know (`{str(kind)[:60]}`)", obj)
        index = obj.get("index")
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            return self.drop(event, "a block index that is not a whole number", obj)
        block = obj.get("content_block")
        if kind == "content_block_start":
            if not isinstance(block, dict):
                return self.drop(event, "a content_block_start without a block", obj)
            if index in self.started:
                return self.drop(event, "a second content_block_start for one index", obj)
            self.started[index] = str(block.get("type"))
            if block.get("type") == "tool_use":
                self.held[index] = _HeldBlock(block)
            elif block.get("type") not in _TEXT_BLOCKS:
                self.refused.add(index)
                return self.drop(event, f"a content block the proxy does not know (`{str(block.get('type'))[:60]}`)",
                                  block, name=str(block.get("type"))[:80])
        elif index not in self.started:
            return self.drop(event, "an event of a block that never started", obj)
        elif index in self.refused:
            return self.drop(event, "an event of a block the proxy cannot judge", obj)
        delta = obj.get("delta")
        if kind == "content_block_delta":
            if not isinstance(delta, dict) or delta.get("type") not in _DELTAS:
                return self.drop(event, "a content_block_delta of a type the proxy does not know", obj)
            if (delta.get("type") == "input_json_delta") != (index in self.held):
                return self.drop(event, "a delta that does not fit its block", obj)
            if delta.get("type") == "input_json_delta" and not isinstance(delta.get("partial_json"), str):
                return self.drop(event, "an input_json_delta whose partial_json is not a string", obj)
        else:
            delta = {}
        held = self.held.get(index)
        if held is not None:
            self.ex.record.mark_first_token()
            held.events.append((obj, event.raw))
            if delta.get("type") == "input_json_delta":
                held.parts.append(delta["partial_json"])
            if observe and kind == "content_block_stop":
                self._sent_call(held.call(0))
            return event.raw if observe else None
        if delta.get("type") in ("text_delta", "thinking_delta"):
            self.ex.record.mark_first_token()
        text = delta.get("text") if delta.get("type") == "text_delta" else None
        if kind == "content_block_start" and isinstance(block, dict) and block.get("type") == "text":
            text = block.get("text")  # a block that starts with text: a client reads it as it reads a delta
        if isinstance(text, str):
            self.attempt_text += text
        if observe:
            self.text_sent += text if isinstance(text, str) else ""
            return event.raw
        return self.narrate(obj)

    def text_kind(self, obj: dict[str, Any]) -> str | None:
        index = obj.get("index")
        return self.started.get(index) if isinstance(index, int) else None

    def event_text(self, obj: dict[str, Any]) -> str:
        delta, block = obj.get("delta"), obj.get("content_block")
        found = delta.get(_TEXT_KEYS.get(str(delta.get("type")), "")) if isinstance(delta, dict) else \
            block.get(str(block.get("type"))) if isinstance(block, dict) else None
        return found if isinstance(found, str) else ""

    def trim(self, events: list[tuple[str | None, dict[str, Any]]], skip: dict[str, int]) -> list[dict[str, Any]]:
        taken_out = cuts(((obj.get("index"), kind, self.event_text(obj)) for kind, obj in events), skip)
        out: list[dict[str, Any]] = []
        for _, obj in events:
            cut = taken_out.get(obj.get("index"))
            if cut is None:  # a block the client has all of: dropped whole
                continue
            text = self.event_text(obj)
            if text and cut[0]:
                taken = min(cut[0], len(text))
                cut[0] -= taken
                if taken == len(text) and obj.get("type") == "content_block_delta":
                    continue
                obj = _with_text(obj, text[taken:])
            out.append(obj)
        return out

    def with_note(self, events: list[dict[str, Any]], line: str) -> list[dict[str, Any]] | None:
        starts = [obj.get("index") for obj in events if obj.get("type") == "content_block_start"
                  and isinstance(obj.get("content_block"), dict) and obj["content_block"].get("type") == "text"]
        stop = next((k for k, obj in enumerate(events) if starts and obj.get("index") == starts[-1]
                     and obj.get("type") == "content_block_stop"), None)
        if stop is None:
            return None
        delta = {"type": "content_block_delta", "index": starts[-1], "delta": {"type": "text_delta", "text": line}}
        return [*events[:stop], delta, *events[stop:]]

    def note_events(self, text: str) -> list[bytes]:
        return self._text_block(text, ("note", self.attempt))

    def client_text(self) -> str:
        return self.text_sent

    def _text_block(self, text: str, key: Any) -> list[bytes]:
        """A text block of the proxy's own, at a client index of its own after everything sent so far."""
        index = self.positions.client(key)
        self.text_sent += text
        return [
            _sse({"type": "content_block_start", "content_block": {"type": "text", "text": ""}, "index": index}),
            _sse({"type": "content_block_delta", "delta": {"type": "text_delta", "text": text}, "index": index}),
            _sse({"type": "content_block_stop", "index": index}),
        ]

    def encode(self, obj: dict[str, Any]) -> bytes:
        delta, block = obj.get("delta"), obj.get("content_block")
        text = delta.get("text") if isinstance(delta, dict) and delta.get("type") == "text_delta" else \
            block.get("text") if isinstance(block, dict) and block.get("type") == "text" else None
        if isinstance(text, str):
            self.text_sent += text  # the lineage: the text the client received
        return self._send(obj, None)

    def _send(self, obj: dict[str, Any], raw: bytes | None, *, placed: bool = False) -> bytes:
        """A block event at the client's index for its block; re-encoded only when that index differs."""
        index = obj.get("index")
        if isinstance(index, int):
            mine = index if placed else self.positions.client(index)
            if mine != index:
                obj = {**obj, "index": mine}
        return _sse(obj)  # enforce mode: always the proxy's own encoding

    def _sent_call(self, call: ToolCall) -> None:
        self.calls_sent.append({"id": call.id, "function": {"name": call.name, "arguments": call.arguments}})

    # -- the end of an attempt

    def release(self, judged: list[JudgedCall]) -> list[bytes]:
        out = self.released_text()
        for held, item in zip(self.held.values(), judged, strict=False):  # calls() lists the held blocks first
            events = held.repaired(item.call) if item.repaired else [obj for obj, _ in held.events]
            out += [self._send(obj, None) for obj in events]
            self._sent_call(item.call)
        stop_reason = "tool_use" if self.held else "end_turn"
        out.append(self._closing(stop_reason))
        out.append(self.stop or _sse({"type": "message_stop"}))
        return out

    def _closing(self, stop_reason: str, *, replace: bool = False) -> bytes:
        """message_delta: the upstream's as it is on a first attempt, else with the usage of every attempt."""
        if self.closing is not None and self.attempt == 1 and not replace:
            return _sse(self.closing[0])
        obj: dict[str, Any] = (dict(self.closing[0]) if self.closing is not None
                               else {"type": "message_delta", "delta": {}})
        delta = dict(obj.get("delta") or {})
        if replace or not delta.get("stop_reason"):
            delta["stop_reason"] = stop_reason
        obj["delta"] = delta
        obj["usage"] = _summed(obj.get("usage"), self.ex.record.usage)
        return _sse(obj)

    def blocked(self, text: str) -> list[bytes]:
        return [*self._text_block(text, ("blocked", self.attempt)), self._closing("end_turn", replace=True),
                _sse({"type": "message_stop"})]

    def refuse(self, judged: list[JudgedCall]) -> list[bytes]:
        # Anthropic's stream error event, typed by the status a whole answer would have (BlockedTurn, 422).
        return [self.error(blocked_message(self.ex.policy, judged, self.attempt), "", BlockedTurn.status_code)]

    def error(self, message: str, type_: str, code: Any) -> bytes:
        status = code if isinstance(code, int) else 500 if type_ != "upstream_timeout" else 504
        return _sse({"type": "error", "error": {"type": anthropic_error_type(status), "message": message}})

    def reply(self) -> list[dict[str, Any]]:
        return [{"role": "assistant", "content": self.text_sent, "tool_calls": list(self.calls_sent)}]
