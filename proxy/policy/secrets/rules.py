"""The secret-detection rules as data: gitleaks' layout (`[[rules]]` with `id`, `regex`, `secretGroup`,
`entropy`, `keywords`, `[[rules.allowlists]]`; a global `[allowlist]`), read from the TOML files beside this
module and compiled once with RE2.

RE2, not `re`: the rules are written for Go's regexp (RE2's syntax: `(?-i:...)`, `\\z`, POSIX classes), and
RE2 runs in time linear in the text whatever the pattern, which matters for text a model can shape (a tool
result is whatever a file or a web page holds). The rules run on UTF-8 bytes: RE2's `str` interface maps every
offset back to characters, which costs as much as the search.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import re2

__all__ = ["GENERIC_RULES", "RULE_FILES", "Allowlist", "Rule", "RuleSet", "compile_pattern", "load_rules"]

# The files read, in order: gitleaks' rules, then this project's (local.toml says what they add).
RULE_FILES = ("gitleaks.toml", "local.toml")

# The rules that find a secret by the name it is assigned to rather than by its own shape: where one of them and
# a token's own rule find the same text, the token's rule names it.
GENERIC_RULES = frozenset({"generic-api-key", "dotenv-secret"})

# How large a pattern's DFA may grow before RE2 falls back to its slower engines. One rule's states are few;
# every rule in one alternation (tried as a single pass) thrashed at 64 MiB on base64-heavy text, seconds per
# 100 KB: the rules run one by one, each behind its keywords (bench/secrets_bench.py).
_MAX_MEM = 32 << 20


def compile_pattern(pattern: str | bytes, *, max_mem: int = _MAX_MEM) -> Any:
    """One RE2 pattern for UTF-8 bytes; ValueError (with RE2's reason) where RE2 does not accept it."""
    options = re2.Options()
    options.max_mem = max_mem
    try:
        return re2.compile(pattern.encode("utf-8") if isinstance(pattern, str) else pattern, options)
    except re2.error as exc:
        raise ValueError(f"{pattern!r}: {exc}") from exc


@dataclass(frozen=True, slots=True)
class Allowlist:
    """What a finding is excused by: a regex over its secret, its whole match or its line (`target`), or a
    stopword inside its secret. `condition` AND needs every check it has; checks on a file path or a commit
    never hold for a tool result."""

    target: str  # secret | match | line
    regexes: Any | None  # one compiled alternation, or None
    stopwords: Any | None  # the stopwords (lower case) as one alternation of literals, or None
    needs_all: bool
    has_paths: bool

    def allows(self, secret: bytes, match: bytes, line: bytes) -> bool:
        subject = {"match": match, "line": line}.get(self.target, secret)
        by_regex = self.regexes is not None and bool(subject) and self.regexes.search(subject) is not None
        by_word = self.stopwords is not None and self.stopwords.search(secret.lower()) is not None
        if self.needs_all:
            checks = [by_regex] if self.regexes is not None else []
            checks += [by_word] if self.stopwords is not None else []
            checks += [False] if self.has_paths else []
            return bool(checks) and all(checks)
        return by_regex or by_word


@dataclass(frozen=True, slots=True)
class Rule:
    id: str  # the TYPE of `[redacted: TYPE]`, and what is counted
    regex: Any
    pattern: str
    secret_group: int
    entropy: float
    keywords: tuple[bytes, ...]  # lower case; the rule runs only on text holding one of them
    allowlists: tuple[Allowlist, ...]


@dataclass(frozen=True, slots=True)
class RuleSet:
    rules: tuple[Rule, ...]
    allowlists: tuple[Allowlist, ...]  # the global ones: every rule's findings go through them
    # Every keyword of every rule (lower case), as one set of literals: one pass over a text says which are there,
    # and only the rules with a keyword there (or with none) run.
    keywords: Any
    keyword_list: tuple[bytes, ...]
    priority: dict[str, int]  # rule id -> rank where findings overlap: the generic rules last



def _literals(words: list[str]) -> Any | None:
    return compile_pattern("|".join(re2.escape(w) for w in words)) if words else None


def _allowlist(entry: dict[str, Any], where: str) -> Allowlist:
    regexes = [str(r) for r in entry.get("regexes", [])]
    target = str(entry.get("regexTarget", "secret"))
    if target not in ("secret", "match", "line"):
        raise ValueError(f"{where}: regexTarget must be secret, match or line (got {target!r})")
    return Allowlist(target=target,
                     regexes=compile_pattern("|".join(f"(?:{r})" for r in regexes)) if regexes else None,
                     stopwords=_literals([str(w).lower() for w in entry.get("stopwords", [])]),
                     needs_all=str(entry.get("condition", "OR")).upper() == "AND",
                     has_paths=bool(entry.get("paths")))


def _rule(entry: dict[str, Any], where: str) -> Rule | None:
    rule_id = entry.get("id")
    if not isinstance(rule_id, str) or not rule_id:
        raise ValueError(f"{where}: a rule needs an `id`")
    if "regex" not in entry or "path" in entry:
        return None  # a rule about file names (or only for some files): a tool result has neither
    try:
        regex = compile_pattern(str(entry["regex"]))
    except ValueError as exc:
        raise ValueError(f"{where}: rule {rule_id}: {exc}") from exc
    return Rule(id=rule_id, regex=regex, pattern=str(entry["regex"]), secret_group=int(entry.get("secretGroup", 0)),
                entropy=float(entry.get("entropy", 0.0)),
                keywords=tuple(str(k).lower().encode() for k in entry.get("keywords", [])),
                allowlists=tuple(_allowlist(a, f"{where}: rule {rule_id}") for a in entry.get("allowlists", [])))


def _read(name: str) -> dict[str, Any]:
    return tomllib.loads(resources.files(__package__).joinpath(name).read_text("utf-8"))


@cache
def load_rules(files: tuple[str, ...] = RULE_FILES) -> RuleSet:
    """The rules of `files` (beside this module), compiled; ValueError names the file and rule that fail."""
    rules: list[Rule] = []
    allowlists: list[Allowlist] = []
    seen: set[str] = set()
    for name in files:
        data = _read(name)
        if "allowlist" in data:
            allowlists.append(_allowlist(data["allowlist"], f"{name}: [allowlist]"))
        for entry in data.get("allowlists", []):
            allowlists.append(_allowlist(entry, f"{name}: [[allowlists]]"))
        for entry in data.get("rules", []):
            rule = _rule(entry, name)
            if rule is None:
                continue
            if rule.id in seen:
                raise ValueError(f"{name}: rule {rule.id} is defined twice")
            seen.add(rule.id)
            rules.append(rule)
    words = sorted({keyword for rule in rules for keyword in rule.keywords})
    options = re2.Options()
    options.max_mem = _MAX_MEM
    found = re2.Set.SearchSet(options)
    for word in words:
        found.Add(re2.escape(word))
    found.Compile()
    ranked = sorted(rules, key=lambda rule: rule.id in GENERIC_RULES)
    return RuleSet(rules=tuple(rules), allowlists=tuple(allowlists), keywords=found, keyword_list=tuple(words),
                   priority={rule.id: rank for rank, rule in enumerate(ranked)})
