"""The scripted upstream's `/v1/responses` and `/v1/messages`, in the formats vLLM serves them.

vLLM builds both dialects on its chat path: the request is turned into chat messages, the model's output
becomes chat deltas, and a converter re-shapes those (`SimpleStreamingEventProcessor` for the Responses
API, `message_stream_converter` for the Anthropic Messages API). This module does the same with the
scripted upstream's own chat deltas (`ScriptedUpstream.deltas`), so one `Reply` (and one model character
from `proxy.testing.characters`) scripts every dialect, and the proxy meets the events exactly as vLLM
emits them:

- Responses: `event: <type>` + compact `data:` per event, no `[DONE]`; `response.created`,
  `response.in_progress`, then per output item `response.output_item.added` ... `.done`
  (`response.output_text.delta`, `response.reasoning_text.delta`, `response.function_call_arguments.delta`
  and `.done`), `sequence_number` counting every event, and `response.completed` carrying the whole
  response, whose output items vLLM re-parses with fresh ids.
- Messages: `message_start` (no `type`/`role` in the message: vLLM dumps with `exclude_unset`),
  `content_block_start` / `content_block_delta` (`text_delta`, `thinking_delta`, `input_json_delta`,
  `signature_delta`) / `content_block_stop`, `message_delta` with the `stop_reason` and usage, `message_stop`.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from proxy.dialects.shapes import parts_text
from proxy.testing.reply import Reply, arguments_text, pace

__all__ = ["dialect_routes", "messages_to_chat", "responses_to_chat"]

_COMPACT = (",", ":")
_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def _dump(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=_COMPACT).encode()


def _sse(event: str, obj: dict[str, Any]) -> bytes:
    return b"event: " + event.encode() + b"\ndata: " + _dump(obj) + b"\n\n"


class ScriptedUpstream(Protocol):
    """What the dialects use of the scripted upstream that mounts them (proxy/testing/scripted_upstream.py)."""

    models: list[str]
    requests: list[dict[str, Any]]
    raw_requests: list[bytes]
    responses: list[bytes]
    headers: list[dict[str, str]]
    disconnects: int
    disconnected_at: list[float]
    completed_streams: int
    store_responses: bool

    def _next(self, body: dict[str, Any]) -> Reply: ...

    async def received(self, request: Request, error: Callable[..., Response]) -> dict[str, Any] | Response: ...

    async def failed(self, reply: Reply, error: Callable[..., Response]) -> Response | None: ...

    def _call_id(self, *, streamed: bool = False) -> str: ...

    async def _completions(self, request: Request) -> Response: ...

    def deltas(self, reply: Reply) -> list[dict[str, Any]]: ...


# ---------------------------------------------------------------- requests as chat messages


def responses_to_chat(body: dict[str, Any]) -> dict[str, Any]:
    """A Responses request as the chat request vLLM renders (what the scripted characters read)."""
    messages: list[dict[str, Any]] = []
    if isinstance(body.get("instructions"), str):
        messages.append({"role": "system", "content": body["instructions"]})
    items = body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    for item in items or []:
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "function_call":
            messages.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": item.get("call_id"), "type": "function",
                 "function": {"name": item.get("name"), "arguments": item.get("arguments")}}]})
        elif kind == "function_call_output":
            messages.append({"role": "tool", "tool_call_id": item.get("call_id"), "content": item.get("output")})
        elif kind in (None, "message") and "role" in item:
            messages.append({"role": item["role"], "content": parts_text(item.get("content"))})
    return {"model": body.get("model"), "messages": messages, "tools": body.get("tools")}


def messages_to_chat(body: dict[str, Any]) -> dict[str, Any]:
    """An Anthropic request as the chat request vLLM converts it to (tool_result blocks become tool messages)."""
    messages: list[dict[str, Any]] = []
    if body.get("system"):
        messages.append({"role": "system", "content": parts_text(body["system"])})
    for message in body.get("messages") or []:
        if not isinstance(message, dict):
            continue
        role, content = message.get("role"), message.get("content")
        if isinstance(content, str):
            messages.append({"role": role, "content": content})
            continue
        text, calls = "", []
        for block in content or []:
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "text":
                text += block.get("text") or ""
            elif kind == "tool_use":
                calls.append({"id": block.get("id"), "type": "function",
                              "function": {"name": block.get("name"), "arguments": json.dumps(block.get("input"))}})
            elif kind == "tool_result":
                messages.append({"role": "tool", "tool_call_id": block.get("tool_use_id"),
                                 "content": parts_text(block.get("content"))})
        if text or calls:
            messages.append({"role": role, "content": text or None, **({"tool_calls": calls} if calls else {})})
    return {"model": body.get("model"), "messages": messages, "tools": body.get("tools")}


# ---------------------------------------------------------------- routes


def dialect_routes(upstream: ScriptedUpstream) -> list[Route]:
    """Mounted before the scripted upstream's own routes: streamed `/v1/completions` is answered here."""
    return [
        Route("/v1/responses", _Responses(upstream).handle, methods=["POST"]),
        Route("/v1/messages", _Messages(upstream).handle, methods=["POST"]),
        Route("/v1/completions", _Completions(upstream).handle, methods=["POST"]),
    ]


