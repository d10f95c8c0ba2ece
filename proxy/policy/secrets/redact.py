"""Texts with their secrets replaced by `[redacted: TYPE]`.

Deterministic by construction: the replacement names only the rule, never a counter, an id or a time, so the
same text always gives the same bytes, and a conversation re-sent with one more turn is redacted to the same
prefix (vLLM's prefix cache keeps hitting). The texts of one request are scanned together, joined, so that a
request of many tool results costs one pass per rule, not one per result."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from proxy.policy.secrets.detect import Finding, find_secrets
from proxy.policy.secrets.rules import RuleSet

__all__ = ["Redacted", "redact_texts", "replacement"]

# Between two texts scanned together; a finding that reaches across it is found again text by text.
_SEPARATOR = b"\n\x00\n"


def replacement(kind: str) -> str:
    return f"[redacted: {kind}]"


@dataclass(frozen=True, slots=True)
class Redacted:
    text: str  # the text with its secrets replaced
    counts: Counter[str]  # type -> how many were replaced


def redact_texts(texts: Sequence[str], rules: RuleSet, allow: Iterable[object] = ()) -> list[Redacted | None]:
    """For each text, its redaction, or None where it holds no secret."""
    allow = tuple(allow)
    encoded = [text.encode("utf-8", "surrogatepass") for text in texts]
    found = find_secrets(_SEPARATOR.join(encoded), rules, allow) if encoded else []
    if not found:
        return [None] * len(texts)
    per_text: list[list[Finding]] = [[] for _ in texts]
    starts, offset = [], 0
    for data in encoded:
        starts.append(offset)
        offset += len(data) + len(_SEPARATOR)
    again: set[int] = set()
    index = 0
    for finding in found:
        while index + 1 < len(starts) and starts[index + 1] <= finding.start:
            index += 1
        base = starts[index]
        if finding.end <= base + len(encoded[index]):
            per_text[index].append(Finding(finding.start - base, finding.end - base, finding.type))
            continue
        # Across a separator: each text it touches is scanned alone, and that scan is the text's.
        last = index
        while last + 1 < len(starts) and starts[last + 1] < finding.end:
            last += 1
        again.update(range(index, last + 1))
    for position in again:
        per_text[position] = find_secrets(encoded[position], rules, allow)
    return [_apply(texts[i], encoded[i], per_text[i]) if per_text[i] else None for i in range(len(texts))]


def _apply(text: str, data: bytes, findings: list[Finding]) -> Redacted:
    pieces: list[bytes] = []
    cursor = 0
    counts: Counter[str] = Counter()
    for finding in findings:
        pieces += [data[cursor:finding.start], replacement(finding.type).encode("utf-8")]
        cursor = finding.end
        counts[finding.type] += 1
    pieces.append(data[cursor:])
    return Redacted(b"".join(pieces).decode("utf-8", "surrogatepass"), counts)
