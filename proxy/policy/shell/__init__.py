"""The shell decision and its explanation: is this command line exactly an allowed `uv run scripts/<name>.py`?

`lexer` (the default-deny lexer: the decision) with `text` (which characters may appear at all) and `matcher`
(the argv against the allowed scripts and their flags); `script_args` (an allowed script's argument rules);
`shell_forms` (a shell tool's command string, list or argv); `scan` + `explain` (for a rejected command only:
the reason codes and the shape, with tree-sitter-bash; never turns a reject into an allow).
"""

from __future__ import annotations

from .explain import explain_command
from .lexer import lex
from .matcher import matcher_for
from .script_args import argument_problem
from .shell_forms import commands_of

__all__ = ["argument_problem", "commands_of", "explain_command", "lex", "matcher_for"]