class _Dialect:
    """What both dialects share: reading the request, picking the reply, streaming with the reply's faults."""

    def __init__(self, upstream: ScriptedUpstream) -> None:
        self.up = upstream

    def error(self, status: int, message: str, type_: str = "BadRequestError") -> Response:
        return Response(_dump({"error": {"message": message, "type": type_, "param": None, "code": status}}),
                        status_code=status, media_type="application/json")

    async def handle(self, request: Request) -> Response:
        body = await self.up.received(request, self.error)
        if isinstance(body, Response):
            return body
        refused = self.refuse(body)
        if refused is not None:
            return refused
        reply = self.up._next(self.to_chat(body))
        if (failed := await self.up.failed(reply, self.error)) is not None:
            return failed
        if body.get("stream"):
            return StreamingResponse(self._stream(self.events(body, reply), reply), media_type="text/event-stream")
        whole = _dump(self.whole(body, reply))
        self.up.responses.append(whole)
        return Response(whole, media_type="application/json")

    def refuse(self, body: dict[str, Any]) -> Response | None:
        """An error the server answers a well-formed request with before the model runs, if any."""
        return None

    def to_chat(self, body: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def whole(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        raise NotImplementedError

    def events(self, body: dict[str, Any], reply: Reply) -> list[bytes]:
        raise NotImplementedError

    async def _stream(self, pieces: list[bytes], reply: Reply) -> AsyncIterator[bytes]:
        self.up.responses.append(b"")
        slot = len(self.up.responses) - 1
        sent = bytearray()
        finished = False
        try:
            started = time.monotonic()
            for count, piece in enumerate(pieces):
                if reply.drop_after is not None and count >= reply.drop_after:
                    raise ConnectionResetError("scripted drop")
                sent += piece
                self.up.responses[slot] = bytes(sent)
                yield piece
                await pace(reply, count + 1, started)
            finished = True
            self.up.completed_streams += 1
        finally:
            if not finished:
                self.up.disconnects += 1
                self.up.disconnected_at.append(time.monotonic())

    def usage(self, reply: Reply) -> tuple[int, int]:
        return reply.prompt_tokens, reply.tokens()


class _Responses(_Dialect):
    """With `store_responses` on, vLLM's response store (VLLM_ENABLE_RESPONSES_API_STORE=1): each response is kept
    as the conversation it ended, and `previous_response_id` continues it (its instructions replaced by the
    request's); an id it does not hold is a 404."""

    def __init__(self, upstream: ScriptedUpstream) -> None:
        super().__init__(upstream)
        self.stored: dict[str, list[dict[str, Any]]] = {}  # response id -> its conversation, instructions left out

    def _previous(self, body: dict[str, Any]) -> str | None:
        previous = body.get("previous_response_id")
        return previous if self.up.store_responses and isinstance(previous, str) else None

    def refuse(self, body: dict[str, Any]) -> Response | None:
        previous = self._previous(body)
        if previous is None or previous in self.stored:
            return None
        return self.error(404, f"Response with id '{previous}' not found.", "invalid_request_error")

    def to_chat(self, body: dict[str, Any]) -> dict[str, Any]:
        chat = responses_to_chat(body)
        previous = self._previous(body)
        if previous is not None:
            system = [m for m in chat["messages"][:1] if m["role"] == "system"]
            chat["messages"] = [*system, *self.stored[previous], *chat["messages"][len(system):]]
        return chat

    def _remember(self, body: dict[str, Any], response: dict[str, Any]) -> None:
        if self.up.store_responses and body.get("store") is not False:
            history = [m for m in self.to_chat(body)["messages"] if m["role"] != "system"]
            self.stored[response["id"]] = [*history, *responses_to_chat({"input": response["output"]})["messages"]]

    def response(self, body: dict[str, Any], reply: Reply, *, rid: str, created: int, status: str,
                 output: list[dict[str, Any]], usage: dict[str, Any] | None) -> dict[str, Any]:
        # ResponsesResponse.from_request, dumped with mode="json": every field present, nulls included.
        return {
            "id": rid, "created_at": created, "incomplete_details": None, "instructions": body.get("instructions"),
            "metadata": body.get("metadata"), "model": body["model"], "object": "response", "output": output,
            "parallel_tool_calls": body.get("parallel_tool_calls", True), "temperature": body.get("temperature", 1.0),
            "tool_choice": body.get("tool_choice", "auto"), "tools": body.get("tools") or [],
            "top_p": body.get("top_p", 1.0), "background": False, "max_output_tokens": body.get("max_output_tokens",
                                                                                            65536 - 12),
            "max_tool_calls": None, "previous_response_id": body.get("previous_response_id"), "prompt": None,
            "reasoning": body.get("reasoning"), "service_tier": "auto", "status": status, "text": None,
            "top_logprobs": None, "truncation": "disabled", "usage": usage, "user": None,
            "input_messages": None, "output_messages": None,
        }

    def usage_obj(self, reply: Reply) -> dict[str, Any]:
        prompt, completion = self.usage(reply)
        return {
            "input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": reply.cached_tokens or 0, "input_tokens_per_turn": [],
                                     "cached_tokens_per_turn": []},
            "output_tokens": completion,
            "output_tokens_details": {"reasoning_tokens": 0, "tool_output_tokens": 0, "output_tokens_per_turn": [],
                                      "tool_output_tokens_per_turn": []},
            "total_tokens": prompt + completion,
        }

    def output(self, reply: Reply) -> list[dict[str, Any]]:
        """The output items vLLM's parser builds from the whole text (fresh ids, as in `response.completed`)."""
        out: list[dict[str, Any]] = []
        if reply.reasoning:
            out.append({"id": f"rs_{uuid.uuid4().hex}", "summary": [], "type": "reasoning",
                        "content": [{"text": reply.reasoning, "type": "reasoning_text"}],
                        "encrypted_content": None, "status": None})
        if reply.content:
            out.append({"id": f"msg_{uuid.uuid4().hex}", "content": [
                {"annotations": [], "text": reply.content, "type": "output_text", "logprobs": None}],
                "role": "assistant", "status": "completed", "type": "message"})
        for name, args in reply.tool_calls:
            out.append({"arguments": arguments_text(args), "call_id": self.up._call_id(), "name": name,
                        "type": "function_call", "id": f"fc_{uuid.uuid4().hex}", "status": "completed"})
        return out

    def whole(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        response = self.response(body, reply, rid=f"resp_{uuid.uuid4().hex}", created=int(time.time()),
                                 status="completed", output=self.output(reply), usage=self.usage_obj(reply))
        self._remember(body, response)
        return response

    def events(self, body: dict[str, Any], reply: Reply) -> list[bytes]:
        rid, created = f"resp_{uuid.uuid4().hex}", int(time.time())
        out: list[bytes] = []

        def emit(obj: dict[str, Any]) -> None:
            obj["sequence_number"] = len(out)
            obj["type"] = obj.pop("type")  # the type goes last, as openai's event models order their fields
            out.append(_sse(obj["type"], obj))

        start = self.response(body, reply, rid=rid, created=created, status="in_progress", output=[], usage=None)
        emit({"response": start, "type": "response.created"})
        emit({"response": start, "type": "response.in_progress"})
        # SimpleStreamingEventProcessor: one state at a time (reasoning, content, tool call), each
        # opened with its `added` events and closed with its `done` events when the next one begins.
        state: dict[str, Any] = {"kind": None, "index": 0, "id": "", "text": "", "call": None}

        def close() -> None:
            kind, index, item_id, text = state["kind"], state["index"], state["id"], state["text"]
            if kind == "content":
                part = {"annotations": [], "text": text, "type": "output_text", "logprobs": None}
                emit({"content_index": 0, "item_id": item_id, "logprobs": [], "output_index": index, "text": text,
                      "type": "response.output_text.done"})
                emit({"content_index": 0, "item_id": item_id, "output_index": index, "part": part,
                      "type": "response.content_part.done"})
                emit({"item": {"id": item_id, "content": [part] if text else [], "role": "assistant",
                               "status": "completed", "type": "message"}, "output_index": index,
                      "type": "response.output_item.done"})
            elif kind == "reasoning":
                part = {"text": text, "type": "reasoning_text"}
                emit({"content_index": 0, "item_id": item_id, "output_index": index, "text": text,
                      "type": "response.reasoning_text.done"})
                emit({"content_index": 0, "item_id": item_id, "output_index": index, "part": part,
                      "type": "response.reasoning_part.done"})
                emit({"item": {"id": item_id, "summary": [], "type": "reasoning", "content": [part],
                               "encrypted_content": None, "status": "completed"}, "output_index": index,
                      "type": "response.output_item.done"})
            elif kind == "tool":
                call_id, name = state["call"]
                if text:
                    emit({"arguments": text, "item_id": item_id, "name": name, "output_index": index,
                          "type": "response.function_call_arguments.done"})
                emit({"item": {"arguments": text, "call_id": call_id, "name": name, "type": "function_call",
                               "id": item_id, "status": "completed"}, "output_index": index,
                      "type": "response.output_item.done"})
            else:
                return
            state.update(kind=None, index=index + 1, text="")

        def open_(kind: str, name: str = "") -> None:
            close()
            state.update(kind=kind, id=str(uuid.uuid4()), text="")
            index, item_id = state["index"], state["id"]
            if kind == "content":
                emit({"item": {"id": item_id, "content": [], "role": "assistant", "status": "in_progress",
                               "type": "message"}, "output_index": index, "type": "response.output_item.added"})
                emit({"content_index": 0, "item_id": item_id, "output_index": index,
                      "part": {"annotations": [], "text": "", "type": "output_text", "logprobs": []},
                      "type": "response.content_part.added"})
            elif kind == "reasoning":
                emit({"item": {"id": item_id, "summary": [], "type": "reasoning", "content": None,
                               "encrypted_content": None, "status": "in_progress"}, "output_index": index,
                      "type": "response.output_item.added"})
                emit({"content_index": 0, "item_id": item_id, "output_index": index,
                      "part": {"text": "", "type": "reasoning_text"}, "type": "response.reasoning_part.added"})
            else:
                state["call"] = (f"call_{uuid.uuid4().hex}", name)
                emit({"item": {"arguments": "", "call_id": state["call"][0], "name": name, "type": "function_call",
                               "id": item_id, "status": "in_progress"}, "output_index": index,
                      "type": "response.output_item.added"})

        tool_index = None
        for delta in self.up.deltas(reply):
            reasoning = delta.get(reply.reasoning_field)
            if delta.get("tool_calls"):
                fragment = delta["tool_calls"][0]
                if state["kind"] != "tool" or fragment.get("index") != tool_index:
                    tool_index = fragment.get("index")
                    open_("tool", fragment["function"].get("name") or "")
                piece = fragment["function"].get("arguments")
                if piece:
                    state["text"] += piece
                    emit({"delta": piece, "item_id": state["id"], "output_index": state["index"],
                          "type": "response.function_call_arguments.delta"})
            elif reasoning:
                if state["kind"] != "reasoning":
                    open_("reasoning")
                state["text"] += reasoning
                emit({"content_index": 0, "delta": reasoning, "item_id": state["id"],
                      "output_index": state["index"], "type": "response.reasoning_text.delta"})
            elif delta.get("content"):
                if state["kind"] != "content":
                    open_("content")
                state["text"] += delta["content"]
                emit({"content_index": 0, "delta": delta["content"], "item_id": state["id"], "logprobs": [],
                      "output_index": state["index"], "type": "response.output_text.delta"})
        close()
        done = self.response(body, reply, rid=rid, created=created, status="completed", output=self.output(reply),
                             usage=self.usage_obj(reply))
        self._remember(body, done)
        emit({"response": done, "type": "response.completed"})
        return out


class _Messages(_Dialect):
    def to_chat(self, body: dict[str, Any]) -> dict[str, Any]:
        return messages_to_chat(body)

    def error(self, status: int, message: str, type_: str = "BadRequestError") -> Response:
        # vLLM's translate_error_response: the Anthropic shape on this route.
        return Response(_dump({"type": "error", "error": {"type": type_, "message": message}}),
                        status_code=status, media_type="application/json")

    def whole(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        # AnthropicMessagesResponse.model_dump(exclude_none=True).
        content: list[dict[str, Any]] = []
        if reply.reasoning:
            content.append({"type": "thinking", "thinking": reply.reasoning, "signature": uuid.uuid4().hex})
        if reply.content:
            content.append({"type": "text", "text": reply.content})
        for name, args in reply.tool_calls:
            arguments = json.loads(args) if isinstance(args, str) else args
            content.append({"type": "tool_use", "id": self.up._call_id(), "name": name, "input": arguments})
        prompt, completion = self.usage(reply)
        return {"id": f"chatcmpl-{uuid.uuid4().hex}", "type": "message", "role": "assistant", "content": content,
                "model": body["model"], "stop_reason": _STOP_REASONS.get(reply.finish(), "end_turn"),
                "usage": {"input_tokens": prompt, "output_tokens": completion}}

    def events(self, body: dict[str, Any], reply: Reply) -> list[bytes]:
        prompt, completion = self.usage(reply)
        out = [_sse("message_start", {"type": "message_start", "message": {
            "id": f"chatcmpl-{uuid.uuid4().hex}", "content": [], "model": body["model"], "stop_reason": None,
            "stop_sequence": None, "usage": {"input_tokens": prompt, "output_tokens": 0}}})]
        block: dict[str, Any] = {"type": None, "index": 0, "signature": None, "tool": None}

        def stop() -> None:
            if block["type"] is None:
                return
            if block["signature"]:
                out.append(_sse("content_block_delta", {"type": "content_block_delta", "delta": {
                    "type": "signature_delta", "signature": block["signature"]}, "index": block["index"]}))
            out.append(_sse("content_block_stop", {"type": "content_block_stop", "index": block["index"]}))
            block.update(type=None, index=block["index"] + 1, signature=None, tool=None)

        def start(content_block: dict[str, Any]) -> None:
            stop()
            out.append(_sse("content_block_start", {"type": "content_block_start", "content_block": content_block,
                                                    "index": block["index"]}))
            block["type"] = content_block["type"]
            if content_block["type"] == "thinking":
                block["signature"] = uuid.uuid4().hex
            if content_block["type"] == "tool_use":
                block["tool"] = content_block["id"]

        def delta(obj: dict[str, Any]) -> None:
            out.append(_sse("content_block_delta", {"type": "content_block_delta", "delta": obj,
                                                    "index": block["index"]}))

        # The first chat chunk only opens the message (message_stream_converter skips its delta).
        for chunk in self.up.deltas(reply)[1:]:
            reasoning = chunk.get(reply.reasoning_field)
            if reasoning:
                if block["type"] != "thinking":
                    start({"type": "thinking", "thinking": ""})
                delta({"type": "thinking_delta", "thinking": reasoning})
            if chunk.get("content"):
                if block["type"] != "text":
                    start({"type": "text", "text": ""})
                delta({"type": "text_delta", "text": chunk["content"]})
            for fragment in chunk.get("tool_calls") or []:
                function = fragment.get("function") or {}
                if fragment.get("id") and fragment["id"] != block["tool"] and function.get("name"):
                    start({"type": "tool_use", "id": fragment["id"], "name": function["name"], "input": {}})
                if function.get("arguments"):
                    delta({"type": "input_json_delta", "partial_json": function["arguments"]})
        stop()
        out.append(_sse("message_delta", {"type": "message_delta", "delta": {
            "stop_reason": _STOP_REASONS.get(reply.finish(), "end_turn")},
            "usage": {"input_tokens": prompt, "output_tokens": completion}}))
        out.append(_sse("message_stop", {"type": "message_stop"}))
        return out


class _Completions(_Dialect):
    """Streamed raw completions (vLLM's completion_stream_generator); whole ones stay the scripted upstream's."""

    async def handle(self, request: Request) -> Response:
        try:
            body = json.loads(await request.body())
        except ValueError:
            body = {}
        if not isinstance(body, dict) or not body.get("stream"):
            return await self.up._completions(request)  # the body is cached: it can be read again
        return await super().handle(request)

    def to_chat(self, body: dict[str, Any]) -> dict[str, Any]:
        return body  # the scripted upstream's whole completions script on the raw body too

    def events(self, body: dict[str, Any], reply: Reply) -> list[bytes]:
        cid, created = f"cmpl-{uuid.uuid4().hex}", int(time.time())
        text, step = reply.content, reply.content_chunk
        pieces = [text[i:i + step] for i in range(0, len(text), step)] or [""]
        out = []
        for k, piece in enumerate(pieces):
            last = k == len(pieces) - 1
            choice = {"index": 0, "text": piece, "logprobs": None, "finish_reason": "stop" if last else None,
                      "stop_reason": None}
            out.append(b"data: " + _dump({"id": cid, "object": "text_completion", "created": created,
                                          "model": body["model"], "choices": [choice], "usage": None}) + b"\n\n")
        options = body.get("stream_options") or {}
        if options.get("include_usage"):
            prompt, completion = self.usage(reply)
            out.append(b"data: " + _dump({"id": cid, "object": "text_completion", "created": created,
                                          "model": body["model"], "choices": [], "usage": {
                                              "prompt_tokens": prompt, "total_tokens": prompt + completion,
                                              "completion_tokens": completion}}) + b"\n\n")
        out.append(b"data: [DONE]\n\n")
        return out
