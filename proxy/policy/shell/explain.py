"""The explanation of a rejected bash command: every reason code that applies, primary first, and a shape.

Runs only after the decision lexer has rejected, and can only produce a rejection. Two readings are merged:
- the scanner of `scan.py`, which follows bash's own quoting and operator rules (trusted first);
- tree-sitter-bash, a full grammar that sees structure (function definitions, compound commands, nested
  lists) the scanner does not model. Where tree-sitter misreads, its extra codes rank after the scanner's.
The content checks (which program, which uv subcommand, which script, which flag) apply only to a command
whose form is clean, i.e. one plain simple command: in anything else the form is the thing to fix.

The shape is the primary code plus, for the codes where the "what" identifies the blocked form, a name:
`program:curl`, `wrapper:timeout`, `runner:pip`, `unknown_script:foo`, `flag:search`. Every pipe is `pipe`,
whatever is piped into, so `| head -5` and `| tail -3` retries count as one loop.
"""

from __future__ import annotations

import re
import threading
from typing import Any

from ..reasons import BASH_CONTENT, order_reasons
from ..verdict import REJECT, Verdict
from .matcher import Matcher
from .scan import Scan, Word, scan
from .text import is_invisible

__all__ = ["CD_PROGRAMS", "WRAPPERS", "explain_command", "parse_error_verdict"]

CD_PROGRAMS = frozenset({"cd", "pushd", "popd", "chdir"})
# Programs and keywords that run another command given as their arguments.
WRAPPERS = frozenset(
    {
        "timeout", "env", "nohup", "sudo", "doas", "su", "runuser", "pkexec", "xargs", "time", "nice", "ionice",
        "stdbuf", "exec", "command", "builtin", "eval", "setsid", "chroot", "unbuffer", "script", "strace",
        "ltrace", "watch", "flock", "taskset", "chrt", "caffeinate", "unshare", "nsenter", "parallel",
        "bash", "sh", "dash", "zsh", "ksh", "mksh", "fish", "csh", "tcsh", "busybox",
        "uvx", "npx", "pnpx", "bunx", "pipx",
    }
)  # fmt: skip
# Reserved words that open or continue a compound command; the next word is a command name again.
_COMPOUND_WORDS = frozenset(
    {"if", "then", "else", "elif", "fi", "do", "done", "while", "until", "for", "case", "esac", "select",
     "function", "in", "{", "}", "[[", "]]"}
)  # fmt: skip
_PREFIX_WORDS = frozenset({"!"})
_DECLARATIONS = frozenset({"export", "declare", "local", "typeset", "readonly"})
_ASSIGNMENT_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\[[^\]]*\])?\+?=")
_SHAPE_NAME = re.compile(r"[^A-Za-z0-9_./:=,+@%-]")

# tree-sitter-bash named node types and the codes they show. Anonymous tokens (`;`, `&`, `|&`) are the
# scanner's job: it reads them exactly as bash does.
_TS_CODES: dict[str, tuple[str, ...]] = {
    "pipeline": ("pipe",),
    "list": ("chain",),
    "redirected_statement": ("redirect",),
    "file_redirect": ("redirect",),
    "heredoc_redirect": ("redirect",),
    "herestring_redirect": ("redirect",),
    "command_substitution": ("substitution", "chain"),
    "process_substitution": ("substitution", "chain"),
    "subshell": ("subshell",),
    "compound_statement": ("subshell",),
    "function_definition": ("subshell",),
    "if_statement": ("subshell",),
    "while_statement": ("subshell",),
    "for_statement": ("subshell",),
    "c_style_for_statement": ("subshell",),
    "case_statement": ("subshell",),
    "simple_expansion": ("expansion",),
    "expansion": ("expansion",),
    "arithmetic_expansion": ("expansion",),
    "brace_expression": ("expansion",),
    "negated_command": ("expansion",),
    "variable_assignment": ("assignment",),
    "declaration_command": ("assignment",),
    "ansi_c_string": ("obfuscation",),
    "translated_string": ("obfuscation",),
    "comment": ("comment",),
}
_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f]")

# One parser (and query cursor) per thread, made on first use (the decision never needs them): tree-sitter
# objects must not be used by two threads at once, and policy reloads judge their examples in a worker
# thread.
_local = threading.local()


def _tree_sitter() -> tuple[Any, Any]:
    tools = getattr(_local, "tools", None)
    if tools is None:
        import tree_sitter
        import tree_sitter_bash

        language = tree_sitter.Language(tree_sitter_bash.language())
        # One pattern matching any node type of interest: the matching runs in C, which costs less than
        # walking the tree from Python (or printing it).
        query = tree_sitter.Query(language, "[" + " ".join(f"({t})" for t in _TS_CODES) + "] @node")
        tools = _local.tools = (tree_sitter.Parser(language), tree_sitter.QueryCursor(query))
    return tools


def _tree_sitter_codes(text: str) -> dict[str, None]:
    """The codes tree-sitter's parse shows."""
    parser, cursor = _tree_sitter()
    tree = parser.parse(text.encode("utf-8", "surrogatepass"))
    codes: dict[str, None] = {}
    for node_type in {node.type for node in cursor.captures(tree.root_node).get("node", ())}:
        for code in _TS_CODES[node_type]:
            codes[code] = None
    return codes


