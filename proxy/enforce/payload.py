"""The client's request body as the proxy reads it: its bytes within the size limit, one strict JSON object
within the limits on tools and messages (a large one parsed off the event loop), and `stream` read as vLLM
reads it."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import threading
from collections.abc import Iterator
from typing import Any

import jiter
from starlette.requests import Request

from proxy.errors import BadRequest, PayloadTooLarge
from proxy.strict import Unparseable, lone_surrogate, unique_object

__all__ = ["check_counts", "gc_paused", "normalize_stream", "read_body", "read_json_object", "read_payload"]


_PARSE_INLINE_BYTES = 1 << 20


_COUNTED = ("messages", "input")


async def read_payload(body: bytes, *, max_tools: int, max_messages: int,
                       counted: tuple[str, ...] = _COUNTED) -> dict[str, Any]:
    """The request's JSON object, its counts checked (400 otherwise): its tools, and each list of turns
    `counted` names (the route's conversation fields)."""
    # A large body is parsed in a thread: tens of megabytes of JSON would stall every other client's stream.
    # Counted there too, so that a refused request's objects are also freed off the loop.
    if len(body) < _PARSE_INLINE_BYTES:
        return _read_payload(body, max_tools=max_tools, max_messages=max_messages, counted=counted)
    return await asyncio.to_thread(_read_large_payload, body, max_tools=max_tools, max_messages=max_messages,
                                   counted=counted)


def _read_payload(body: bytes, *, max_tools: int, max_messages: int, counted: tuple[str, ...]) -> dict[str, Any]:
    payload = read_json_object(body)
    check_counts(payload, max_tools=max_tools, max_messages=max_messages, counted=counted)
    return payload


def _read_large_payload(body: bytes, *, max_tools: int, max_messages: int,
                        counted: tuple[str, ...]) -> dict[str, Any]:
    # Parsed JSON holds no reference cycles, yet its hundreds of thousands of new objects set off the
    # cyclic collector, which holds the GIL (and so every client's stream) for a full pass: 300 ms for 35 MB.
    with gc_paused():
        return _read_payload(body, max_tools=max_tools, max_messages=max_messages, counted=counted)


def check_counts(payload: dict[str, Any], *, max_tools: int, max_messages: int,
                 counted: tuple[str, ...] = _COUNTED) -> None:
    """400 for a request offering more tools or carrying more messages than the settings allow: the work of
    judging a request grows with both, and one request must not hold the proxy for everyone else."""
    tools = payload.get("tools")
    if isinstance(tools, list) and len(tools) > max_tools:
        raise BadRequest(f"the request offers {len(tools)} tools; the limit is {max_tools} (setting max_tools)",
                         param="tools")
    for key in counted:
        items = payload.get(key)
        if isinstance(items, list) and len(items) > max_messages:
            raise BadRequest(f"the request carries {len(items)} {key}; the limit is {max_messages} "
                             "(setting max_messages)", param=key)


# pydantic's lax booleans, which vLLM applies to `stream`: the proxy must read the value as vLLM will.
_TRUE = frozenset({"1", "on", "t", "true", "y", "yes"})
_FALSE = frozenset({"0", "off", "f", "false", "n", "no"})


def normalize_stream(payload: dict[str, Any]) -> tuple[bool, bool]:
    """Whether the request streams, and whether `payload["stream"]` had to be rewritten to say so as a bool.

    The proxy decides streamed or whole itself and sends the upstream that decision, so a `"true"` or `1`
    can never make the proxy read a whole body while the upstream streams."""
    value = payload.get("stream")
    if value is None or isinstance(value, bool):
        return value is True, False
    text = str(value).strip().lower() if isinstance(value, str | int | float) else None
    if isinstance(value, float) and value in (0.0, 1.0):
        text = str(int(value))
    if text in _TRUE or text in _FALSE:
        payload["stream"] = text in _TRUE
        return payload["stream"], True
    raise BadRequest(f"`stream` must be a boolean (got {json.dumps(value)[:50]})", param="stream")

_gc_lock = threading.Lock()
_gc_pausers = 0


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic collector off while the block runs (in any number of threads at once), then as it was."""
    global _gc_pausers
    with _gc_lock:
        if _gc_pausers == 0:
            was_enabled = gc.isenabled()
            gc.disable()
            _gc_pausers = -1 if not was_enabled else 1
        elif _gc_pausers > 0:
            _gc_pausers += 1
    try:
        yield
    finally:
        with _gc_lock:
            if _gc_pausers > 0:
                _gc_pausers -= 1
                if _gc_pausers == 0:
                    gc.enable()
            elif _gc_pausers == -1:
                _gc_pausers = 0


async def read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"request body of {declared} bytes is over the limit of {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"request body is over the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def read_json_object(body: bytes) -> dict[str, Any]:
    # jiter reads a conversation of a few hundred KB in well under half the time of the stdlib with a pairs hook
    # and refuses by itself what the proxy must: a key written twice (`"stream"`, `"tools"`, `"model"`, read
    # first-wins by some servers and last-wins by others), an unpaired surrogate escape, invalid UTF-8. Whatever
    # it refuses is read again by the stdlib: a body only it refuses (nested past its 200 levels, a float of
    # thousands of digits) is accepted as before, and every refusal is worded as before.
    try:
        payload = jiter.from_json(body, catch_duplicate_keys=True, cache_mode="keys")
    except ValueError:
        payload = _read_json_slowly(body)
    if not isinstance(payload, dict):
        raise BadRequest(f"request body must be a JSON object (got {type(payload).__name__})")
    return payload


def _read_json_slowly(body: bytes) -> Any:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRequest(f"request body is not valid UTF-8 (byte {exc.start})") from exc
    try:
        payload = json.loads(text, object_pairs_hook=unique_object)
    except Unparseable as exc:
        raise BadRequest(f"request body is ambiguous: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise BadRequest(f"request body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") \
            from exc
    except RecursionError as exc:
        raise BadRequest("request body is nested too deeply to be read") from exc
    except ValueError as exc:  # an integer of more digits than Python converts (sys.get_int_max_str_digits)
        raise BadRequest(f"request body holds a number the proxy cannot read: {str(exc)[:200]}") from exc
    if lone_surrogate(text, payload):
        raise BadRequest("request body holds an unpaired UTF-16 surrogate escape, which readers decode differently")
    return payload
