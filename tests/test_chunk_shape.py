"""TextFrame: a text chunk read through its learnt frame gives what parsing it whole gives, or nothing."""

from __future__ import annotations

import json

import pytest

from proxy.strict import dumps
from proxy.upstream.text_frame import TextFrame

HEAD = '{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,'
TAIL = ',"logprobs":null,"finish_reason":null}]}'


def chunk(delta: str) -> str:
    return HEAD + '"delta":' + delta + TAIL


def learnt(content: str = "x") -> TextFrame:
    data = chunk(json.dumps({"content": content}, ensure_ascii=False, separators=(",", ":")))
    frame = TextFrame.learn(data, json.loads(data))
    assert frame is not None
    return frame


@pytest.mark.parametrize("text", ["hello", "", "é ü 中", 'say "hi"\n', "<tool_call>\n<function=bash>", "a\\b",
                                  "\u2028\x7f\t"])
def test_matching_chunks_read_as_their_parse(text):
    frame = learnt()
    data = chunk('{"content":' + dumps(text) + "}")
    assert frame.text(data) == json.loads(data)["choices"][0]["delta"]["content"] == text
    assert frame.index == 0


@pytest.mark.parametrize("text", ["é ü 中", "\u2028", "a/b"])
def test_only_the_canonical_spelling_of_the_text_is_read(text):
    """Any other spelling is parsed in full and re-encoded: the bytes forwarded as they are must be the
    proxy's own encoding of what it judged."""
    frame = learnt()
    for literal in (json.dumps(text), json.dumps(text, ensure_ascii=False), json.dumps(text).replace("/", "\\/")):
        if literal != dumps(text):
            assert frame.text(chunk('{"content":' + literal + "}")) is None


@pytest.mark.parametrize("delta", [
    '{"content":"a","reasoning":"b"}',  # another field after the text
    '{"content":"a"},"x":{"y":"b"}',  # more JSON smuggled in the middle
    '{"content":null}',
    '{"content":1}',
    '{"content":"a\\q"}',  # not a valid escape
    '{"content":"a',
    '{"content":"}',  # one quote alone is no string
    '{"content":"a\tb"}',  # a raw tab: not JSON
    '{"tool_calls":[]}',
])
def test_anything_else_does_not_match(delta):
    assert learnt().text(chunk(delta)) is None


def test_other_frames_do_not_match():
    frame = learnt()
    assert frame.text(chunk('{"content":"a"}').replace("chatcmpl-1", "chatcmpl-2")) is None
    assert frame.text(chunk('{"content":"a"}').replace('"finish_reason":null', '"finish_reason":"stop"')) is None
    assert frame.text("[DONE]") is None


@pytest.mark.parametrize("data", [
    chunk('{"content":"a","role":"assistant"}'),
    chunk('{"content":"a"}').replace('"finish_reason":null', '"finish_reason":"stop"'),
    chunk('{"content":"a"}').replace('}]}', '}],"usage":{"completion_tokens":1}}'),
    chunk('{"content":"a"}').replace('[{"index":0,', '[{"index":1,"delta":{"content":"b"}},{"index":0,'),
    '{"error":{"message":"x"},"choices":[{"index":0,"delta":{"content":"a"}}]}',
])
def test_only_plain_single_choice_text_chunks_teach_a_frame(data):
    assert TextFrame.learn(data, json.loads(data)) is None


def test_a_frame_is_not_learnt_when_the_text_is_spelled_unusually():
    data = chunk('{"content":"\\u0061"}')  # "a", escaped though it need not be
    assert TextFrame.learn(data, json.loads(data)) is None


@pytest.mark.parametrize("field", ["reasoning", "reasoning_content"])
def test_the_thinking_fields_teach_their_own_frame(field):
    """Qwen3.5/3.6 in thinking mode stream mostly reasoning: those chunks take the fast path too."""
    data = chunk('{"' + field + '":"x"}')
    frame = TextFrame.learn(data, json.loads(data))
    assert frame is not None and frame.field == field
    assert frame.text(chunk('{"' + field + '":"think é"}')) == "think é"
    assert frame.text(chunk('{"content":"a"}')) is None  # another field is another frame
    assert learnt().text(chunk('{"' + field + '":"a"}')) is None


def test_an_unknown_field_teaches_no_frame():
    data = chunk('{"refusal":"x"}')
    assert TextFrame.learn(data, json.loads(data)) is None


def event(data: str) -> bytes:
    return b"data: " + data.encode() + b"\n\n"


@pytest.mark.parametrize("text", ["hello", "é ü 中", "<tool_call>", " ", "a/b"])
def test_a_plain_chunk_reads_from_its_bytes_as_its_parse(text):
    data = chunk('{"content":' + dumps(text) + "}")
    assert learnt().plain_text(event(data)) == json.loads(data)["choices"][0]["delta"]["content"] == text


@pytest.mark.parametrize("delta", [
    '{"content":"a\\nb"}',  # escapes are read by `text`, in full
    '{"content":"say \\"hi\\""}',
    '{"content":"\u2028"}',  # printable only as escaped: read in full
    '{"content":""}',
    '{"content":"a","reasoning":"b"}',
    '{"content":"a"},"x":{"y":"b"}',
    '{"content":"a',
    '{"content":"}',
    '{"content":"a\tb"}',
    '{"content":1}',
])
def test_anything_but_a_plain_string_is_left_to_the_full_reading(delta):
    assert learnt().plain_text(event(chunk(delta))) is None


def test_bytes_that_are_not_utf8_or_not_one_whole_event_are_left_to_the_full_reading():
    frame = learnt()
    whole = event(chunk('{"content":"ab"}'))
    assert frame.plain_text(whole.replace(b"ab", b"a\xff")) is None
    assert frame.plain_text(whole[:-1]) is None  # the blank line not read yet
    assert frame.plain_text(whole + whole) is None  # two events in one read
    assert frame.plain_text(b"event: x\n" + whole) is None
    assert frame.plain_text(whole.replace(b"data: ", b"data:")) is None
