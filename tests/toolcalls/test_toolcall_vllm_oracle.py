"""The Qwen3-Coder parser reads what vLLM's qwen3_coder parser reads (see vllm_oracle.py)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.toolcalls import extract_from_text

from .toolcall_cases import OPENCODE_TOOLS, QWEN3_CODER, Case, xml
from .vllm_oracle import vllm_extract

SAME = [c for c in QWEN3_CODER if not c.vllm_differs and not c.malformed and set(c.message) <= {"role", "content"}]


def ours(text: str, tools: list[dict[str, Any]] | None) -> tuple[str, list[tuple[str, Any]]]:
    result = extract_from_text(text, tools)
    assert not result.malformed
    return result.content, [(c.name, c.arguments) for c in result.tool_calls]


def test_the_oracle_covers_enough_cases() -> None:
    assert len(SAME) >= 15


@pytest.mark.parametrize("case", SAME, ids=str)
def test_case_reads_as_vllm_reads_it(case: Case) -> None:
    expected = vllm_extract(case.message["content"], case.tools)
    assert expected is not None, "vLLM fails on this case: mark it vllm_differs"
    content, calls = ours(case.message["content"], case.tools)
    assert calls == expected[1]
    assert content == expected[0]


# Values: text a model writes, with the characters that matter to the grammar, but no complete
# closing tag (which ends a value in vLLM and here alike).
VALUE_CHARS = st.sampled_from([*list("ab z09_-./\n\t<>&=\"'{}[]:,é✓日"), "</param", "<parame", "null", "true", " 1.5"])
VALUES = st.lists(VALUE_CHARS, max_size=12).map("".join)
NUMBERS = st.one_of(st.integers(-(10**6), 10**6).map(str), st.floats(-1e6, 1e6, allow_nan=False).map(repr), VALUES)
BOOLS = st.sampled_from(["true", "false", "True", "FALSE", "yes", ""])
PREFIX = st.lists(st.sampled_from([*list("ab .\n<>"), "<b>", "< tool"]), max_size=10).map("".join)


@st.composite
def opencode_call(draw: st.DrawFn) -> str:
    name, params = draw(
        st.sampled_from(
            [
                ("bash", {"command": VALUES, "timeout": NUMBERS, "workdir": VALUES}),
                ("read", {"filePath": VALUES, "offset": NUMBERS, "limit": NUMBERS}),
                ("edit", {"filePath": VALUES, "oldString": VALUES, "replaceAll": BOOLS}),
                ("unknown_tool", {"x": VALUES}),
            ]
        )
    )
    keys = draw(st.lists(st.sampled_from(sorted(params)), max_size=4))
    pairs = [(k, draw(params[k])) for k in keys]
    call = xml(name, *pairs, wrap=draw(st.booleans()))
    if draw(st.booleans()):  # drop a closing </parameter>: tolerated by both
        call = call.replace("</parameter>\n", "", 1)
    return call


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prefix=PREFIX, calls=st.lists(opencode_call(), min_size=1, max_size=3), unclosed=st.booleans())
def test_generated_calls_read_as_vllm_reads_them(prefix: str, calls: list[str], unclosed: bool) -> None:
    wrapped = all(c.startswith("<tool_call>") for c in calls)
    if not wrapped:
        calls = calls[:1]  # vLLM reads bare functions only when no <tool_call> is present
    text = prefix + "\n".join(calls)
    if unclosed and text.endswith("</tool_call>"):
        text = text[: -len("</tool_call>")]
    expected = vllm_extract(text, OPENCODE_TOOLS)
    if expected is None:  # vLLM failed (e.g. float('inf')): nothing to compare
        return
    content, found = ours(text, OPENCODE_TOOLS)
    assert found == expected[1]
    assert content == expected[0]
