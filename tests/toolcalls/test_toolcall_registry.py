"""The registry dispatches: a format registered in a test, opening with a character other than `<`, is
found by whole extraction and by the streamed path, and priority decides between formats that match at
one position."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import ClassVar

import pytest

from proxy.toolcalls import ChoiceStream, ExtractionResult, extract_from_text
from proxy.toolcalls.base import Schemas, ToolCall, loads_strict
from proxy.toolcalls.registry import FORMATS, content_formats, register, unregister
from proxy.toolcalls.scanner import ContentFormat

from .helpers import collect, summary


class AtFormat(ContentFormat):
    """A toy format: `@@name {"json": "arguments"}`, ended by a newline (or the end of the text)."""

    name: ClassVar[str] = "toy_at"
    priority: ClassVar[int] = 5
    openers: ClassVar[tuple[str, ...]] = ("@@",)
    bare_closers: ClassVar[tuple[str, ...]] = ("\n",)

    def parse_bare(self, body: str, *, closer: str | None, schemas: Schemas) -> list[ToolCall]:
        name, _, text = body.partition(" ")
        try:
            arguments = loads_strict(text or "{}")
        except ValueError as exc:
            return [ToolCall(name=name, arguments_text=body, arguments=None, source=self.name, error=str(exc))]
        return [ToolCall(name=name, arguments_text=json.dumps(arguments), arguments=arguments, source=self.name)]


class LoudAtFormat(AtFormat):
    """The same opener, a higher priority: wins every `@@` call."""

    name: ClassVar[str] = "toy_loud_at"
    priority: ClassVar[int] = 50


class BangFormat(AtFormat):
    """An opener that `@@` is a prefix of, with a higher priority: `@@!` is read by this format."""

    name: ClassVar[str] = "toy_bang"
    priority: ClassVar[int] = 40
    openers: ClassVar[tuple[str, ...]] = ("@@!",)


@pytest.fixture
def formats() -> Iterator[list[str]]:
    """Registers the formats a test appends; removes them afterwards, whatever happened."""
    names: list[str] = []
    yield names
    for name in names:
        if name in FORMATS:
            unregister(name)


def _use(names: list[str], *fmts: ContentFormat) -> None:
    for fmt in fmts:
        register(fmt)
        names.append(fmt.name)


def _streamed(text: str, size: int) -> ExtractionResult:
    """`text` fed to a ChoiceStream in pieces of `size` characters."""
    stream = ChoiceStream()
    events = []
    for start in range(0, len(text), size):
        events += stream.feed({"content": text[start : start + size]})
    return collect(events + stream.finish())


def _all_splits_agree(text: str) -> ExtractionResult:
    whole = extract_from_text(text)
    for size in range(1, len(text) + 1):
        assert summary(_streamed(text, size)) == summary(whole), size
    return whole


TEXT = 'run it: @@bash {"command": "ls"}\nthen @@read {"path": "a"}'


def test_a_registered_format_is_found_whole_and_streamed(formats: list[str]) -> None:
    assert summary(extract_from_text(TEXT))[1] == []  # not a format before it is registered
    _use(formats, AtFormat())
    result = _all_splits_agree(TEXT)
    assert [(c.name, c.arguments, c.source) for c in result.tool_calls] == [
        ("bash", {"command": "ls"}, "toy_at"), ("read", {"path": "a"}, "toy_at")]
    assert result.content == "run it: then "
    # The built-in formats are still read beside it, and the toy's calls keep their running index.
    mixed = _all_splits_agree('@@a {}\n<tool_call>{"name": "b", "arguments": {}}</tool_call>')
    assert [(c.name, c.source, c.index) for c in mixed.tool_calls] == [("a", "toy_at", 0), ("b", "hermes", 1)]


def test_plain_text_without_the_opener_still_takes_the_fast_path(formats: list[str]) -> None:
    _use(formats, AtFormat())
    stream = ChoiceStream()
    assert stream.releases_as_is("an @ alone is text") is False  # '@' may open a call: looked at
    assert summary(_streamed("mail me @ home, or @@", 3)) == summary(extract_from_text("mail me @ home, or @@"))
    assert extract_from_text("mail me @ home").content == "mail me @ home"


def test_priority_decides_between_formats_with_one_opener(formats: list[str]) -> None:
    _use(formats, AtFormat(), LoudAtFormat())
    assert [f.name for f in content_formats()][:2] == ["toy_loud_at", "hermes"]
    assert {c.source for c in _all_splits_agree(TEXT).tool_calls} == {"toy_loud_at"}


def test_priority_decides_between_openers_starting_at_one_position(formats: list[str]) -> None:
    _use(formats, AtFormat(), BangFormat())
    result = _all_splits_agree('@@!x {"a": 1}\n@@y {}')
    assert [(c.name, c.source) for c in result.tool_calls] == [("x", "toy_bang"), ("y", "toy_at")]


def test_priority_decides_which_format_claims_a_tool_call_block(formats: list[str]) -> None:
    class GreedyBlocks(ContentFormat):
        name: ClassVar[str] = "toy_greedy"
        priority: ClassVar[int] = 99

        def claims(self, body: str) -> bool:
            return True

        def parse_block(self, body: str, *, closed: bool, schemas: Schemas) -> list[ToolCall]:
            return [ToolCall(name="greedy", arguments_text="{}", arguments={}, source=self.name)]

    block = '<tool_call>{"name": "b", "arguments": {}}</tool_call>'
    assert [c.source for c in extract_from_text(block).tool_calls] == ["hermes"]
    _use(formats, GreedyBlocks())
    assert [c.source for c in _all_splits_agree(block).tool_calls] == ["toy_greedy"]


def test_a_second_reader_of_a_structured_field_is_refused() -> None:
    from proxy.toolcalls.openai import OpenAIFormat

    class OtherStructured(OpenAIFormat):
        name: ClassVar[str] = "toy_structured"

    with pytest.raises(ValueError, match="already read by 'openai'"):
        register(OtherStructured())
    assert "toy_structured" not in FORMATS
