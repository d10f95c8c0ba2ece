"""The tool-call formats by name: the table that whole extraction and `ChoiceStream` dispatch through.

A format registered here is read everywhere calls are read. The formats written in content are read
together by one scanner, each by what it declares (`ContentFormat.openers`, `priority`); a format
with a field of its own (OpenAI's structured `tool_calls`) reads that field alone. Adding a format:
its module, and one `register(...)` line below.
"""

from __future__ import annotations

import functools

from proxy.toolcalls.base import ToolCallFormat
from proxy.toolcalls.families import DEFAULT_RULES, XmlRules
from proxy.toolcalls.hermes import HermesFormat
from proxy.toolcalls.openai import OpenAIFormat
from proxy.toolcalls.qwen3_coder import Qwen3CoderFormat
from proxy.toolcalls.scanner import ContentFormat
from proxy.toolcalls.text_actions import TextActionFormat
from proxy.toolcalls.text_aider import AiderEditBlocks, AiderUnifiedDiffs, AiderWholeFiles
from proxy.toolcalls.text_dspy import DSPyChatFields, DSPyJsonFields
from proxy.toolcalls.text_fenced import FencedBlocks
from proxy.toolcalls.text_oi import OpenInterpreterBlocks
from proxy.toolcalls.text_xml_tags import ROO_PARAMS, ROO_TOOLS, XmlActionTags

__all__ = ["FORMATS", "TEXT_FORMATS", "content_formats", "register", "register_text", "structured_format", "unregister"]

FORMATS: dict[str, ToolCallFormat] = {}
"""Every registered format by name, in registration order."""


def register(fmt: ToolCallFormat) -> ToolCallFormat:
    """Adds `fmt` (or replaces the format of its name); returns it."""
    if not isinstance(fmt, ContentFormat):
        other = next((f for f in FORMATS.values() if f.field == fmt.field and f.name != fmt.name), None)
        if other is not None:  # a delta field holds one format's calls: two readers would disagree
            raise ValueError(f"format {fmt.name!r}: field {fmt.field!r} is already read by {other.name!r}")
    FORMATS[fmt.name] = fmt
    _forget()
    return fmt


def unregister(name: str) -> None:
    """Removes the format `name` (a test's own format, once the test is done)."""
    del FORMATS[name]
    _forget()


def content_formats(rules: XmlRules | None = None) -> tuple[ContentFormat, ...]:
    """The registered content formats, highest priority first, XML read by `rules` (default: vLLM 0.19)."""
    return _content_formats(DEFAULT_RULES if rules is None else rules)


@functools.cache  # one tuple per rules object (a handful of families), until the table changes
def _content_formats(rules: XmlRules) -> tuple[ContentFormat, ...]:
    formats = [fmt.for_rules(rules) for fmt in FORMATS.values() if isinstance(fmt, ContentFormat)]
    return tuple(sorted(formats, key=lambda fmt: -fmt.priority))


@functools.cache
def structured_format() -> ToolCallFormat:
    """The format that reads a message's structured `tool_calls`."""
    return next(fmt for fmt in FORMATS.values() if fmt.field == "tool_calls")


def _forget() -> None:
    _content_formats.cache_clear()
    structured_format.cache_clear()


register(Qwen3CoderFormat())
register(HermesFormat())
register(OpenAIFormat())


TEXT_FORMATS: dict[str, TextActionFormat] = {}
"""The text action formats by name (text_actions.py): read only for the clients whose profile names them."""


def register_text(fmt: TextActionFormat) -> TextActionFormat:
    TEXT_FORMATS[fmt.name] = fmt
    return fmt


register_text(FencedBlocks("mswea_bash_command", ("mswea_bash_command",), "mswea_bash_command"))
register_text(FencedBlocks("bash_block", ("bash", "sh", "shell"), "bash_block"))
register_text(XmlActionTags("cline_xml"))
register_text(XmlActionTags("roo_xml", ROO_TOOLS, ROO_PARAMS))
register_text(DSPyChatFields())
register_text(DSPyJsonFields())
register_text(OpenInterpreterBlocks())
register_text(AiderEditBlocks("aider_diff"))
register_text(AiderEditBlocks("aider_diff_fenced"))
register_text(AiderWholeFiles())
register_text(AiderUnifiedDiffs())
