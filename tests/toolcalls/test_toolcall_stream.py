"""What the proxy's enforcement relies on: text goes out at once, calls come out whole."""

from __future__ import annotations

import time

import pytest

from proxy.toolcalls import ChoiceStream, CompletedCall, TextDelta
from proxy.toolcalls.base import Event

from .toolcall_cases import LS, OPENCODE_TOOLS, xml


def content(events: list[Event]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta) and e.field == "content")


def calls(events: list[Event]) -> list[CompletedCall]:
    return [e for e in events if isinstance(e, CompletedCall)]


def test_plain_text_is_released_at_once() -> None:
    stream = ChoiceStream(OPENCODE_TOOLS)
    assert stream.feed({"role": "assistant", "content": ""}) == []
    assert stream.feed({"content": "Hello wor"}) == [TextDelta("content", "Hello wor")]
    assert stream.feed({"content": "ld: a < b, <b>x</b>"}) == [TextDelta("content", "ld: a < b, <b>x</b>")]
    assert stream.finish() == []


@pytest.mark.parametrize("tag", ["<tool_call>", "<function=", "<think>"])
def test_a_possible_tag_prefix_is_held_and_released_as_text_when_it_is_not_one(tag: str) -> None:
    for k in range(1, len(tag)):
        stream = ChoiceStream()
        assert content(stream.feed({"content": "a" + tag[:k]})) == "a"
        assert content(stream.feed({"content": " no"})) == tag[:k] + " no"
        stream = ChoiceStream()
        stream.feed({"content": tag[:k]})
        assert stream.finish() == [TextDelta("content", tag[:k])]  # the end decides: it was text


def test_tag_split_in_two_is_still_a_tag() -> None:
    stream = ChoiceStream()
    assert content(stream.feed({"content": "Run:<tool_"})) == "Run:"
    assert stream.feed({"content": "call>\n<function=bash>\n<parameter=command>\nls"}) == []


def test_call_text_is_never_released_and_the_call_comes_out_at_its_closing_tag() -> None:
    stream = ChoiceStream()
    text = "Listing.\n" + LS + "\nDone."
    closing_at = text.index("</tool_call>") + len("</tool_call>") - 1
    released = ""
    for i, ch in enumerate(text):
        events = stream.feed({"content": ch})
        released += content(events)
        if i == closing_at:
            [done] = calls(events)
            assert (done.call.name, done.call.arguments) == ("bash", {"command": "ls -la"})
        else:
            assert calls(events) == []
        if i < len("Listing.\n"):
            assert released == text[: i + 1]  # nothing before the call waits
    assert released == "Listing.\n\nDone."
    assert stream.finish() == []


def test_bare_function_comes_out_at_function_close() -> None:
    stream = ChoiceStream()
    call = xml("read", ("filePath", "a.py"), wrap=False)
    assert calls(stream.feed({"content": call[:-1]})) == []
    [done] = calls(stream.feed({"content": call[-1]}))
    assert done.call.arguments == {"filePath": "a.py"}


def test_unclosed_final_call_comes_out_at_finish() -> None:
    stream = ChoiceStream()
    assert stream.feed({"content": "<tool_call>\n<function=bash>\n<parameter=command>\npwd\n"}) == []
    [done] = calls(stream.finish())
    assert done.call.arguments == {"command": "pwd"}


def test_whitespace_between_calls_is_held_and_dropped_other_text_released() -> None:
    stream = ChoiceStream()
    assert len(calls(stream.feed({"content": LS}))) == 1
    assert stream.feed({"content": "\n"}) == []  # only whitespace since the call: held
    assert len(calls(stream.feed({"content": LS}))) == 1  # another call: the newline was no content
    assert stream.feed({"content": "\n "}) == []
    assert content(stream.feed({"content": "Done"})) == "\n Done"
    assert stream.finish() == []


@pytest.mark.parametrize("field", ["reasoning", "reasoning_content"])
def test_reasoning_is_passed_through_and_never_read(field: str) -> None:
    stream = ChoiceStream()
    events = stream.feed({field: "thinking " + LS})
    assert events == [TextDelta(field, "thinking " + LS)]
    assert stream.feed({field: "<tool_"}) == [TextDelta(field, "<tool_")]  # nothing held
    assert stream.finish() == []


def test_think_in_content_is_passed_through_as_it_comes() -> None:
    stream = ChoiceStream()
    assert content(stream.feed({"content": "<think>I could "})) == "<think>I could "
    assert content(stream.feed({"content": "<tool_call>\n<function=bash>"})) == "<tool_call>\n<function=bash>"
    assert content(stream.feed({"content": " no </thi"})) == " no "  # a possible </think> waits
    assert content(stream.feed({"content": "nk>\n"})) == "</think>\n"
    assert calls(stream.feed({"content": LS}))
    assert stream.finish() == []


def _first(index: int, call_id: str, name: str) -> dict:
    return {
        "tool_calls": [{"index": index, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}]
    }


def _args(index: int | None, fragment: str) -> dict:
    entry: dict = {"function": {"arguments": fragment}}
    if index is not None:
        entry["index"] = index
    return {"tool_calls": [entry]}


