"""Raw XML streamed through the proxy, checked against what each vLLM release's own parser streamed.

`data/vllm_qwen3_xml_streamed.jsonl` holds, for every text of `vllm_qwen3_xml.jsonl` and
`vllm_qwen3_xml_generated.jsonl`, what vLLM 0.19.0, 0.23.0, 0.24.0, 0.27.0 and 0.34.0 delivered
when the text was fed to `extract_tool_calls_streaming` one token at a time (the deltas joined:
content, and each call's name and argument text). The proxy is fed the same pieces. Each
(text, version/parser) pair is one of:

- `same`: the same calls (and content, up to surrounding whitespace);
- `reported`: vLLM's stream lost or garbled a call (arguments that are not JSON, a parser error) and
  the proxy reports it as malformed, never inventing a call vLLM did not make;
- `follows_whole`: vLLM's stream disagrees with vLLM's own whole response for the text, and the
  proxy gives the whole response's answer (docs/toolcalls.md: "streamed as whole");
- a departure named in docs/toolcalls.md (`named`), or `other`.
"""

from __future__ import annotations

import collections
import json
import re
from pathlib import Path
from typing import Any

import pytest

from proxy.toolcalls import ChoiceStream, ExtractionResult
from proxy.toolcalls.families import FAMILIES, XmlRules, family_of

from .helpers import collect

DATA = Path(__file__).parent / "data"
_MAIN = [json.loads(line) for line in (DATA / "vllm_qwen3_xml.jsonl").read_text("utf-8").splitlines() if line]
_GEN_LINES = (DATA / "vllm_qwen3_xml_generated.jsonl").read_text("utf-8").splitlines()
_GEN_TOOLS = json.loads(_GEN_LINES[0])["tools"]
TEXTS = {c["id"]: c for c in _MAIN} | {
    c["id"]: c | {"tools": _GEN_TOOLS} for c in map(json.loads, _GEN_LINES[1:])}
STREAMED = {
    row["id"]: row["streamed"]
    for row in map(json.loads, (DATA / "vllm_qwen3_xml_streamed.jsonl").read_text("utf-8").splitlines())}
# Probes of what the issue named (stray closing tags, a lone `<tool_call>`, an empty block, object and
# array parameters), each with vLLM's whole and streamed answers.
_PROBES = [json.loads(line) for line in (DATA / "vllm_qwen3_xml_probes.jsonl").read_text("utf-8").splitlines()]
TEXTS |= {p["id"]: p for p in _PROBES}
STREAMED |= {p["id"]: p["streamed"] for p in _PROBES}
TARGETS = list(next(iter(STREAMED.values())))

# How the recorded streams were cut: Qwen's `<tool_call>` / `</tool_call>` are single tokens, other
# text splits into words, runs of whitespace and single punctuation characters, as a BPE vocabulary
# roughly does (vLLM's tests use the real tokenizer, which cannot be downloaded here).
TOKEN = re.compile(r"<tool_call>|</tool_call>|\s+|\w+|[^\w\s]")

# Departures docs/toolcalls.md names, by text, with the targets they apply to.
NAMED = {
    "name_without_gt": "*",  # a name with whitespace or `<` is malformed
    # A `<tool_call>` with no `<function=` is one malformed call: vLLM's stream drops it (and, in
    # 0.19/0.23 `qwen3_coder`, the text after it), its whole path leaves it as content.
    "p_lone_open": "*",
    "p_lone_open_text": "*",
    "p_empty_block": "*",
}
# qwen3_xml 0.19/0.23 is an expat parser over rewritten text; on generated tag soup it garbles names
# and values in ways the proxy does not reproduce (docs/toolcalls.md): a floor, as for whole texts.
FLOORS = {"0.19/qwen3_xml": 390, "0.23/qwen3_xml": 390}


def rules(target: str) -> XmlRules:
    version, parser = target.split("/")
    return FAMILIES[family_of(version)[0]][parser]


def streamed(case: dict[str, Any], target: str) -> ExtractionResult:
    stream = ChoiceStream(case["tools"], rules=rules(target))
    events = [e for piece in TOKEN.findall(case["text"]) for e in stream.feed({"content": piece})]
    return collect(events + stream.finish())


def _calls(expected: dict[str, Any]) -> list[list[Any]]:
    return [list(c) if isinstance(c, list) else [c["name"], c["arguments"]] for c in expected["calls"]]


def agrees(expected: dict[str, Any], result: ExtractionResult, text: str) -> str | None:
    """`same` or `reported` when the proxy gives what this vLLM answer means for enforcement."""
    ours = [[c.name, c.arguments] for c in result.tool_calls]
    if "error" in expected:  # vLLM's parser raised: the stream ends in an error
        return "reported" if result.malformed else None
    calls = _calls(expected)
    made = [c for c in calls if "__unparsed__" not in c[1]]
    lost = len(made) < len(calls) or (not expected["tools_called"] and "<function=" in text)
    if ours == made and not lost and not result.malformed:
        content = expected.get("content")
        if content is None or content.strip() == result.content.strip():
            return "same"
        return None
    if lost and result.malformed and all(c in made for c in ours):
        return "reported"
    return None


def _bare_call_before_a_block(text: str, target: str) -> bool:
    start = text.find("<function=")
    return target.split("/")[0] in ("0.19", "0.23") and 0 <= start < text.find("<tool_call>")


def classify(case_id: str, target: str) -> str:
    case = TEXTS[case_id]
    result = streamed(case, target)
    verdict = agrees(STREAMED[case_id][target], result, case["text"])
    if verdict:
        return verdict
    whole = case["expected"][target]
    if agrees(whole, result, case["text"]):
        return "follows_whole"
    if NAMED.get(case_id) in ("*", target) or _bare_call_before_a_block(case["text"], target):
        return "named"
    return "other"


def tally(target: str) -> tuple[collections.Counter[str], list[str]]:
    counts: collections.Counter[str] = collections.Counter()
    others = []
    for case_id in TEXTS:
        kind = classify(case_id, target)
        counts[kind] += 1
        if kind == "other":
            others.append(case_id)
    return counts, others


def test_the_data_covers_every_text_and_target() -> None:
    assert set(STREAMED) == set(TEXTS)
    assert len(TEXTS) == 444 + len(_PROBES)
    assert {family_of(t.split("/")[0])[0] for t in TARGETS} == set(FAMILIES)


@pytest.mark.parametrize("target", TARGETS)
def test_streamed_reads_as_that_vllm_streams(target: str) -> None:
    counts, others = tally(target)
    explained = len(TEXTS) - len(others)
    assert explained >= FLOORS.get(target, len(TEXTS)), (dict(counts), others[:10])


def test_where_vllm_streams_differently_from_its_whole_answer_the_proxy_follows_the_whole() -> None:
    """The recorded streams do hold vLLM's stream-only behaviour (so the classes above are not empty):
    from 0.24 a repeated parameter streams arguments that are not JSON."""
    stream = STREAMED["repeated_parameter"]["0.34/qwen3_coder"]
    assert "__unparsed__" in stream["calls"][0][1]
    assert classify("repeated_parameter", "0.34/qwen3_coder") == "follows_whole"
