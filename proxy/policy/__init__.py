"""The policy engine: policy files, the bash decision and its explanation, and judging tool calls.

Modules, one job each: `schema` (the file format), `loader` (YAML with lines, validation, self-test),
`errors` (PolicyError), `manager` (serving and hot reload), `lexer` + `matcher` (the decision), `text`
(which characters may appear at all), `scan` + `explain` (reason codes and shape of a rejection), `paths`
(file paths and the project root), `offered` (a request's tools, and which unknown ones look like shells),
`profiles` (clients' tools mapped onto the shell and paths capabilities, chosen per request),
`shell_forms` (a shell tool's command string, list or argv), `judge` (one call), `feedback` (the text a
model gets back, per capability), `core` + `suggest` (the nearest allowed command), `repair` (opt-in
repairs), `variants` (feedback experiments), `reasons` (the stable codes), `verdict` (the result).
"""

from __future__ import annotations

from .errors import PolicyError
from .feedback import format_feedback
from .judge import judge_call, judge_command
from .lexer import lex
from .loader import LoadedPolicy, default_policy_path, load_policy_file, load_policy_text
from .manager import PolicyManager
from .reasons import REASON_CODES
from .schema import Policy
from .suggest import Suggestion, suggest
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
