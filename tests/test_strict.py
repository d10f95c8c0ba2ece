"""The strict decoder refuses what parsers read differently; the canonical encoder writes what they agree on."""

from __future__ import annotations

import json

import pytest

from proxy.strict import MAX_DEPTH, Unparseable, dumps, encode_event, loads


@pytest.mark.parametrize("raw", [
    b'{"n":' + b"1" * 5000 + b"}",  # Python refuses it, JavaScript rounds it
    b'{"n":' + b"1" * 41 + b"}",
    b'{"n":1e999}',
    b'{"n":NaN}',
    b'{"n":-Infinity}',
    b'{"s":"\xff"}',
    b'\xef\xbb\xbf{"a":1}',
    b'{"a":1} x',
    b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1),
    b"[" * 5000 + b"]" * 5000,
])
def test_refused(raw):
    with pytest.raises(Unparseable):
        loads(raw)


def test_ordinary_chunks_read_as_json_reads_them():
    raw = '{"id":"c","created":1700000000,"choices":[{"index":0,"delta":{"content":"é中\\u2028"},"p":-1.5e-3}]}'
    assert loads(raw) == json.loads(raw)
    assert loads('{"a":' * 10 + "1" + "}" * 10) is not None


def test_braces_inside_strings_do_not_count_as_nesting():
    text = json.dumps({"arguments": "{" * 500})
    assert loads(text) == {"arguments": "{" * 500}


def test_the_canonical_encoding_escapes_line_breaking_characters_only():
    obj = {"content": "a\u2028b\x85c\u2029d é 中 \n"}
    text = dumps(obj)
    assert text == '{"content":"a\\u2028b\\u0085c\\u2029d é 中 \\n"}'
    assert json.loads(text) == obj
    assert text.splitlines() == [text]


def test_event_names_cannot_smuggle_lines():
    assert encode_event({"a": 1}, "message_start") == b'event: message_start\ndata: {"a":1}\n\n'
    with pytest.raises(Unparseable):
        encode_event({"a": 1}, "x\ndata: {}")
