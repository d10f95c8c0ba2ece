"""The allowed core of a rejected command: what is left once harmless wrapping is taken away.

Models that break the rule mostly wrap an allowed call in something the policy refuses: an output filter
(`| head -5`, `| tail -3`, `| grep x`), a redirect (`2>&1`, `> out.txt`), a wrapper (`timeout 30`, `time`) or
a directory change (`cd DIR &&`). `find_core` peels exactly those layers off and says which it peeled, so
that the suggestion (`suggest.py`) can offer the core and an opt-in repair (`repair.py`) can deliver it.

This reading never decides anything: whatever it returns is judged again by the decision lexer, and only an
allowed result is ever offered or delivered. It gives up (None) on anything it does not model - `;`, `||`,
a single `&`, `<`, substitutions, subshells, variables - because there the "core" is not what would run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["FILTER_PROGRAMS", "Core", "Token", "find_core", "split_tokens"]

# Programs that only shape output the script already printed: dropping them loses nothing the model needs.
FILTER_PROGRAMS = frozenset({
    "head", "tail", "grep", "egrep", "fgrep", "rg", "sort", "uniq", "wc", "cut", "less", "more", "cat", "jq",
    "tee", "column", "nl", "fold", "tr", "awk", "sed",
})  # fmt: skip
# Wrappers that run their command unchanged apart from time, priority or buffering: name -> how many
# leading option words (and their values) they take is read below.
_WRAPPERS = frozenset({"timeout", "time", "nice", "exec", "command", "stdbuf"})
_MAX_TEXT = 4000


@dataclass(frozen=True, slots=True)
class Token:
    kind: str  # "word" | "pipe" | "and" | "redirect"
    text: str  # the raw text (a word with its quotes)
    value: str = ""  # a word without its quotes


@dataclass
class Core:
    """The core command, and the layers peeled off it, by the repair names of DESIGN.md plus `redirect`
    (any other redirect) and `wrapper` (a wrapper other than timeout)."""

    words: list[Token]
    removed: set[str] = field(default_factory=set)
    cd_dir: str | None = None  # the directory of a leading `cd DIR &&`

    @property
    def command(self) -> str:
        return " ".join(w.text for w in self.words)


def _read_word(text: str, i: int) -> tuple[str, str, int] | None:
    """One shell word from i: (raw, value, end), or None when it holds something not modelled."""
    start, value = i, ""
    n = len(text)
    while i < n and text[i] not in " |&;<>()\n\t":
        ch = text[i]
        if ch == "'":
            end = text.find("'", i + 1)
            if end < 0:
                return None
            value += text[i + 1 : end]
            i = end + 1
        elif ch == '"':
            end = text.find('"', i + 1)
            if end < 0:
                return None
            inner = text[i + 1 : end]
            if any(c in inner for c in "$`\\"):
                return None
            value += inner
            i = end + 1
        elif ch in "$`\\{}*?[]~#!":
            return None
        else:
            value += ch
            i += 1
    return text[start:i], value, i


def split_tokens(text: str) -> list[Token] | None:
    """Words, `|`, `&&` and redirects of a command; None on anything else (`;`, `||`, `&`, `<`, ...)."""
    if not isinstance(text, str) or len(text) > _MAX_TEXT:
        return None
    tokens: list[Token] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == " ":
            i += 1
        elif text.startswith("&&", i):
            tokens.append(Token("and", "&&"))
            i += 2
        elif ch == "|" and not text.startswith("||", i) and not text.startswith("|&", i):
            tokens.append(Token("pipe", "|"))
            i += 1
        elif ch == ">" or (ch in "12" and text.startswith(">", i + 1)):
            j = i + (1 if ch == ">" else 2)
            if text.startswith(">", j):
                j += 1  # >>
            if text.startswith("&", j):  # 2>&1, >&2: a descriptor, no file
                end = j + 1
                while end < n and text[end].isdigit():
                    end += 1
                if end == j + 1:
                    return None
                tokens.append(Token("redirect", text[i:end]))
                i = end
                continue
            while j < n and text[j] == " ":
                j += 1
            word = _read_word(text, j)
            if word is None or not word[0]:
                return None
            tokens.append(Token("redirect", text[i:word[2]], word[1]))
            i = word[2]
        else:
            word = _read_word(text, i)
            if word is None or not word[0]:
                return None
            tokens.append(Token("word", word[0], word[1]))
            i = word[2]
    return tokens


def _base(word: Token) -> str:
    return word.value.rsplit("/", 1)[-1]


def _strip_wrappers(words: list[Token], removed: set[str]) -> list[Token]:
    """`timeout 30 CMD`, `time CMD`, `nice -n 5 CMD`, ... -> CMD."""
    while words and _base(words[0]) in _WRAPPERS and words[0].text == words[0].value:
        name = _base(words[0])
        k = 1
        while k < len(words) and words[k].value.startswith("-"):
            takes_value = name in ("nice", "timeout") and words[k].value in ("-n", "-s", "-k", "--signal",
                                                                              "--kill-after")
            k += 2 if takes_value else 1
        if name == "timeout":
            if k >= len(words) or not words[k].value[:1].isdigit():
                return words
            k += 1  # the duration
        removed.add("timeout" if name == "timeout" else "wrapper")
        words = words[k:]
    return words


def find_core(command: str) -> Core | None:
    """The command with its output filters, redirects, wrappers and leading `cd DIR &&` taken away.

    None when the command holds anything this reading does not model, or nothing was peeled off (then the
    command itself is the core and there is nothing to offer).
    """
    tokens = split_tokens(command)
    if not tokens:
        return None
    removed: set[str] = set()
    cd_dir: str | None = None
    if "and" in (t.kind for t in tokens):
        k = next(i for i, t in enumerate(tokens) if t.kind == "and")
        head = tokens[:k]
        if (len(head) != 2 or head[0].kind != "word" or head[0].text not in ("cd", "pushd")
                or head[1].kind != "word"):
            return None
        cd_dir = head[1].value
        removed.add("cd_workdir")
        tokens = tokens[k + 1 :]
        if any(t.kind == "and" for t in tokens):
            return None
    stages: list[list[Token]] = [[]]
    for token in tokens:
        if token.kind == "pipe":
            stages.append([])
        else:
            stages[-1].append(token)
    for stage in stages[1:]:
        words = [t for t in stage if t.kind == "word"]
        if not words or _base(words[0]) not in FILTER_PROGRAMS or words[0].text != words[0].value:
            return None
        removed.add("output_filters")
    first = stages[0]
    for token in first:
        if token.kind == "redirect":
            removed.add("stderr_redirect" if token.text.replace(" ", "") == "2>&1" else "redirect")
    if any(t.kind == "redirect" for stage in stages[1:] for t in stage):
        removed.add("redirect")
    words = _strip_wrappers([t for t in first if t.kind == "word"], removed)
    if not words or not removed:
        return None
    return Core(words=words, removed=removed, cd_dir=cd_dir)
