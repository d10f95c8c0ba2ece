"""The stable reason codes of DESIGN.md and the order that picks the primary one.

A rejection carries every code that applies; the first is the primary, the one the feedback leads with and
the one the stats count. The order says which fault matters most to the operator and is the one to fix
first: a command that runs a second program (substitution, background, chain) is worse than a glued-on
expansion, and any form problem hides the content checks (which program, which script, which flag) because
those only make sense for one plain command.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "BASH_CONTENT",
    "BASH_FORM",
    "OUTPUT_REASONS",
    "PRIMARY_ORDER",
    "REASON_CODES",
    "TOOL_REASONS",
    "VALUE_REASONS",
    "order_reasons",
]

# Problems of the command's form: the shell would do something beyond running one plain command.
BASH_FORM: tuple[str, ...] = (
    "unsafe_text",
    "empty",
    "parse_error",
    "substitution",
    "background",
    "cd",
    "pipe",
    "redirect",
    "subshell",
    "chain",
    "wrapper",
    "assignment",
    "expansion",
    "obfuscation",
    "comment",
)
# Problems of the content of one plain command; reported only when its form is clean.
BASH_CONTENT: tuple[str, ...] = ("program", "runner", "script_path", "unknown_script", "flag")
TOOL_REASONS: tuple[str, ...] = ("bad_arguments", "unknown_tool", "absolute_path", "path_escape", "protected_path")
# What an allowed script is given (`argument`: a script argument that fails its rule) and where a URL
# leads (`url`: a scheme or host the policy's `urls:` refuses). Ranked after the command's own content: a
# command with a form or content problem is explained by that first.
VALUE_REASONS: tuple[str, ...] = ("argument", "url")

# Upstream output the proxy cannot parse or does not know (refused in enforce mode): nothing else was judged.
OUTPUT_REASONS: tuple[str, ...] = ("unjudgeable",)

PRIMARY_ORDER: tuple[str, ...] = (OUTPUT_REASONS + TOOL_REASONS[:2] + BASH_FORM + BASH_CONTENT + VALUE_REASONS
                                  + TOOL_REASONS[2:])
REASON_CODES: frozenset[str] = frozenset(PRIMARY_ORDER)
_RANK = {code: i for i, code in enumerate(PRIMARY_ORDER)}


def order_reasons(codes: Iterable[str]) -> tuple[str, ...]:
    """Deduplicate and sort codes by priority (unknown codes last, in their given order)."""
    seen: dict[str, None] = dict.fromkeys(codes)
    return tuple(sorted(seen, key=lambda c: _RANK.get(c, len(_RANK))))
