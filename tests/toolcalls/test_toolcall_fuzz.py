"""Any text, cut anywhere: streamed equals whole, and nothing raises."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.toolcalls import ChoiceStream, extract_from_text

from .helpers import collect, summary
from .toolcall_cases import OPENCODE_TOOLS

FRAGMENTS = [
    "<tool_call>", "</tool_call>", "<function=", "</function>", "<parameter=", "</parameter>",
    "<think>", "</think>", "<tool_", "</func", "<", ">", "/", "=", "\n", " ", "bash", "command",
    "timeout", "12", "x", "é", "{", "}", '"name": "bash"', '"arguments": {"a": 1}', ",", ":", '"',
]  # fmt: skip
SETTINGS = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def streamed(text: str, cuts: list[int]) -> tuple:
    stream = ChoiceStream(OPENCODE_TOOLS)
    events = []
    points = sorted({c for c in cuts if 0 < c < len(text)})
    for a, b in zip([0, *points], [*points, len(text)], strict=True):
        events += stream.feed({"content": text[a:b]})
    return summary(collect(events + stream.finish()))


@SETTINGS
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=40).map("".join), st.lists(st.integers(0, 400), max_size=12))
def test_tag_soup_streamed_equals_whole(text: str, cuts: list[int]) -> None:
    whole = summary(extract_from_text(text, OPENCODE_TOOLS))
    assert streamed(text, cuts) == whole
    assert streamed(text, list(range(len(text)))) == whole


@SETTINGS
@given(st.text(max_size=200), st.lists(st.integers(0, 200), max_size=8))
def test_arbitrary_text_streamed_equals_whole(text: str, cuts: list[int]) -> None:
    assert streamed(text, cuts) == summary(extract_from_text(text, OPENCODE_TOOLS))


@SETTINGS
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=40).map("".join))
def test_content_is_the_text_outside_calls(text: str) -> None:
    # Without any opening tag nothing is a call, and the content is the text itself.
    result = extract_from_text(text)
    if not any(tag in text for tag in ("<tool_call>", "<function=")):
        assert result.content == text and not result.tool_calls and not result.malformed
    for call in result.tool_calls + result.malformed:
        assert call.raw and call.raw in text  # what a call reports is text the model wrote
