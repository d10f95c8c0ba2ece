"""The policy engine: a tool call in, a verdict out. `judge` is the one entry point; the rooms below it are
packages by concern, and imports between them point one way (docs/DESIGN.md "The policy engine's rooms"):

    file       the policy file: loading, the examples' self-test, serving, reloads and their guard, watching
    feedback   what the model is told: feedback text, the nearest allowed command, repairs, variants
    judge      judge_call / judge_command / call_command: every check a call goes through, in order
    shell      the shell decision (lexer, matcher, script arguments) and its explanation (scan, explain)
    tools      tools onto capabilities: profiles, classification of unknown tools, whole values
    paths      inside the project, protected writes and reads, globs, on-disk listing, imported modules
    urls       URL schemes and hosts, and their lookups
    schema verdict reasons errors roots    the terms every room shares

A new check on a tool call: one module in its room, and one line in `judge.py` where the call's capability is
judged."""

from __future__ import annotations

from .errors import PolicyError
from .feedback.messages import format_feedback
from .feedback.suggest import Suggestion, suggest
from .file.loader import LoadedPolicy, default_policy_path, load_policy_file, load_policy_text
from .file.manager import PolicyManager
from .judge import judge_call, judge_command
from .reasons import REASON_CODES
from .schema import Policy
from .shell.lexer import lex
from .verdict import Verdict

__all__ = [
    "REASON_CODES",
    "LoadedPolicy",
    "Policy",
    "PolicyError",
    "PolicyManager",
    "Suggestion",
    "Verdict",
    "default_policy_path",
    "format_feedback",
    "judge_call",
    "judge_command",
    "lex",
    "load_policy_file",
    "load_policy_text",
    "suggest",
]
