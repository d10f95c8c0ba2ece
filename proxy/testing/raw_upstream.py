"""A hostile upstream for tests: it answers, byte for byte, whatever a test scripted.

Each POST to /v1/... takes the next `RawAnswer` from the queue (its status, content type and body, the body
sent in the pieces given); when the queue is empty it answers a plain, harmless text reply in the shape of the
route asked (so a proxy's retries end well). GET /v1/models lists the models.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

__all__ = ["RawAnswer", "RawUpstream", "harmless"]


@dataclass
class RawAnswer:
    body: bytes | list[bytes]  # a list is sent in those pieces, one write each
    status: int = 200
    content_type: str = "text/event-stream"
    headers: dict[str, str] = field(default_factory=dict)


def _dump(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()


def harmless(path: str, model: str, stream: bool) -> RawAnswer:
    """A plain text answer of the route, as vLLM would give it."""
    text = "All done."
    if path.endswith("chat/completions"):
        if not stream:
            return RawAnswer(_dump({"id": "chatcmpl-ok", "object": "chat.completion", "created": 1, "model": model,
                                    "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                                 "logprobs": None, "finish_reason": "stop"}]}),
                             content_type="application/json")
        head = {"id": "chatcmpl-ok", "object": "chat.completion.chunk", "created": 1, "model": model}
        return RawAnswer([
            b"data: " + _dump({**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": text},
                                                    "logprobs": None, "finish_reason": None}]}) + b"\n\n",
            b"data: " + _dump({**head, "choices": [{"index": 0, "delta": {}, "logprobs": None,
                                                    "finish_reason": "stop"}]}) + b"\n\n",
            b"data: [DONE]\n\n"])
    if path.endswith("/completions"):
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "stop"}
        obj = {"id": "cmpl-ok", "object": "text_completion", "created": 1, "model": model, "choices": [choice]}
        if not stream:
            return RawAnswer(_dump(obj), content_type="application/json")
        return RawAnswer([b"data: " + _dump(obj) + b"\n\n", b"data: [DONE]\n\n"])
    if path.endswith("/responses"):
        item = {"id": "msg_ok", "type": "message", "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}]}
        response = {"id": "resp_ok", "object": "response", "model": model, "status": "completed", "output": [item],
                    "usage": {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5}}
        if not stream:
            return RawAnswer(_dump(response), content_type="application/json")
        events: list[dict[str, Any]] = [
            {"type": "response.created", "response": {**response, "status": "in_progress", "output": []}},
            {"type": "response.output_item.added", "output_index": 0, "item": {**item, "content": []}},
            {"type": "response.output_text.delta", "output_index": 0, "item_id": "msg_ok", "content_index": 0,
             "delta": text},
            {"type": "response.output_item.done", "output_index": 0, "item": item},
            {"type": "response.completed", "response": response},
        ]
        return RawAnswer([b"event: " + e["type"].encode() + b"\ndata: " + _dump({**e, "sequence_number": n})
                          + b"\n\n" for n, e in enumerate(events)])
    message = {"id": "msg_ok", "type": "message", "role": "assistant", "model": model,
               "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "stop_sequence": None,
               "usage": {"input_tokens": 3, "output_tokens": 2}}
    if not stream:
        return RawAnswer(_dump(message), content_type="application/json")
    events = [
        {"type": "message_start", "message": {**message, "content": [], "stop_reason": None}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
         "usage": {"output_tokens": 2}},
        {"type": "message_stop"},
    ]
    return RawAnswer([b"event: " + e["type"].encode() + b"\ndata: " + _dump(e) + b"\n\n" for e in events])


class RawUpstream:
    def __init__(self, models: list[str]) -> None:
        self.models = models
        self.queue: deque[RawAnswer] = deque()
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self._lock = threading.Lock()
        self.app = Starlette(routes=[
            Route("/v1/models", self._models, methods=["GET"]),
            Route("/v1/{path:path}", self._answer, methods=["POST"]),
        ])

    url: str = ""  # set by whoever serves the app, e.g. "http://127.0.0.1:PORT/v1"

    def script(self, *answers: RawAnswer) -> None:
        with self._lock:
            self.queue.clear()
            self.queue.extend(answers)

    async def _models(self, _request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": m, "object": "model", "owned_by": "test"}
                                                        for m in self.models]})

    async def _answer(self, request: Request) -> Response:
        path = request.url.path
        body = json.loads(await request.body() or b"{}")
        with self._lock:
            self.requests.append((path, body))
            answer = self.queue.popleft() if self.queue else None
        if answer is None:
            answer = harmless(path, str(body.get("model")), body.get("stream") is True)
        headers = {"content-type": answer.content_type, **answer.headers}
        if isinstance(answer.body, bytes):
            return Response(answer.body, status_code=answer.status, headers=headers)
        pieces = list(answer.body)

        async def send() -> AsyncIterator[bytes]:
            for piece in pieces:
                yield piece

        return StreamingResponse(send(), status_code=answer.status, headers=headers)
