"""The SSE decoder: same events whatever the chunk boundaries, exact bytes kept."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.sse import SSEDecoder

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
