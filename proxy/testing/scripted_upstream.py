"""A scripted OpenAI-compatible upstream that answers exactly as vLLM does.

Tests, benchmarks and `allowlist-proxy demo` put it where vLLM would be. Each reply is scripted
(text, reasoning, tool calls, usage) and can be told to fail, stall, or drop the connection.
Chunks are serialized like vLLM's (compact JSON, `logprobs`/`stop_reason` present, usage chunk
with empty `choices`, `data: [DONE]`).

`family` picks a vLLM version family's exact bytes (`proxy.testing.vllm_bytes`): its `/version`,
tool-call ids, first tool delta, argument cuts, `token_ids`, `prompt_token_ids`/`prompt_text`,
usage without nulls, and 0.34's `: keep-alive` comments. Without one, the replies keep the shape
the tests were written against (answering `/version` as 0.19.0, whose XML rules that shape
matches).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from proxy.testing.dialects import dialect_routes
from proxy.testing.reply import Reply, arguments_text, pace
from proxy.testing.vllm_bytes import FamilyBytes, family_bytes

__all__ = ["Reply", "ScriptedUpstream"]

_COMPACT = (",", ":")
# (status, message, error type) -> the error answer in a route's shape.
ErrorAnswer = Callable[..., Response]


def _dump(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=_COMPACT).encode()


class ScriptedUpstream:
    """Replies come from `queue` (per model, else shared) or, when that is empty, from `responder`."""

    def __init__(self, models: list[str] | None = None,
                 responder: Callable[[dict[str, Any]], Reply] | None = None, *, family: str | None = None,
                 tool_parser: str = "qwen3_coder", keep_alive: bool = False) -> None:
        self.models = models or ["qwen3.5-27b"]
        self.bytes: FamilyBytes | None = family_bytes(family, tool_parser, keep_alive=keep_alive) if family else None
        self.version = self.bytes.version if self.bytes else "0.19.0"
        self.responder = responder
        self.queue: deque[Reply] = deque()
        self.queues: dict[str, deque[Reply]] = {}
        self.requests: list[dict[str, Any]] = []
        self.raw_requests: list[bytes] = []  # the chat bodies as received, for byte-exact comparisons
        self.responses: list[bytes] = []  # every body sent, streams joined, for byte-exact comparisons
        self.headers: list[dict[str, str]] = []
        self.models_headers: list[dict[str, str]] = []  # the headers of every GET /v1/models
        self.disconnects = 0
        self.store_responses = False  # vLLM's Responses store: `previous_response_id` continues a stored response
        self.disconnected_at: list[float] = []
        self.completed_streams = 0
        self._lock = threading.Lock()
        self.app = Starlette(routes=[
            *dialect_routes(self),  # /v1/responses, /v1/messages and streamed /v1/completions, on the same replies
            Route("/v1/chat/completions", self._chat, methods=["POST"]),
            Route("/v1/completions", self._completions, methods=["POST"]),
            Route("/v1/models", self._models, methods=["GET"]),
            Route("/v1/tokenize", self._tokenize, methods=["POST"]),
            Route("/health", self._health, methods=["GET"]),
            Route("/version", self._version, methods=["GET"]),
        ])

    url: str = ""  # set by whoever serves the app, e.g. "http://127.0.0.1:PORT/v1"

    # -- scripting

    def script(self, *replies: Reply, model: str | None = None) -> None:
        with self._lock:
            target = self.queue if model is None else self.queues.setdefault(model, deque())
            target.extend(replies)

    def _next(self, body: dict[str, Any]) -> Reply:
        with self._lock:
            own = self.queues.get(str(body.get("model")))
            if own:
                return own.popleft()
            if self.queue:
                return self.queue.popleft()
        if self.responder is not None:
            return self.responder(body)
        return Reply(content="Hello from the scripted upstream.")

    # -- routes

    async def _health(self, _request: Request) -> Response:
        return Response(b"", status_code=200)

    async def _version(self, _request: Request) -> Response:
        return Response(_dump({"version": self.version}), media_type="application/json")

    async def _models(self, request: Request) -> Response:
        self.models_headers.append(dict(request.headers))
        data: list[dict[str, Any]] = [{"id": m, "object": "model", "created": 1764633600, "owned_by": "vllm", "root": m,
                 "parent": None, "max_model_len": 65536, "permission": []} for m in self.models]
        return Response(_dump({"object": "list", "data": data}), media_type="application/json")

    async def _tokenize(self, request: Request) -> Response:
        body = json.loads(await request.body())
        text = body.get("prompt", "")
        return JSONResponse({"count": len(text.split()), "max_model_len": 65536,
                             "tokens": list(range(len(text.split())))})

    def _unknown_model(self, model: Any) -> Response | None:
        if model in self.models:
            return None
        return self._error(404, f"The model `{model}` does not exist.", "NotFoundError")

    @staticmethod
    def _error(status: int, message: str, type_: str = "BadRequestError") -> Response:
        return Response(_dump({"error": {"message": message, "type": type_, "param": None, "code": status}}),
                        status_code=status, media_type="application/json")

    async def _completions(self, request: Request) -> Response:
        body = json.loads(await request.body())
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        if (refused := self._unknown_model(body.get("model"))) is not None:
            return refused
        reply = self._next(body)
        text = reply.content
        whole = _dump({
            "id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
            "model": body["model"], "choices": [{"index": 0, "text": text, "logprobs": None,
                                                 "finish_reason": "stop", "stop_reason": None}],
            "usage": {"prompt_tokens": reply.prompt_tokens, "total_tokens": reply.prompt_tokens + reply.tokens(),
                      "completion_tokens": reply.tokens(), "prompt_tokens_details": None},
        })
        self.responses.append(whole)
        return Response(whole, media_type="application/json")

    async def received(self, request: Request, error: ErrorAnswer | None = None) -> dict[str, Any] | Response:
        """A request of a chat-like route: its body, recorded (parsed, as bytes, and its headers) for the test;
        the answer instead where the server refuses it before the model runs (not JSON, an unknown model), in the
        route's error shape (`error`, default OpenAI's)."""
        error = error or self._error
        raw = await request.body()
        try:
            body = json.loads(raw)
        except ValueError:
            return error(400, "invalid JSON")
        self.requests.append(body)
        self.raw_requests.append(raw)
        self.headers.append(dict(request.headers))
        if body.get("model") not in self.models:
            return error(404, f"The model `{body.get('model')}` does not exist.", "NotFoundError")
        return body

    async def failed(self, reply: Reply, error: ErrorAnswer | None = None) -> Response | None:
        """The reply's scripted stall, then its scripted error answer (in the route's shape), if it has one."""
        if reply.stall:
            await asyncio.sleep(reply.stall)
        if reply.status >= 400:
            return (error or self._error)(reply.status, reply.error_message or "scripted failure")
        return None

    async def _chat(self, request: Request) -> Response:
        body = await self.received(request)
        if isinstance(body, Response):
            return body
        reply = self._next(body)
        if (failed := await self.failed(reply)) is not None:
            return failed
        if body.get("stream"):
            return StreamingResponse(self._stream(body, reply), media_type="text/event-stream")
        whole = _dump(self._whole(body, reply))
        self.responses.append(whole)
        return Response(whole, media_type="application/json")

    def _usage(self, reply: Reply) -> dict[str, Any]:
        completion = reply.tokens()
        details = {"cached_tokens": reply.cached_tokens} if reply.cached_tokens is not None else None
        usage = {"prompt_tokens": reply.prompt_tokens, "total_tokens": reply.prompt_tokens + completion,
                 "completion_tokens": completion, "prompt_tokens_details": details}
        if self.bytes is not None and details is None:
            del usage["prompt_tokens_details"]  # vLLM's usage chunk leaves nulls out
        return usage

    def _call_id(self, *, streamed: bool = False) -> str:
        if self.bytes is not None and streamed:
            return self.bytes.stream_call_id()
        return f"chatcmpl-tool-{uuid.uuid4().hex}"

    def _whole(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        tool_calls = [{"id": self._call_id(), "type": "function",
                       "function": {"name": name, "arguments": arguments_text(args)}}
                      for name, args in reply.tool_calls]
        message: dict[str, Any] = {"role": "assistant", "content": reply.content or None, "refusal": None,
                                   "annotations": None, "audio": None, "function_call": None,
                                   "tool_calls": tool_calls, reply.reasoning_field: reply.reasoning}
        message.update(reply.extra_message)
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": body["model"],
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": reply.finish(),
                         "stop_reason": None, "token_ids": None}],
            "service_tier": None, "system_fingerprint": None, "usage": self._usage(reply),
            "prompt_logprobs": None, "prompt_token_ids": None, "kv_transfer_params": None,
        }

    def deltas(self, reply: Reply) -> list[dict[str, Any]]:
        """The deltas of one reply, in vLLM's order and shapes."""
        out: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
        if reply.reasoning:
            for i in range(0, len(reply.reasoning), reply.content_chunk):
                out.append({reply.reasoning_field: reply.reasoning[i:i + reply.content_chunk]})
        for i in range(0, len(reply.content), reply.content_chunk):
            out.append({"content": reply.content[i:i + reply.content_chunk]})
        for index, (name, args) in enumerate(reply.tool_calls):
            if self.bytes is not None:
                out += self.bytes.tool_deltas(index, name, args, reply.arguments_chunk)
                continue
            out.append({"tool_calls": [{"id": self._call_id(), "type": "function", "index": index,
                                        "function": {"name": name, "arguments": ""}}]})
            text = arguments_text(args)
            for i in range(0, len(text), reply.arguments_chunk):
                out.append({"tool_calls": [{"index": index,
                                            "function": {"arguments": text[i:i + reply.arguments_chunk]}}]})
        return out

    async def _stream(self, body: dict[str, Any], reply: Reply) -> AsyncIterator[bytes]:
        chunk_id = f"chatcmpl-{uuid.uuid4().hex}"
        created = int(time.time())
        options = body.get("stream_options") or {}
        include_usage = bool(options.get("include_usage"))
        continuous = include_usage and bool(options.get("continuous_usage_stats"))
        finished = False
        sent = 0
        record = bytearray()
        self.responses.append(b"")
        slot = len(self.responses) - 1

        family = self.bytes

        def chunk(delta: dict[str, Any], finish: str | None = None, *, first: bool = False) -> bytes:
            choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            if finish is not None:
                choice["stop_reason"] = None
            if family is not None:
                choice["token_ids"] = None
            obj: dict[str, Any] = {"id": chunk_id, "object": "chat.completion.chunk", "created": created,
                                   "model": body["model"], "choices": [choice]}
            if continuous:
                obj["usage"] = self._usage(reply)
            if family is not None and first:
                obj.update(family.first_chunk_fields())
            return b"data: " + _dump(obj) + b"\n\n"

        try:
            deltas = self.deltas(reply)
            pieces = [chunk(d, first=i == 0) for i, d in enumerate(deltas)] + [chunk({}, reply.finish())]
            if family is not None and family.keep_alive:
                pieces.insert(1, b": keep-alive\n\n")  # vLLM 0.34 may send these while a request waits
            started = time.monotonic()
            for piece in pieces:
                if reply.drop_after is not None and sent >= reply.drop_after:
                    raise ConnectionResetError("scripted drop")
                if reply.stream_error_after is not None and sent >= reply.stream_error_after:
                    yield b"data: " + _dump({"error": {"message": "scripted stream failure", "type":
                                                       "InternalServerError", "param": None, "code": 500}}) + b"\n\n"
                    yield b"data: [DONE]\n\n"
                    finished = True
                    return
                record += piece
                self.responses[slot] = bytes(record)
                yield piece
                sent += 1
                await pace(reply, sent, started)
            if include_usage:
                usage = {"id": chunk_id, "object": "chat.completion.chunk", "created": created,
                         "model": body["model"], "choices": [], "usage": self._usage(reply)}
                record += b"data: " + _dump(usage) + b"\n\n"
            record += b"data: [DONE]\n\n"
            self.responses[slot] = bytes(record)
            if include_usage:
                yield b"data: " + _dump(usage) + b"\n\n"
            yield b"data: [DONE]\n\n"
            finished = True
            self.completed_streams += 1
        finally:
            if not finished:
                self.disconnects += 1
                self.disconnected_at.append(time.monotonic())
