"""The decision: a default-deny lexer for the one tiny language that bash, dash and zsh all read alike.

The language (DESIGN.md "How a bash command is judged"):
- words separated by ASCII spaces (a run of them is one separator; leading/trailing spaces are ignored);
- a word is a run of segments, each an unquoted character of `SAFE_UNQUOTED`, a single-quoted text of
  printable characters but `'`, or a double-quoted text of printable characters but `"`, `$`, backtick,
  backslash and `!` (none of which then means anything inside double quotes, even to interactive shells);
- no word may begin with an unquoted `=` once its empty quotes are removed (zsh's `=cmd` expansion, which
  zsh also performs on `""=ls`), and no unquoted `=` may follow a `=`, or a `:` once the word holds a `=`
  (with the MAGIC_EQUAL_SUBST option, zsh expands `x==ls` and `x=a:=ls` too);
- a single-quoted text never directly follows another (`'a''b'`: zsh's RC_QUOTES reads `''` as a quote);
- non-ASCII only inside quotes and only visible text; no control character, tab or newline anywhere;
- at most `max_length` characters.

Every character outside this language is refused, whatever it would mean: no parser library takes part,
because each one misreads some input a real shell runs differently. The regex uses possessive
quantifiers so a failing match never backtracks, keeping the time linear in the (capped) length.
"""

from __future__ import annotations

import re

from .text import visible_non_ascii

__all__ = ["WORD_PATTERN", "equals_expands", "lex", "split_words", "unquote_word", "unquote_words"]

_SAFE_CLASS = r"A-Za-z0-9_./:=,+@%\-"
# A single-quoted text may not touch the next one: with zsh's RC_QUOTES option `'a''b'` is `a'b`.
_SQ = r"'[^'\x00-\x1f\x7f]*+'(?!')"
_DQ = r'"[^"$`\\!\x00-\x1f\x7f]*+"'
# One word of the language. Non-ASCII characters pass the quoted classes here and are judged afterwards
# by `visible_non_ascii`, which is cheaper than spelling Unicode categories into the regex.
WORD_PATTERN = rf"(?:[{_SAFE_CLASS}]++|{_SQ}|{_DQ})++"

_LINE_RE = re.compile(rf" *+((?:{WORD_PATTERN}(?: ++|\Z))*+)\Z")
_WORD_RE = re.compile(WORD_PATTERN)
_SEGMENT_RE = re.compile(rf"([{_SAFE_CLASS}]++)|'([^']*+)'|\"([^\"]*+)\"")


def equals_expands(before: str) -> bool:
    """Whether zsh may expand `=cmd` at an unquoted `=` that follows the text `before` of its word."""
    if not before:
        return True
    last = before[-1]
    return last == "=" or (last == ":" and "=" in before)


def _plain_equals_ok(before: str, plain: str) -> bool:
    start = 0
    while (k := plain.find("=", start)) >= 0:
        if equals_expands(before + plain[:k]):
            return False
        start = k + 1
    return True


def unquote_word(word: str) -> str | None:
    """Remove the quotes of one word of the language; None if zsh could expand one of its `=`."""
    if "'" not in word and '"' not in word:
        return word if "=" not in word or _plain_equals_ok("", word) else None
    value = ""
    for m in _SEGMENT_RE.finditer(word):
        plain = m.group(1)
        if plain is not None:
            if "=" in plain and not _plain_equals_ok(value, plain):
                return None
            value += plain
        else:
            value += m.group(2) if m.group(2) is not None else m.group(3)
    return value


def split_words(text: str) -> list[str]:
    """The raw words of a text already known to be in the language (quotes kept)."""
    return _WORD_RE.findall(text)


def lex(command: str, *, max_length: int = 2000) -> list[str] | None:
    """The argv a command of the language gives in bash, dash and zsh; None when it is outside it."""
    if not isinstance(command, str) or len(command) > max_length:
        return None
    if not command.isascii() and not visible_non_ascii(command):
        return None
    if _LINE_RE.match(command) is None:
        return None
    return unquote_words(_WORD_RE.findall(command))


def unquote_words(words: list[str]) -> list[str] | None:
    """Quote removal for a list of raw words; None if any would start with an unquoted `=`."""
    argv: list[str] = []
    for word in words:
        value = unquote_word(word)
        if value is None:
            return None
        argv.append(value)
    return argv