def parse_error_verdict() -> Verdict:
    return Verdict(REJECT, ("parse_error",), "parse_error")


def _shape_name(value: str) -> str:
    return _SHAPE_NAME.sub("?", value)[:40] or "?"


class _Explanation:
    def __init__(self) -> None:
        self.codes: dict[str, None] = {}
        self.names: dict[str, str] = {}  # code -> the name its shape carries

    def add(self, code: str, name: str | None = None) -> None:
        self.codes.setdefault(code, None)
        if name is not None:
            self.names.setdefault(code, _shape_name(name))


def _name_checks(commands: list[list[Word]], out: _Explanation) -> list[Word] | None:
    """Codes that come from command names (cd, wrappers, assignments, quoted names).

    Returns the words of the single plain command when there is exactly one, for the content checks.
    """
    plain: list[list[Word]] = []
    for words in commands:
        k = 0
        while k < len(words):
            word = words[k]
            if word.plain and word.value in _COMPOUND_WORDS:
                out.add("subshell")
            elif word.plain and word.value in _PREFIX_WORDS:
                out.add("expansion")
            elif _ASSIGNMENT_WORD.match(word.raw):  # NAME= unquoted, whatever the value's quoting
                out.add("assignment")
            else:
                break
            k += 1
        if k >= len(words):
            continue
        name = words[k]
        base = name.value.rsplit("/", 1)[-1]
        if name.quoted or name.escaped:
            out.add("obfuscation")  # "uv", u\v: the shell runs what a reader does not see at once
        if name.dynamic:
            continue
        if base in CD_PROGRAMS:
            out.add("cd")
        elif base in WRAPPERS:
            out.add("wrapper", base)
        elif name.value in _DECLARATIONS:
            out.add("assignment")
        else:
            plain.append(words[k:])
    return plain[0] if len(commands) == 1 and len(plain) == 1 else None


def _content_checks(words: list[Word], matcher: Matcher, out: _Explanation) -> None:
    """Program, runner, script path, script and flags of one plain command."""
    name = words[0]
    if name.value != "uv":
        out.add("program", name.value)
        return
    if len(words) < 2:
        out.add("runner", "uv")
        return
    sub = words[1]
    if sub.value != "run" or not sub.plain:
        out.add("runner", sub.value)  # uv pip/add/tool, global options, or a quoted "run"
        return
    if len(words) < 3:
        out.add("unknown_script")
        return
    path = words[2]
    if path.value.startswith("-"):
        out.add("runner", path.value.split("=", 1)[0])  # uv run --with/--env-file/...
        return
    if not path.plain:
        out.add("obfuscation")
    prefix = matcher.scripts_dir + "/"
    stem = path.value[len(prefix) : -3] if path.value.startswith(prefix) and path.value.endswith(".py") else ""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", stem):
        out.add("script_path")
        return
    flags = matcher.flags_for(stem)
    if flags is None:
        out.add("unknown_script", stem)
        return
    for arg in words[3:]:
        if arg.value[:1] == "-" and arg.value.split("=", 1)[0] not in flags:
            out.add("flag", stem)
            return


def _text_problem(command: str, max_length: int) -> bool:
    """Text no reading can be trusted on: over-long, control characters, invisible characters."""
    if len(command) > max_length or _CONTROL.search(command) is not None:
        return True
    return not command.isascii() and any(ord(ch) > 0x7E and is_invisible(ch) for ch in command)


def explain_command(matcher: Matcher, command: str) -> Verdict:
    """Reasons and shape for a command the decision rejected. Never raises, never allows."""
    try:
        return _explain(matcher, command)
    except Exception:
        return parse_error_verdict()


def _explain(matcher: Matcher, command: Any) -> Verdict:
    if not isinstance(command, str):
        return parse_error_verdict()
    if not command.strip():
        return Verdict(REJECT, ("empty",), "empty")
    if _text_problem(command, matcher.max_length):
        # The text itself is the problem; parsing it further would only guess (a CR is a word character
        # to bash but a separator to most parsers).
        return Verdict(REJECT, ("unsafe_text",), "unsafe_text")
    scanned: Scan = scan(command)
    out = _Explanation()
    for code in scanned.findings:
        out.add(code)
    single = _name_checks(scanned.commands, out) if not scanned.aborted else None
    if not any(code not in BASH_CONTENT for code in out.codes) and single is not None:
        _content_checks(single, matcher, out)
    reasons = order_reasons(out.codes)
    if not scanned.aborted:
        # An aborted scan (unterminated quote, unclosed `$(`) is a parse error for certain, and
        # tree-sitter's error recovery on such text is slow and only guesses.
        reasons += order_reasons(c for c in _tree_sitter_codes(command) if c not in out.codes)
    if not reasons:
        reasons = order_reasons(scanned.weak) or ("parse_error",)
    primary = reasons[0]
    name = out.names.get(primary)
    return Verdict(REJECT, reasons, f"{primary}:{name}" if name else primary)
