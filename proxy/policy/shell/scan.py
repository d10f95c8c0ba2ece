"""The explanation's own reading of a rejected command: a bash-like tokenizer that names what it meets.

It follows bash's quoting and operator rules closely enough to say *why* a command is outside the
language (a pipe, a substitution inside double quotes, an ANSI-C string...), and it splits the command into
simple commands so the explainer can name programs, wrappers and scripts. It never decides anything: the
decision lexer already has. Tree-sitter-bash adds its reading on top (see `explain.py`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from .lexer import equals_expands
from .text import SAFE_UNQUOTED

__all__ = ["Scan", "Word", "scan"]

# Unquoted characters that simply extend a word (the language's alphabet minus `=`, checked apart).
_PLAIN_RUN = re.compile(r"[A-Za-z0-9_./:,+@%-]+")
_NAME_RUN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\[[^\]]*\])?\+?=")
_SPECIAL_PARAMS = frozenset("@*#?$!-0123456789")
_GLOB = frozenset("*?[]")
# Deep nesting only comes from hostile input; past this the scan stops and calls it a parse error.
_MAX_DEPTH = 40


@dataclass(kw_only=True, slots=True)
class Word:
    raw: str = ""
    value: str = ""
    quoted: bool = False
    escaped: bool = False
    dynamic: bool = False  # holds an expansion or substitution: its value is not known before running
    sq_end: int = -1  # index just after its last single-quoted text

    @property
    def plain(self) -> bool:
        return not (self.quoted or self.escaped or self.dynamic)


@dataclass(slots=True)
class Scan:
    # Insertion-ordered sets of reason codes.
    findings: dict[str, None] = field(default_factory=dict)
    # Findings that only count when nothing else explains the rejection.
    weak: dict[str, None] = field(default_factory=dict)
    # Simple commands outside any substitution, in order; words as the shell would split them.
    commands: list[list[Word]] = field(default_factory=list)
    aborted: bool = False

    def add(self, *codes: str) -> None:
        for code in codes:
            self.findings[code] = None


class _Abort(Exception):
    """The text ends inside a construct (unterminated quote, too deep): stop scanning."""


class _Scanner:
    def __init__(self, text: str) -> None:
        self.s = text
        self.n = len(text)
        self.out = Scan()
        self.depth = 0  # nesting of substitutions: commands inside them are not the command that runs
        self.level = 0  # nesting of any kind, to bound recursion
        self.drop_next = False  # the next word is a redirection target, not an argument
        self.heredocs: list[tuple[str, bool, bool]] = []  # (delimiter, quoted, strip tabs) awaiting a newline

    # -- words and commands -------------------------------------------------------------------------

    def _finish_word(self, word: Word, words: list[Word]) -> Word:
        if word.raw:
            if self.drop_next:
                self.drop_next = False
            else:
                words.append(word)
            return Word()
        return word

    def _finish_command(self, words: list[Word], nested: bool) -> list[Word]:
        if words:
            if not nested:
                self.out.commands.append(words)
            return []
        return words

    def commands(self, i: int, closer: str | None, nested: bool) -> int:
        """Scan commands from i until `closer` (unquoted) or the end; return the index after the closer."""
        if self.level > _MAX_DEPTH:
            self.out.add("parse_error")
            raise _Abort
        self.level += 1
        try:
            return self._commands(i, closer, nested)
        finally:
            self.level -= 1

    def _commands(self, i: int, closer: str | None, nested: bool) -> int:
        s, n, out = self.s, self.n, self.out
        words: list[Word] = []
        word = Word()
        while i < n:
            c = s[i]
            if c == closer:
                self._finish_word(word, words)
                self._finish_command(words, nested)
                return i + 1
            if c in SAFE_UNQUOTED and c != "=":
                m = _PLAIN_RUN.match(s, i)
                assert m is not None
                word.raw += m.group()
                word.value += m.group()
                i = m.end()
                continue
            if c == " " or c == "\t":
                word = self._finish_word(word, words)
                i += 1
            elif c == "\n" or c == ";":
                word = self._finish_word(word, words)
                words = self._finish_command(words, nested)
                out.add("chain")
                i += 1
                if c == "\n" and self.heredocs:
                    i = self._heredoc_bodies(i)
            elif c == "=":
                if not word.dynamic and equals_expands(word.value):
                    out.add("unsafe_text")  # zsh's `=cmd` (even `""=ls`; `x==ls` with MAGIC_EQUAL_SUBST)
                word.raw += c
                word.value += c
                i += 1
            elif c == "'":
                j = s.find("'", i + 1)
                if j < 0:
                    out.add("parse_error")
                    raise _Abort
                self._check_quoted_text(s[i + 1 : j])
                if word.sq_end == i:
                    out.add("obfuscation")  # 'a''b': zsh's RC_QUOTES reads '' as a quote character
                word.sq_end = j + 1
                word.raw += s[i : j + 1]
                word.value += s[i + 1 : j]
                word.quoted = True
                i = j + 1
            elif c == '"':
                i = self._double(i + 1, word)
            elif c == "\\":
                if i + 1 >= n:
                    out.add("obfuscation")
                    word.raw += c
                    i += 1
                elif s[i + 1] == "\n":
                    out.weak["obfuscation"] = None  # line continuation: joins lines, hides structure
                    i += 2
                else:
                    i = self._escaped(i, word)
            elif c == "$" or c == "`":
                i = self._substitution(i, word)
            elif c == "|":
                word = self._finish_word(word, words)
                words = self._finish_command(words, nested)
                nxt = s[i + 1 : i + 2]
                if nxt == "|":
                    out.add("chain")
                    i += 2
                else:
                    out.add("pipe")
                    i += 2 if nxt == "&" else 1
            elif c == "&":
                nxt = s[i + 1 : i + 2]
                if nxt == ">":  # &> and &>> redirect both streams
                    out.add("redirect")
                    word = self._finish_word(word, words)
                    i += 3 if s[i + 2 : i + 3] == ">" else 2
                    continue
                word = self._finish_word(word, words)
                words = self._finish_command(words, nested)
                if nxt == "&":
                    out.add("chain")
                    i += 2
                else:
                    out.add("background")
                    i += 1
            elif c in "<>":
                if s[i + 1 : i + 2] == "(":
                    out.add("substitution", "chain")
                    word.raw += s[i : i + 2]
                    word.dynamic = True
                    i = self._nested(i + 2, ")")
                    continue
                out.add("redirect")
                # A word of digits glued to the operator is its file descriptor, not an argument.
                if word.raw.isdigit():
                    word = Word()
                word = self._finish_word(word, words)
                j = i + 1
                while j < n and s[j] in "<>&|" and j - i < 3:
                    j += 1
                op = s[i:j]
                if op == "<<":
                    j = self._heredoc_start(j)
                else:
                    self.drop_next = True
                i = j
            elif c == "(":
                if word.raw and (word.raw[-1] in "*?+@!" or any(g in word.raw for g in _GLOB)):
                    out.add("expansion")  # extglob @(..)/!(..) or a zsh glob qualifier *(..)
                    word.raw += c
                    word.dynamic = True
                    i = self._glob_group(i + 1)
                elif word.raw and _ASSIGNMENT.fullmatch(word.raw):
                    out.add("assignment", "expansion")  # array assignment a=(...)
                    word.raw += c
                    word.dynamic = True
                    i = self._nested(i + 1, ")")
                else:
                    out.add("subshell")  # (...) subshell, or name() of a function definition
                    word = self._finish_word(word, words)
                    words = self._finish_command(words, nested)
                    i = self.commands(i + 1, ")", nested)
            elif c == ")":
                out.add("parse_error")  # a `)` that closes nothing
                word.raw += c
                i += 1
            elif c == "{":
                nxt = s[i + 1 : i + 2]
                if not word.raw and not words and nxt in ("", " ", "\t", "\n"):
                    out.add("subshell")  # brace group { ...; } at the start of a command
                    i += 1
                else:
                    out.add("expansion")  # brace expansion {a,b} / {1..9}
                    word.raw += c
                    word.value += c
                    i += 1
            elif c == "}":
                if not word.raw and not words and s[i + 1 : i + 2] in ("", " ", "\t", "\n", ";", ")", "&", "|"):
                    i += 1  # end of a brace group, already reported
                else:
                    out.add("expansion")
                    word.raw += c
                    word.value += c
                    i += 1
            elif c == "#":
                if not word.raw:
                    out.add("comment")
                    j = s.find("\n", i)
                    i = n if j < 0 else j
                else:
                    out.add("comment")  # mid-word `#`: literal in bash, a glob operator in zsh
                    word.raw += c
                    word.value += c
                    i += 1
            elif c in "*?[]~!^":
                out.add("expansion")  # globs, tilde, history/negation, zsh's ^ glob
                word.raw += c
                word.value += c
                if c != "!":
                    word.dynamic = True
                i += 1
            else:
                # Non-ASCII outside quotes (look-alike letters) or a control character.
                out.add("unsafe_text")
                word.raw += c
                word.value += c
                i += 1
        if closer is not None:
            out.add("parse_error")  # unclosed ( $( ` <(
            raise _Abort
        self._finish_word(word, words)
        self._finish_command(words, nested)
        return i

    # -- pieces -------------------------------------------------------------------------------------

    def _nested(self, i: int, closer: str) -> int:
        self.depth += 1
        try:
            return self.commands(i, closer, nested=True)
        finally:
            self.depth -= 1

    def _heredoc_start(self, i: int) -> int:
        """Read a here-document's delimiter after `<<` (or `<<-`); its body starts at the next newline."""
        s, n = self.s, self.n
        strip = s[i : i + 1] == "-"
        if strip:
            i += 1
        while i < n and s[i] in " \t":
            i += 1
        j = i
        while j < n and s[j] not in " \t\n;|&<>()":
            j += 1
        raw = s[i:j]
        quoted = any(q in raw for q in "'\"\\")
        self.heredocs.append((raw.replace("'", "").replace('"', "").replace("\\", ""), quoted, strip))
        return j

    def _heredoc_bodies(self, i: int) -> int:
        """Skip the bodies of pending here-documents (from i, just after a newline), judging their text."""
        s, n = self.s, self.n
        for delimiter, quoted, strip in self.heredocs:
            start = i
            while i < n:
                j = s.find("\n", i)
                end = n if j < 0 else j
                line = s[i:end]
                if (line.lstrip("\t") if strip else line) == delimiter:
                    body = s[start:i]
                    i = end + 1 if j >= 0 else n
                    break
                i = end + 1 if j >= 0 else n
            else:
                body = s[start:]
            if not quoted:
                # An unquoted delimiter leaves the body open to expansion and command substitution.
                if "`" in body or re.search(r"\$\((?!\()", body):
                    self.out.add("substitution", "chain")
                if re.search(r"\$[A-Za-z_{\[@*#?$!0-9-]|\$\(\(", body):
                    self.out.add("expansion")
        self.heredocs.clear()
        return i

    def _glob_group(self, i: int) -> int:
        """Skip a pattern group `(...)` of an extended glob: its `|` and `(` are pattern syntax."""
        s, n = self.s, self.n
        level = 1
        while i < n:
            c = s[i]
            if c == "\\":
                i += 2
                continue
            if c in "'\"":
                j = s.find(c, i + 1)
                if j < 0:
                    break
                i = j + 1
                continue
            if c == "(":
                level += 1
            elif c == ")":
                level -= 1
                if level == 0:
                    return i + 1
            i += 1
        self.out.add("parse_error")
        raise _Abort

    def _check_quoted_text(self, text: str) -> None:
        if "\n" in text:
            self.out.add("unsafe_text")  # newlines are refused even inside quotes

    def _to_closer(self, i: int, closer: str, word: Word, step: Callable[[int, str, Word], int]) -> int:
        """Scan from i up to `closer`, which ends the word's raw text, each other character by `step`; return
        the index after the closer. A text that ends first is a parse error."""
        s, n = self.s, self.n
        while i < n:
            c = s[i]
            if c == closer:
                word.raw += c
                return i + 1
            i = step(i, c, word)
        self.out.add("parse_error")
        raise _Abort

    def _double(self, i: int, word: Word) -> int:
        """Scan a double-quoted text from just after the opening quote; return the index after the close."""
        word.quoted = True
        word.raw += '"'
        return self._to_closer(i, '"', word, self._in_double)

    def _in_double(self, i: int, c: str, word: Word) -> int:
        if c == "\\":
            return self._escaped(i, word)
        if c == "$" or c == "`":
            return self._substitution(i, word)
        if c == "!":
            self.out.add("expansion")  # history expansion in interactive bash and zsh
        elif c == "\n":
            self.out.add("unsafe_text")
        word.raw += c
        word.value += c
        return i + 1

    def _escaped(self, i: int, word: Word) -> int:
        """A backslash and the character it escapes (unquoted or in double quotes): escapes can spell
        a word the policy would refuse."""
        self.out.add("obfuscation")
        word.raw += self.s[i : i + 2]
        word.value += self.s[i + 1 : i + 2]
        word.escaped = True
        return i + 2

    def _substitution(self, i: int, word: Word) -> int:
        """`$...` or a backquoted command inside a word (unquoted or in double quotes)."""
        if self.s[i] == "$":
            return self._dollar(i, word)
        self.out.add("substitution", "chain")
        word.raw += "`"
        word.dynamic = True
        return self._nested(i + 1, "`")

    def _dollar(self, i: int, word: Word) -> int:
        s, out = self.s, self.out
        nxt = s[i + 1 : i + 2]
        if nxt == "(":
            word.dynamic = True
            word.raw += "$("
            if s[i + 2 : i + 3] == "(":
                out.add("expansion")  # $(( arithmetic ))
                j = self._nested(i + 3, ")")
                return j + 1 if s[j : j + 1] == ")" else j
            out.add("substitution", "chain")
            return self._nested(i + 2, ")")
        if nxt == "{":
            out.add("expansion")
            word.dynamic = True
            word.raw += "${"
            return self._param(i + 2, word)
        if nxt == "[":
            out.add("expansion")  # legacy $[ arithmetic ]
            word.dynamic = True
            j = s.find("]", i + 2)
            if j < 0:
                out.add("parse_error")
                raise _Abort
            word.raw += s[i : j + 1]
            return j + 1
        if nxt == "'":
            out.add("obfuscation")  # ANSI-C quoting: escapes spell any text
            j = i + 2
            while j < self.n and s[j] != "'":
                j += 2 if s[j] == "\\" else 1
            if j >= self.n:
                out.add("parse_error")
                raise _Abort
            word.raw += s[i : j + 1]
            word.quoted = True
            word.dynamic = True
            return j + 1
        if nxt == '"':
            out.add("obfuscation")  # locale quoting $"..."
            word.dynamic = True
            return self._double(i + 2, word)
        out.add("expansion")
        word.dynamic = True
        m = _NAME_RUN.match(s, i + 1)
        if m is not None:
            word.raw += s[i : m.end()]
            return m.end()
        if nxt and nxt in _SPECIAL_PARAMS:
            word.raw += s[i : i + 2]
            return i + 2
        word.raw += "$"
        return i + 1

    def _param(self, i: int, word: Word) -> int:
        """Scan the inside of ${...}, which may hold quotes and further expansions, up to its `}`."""
        return self._to_closer(i, "}", word, self._in_param)

    def _in_param(self, i: int, c: str, word: Word) -> int:
        if c == "$":
            return self._dollar(i, word)
        if c == "`":
            self.out.add("substitution", "chain")
            return self._nested(i + 1, "`")
        if c == '"':
            return self._double(i + 1, Word())
        if c == "'":
            j = self.s.find("'", i + 1)
            if j < 0:
                self.out.add("parse_error")
                raise _Abort
            return j + 1
        if c == "\\":
            return i + 2
        word.raw += c
        return i + 1


def scan(text: str) -> Scan:
    scanner = _Scanner(text)
    try:
        scanner.commands(0, None, nested=False)
    except _Abort:
        scanner.out.aborted = True
    return scanner.out
