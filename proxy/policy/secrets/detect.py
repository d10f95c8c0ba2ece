"""Where the secrets are in a text: each rule's matches, kept as gitleaks keeps them (detect.go's `detectRule`):
the rule runs only where one of its keywords is present; its secret is the `secretGroup` (else the first
non-empty group, else the whole match); a secret whose Shannon entropy is not above the rule's `entropy` is
dropped, and so is one that the global or the rule's allowlists excuse, or that an operator's `secrets.allow`
pattern matches."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from proxy.policy.secrets.rules import Rule, RuleSet

__all__ = ["Finding", "find_secrets", "present_keywords", "shannon_entropy"]


@dataclass(frozen=True, slots=True, order=True)
class Finding:
    start: int  # byte offsets of the secret in the UTF-8 text
    end: int
    type: str  # the rule's id


def shannon_entropy(data: bytes) -> float:
    """Bits per character, over the characters of `data` (gitleaks' `shannonEntropy`)."""
    text = data.decode("utf-8", "replace")
    if not text:
        return 0.0
    size = len(text)
    return -sum(n / size * math.log2(n / size) for n in Counter(text).values())


def find_secrets(text: bytes, rules: RuleSet, allow: Iterable[object] = ()) -> list[Finding]:
    """The secrets in `text` (UTF-8), one finding per match that survives its checks, in order of position;
    overlapping findings are merged into one, named by the most specific rule.

    One pass over the text (lower case) finds which rules' keywords are in it; only those rules run, each over
    the whole text, as gitleaks runs them. A text with no keyword costs that one pass."""
    allow = tuple(allow)
    present = present_keywords(text, rules)
    found: list[Finding] = []
    for rule in rules.rules:
        if rule.keywords and not present.intersection(rule.keywords):
            continue
        found.extend(_rule_findings(text, rule, rules, allow))
    return _merged(found, rules.priority)


def present_keywords(text: bytes, rules: RuleSet) -> set[bytes]:
    """The rules' keywords that `text` holds, in any case."""
    hits = rules.keywords.Match(text.lower())
    return {rules.keyword_list[index] for index in hits} if hits else set()


def _rule_findings(text: bytes, rule: Rule, rules: RuleSet, allow: tuple[object, ...]) -> Iterable[Finding]:
    for match in rule.regex.finditer(text):
        start, end = match.span()
        # gitleaks trims newlines off a match (a rule ending in `\n` or `$` takes the line break with it).
        matched = text[start:end]
        stripped = matched.strip(b"\n")
        start += len(matched) - len(matched.lstrip(b"\n"))
        end = start + len(stripped)
        secret_start, secret_end = _secret_span(rule, match, start, end)
        if secret_start >= secret_end:
            continue
        secret = text[secret_start:secret_end]
        if rule.entropy and shannon_entropy(secret) <= rule.entropy:
            continue
        line = _line(text, start, end)
        if any(a.allows(secret, stripped, line) for a in (*rules.allowlists, *rule.allowlists)):
            continue
        if any(pattern.search(secret) is not None for pattern in allow):  # type: ignore[attr-defined]
            continue
        yield Finding(secret_start, secret_end, rule.id)


def _secret_span(rule: Rule, match: object, start: int, end: int) -> tuple[int, int]:
    groups = match.re.groups  # type: ignore[attr-defined]
    if groups == 0:
        return start, end
    wanted = [rule.secret_group] if rule.secret_group else range(1, groups + 1)
    for group in wanted:
        if group > groups:
            break
        span = match.span(group)  # type: ignore[attr-defined]
        if span[0] >= 0 and span[1] > span[0]:
            return max(span[0], start), min(span[1], end)
    return start, end


def _line(text: bytes, start: int, end: int) -> bytes:
    first = text.rfind(b"\n", 0, start) + 1
    last = text.find(b"\n", end)
    return text[first:last if last >= 0 else len(text)]


def _merged(found: list[Finding], priority: dict[str, int]) -> list[Finding]:
    """Overlapping findings as one: their union, named by the most specific rule among them (a token's own rule
    before the generic assignment rules that also match it)."""
    found.sort()
    merged: list[Finding] = []
    for finding in found:
        if merged and finding.start < merged[-1].end:
            last = merged[-1]
            kind = min(last.type, finding.type, key=lambda t: priority.get(t, len(priority)))
            merged[-1] = Finding(last.start, max(last.end, finding.end), kind)
            continue
        merged.append(finding)
    return merged
