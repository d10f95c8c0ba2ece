"""Glob filters of read and search tools (a grep's `include`, a glob tool's `pattern`): which files they
select, and whether they name a protected read.

A filter and the protected patterns become token sequences over a relative path (`*` and `?` within a
segment, `**` across segments, `[...]` classes, literals), compared on their product automaton. Read as a
tool would read it, or wider, never narrower: braces are expanded (nested; a range `{1..9}` becomes `**`;
more than `_MAX_ALTERNATIVES` alternatives or `_MAX_GLOBSTARS` `**/` are not read, and refused), extended
globs are read as braces (`@(a|b)` as `{a,b}`, `!(x)` as `*`), ripgrep's `!GLOB` (exclude) and an empty
filter select every file, `**/` also matches no directory, a filter may sit at any depth below the searched
directory (ripgrep and gitignore match a slashless glob against every file name), and both sides are folded
(NFKC, case, trailing dots and spaces per segment) as protected paths are.

`selects` asks whether a filter *names* a protected read: some path matches both with at least half of
the pattern's literal characters matched by the filter's own (`*.pem`, `{.env,x}`, `.e?v`, `id_rs*`).
A bare intersection would refuse `*.py` (it can match `.env.py`); `*` and `**/*` name nothing and select
no more than the unfiltered search, which the listing of the files on disk judges (proxy/policy/paths/on_disk.py).
`matches` asks whether a filter selects one concrete file.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["GlobSet", "Patterns", "compile_glob", "literal_form", "matches", "pattern_tokens", "selects"]

_MAX_ALTERNATIVES = 32
_MAX_GLOBSTARS = 4
_MAX_LENGTH = 1000
_RANGE = re.compile(r"^(?:-?[0-9]+|.)\.\.(?:-?[0-9]+|.)(?:\.\.-?[0-9]+)?$")


# A token: a literal character, one character of a set, or a loop (`*` within a segment, `**` across).
@dataclass(frozen=True, slots=True)
class _Chars:
    chars: frozenset[str] = frozenset()
    negated: bool = True  # the empty negated set: any character but `/`
    slash: bool = False  # `/` included (the loop of `**`)

    def has(self, char: str) -> bool:
        if char == "/":
            return self.slash
        return (char in self.chars) != self.negated


ANY = _Chars()
_ALL = _Chars(slash=True)


@dataclass(frozen=True, slots=True)
class _Loop:
    chars: _Chars


STAR = _Loop(ANY)
GLOBSTAR = _Loop(_ALL)
Token = str | _Chars | _Loop
Tokens = tuple[Token, ...]


def _meets(a: str | _Chars, b: str | _Chars) -> bool:
    """Whether one character can be both."""
    if isinstance(a, str):
        return a == b if isinstance(b, str) else b.has(a)
    if isinstance(b, str):
        return a.has(b)
    if not a.negated and not b.negated:
        return bool(a.chars & b.chars) or (a.slash and b.slash)
    if a.negated and b.negated:
        return True  # two complements of finite sets always share a character
    positive, negative = (a, b) if not a.negated else (b, a)
    return bool(positive.chars - negative.chars) or (positive.slash and negative.slash)


def intersects(left: Tokens, rights: Sequence[Tokens]) -> bool:
    """Whether some string is matched by `left` and by any of `rights` (depth-first over the product)."""
    stack = [(0, k, 0) for k in range(len(rights))]
    seen = set(stack)
    while stack:
        i, k, j = stack.pop()
        right = rights[k]
        a = left[i] if i < len(left) else None
        b = right[j] if j < len(right) else None
        if a is None and b is None:
            return True
        following = []
        if isinstance(a, _Loop):
            following.append((i + 1, k, j))
        if isinstance(b, _Loop):
            following.append((i, k, j + 1))
        if a is not None and b is not None:
            ca, na = (a.chars, i) if isinstance(a, _Loop) else (a, i + 1)
            cb, nb = (b.chars, j) if isinstance(b, _Loop) else (b, j + 1)
            if _meets(ca, cb):
                following.append((na, k, nb))
        for state in following:
            if state not in seen:
                seen.add(state)
                stack.append(state)
    return False


def _specific(token: str | _Chars) -> bool:
    """A glob character that names something: a literal, or a set that is not every character."""
    return isinstance(token, str) or not token.negated


def coverage(left: Tokens, right: Tokens) -> int:
    """The most literal characters of `right` (a protected pattern; `/` not counted) that `left` (a filter)
    matches with characters of its own that name something, over the strings both match; -1 when they
    share none. `*.pem` covers all of `*.pem`; `*.py` covers one of `.env.*` (its `.`, in `.env.py`)."""
    memo: dict[tuple[int, int], int] = {}

    def best(i: int, j: int) -> int:
        key = (i, j)
        if key in memo:
            return memo[key]
        memo[key] = -1  # a state on the current path (only a both-loops step returns to it)
        a = left[i] if i < len(left) else None
        b = right[j] if j < len(right) else None
        found = 0 if a is None and b is None else -1
        if isinstance(a, _Loop):
            found = max(found, best(i + 1, j))
        if isinstance(b, _Loop):
            found = max(found, best(i, j + 1))
        if a is not None and b is not None:
            ca, na = (a.chars, i) if isinstance(a, _Loop) else (a, i + 1)
            cb, nb = (b.chars, j) if isinstance(b, _Loop) else (b, j + 1)
            if (na, nb) != (i, j) and _meets(ca, cb):
                rest = best(na, nb)
                if rest >= 0:
                    found = max(found, rest + (isinstance(b, str) and b != "/" and _specific(ca)))
        memo[key] = found
        return found

    return best(0, 0)


def _letters(tokens: Iterable[Token]) -> Counter[str]:
    """Each character the tokens name, with how often (a set's members each once; `/` not counted)."""
    found: Counter[str] = Counter()
    for token in tokens:
        if isinstance(token, str):
            if token != "/":
                found[token] += 1
        elif isinstance(token, _Chars) and not token.negated:
            found.update(token.chars)
    return found


@dataclass(frozen=True, slots=True)
class _Pattern:
    tokens: Tokens
    letters: tuple[tuple[str, int], ...]
    need: int  # of its literal characters a filter must name: half, at least one (none: a bare `*`)
    last: Tokens  # its last segment: a filter whose last segment cannot match it names other files
    plain_last: str | None  # that segment when it is a plain name (most are)

    @classmethod
    def of(cls, tokens: Tokens) -> _Pattern:
        letters = _letters(tokens)
        total = sum(letters.values())
        last = _last_segment(tokens)
        plain = "".join(t for t in last if isinstance(t, str))
        return cls(tokens, tuple(letters.items()), max(1, (total + 1) // 2) if total else 0, last,
                   plain if len(plain) == len(last) else None)


def _targets(left: Tokens, letters: Counter[str], right: _Pattern) -> bool:
    """Whether a filter names what a protected pattern names: some string matches both, with at least half
    of the pattern's literal characters (one at least) matched by the filter's own. `*.pem`, `.e?v`,
    `*.en[v]` and `id_rs*` target secrets; `*.py` (which could match `.env.py`) and `*` do not: a filter
    that names nothing in particular selects no more than the unfiltered search."""
    if right.need and sum(min(letters.get(char, 0), count) for char, count in right.letters) < right.need:
        return False  # too few of the pattern's characters anywhere in the filter
    return coverage(left, right.tokens) >= right.need


def _fold(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold()


# -- a filter glob, parsed ------------------------------------------------------------------------------

_Alt = tuple[tuple["_Item", ...], ...]
_Item = Token | _Alt


_INNERMOST_EXTGLOB = re.compile(r"([?*+@!])\(([^()]*)\)")


def _extglob_as_braces(match: re.Match[str]) -> str:
    """An extended glob as braces that match at least as much: `@(a|b)` one of, `?(a|b)` maybe one of,
    `+(a|b)` / `*(a|b)` one of (or none) followed by anything, `!(x)` anything."""
    kind, inner = match.group(1), match.group(2)
    choices = inner.split("|")
    if kind == "!":
        return "*"
    if kind in "?*":
        choices = ["", *choices]
    return "{" + ",".join(choices) + "}" + ("*" if kind in "+*" else "")


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def sequence(self, inside: bool) -> list[_Item]:
        items: list[_Item] = []
        text = self.text
        while self.pos < len(text):
            char = text[self.pos]
            if inside and char in ",}":
                break
            nxt = text[self.pos + 1] if self.pos + 1 < len(text) else ""
            if char == "\\" and nxt:
                items.append(nxt)
                self.pos += 2
            elif char == "*":
                end = self.pos
                while end < len(text) and text[end] == "*":
                    end += 1
                items.append(GLOBSTAR if end - self.pos > 1 else STAR)
                self.pos = end
            elif char == "?":
                items.append(ANY)
                self.pos += 1
            elif char == "[" and (chars := self._class()) is not None:
                items.append(chars)
            elif char == "{" and (alternatives := self._braces()) is not None:
                items.append(alternatives)
            else:
                items.append(char)
                self.pos += 1
        return items

    def _class(self) -> _Chars | None:
        text, start = self.text, self.pos + 1
        negated = start < len(text) and text[start] in "!^"
        i = start + 1 if negated else start
        if i < len(text) and text[i] == "]":
            i += 1  # a leading `]` is a member
        close = text.find("]", i)
        if close < 0:
            return None
        body = text[start + 1 if negated else start:close]
        chars: set[str] = set()
        k = 0
        while k < len(body):
            if k + 2 < len(body) and body[k + 1] == "-":
                low, high = ord(body[k]), ord(body[k + 2])
                if high - low > 512:
                    chars = set()
                    negated = True  # a wide range: any character (over, never under)
                    break
                chars.update(chr(c) for c in range(low, high + 1))
                k += 3
            else:
                chars.add(body[k])
                k += 1
        self.pos = close + 1
        if negated:
            return ANY  # folding a complement is not exact: any character (over, never under)
        return _Chars(frozenset(_fold(c) for c in chars if len(_fold(c)) == 1) | frozenset(chars), negated=False)

    def _braces(self) -> _Alt | None:
        start = self.pos
        self.pos += 1
        alternatives: list[tuple[_Item, ...]] = []
        while True:
            alternatives.append(tuple(self.sequence(inside=True)))
            if self.pos >= len(self.text):
                self.pos = start + 1  # unclosed: a literal `{`
                return None
            if self.text[self.pos] == "}":
                self.pos += 1
                break
            self.pos += 1  # `,`
        body = self.text[start + 1:self.pos - 1]
        if len(alternatives) == 1 and _RANGE.match(body):
            return ((GLOBSTAR,),)  # `{1..9}`, `{a..z}`: some run of characters
        return tuple(alternatives)


def _expand(items: Sequence[_Item], limit: int) -> list[list[Token]] | None:
    """Every alternative of a parsed glob; None when there are more than `limit`."""
    out: list[list[Token]] = [[]]
    for item in items:
        if isinstance(item, tuple):
            choices: list[list[Token]] = []
            for alternative in item:
                inner = _expand(alternative, limit)
                if inner is None:
                    return None
                choices += inner
            out = [done + choice for done in out for choice in choices]
            if len(out) > limit:
                return None
        else:
            for done in out:
                done.append(item)
    return out


def _tidy(tokens: list[Token]) -> Tokens:
    """Fold literals; drop empty and `.` segments, and trailing literal dots and spaces per segment (as
    protected paths are compared)."""
    segments: list[list[Token]] = [[]]
    for token in tokens:
        for part in (_fold(token) if isinstance(token, str) else (token,)):
            if part == "/":
                segments.append([])
            else:
                segments[-1].append(part)
    out: list[Token] = []
    for segment in segments:
        if segment not in ([], ["."], [".", "."]):
            while segment and segment[-1] in (".", " "):
                segment.pop()
        if segment in ([], ["."]):
            continue
        if out:
            out.append("/")
        out += segment
    return tuple(out)


@dataclass(frozen=True, slots=True)
class GlobSet:
    """A filter glob as the paths it could match: each alternative, also below any directory."""

    alternatives: tuple[Tokens, ...]
    spellings: tuple[str, ...]  # each alternative with wildcards as `x`: what a path check reads
    # False when the glob could not be read whole (more alternatives than are expanded, over-long): the
    # caller refuses it rather than judge a part.
    complete: bool = True


def _rewrite_extglobs(text: str) -> str:
    for _ in range(16):  # innermost first; deeper nesting than this is left as written
        rewritten = _INNERMOST_EXTGLOB.sub(_extglob_as_braces, text)
        if rewritten == text:
            break
        text = rewritten
    return text


def compile_glob(glob: str) -> GlobSet:
    """A filter as the paths it could select. An empty filter, or ripgrep's `!GLOB` (exclude), selects
    every file: as `**`."""
    text = glob.strip()
    if not text or text.startswith("!"):
        text = "**"
    if len(text) > _MAX_LENGTH:
        return GlobSet(((GLOBSTAR,),), (), complete=False)
    items = _Parser(_rewrite_extglobs(text)).sequence(inside=False)
    expanded = _expand(items, _MAX_ALTERNATIVES)
    if expanded is None:
        return GlobSet(((GLOBSTAR,),), (), complete=False)
    alternatives: list[Tokens] = []
    for tokens in expanded:
        forms = _no_directories(_tidy(tokens))
        if forms is None:
            return GlobSet(((GLOBSTAR,),), (), complete=False)
        for tidy in forms:
            alternatives.append(tidy)
            if tidy[:2] != (GLOBSTAR, "/") and tidy[:1] != (GLOBSTAR,):
                alternatives.append((GLOBSTAR, "/", *tidy))  # below the searched directory, at any depth
    spellings = tuple(literal_form(tokens) for tokens in expanded)
    return GlobSet(tuple(alternatives), spellings)


def matches(glob: GlobSet, folded_path: str) -> bool:
    """Whether a filter selects one file (its folded path below the searched directory)."""
    path = tuple(folded_path)
    return any(intersects(alternative, [path]) for alternative in glob.alternatives)


def _no_directories(tokens: Tokens) -> list[Tokens] | None:
    """The glob, and with each `**/` also matching no directory at all (`**/.env` matches `.env`, `a/**/b`
    matches `a/b`): every choice of them; None for more than `_MAX_GLOBSTARS`."""
    places = [i for i in range(len(tokens) - 1) if tokens[i] is GLOBSTAR and tokens[i + 1] == "/"
              and (i == 0 or tokens[i - 1] == "/")]
    if len(places) > _MAX_GLOBSTARS:
        return None
    out = [tokens]
    for place in reversed(places):
        out += [t[:place] + t[place + 2:] for t in out]
    return out


def literal_form(tokens: Iterable[Token]) -> str:
    """A glob alternative spelled with each wildcard as `x`: `../*` reads as the path `../x`."""
    return "".join(t if isinstance(t, str) else "x" for t in tokens)


# -- the protected patterns -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Patterns:
    """Protected patterns as token sequences: file names of one segment (`*.pem`, compared with a filter's
    last segment only: a file pattern names the file, not a directory above it), files of several segments
    (`.aws/credentials`, at any depth unless anchored), and the directories written as such (`.azure/`),
    which a filter selects by naming the directory."""

    names: tuple[_Pattern, ...]
    files: tuple[_Pattern, ...]
    directories: tuple[_Pattern, ...]


def pattern_tokens(folded: Iterable[tuple[str, bool]]) -> Patterns:
    """Folded protected patterns (gitignore-like: `*` and `?` within a segment, a leading `/` anchors one),
    each with whether it was written as a directory."""
    names: list[_Pattern] = []
    files: list[_Pattern] = []
    directories: list[_Pattern] = []
    for pattern, directory in folded:
        body = tuple(STAR if c == "*" else ANY if c == "?" else c for c in pattern.strip("/"))
        if not directory and "/" not in body:
            names.append(_Pattern.of(body))
            continue
        forms = [body] if pattern.startswith("/") else [body, (GLOBSTAR, "/", *body)]
        (directories if directory else files).extend(map(_Pattern.of, forms))
    return Patterns(tuple(names), tuple(files), tuple(directories))


def _last_segment(tokens: Tokens) -> Tokens:
    for index in range(len(tokens) - 1, -1, -1):
        if tokens[index] == "/":
            return tokens[index + 1:]
    return tokens


def _named_prefixes(tokens: Tokens) -> list[Tokens]:
    """The leading parts of a glob that end with a segment naming something (not only wildcards): a filter
    selects a protected directory's files by naming the directory (`.azure/*`, `**/gcloud/**`)."""
    out = []
    start = 0
    for index in range(len(tokens) + 1):
        if index == len(tokens) or tokens[index] == "/":
            if any(not isinstance(t, _Loop) for t in tokens[start:index]):
                out.append(tokens[:index])
            start = index + 1
    return out


def _hidden_files(segment: Tokens) -> bool:
    """`.*`, `.??*`, `.[!.]*`: a filter that names every hidden file, where most secrets live (`.env`,
    `.netrc`, `.pgpass`), by its leading dot alone."""
    return len(segment) > 1 and segment[0] == "." and all(
        isinstance(t, _Loop) or (isinstance(t, _Chars) and t.negated) for t in segment[1:])


def selects(globs: GlobSet, patterns: Patterns) -> bool:
    """Whether the filter targets a file a protected pattern names, or names a protected directory."""
    for last in {_last_segment(alternative) for alternative in globs.alternatives}:
        letters = _letters(last)
        if any(_targets(last, letters, pattern) for pattern in patterns.names):
            return True
        if _hidden_files(last) and any(p.tokens[:1] == (".",) and intersects(last, [p.tokens])
                                       for p in patterns.names):
            return True
    for alternative in globs.alternatives:
        if _targets_any(alternative, patterns.files):
            return True
        if patterns.directories and any(_targets_any(prefix, patterns.directories)
                                        for prefix in _named_prefixes(alternative)):
            return True
    return False


def _regex(tokens: Tokens) -> re.Pattern[str]:
    """A filter's tokens as a regex over one string (for matching plain names quickly)."""
    parts = []
    for token in tokens:
        if isinstance(token, str):
            parts.append(re.escape(token))
        elif isinstance(token, _Loop):
            parts.append(".*" if token.chars.slash else "[^/]*")
        elif token.negated:
            parts.append("[^/]")
        else:
            parts.append("[" + "".join(re.escape(c) for c in sorted(token.chars)) + "]")
    return re.compile("".join(parts), re.DOTALL)


def _targets_any(tokens: Tokens, candidates: Sequence[_Pattern]) -> bool:
    """`_targets` over several-segment patterns, each first checked by its last segment alone (skipped
    where the filter's last segment holds a `**`, which may span segments)."""
    last = _last_segment(tokens)
    spans = GLOBSTAR in last
    regex = None if spans else _regex(last)
    letters: Counter[str] | None = None
    for pattern in candidates:
        if regex is not None:
            if pattern.plain_last is not None:  # one regex match
                if regex.fullmatch(pattern.plain_last) is None:
                    continue
            elif not intersects(last, [pattern.last]):
                continue
        if letters is None:
            letters = _letters(tokens)
        if _targets(tokens, letters, pattern):
            return True
    return False
