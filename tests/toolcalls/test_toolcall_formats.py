"""The shared suite: every registered format's cases, whole and streamed, must agree.

Streams are the same message as vLLM-shaped deltas, every text cut at every offset and in
random (seeded) chunkings; each must give exactly the whole-message result.
"""

from __future__ import annotations

import random
import re

import pytest

from proxy.toolcalls import FORMATS, ChoiceStream, extract_from_message, extract_from_text, tool_schemas

from .helpers import check_expected, run_stream, summary
from .toolcall_cases import CASES, Case, random_cuts

CALL_ID = re.compile(r"chatcmpl-tool-[0-9a-f]{32}")
SEEDS = range(25)


def _longest_text(case: Case) -> int:
    message = case.message
    texts = [
        message.get("content") or "",
        message.get("reasoning") or "",
        message.get("reasoning_content") or "",
    ]
    texts += [c["function"]["arguments"] for c in message.get("tool_calls") or []]
    return max(len(t) for t in texts)


def _content_only(case: Case) -> bool:
    return set(case.message) <= {"role", "content"}


def test_every_registered_format_has_cases() -> None:
    covered = {case.fmt for case in CASES}
    missing = set(FORMATS) - covered
    assert not missing, f"registered formats without test cases: {sorted(missing)}"
    assert covered <= set(FORMATS), f"cases for unregistered formats: {sorted(covered - set(FORMATS))}"
    for name in FORMATS:
        assert sum(case.fmt == name for case in CASES) >= 5, name


def test_case_ids_are_unique() -> None:
    ids = [str(case) for case in CASES]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("case", CASES, ids=str)
def test_whole_message(case: Case) -> None:
    result = extract_from_message(case.message, case.tools)
    check_expected(case, result)
    if _content_only(case):
        assert summary(extract_from_text(case.message["content"], case.tools)) == summary(result)


@pytest.mark.parametrize("case", [c for c in CASES if c.alone], ids=str)
def test_format_alone_whole(case: Case) -> None:
    check_expected(case, FORMATS[case.fmt].extract(case.message, tool_schemas(case.tools)))


@pytest.mark.parametrize("case", CASES, ids=str)
def test_stream_split_at_every_offset(case: Case) -> None:
    whole = summary(extract_from_message(case.message, case.tools))
    for offset in range(_longest_text(case) + 1):
        streamed = run_stream(ChoiceStream(case.tools), case.message, lambda text, k=offset: [k])
        assert summary(streamed) == whole, f"split at {offset}"


@pytest.mark.parametrize("case", CASES, ids=str)
def test_stream_random_chunkings(case: Case) -> None:
    whole = summary(extract_from_message(case.message, case.tools))
    for seed in SEEDS:
        rng = random.Random(seed)
        streamed = run_stream(ChoiceStream(case.tools), case.message, lambda text, r=rng: random_cuts(r, text))
        assert summary(streamed) == whole, f"seed {seed}"
    one_char = run_stream(ChoiceStream(case.tools), case.message, lambda text: list(range(len(text))))
    assert summary(one_char) == whole


@pytest.mark.parametrize("case", [c for c in CASES if c.alone], ids=str)
def test_format_alone_streamed_equals_whole(case: Case) -> None:
    fmt = FORMATS[case.fmt]
    schemas = tool_schemas(case.tools)
    whole = fmt.extract(case.message, schemas)
    if case.fmt == "openai":
        whole.content = ""  # the structured stream carries no text; ChoiceStream relays it
    for offset in range(_longest_text(case) + 1):
        streamed = run_stream(fmt.stream(schemas), case.message, lambda text, k=offset: [k])
        assert summary(streamed) == summary(whole), f"split at {offset}"
    rng = random.Random(7)
    streamed = run_stream(fmt.stream(schemas), case.message, lambda text: random_cuts(rng, text))
    assert summary(streamed) == summary(whole)


@pytest.mark.parametrize("case", CASES, ids=str)
def test_call_ids(case: Case) -> None:
    result = extract_from_message(case.message, case.tools)
    streamed = run_stream(ChoiceStream(case.tools), case.message, lambda text: [3])
    sent = {c["id"] for c in case.message.get("tool_calls") or []}
    for call in result.tool_calls + result.malformed + streamed.tool_calls + streamed.malformed:
        if call.source == "openai":
            assert call.id in sent  # the upstream's id is kept
        else:
            assert call.id and CALL_ID.fullmatch(call.id)
    fresh = [
        c.id
        for c in result.tool_calls + result.malformed + streamed.tool_calls + streamed.malformed
        if c.source != "openai"
    ]
    assert len(fresh) == len(set(fresh))
