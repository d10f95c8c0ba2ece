"""The request body's fast reading (jiter) reads every body as the stdlib's strict reading does: the same
value where both accept, and where either refuses, the stdlib's verdict in the stdlib's words."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.enforce.payload import _read_json_slowly, read_json_object
from proxy.errors import BadRequest


def _same(a: Any, b: Any) -> bool:
    """Equal, type for type (1 is not 1.0, -0.0 is not 0.0), NaN equal to NaN."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _outcome(read: Any, body: bytes) -> tuple[str, Any]:
    try:
        return "ok", read(body)
    except BadRequest as exc:
        return "refused", exc.message


def _reference(body: bytes) -> Any:
    value = _read_json_slowly(body)
    if not isinstance(value, dict):
        raise BadRequest(f"request body must be a JSON object (got {type(value).__name__})")
    return value


def _agrees(body: bytes) -> None:
    fast, slow = _outcome(read_json_object, body), _outcome(_reference, body)
    assert fast[0] == slow[0], (body[:200], fast, slow)
    if fast[0] == "ok":
        assert _same(fast[1], slow[1]), body[:200]
    else:
        assert fast[1] == slow[1]


_text = st.text(st.characters(codec="utf-8") | st.sampled_from(["\ud800", "\udfff", "\u2028", "\x00", '"', "\\"]))
_scalars = (st.none() | st.booleans() | st.integers(-(2**80), 2**80) | st.floats(allow_nan=True, allow_infinity=True)
            | _text)
_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=4)
                       | st.dictionaries(st.sampled_from(["a", "b", "role", "content", "é", "\ud83d"]) | _text,
                                         inner, max_size=4), max_leaves=20)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(_text, _values, max_size=5), st.booleans())
def test_any_object_is_read_as_the_stdlib_reads_it(value: dict[str, Any], ascii_only: bool) -> None:
    _agrees(json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass"))


@settings(max_examples=600, deadline=None)
@given(st.dictionaries(st.sampled_from(["model", "messages", "stream"]), _values, min_size=1, max_size=3),
       st.data())
def test_any_damaged_body_is_refused_or_read_as_the_stdlib_reads_it(value: dict[str, Any], data: st.DataObject) -> None:
    body = bytearray(json.dumps(value).encode("utf-8", "surrogatepass"))
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(body)))
        piece = data.draw(st.sampled_from([b",", b'"', b"\\", b"{", b"}", b"]", b"\\ud800", b"\\udc00", b"\xff",
                                           b"\xed\xa0\x80", b"\xc3", b'"a":1,', b'"model":0,', b"1e999", b"-",
                                           b"NaN", b" ", b"\x0c", b"\x00"]))
        if data.draw(st.booleans()) and at < len(body):
            body[at:at + 1] = piece
        else:
            body[at:at] = piece
    _agrees(bytes(body))


@pytest.mark.parametrize("body", [
    b'{"a": 1, "a": 2}', b'{"m": [{"role": "user", "role": "system"}]}', b'{"": 1, "": 2}',
    b'{"\\u0061": 1, "a": 2}', b'{"c": "\\ud800"}', b'{"c": "\\udc00x"}', b'{"c": "\\ud800\\u0041"}',
    b'{"c": "\xed\xa0\x80"}', b'{"c": "\xff"}', b'\xef\xbb\xbf{}', b'[]', b'"x"', b'{"n": ' + b"1" * 4301 + b"}",
    b'{"a": 1} x', b"", b"{",
])
def test_a_refused_body_is_refused_in_the_stdlibs_words(body: bytes) -> None:
    _agrees(body)
    with pytest.raises(BadRequest):
        read_json_object(body)


@pytest.mark.parametrize("body", [
    b'{"deep": ' + b"[" * 300 + b"]" * 300 + b"}",  # past jiter's 200 levels, within the stdlib's
    b'{"f": ' + b"1" * 5000 + b".5}",  # a float of thousands of digits
    b'{"n": ' + b"9" * 4300 + b"}",
    b'{"x": NaN, "y": -Infinity, "z": -0.0, "e": "\\ud83d\\ude00"}',
])
def test_a_body_only_jiter_would_refuse_is_read_as_before(body: bytes) -> None:
    _agrees(body)
    assert isinstance(read_json_object(body), dict)
