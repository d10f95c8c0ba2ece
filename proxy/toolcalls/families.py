"""How each vLLM version family reads Qwen3-Coder XML: the rules as data, chosen by version and parser.

vLLM changed its raw-XML rules several times (read and run from the released packages):
- 0.19 `qwen3_coder`: a regex parser; values typed by `_convert_param_value`.
- 0.23 `qwen3_coder`: the same regexes; values typed by `coerce_to_schema_type`.
- 0.19 / 0.23 `qwen3_xml`: a different, expat-based streaming parser.
- 0.24 (and 0.25): one state-machine engine for both parser names; every value `.strip()`ped; a
  parameter that is not closed is dropped; content stripped when tools are called; non-finite
  numbers kept as strings.
- 0.26 (to 0.32): the engine again drops only one newline each side of a value.
- 0.33 (measured on 0.34.0): the engine splits a stray nested `<function=` into two calls and
  reads a number with int() first.

The proxy converts calls left in content the way the upstream's own vLLM would have, so a
`XmlRules` object travels from the settings (or `GET /version`) to the parser; the parser reads
its fields and holds no version branches of its own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "DEFAULT_FAMILY",
    "DEFAULT_RULES",
    "FAMILIES",
    "NEWEST",
    "NEWEST_READ",
    "PARSERS",
    "XmlRules",
    "family_of",
    "rules_for",
]

PARSERS = ("qwen3_coder", "qwen3_xml")


@dataclass(frozen=True, slots=True)
class XmlRules:
    """One version family's way of reading Qwen3-Coder XML.

    engine: "regex" (the 0.19/0.23 `qwen3_coder` regexes), "expat" (the 0.19/0.23 `qwen3_xml`
    parser), "engine" (the 0.24+ state machine).
    typing: how a value is typed from the schema: "convert_param_value" (0.19), "expat" (0.19/0.23
    `qwen3_xml`), "coerce" (0.23+ `coerce_to_schema_type`).
    """

    family: str
    parser: str
    engine: Literal["regex", "expat", "engine"]
    typing: Literal["convert_param_value", "expat", "coerce"]
    strip_values: bool = False  # 0.24-0.25: `.strip()` every value (loses code indentation)
    split_nested_function: bool = False  # 0.33+: a `<function=` inside a call starts another call
    finite_guard: bool = False  # 0.24+: non-finite numbers stay strings (0.19/0.23 fail the call)
    number_int_first: bool = False  # 0.33+: a number is read with int() first
    strip_content_with_tools: bool = False  # 0.24+: whole responses' content is `.strip()`ped
    value_ends_at_tool_call: bool = False  # `qwen3_xml` 0.19/0.23: `<tool_call>` ends a value
    name_closers: tuple[str, ...] = ()  # engine: tags that end a function name before its `>`

    @property
    def label(self) -> str:
        return f"vLLM {self.family} {self.parser}"


def _both(family: str, **fields: object) -> dict[str, XmlRules]:
    return {parser: XmlRules(family=family, parser=parser, **fields) for parser in PARSERS}  # type: ignore[arg-type]


_ENGINE_024 = dict(engine="engine", typing="coerce", strip_values=True, finite_guard=True,
                   strip_content_with_tools=True, name_closers=("</function>",))
_ENGINE_026 = dict(_ENGINE_024, strip_values=False)
_ENGINE_033 = dict(_ENGINE_026, split_nested_function=True, number_int_first=True,
                   name_closers=("</function>", "</tool_call>", "<tool_call>", "<function="))

# family -> parser name -> rules. A version belongs to the newest family not after it.
FAMILIES: dict[str, dict[str, XmlRules]] = {
    "0.19": {
        "qwen3_coder": XmlRules("0.19", "qwen3_coder", engine="regex", typing="convert_param_value"),
        "qwen3_xml": XmlRules("0.19", "qwen3_xml", engine="expat", typing="expat", value_ends_at_tool_call=True),
    },
    "0.23": {
        "qwen3_coder": XmlRules("0.23", "qwen3_coder", engine="regex", typing="coerce"),
        "qwen3_xml": XmlRules("0.23", "qwen3_xml", engine="expat", typing="expat", value_ends_at_tool_call=True),
    },
    "0.24": _both("0.24", **_ENGINE_024),
    "0.26": _both("0.26", **_ENGINE_026),
    "0.33": _both("0.33", **_ENGINE_033),
}
NEWEST = "0.33"
# The newest release whose rules were read: a later version is read as NEWEST, with a note.
NEWEST_READ = (0, 34)
# Where no version is known (a library call without rules, `extract` without --vllm-version, an
# upstream that does not answer GET /version): the rules the proxy had before families existed.
DEFAULT_FAMILY = "0.19"
DEFAULT_RULES = FAMILIES[DEFAULT_FAMILY]["qwen3_coder"]

_VERSION = re.compile(r"^v?(\d+)\.(\d+)")


def _key(family: str) -> tuple[int, int]:
    major, minor = family.split(".")
    return int(major), int(minor)


def family_of(version: str) -> tuple[str, str | None]:
    """The family a vLLM version string belongs to (`0.27.0rc1`, `0.23.1.dev5+g...` alike), and a
    note when the version is unknown or newer than every family (the newest is used then)."""
    match = _VERSION.match(version.strip())
    if match is None:
        return NEWEST, f"vLLM version {version!r} is not a version number: reading XML as vLLM {NEWEST}"
    wanted = (int(match.group(1)), int(match.group(2)))
    known = sorted(FAMILIES, key=_key)
    older = [f for f in known if _key(f) <= wanted]
    if not older:
        return known[0], f"vLLM {version} is older than every known family: reading XML as vLLM {known[0]}"
    family = older[-1]
    if wanted > NEWEST_READ:
        return family, f"vLLM {version} is newer than the rules known here: reading XML as vLLM {NEWEST}"
    return family, None


def rules_for(version: str, parser: str = "qwen3_coder") -> XmlRules:
    """The rules for a version string (or a family name) and a tool parser name."""
    if parser not in PARSERS:
        raise ValueError(f"unknown tool parser {parser!r}: expected one of {', '.join(PARSERS)}")
    if not _VERSION.match(version.strip()):
        raise ValueError(f"unknown vLLM version {version!r}: expected a version such as 0.23 or 0.27.1")
    family, _ = family_of(version)
    return FAMILIES[family][parser]
