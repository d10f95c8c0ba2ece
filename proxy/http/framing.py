"""Request framing as RFC 9112 section 6 has it, checked on the parsed head before the body is read.

llhttp (uvicorn's httptools parser) accepts `Transfer-Encoding: identity, chunked` or `gzip, chunked` and
reads the body as chunked; a front proxy may read the same bytes another way (request smuggling). The proxy
takes one framing only, the one every client writes: `Transfer-Encoding: chunked` exactly, or one
`Content-Length`. Everything else is refused before the app sees the request:
- a transfer coding other than chunked (`identity`, `gzip`, ...): 501, RFC 9112 6.1;
- chunked not the final coding, chunked twice, several Transfer-Encoding lines, Transfer-Encoding with
  Content-Length, Transfer-Encoding in an HTTP/1.0 request, several Content-Length lines (even equal ones),
  a Content-Length that is not digits, and a non-canonical spelling of chunked (`CHUNKED`, ` chunked`,
  which some parsers take and others do not): 400.
"""

from __future__ import annotations

import json

from proxy.errors import error_body

__all__ = ["framing_problem", "refusal_bytes"]

_REASONS = {400: b"Bad Request", 501: b"Not Implemented"}


def framing_problem(headers: list[tuple[bytes, bytes]], http_version: str) -> tuple[int, str] | None:
    """(status, message) when the head's framing is refused, else None. `headers` have lower-case names."""
    codings = [value for name, value in headers if name == b"transfer-encoding"]
    lengths = [value for name, value in headers if name == b"content-length"]
    if len(lengths) > 1:
        return 400, "more than one Content-Length header"
    if lengths and not (lengths[0].isdigit() and len(lengths[0]) <= 18):
        return 400, "Content-Length is not a number"
    if not codings:
        return None
    if len(codings) > 1:
        return 400, "more than one Transfer-Encoding header; send one: Transfer-Encoding: chunked"
    if lengths:
        return 400, "both Transfer-Encoding and Content-Length: send one of them"
    if http_version == "1.0":
        return 400, "Transfer-Encoding in an HTTP/1.0 request"
    names = [part.strip(b" \t").lower() for part in codings[0].split(b",")]
    if names[-1] != b"chunked" or names.count(b"chunked") > 1:
        return 400, "chunked must be the one and final transfer coding"
    if len(names) > 1:
        unknown = next(n for n in names if n != b"chunked").decode("latin-1")[:40]
        return 501, f"the transfer coding {unknown!r} is not supported; send Transfer-Encoding: chunked"
    if codings[0] != b"chunked":
        return 400, "write the transfer coding as `chunked` (the one spelling every parser reads alike)"
    return None


def refusal_bytes(status: int, message: str) -> bytes:
    """A whole HTTP/1.1 response in the proxy's error shape; the connection closes after it."""
    body = json.dumps(error_body(message, "invalid_request_error", code="bad_framing")).encode()
    return (b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n"
            % (status, _REASONS[status], len(body))) + body
