"""Reading and validating a client's JSON body."""

from __future__ import annotations

import contextlib
import gc
import json
import threading
from collections.abc import Iterator
from typing import Any

from starlette.requests import Request

from proxy.errors import BadRequest, PayloadTooLarge
from proxy.upstream.strict import Unparseable, lone_surrogate, unique_object

__all__ = ["gc_paused", "read_body", "read_json_object"]

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
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRequest(f"request body is not valid UTF-8 (byte {exc.start})") from exc
    try:
        # A key written twice (`"stream"`, `"tools"`, `"model"`) is read first-wins by some servers and
        # last-wins by the proxy: the request is refused rather than judged as one thing and run as another.
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
    if not isinstance(payload, dict):
        raise BadRequest(f"request body must be a JSON object (got {type(payload).__name__})")
    if lone_surrogate(text, payload):
        raise BadRequest("request body holds an unpaired UTF-16 surrogate escape, which readers decode differently")
    return payload