def test_structured_call_completes_when_the_next_index_begins_and_at_finish() -> None:
    stream = ChoiceStream()
    assert stream.feed(_first(0, "chatcmpl-tool-a", "bash")) == []
    assert stream.feed(_args(0, '{"command": ')) == []
    assert stream.feed(_args(0, '"ls"}')) == []
    [first] = stream.feed(_first(1, "chatcmpl-tool-b", "read"))
    assert isinstance(first, CompletedCall)
    assert (first.call.id, first.call.name, first.call.arguments) == (
        "chatcmpl-tool-a",
        "bash",
        {"command": "ls"},
    )
    assert first.call.arguments_text == '{"command": "ls"}'  # the upstream's text, untouched
    assert stream.feed(_args(1, '{"filePath": "a"}')) == []
    [second] = stream.finish()
    assert (second.call.index, second.call.source, second.call.arguments) == (1, "openai", {"filePath": "a"})
    assert stream.finish() == []


def test_structured_same_index_with_a_new_id_is_a_new_call() -> None:
    # Some servers number every call 0; the new id still marks a new call.
    stream = ChoiceStream()
    stream.feed(_first(0, "id-1", "a"))
    stream.feed(_args(0, "{}"))
    [done] = stream.feed(_first(0, "id-2", "b"))
    assert done.call.name == "a"
    stream.feed(_args(0, '{"x": 1}'))
    assert [e.call.name for e in stream.finish()] == ["b"]


def test_structured_fragments_without_index_and_repeated_names() -> None:
    stream = ChoiceStream()
    stream.feed({"tool_calls": [{"id": "id-1", "type": "function", "function": {"name": "bash", "arguments": ""}}]})
    stream.feed({"tool_calls": [{"id": "", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]})
    stream.feed(_args(None, ""))
    [done] = stream.finish()
    assert (done.call.name, done.call.arguments, done.call.id) == ("bash", {}, "id-1")


def test_structured_malformed_arguments_are_reported_not_dropped() -> None:
    stream = ChoiceStream()
    stream.feed(_first(0, "id-1", "bash"))
    stream.feed(_args(0, "ls -la"))
    [done] = stream.finish()
    assert done.call.malformed and done.call.raw == "ls -la" and "not valid JSON" in (done.call.error or "")


def test_scan_content_off_relays_content_untouched() -> None:
    stream = ChoiceStream(scan_content=False)
    assert stream.feed({"content": LS}) == [TextDelta("content", LS)]
    assert stream.finish() == []


def test_junk_deltas_do_not_crash() -> None:
    stream = ChoiceStream()
    for junk in (
        None,
        5,
        "x",
        {},
        {"content": None},
        {"content": 5},
        {"tool_calls": "x"},
        {"tool_calls": [None, 5, {"index": "x", "function": "y"}]},
        {"reasoning": None},
    ):
        stream.feed(junk)  # type: ignore[arg-type]
    for event in stream.finish():
        assert isinstance(event, CompletedCall) and event.call.malformed


def test_a_stream_may_continue_after_finish() -> None:
    stream = ChoiceStream()
    stream.feed({"content": "<tool_call>\n<function=a>\n"})
    assert calls(stream.finish())
    assert content(stream.feed({"content": "more"})) == "more"


def test_cost_per_chunk_does_not_grow_with_the_call() -> None:
    # A long `write` call streamed in one-character chunks: rescanning the held call text per
    # chunk would be quadratic (minutes here); linear work takes well under a second.
    stream = ChoiceStream()
    stream.feed({"content": "<tool_call>\n<function=write>\n<parameter=content>\n"})
    started = time.perf_counter()
    for _ in range(200_000):
        stream.feed({"content": "x"})
    [done] = calls(stream.feed({"content": "\n</parameter>\n</function>\n</tool_call>"}))
    assert time.perf_counter() - started < 3.0
    assert done.call.arguments == {"content": "x" * 200_000}


def test_structured_new_index_without_id_is_a_new_call() -> None:
    stream = ChoiceStream()
    stream.feed(_first(0, "id-1", "a"))
    stream.feed(_args(0, '{"x": 1}'))
    [done] = stream.feed({"tool_calls": [{"index": 1, "function": {"name": "b", "arguments": "{}"}}]})
    assert (done.call.name, done.call.arguments) == ("a", {"x": 1})
    [last] = stream.finish()
    assert (last.call.index, last.call.name, last.call.arguments, last.call.id) == (1, "b", {}, None)


@pytest.mark.parametrize("scan", [True, False])
def test_releases_as_is_promises_only_what_feed_does(scan: bool) -> None:
    """The relay skips `feed` for text that `releases_as_is` vouches for: fed anyway, it must come out
    unchanged, and the stream must go on as if it had not been fed at all."""
    pieces = ["Hi ", "", "there", " <", "tool_call>\n<function=ls>\n</function>\n</tool_call>", "after", "<b>", "x"]
    fed, skipped = ChoiceStream(OPENCODE_TOOLS, scan_content=scan), ChoiceStream(OPENCODE_TOOLS, scan_content=scan)
    out_fed: list[Event] = []
    out_skipped: list[Event] = []
    for piece in pieces:
        if fed.releases_as_is(piece):
            assert fed.feed({"content": piece}) == [TextDelta("content", piece)]
            out_fed.append(TextDelta("content", piece))
            out_skipped.append(TextDelta("content", piece))
        else:
            out_fed += fed.feed({"content": piece})
            out_skipped += skipped.feed({"content": piece})
    out_fed += fed.finish()
    out_skipped += skipped.finish()
    assert content(out_fed) == content(out_skipped)
    names = [c.call.name for c in calls(out_fed)]
    assert names == [c.call.name for c in calls(out_skipped)] == (["ls"] if scan else [])
    assert not fed.releases_as_is("")
    assert fed.releases_as_is("<") is not scan  # unscanned content is text whatever it holds
