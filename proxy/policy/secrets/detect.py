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

__all__ = ["Finding", "find_secrets", "shannon_entropy"]


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


# How far past the end of the line of a place the gate found a rule may still reach: a private key's block
# (a 4096-bit RSA key is 3.3 KB) that starts inside another rule's match.
_REACH = 8192


def find_secrets(text: bytes, rules: RuleSet, allow: Iterable[object] = ()) -> list[Finding]:
    """The secrets in `text` (UTF-8), one finding per match that survives its checks, in order of position;
    overlapping findings are merged into the first (the longer where they start together).

    One pass of the gate finds where any rule may match; only there, from the start of that line to the end
    of the match's line (and `_REACH` beyond, for a match that continues), does each rule whose keyword is
    present run. A text where no rule matches costs the one pass."""
    allow = tuple(allow)
    found: list[Finding] = []
    for start, end in _windows(text, rules):
        lowered = text[start:end].lower()
        for rule in rules.rules:
            if rule.keywords and not any(keyword in lowered for keyword in rule.keywords):
                continue
            found.extend(_rule_findings(text, rule, rules, allow, start, min(len(text), end + _REACH), end))
    return _merged(list(dict.fromkeys(found)), rules.priority)


def _windows(text: bytes, rules: RuleSet) -> list[tuple[int, int]]:
    """The lines where the gate matched, as merged (start, end) ranges."""
    windows: list[tuple[int, int]] = []
    for match in rules.gate.finditer(text):
        start = text.rfind(b"\n", 0, match.start()) + 1
        end = text.find(b"\n", match.end())
        end = len(text) if end < 0 else end
        if windows and start <= windows[-1][1]:
            windows[-1] = (windows[-1][0], max(end, windows[-1][1]))
        else:
            windows.append((start, end))
    return windows


def _rule_findings(text: bytes, rule: Rule, rules: RuleSet, allow: tuple[object, ...], begin: int, stop: int,
                   starts_before: int) -> Iterable[Finding]:
    """The rule's findings among its matches in text[begin:stop] that start before `starts_before`."""
    for match in rule.regex.finditer(text, begin, stop):
        start, end = match.span()
        if start >= starts_before:
            break
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
