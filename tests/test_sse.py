"""The SSE decoder: same events whatever the chunk boundaries, exact bytes kept."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.upstream.sse import SSEDecoder

STREAM = (b'data: {"a":1}\n\n: keep-alive\n\nevent: message_start\ndata: {"b":"\xc3\xa9"}\n\n'
          b'data: line one\ndata: line two\n\ndata: {"c":3}\r\n\r\ndata: [DONE]\n\n')


def _decode(pieces: list[bytes]) -> list[tuple[bytes, str | None, str | None]]:
    decoder = SSEDecoder()
    events = [e for piece in pieces for e in decoder.feed(piece)] + decoder.close()
    return [(e.raw, e.data, e.event) for e in events]


def test_whole_stream():
    events = _decode([STREAM])
    assert [e[1] for e in events] == ['{"a":1}', None, '{"b":"é"}', "line one\nline two", '{"c":3}', "[DONE]"]
    assert events[2][2] == "message_start"
    assert b"".join(e[0] for e in events) == STREAM


def test_every_split_point_gives_the_same_events():
    whole = _decode([STREAM])
    for cut in range(1, len(STREAM)):
        assert _decode([STREAM[:cut], STREAM[cut:]]) == whole


@settings(max_examples=200, derandomize=True)
@given(st.integers(min_value=0, max_value=2**32))
def test_random_chunkings_give_the_same_events(seed):
    rng = random.Random(seed)
    pieces, rest = [], STREAM
    while rest:
        size = rng.randint(1, 9)
        pieces.append(rest[:size])
        rest = rest[size:]
    assert _decode(pieces) == _decode([STREAM])


def test_unterminated_tail_is_returned_on_close():
    decoder = SSEDecoder()
    assert decoder.feed(b'data: {"x":1}') == []
    [event] = decoder.close()
    assert event.data == '{"x":1}'


def test_a_read_holding_one_whole_event_gives_it_as_is():
    piece = b'data: {"a":1}\n\n'
    [event] = SSEDecoder().feed(piece)
    assert event.raw is piece
    assert event.data == '{"a":1}'


def test_whole_event_reads_mixed_with_partial_ones_give_the_same_events():
    pieces = [b'data: {"a":1}\n\n', b"data: x\n\n\n", b'\ndata: {"b":2}\n\n', b"data: y", b"\n\n", b"data: z\n\n"]
    assert _decode(pieces) == _decode([b"".join(pieces)])


# ---------------------------------------------------------------- the WHATWG rules


def _data(raw: bytes) -> list[str | None]:
    return [e[1] for e in _decode([raw])]


@pytest.mark.parametrize("end", [b"\n\n", b"\r\r", b"\r\n\r\n", b"\n\r", b"\r\n\r", b"\r\n\n"])
def test_every_line_end_ends_an_event(end):
    raw = b"data: a" + end + b"data: b" + end
    assert [d for d in _data(raw) if d is not None] == ["a", "b"]
    for cut in range(1, len(raw)):  # a CR and its LF in two reads are one line end
        assert _decode([raw[:cut], raw[cut:]]) == _decode([raw])


def test_a_bom_opens_the_stream_once():
    assert _data(b"\xef\xbb\xbfdata: a\n\n") == ["a"]
    assert _decode([b"\xef", b"\xbb\xbfdata: a\n\n"]) == _decode([b"\xef\xbb\xbfdata: a\n\n"])
    assert _data(b"data: a\n\n\xef\xbb\xbfdata: b\n\n")[1:] == [None]  # later, it is no field the rules know


def test_fields_follow_the_rules():
    assert _data(b"data:a\n\n") == ["a"]  # no space after the colon
    assert _data(b"data:  a\n\n") == [" a"]  # only one space is dropped
    assert _data(b"data\n\n") == [""]  # a field without a colon has an empty value
    assert _data(b": comment\ndata: a\nid: 7\nretry: 10\nfoo: bar\n\n") == ["a"]
    assert _data(b"data: a\rdata: b\n\n") == ["a\nb"]  # a lone CR ends a line


def test_invalid_utf8_is_marked_not_replaced():
    [event] = SSEDecoder().feed(b"data: \xff\n\n")
    assert event.data is None and event.invalid
    [event] = _events(b"event: x\ndata: \xc3\n\n")
    assert event.data is None and event.invalid


def test_plain_marks_the_framing_every_reader_agrees_on():
    assert [e.plain for e in _events(b"data: a\n\ndata:a\n\ndata: a\r\n\r\nevent: x\ndata: a\n\n")] == \
        [True, False, False, False]
    assert [e.plain for e in SSEDecoder().feed(b"data: a\n\n")] == [True]


def _events(raw: bytes) -> list:
    decoder = SSEDecoder()
    return decoder.feed(raw) + decoder.close()
