"""The text a model gets back for a rejected call: the policy's `feedback` template for the capability the
rejection concerns (a shell command, a file path, anything else), filled in."""

from __future__ import annotations

import json
import re
from typing import Any

from ..judge import call_command
from ..reasons import BASH_CONTENT, BASH_FORM
from ..schema import Policy
from ..shell.matcher import matcher_for
from ..verdict import Verdict
from .suggest import suggest

__all__ = ["HINTS", "UNROOTED", "capability_of", "format_feedback", "template_for"]

# One sentence per reason code, for the `{hint}` placeholder: what to do instead.
HINTS: dict[str, str] = {
    "pipe": "Do not pipe the output into another program; run the script alone.",
    "redirect": "Do not redirect input or output; the script's output comes back to you as it is.",
    "chain": "Run one command per call: no `;`, `&&`, `||`, newlines or substitutions.",
    "cd": "Do not change directory; run the script from the project root.",
    "wrapper": "Run `uv run` directly, not through another program (timeout, env, sudo, sh -c ...).",
    "substitution": "Do not use `$(...)`, backticks or `<(...)`; pass literal arguments.",
    "background": "Do not run commands in the background with `&`.",
    "subshell": "Do not use subshells, brace groups, functions or compound commands.",
    "expansion": "Quote arguments that contain `$`, `~`, `*`, `?`, `[`, `{`, `!`: no expansions are allowed.",
    "assignment": "Do not set variables before the command.",
    "obfuscation": "Write the program, subcommand and script plainly, without quotes or backslashes.",
    "unsafe_text": "Use plain printable text: no tabs, control or invisible characters, no `=` at a word start.",
    "comment": "Do not add comments; quote arguments that contain `#`.",
    "parse_error": "The command does not parse: check the quotes.",
    "empty": "The command was empty.",
    "program": "Only `uv run` may run.",
    "runner": "Use exactly `uv run <script>`: no other uv subcommand or uv option.",
    "unknown_script": "Use one of the allowed scripts.",
    "script_path": "Give the script as `scripts/<name>.py`, nothing else.",
    "flag": "Use only the flags the script declares.",
    "absolute_path": "Use a path inside the project, relative to its root.",
    "path_escape": "Stay inside the project: no `..` above the root and no `~`.",
    "protected_path": "That file is protected: the scripts, the project and environment config (`pyproject.toml`, "
                      "`uv.lock`, `.venv`, `.git`), editor and agent settings, the proxy's policy and secrets "
                      "(`.env`, keys, credentials) may not be written (secrets not read, listed or searched: "
                      "give a search a narrower directory, or a file filter such as `*.py` that cannot select "
                      "them). Work on the project's other files, and run the allowed scripts as they are.",
    "argument": "Give the script only arguments its rules accept: a path inside the project, relative to its "
                "root (no `/...` outside it, `..`, `~` or `file://`), a public http(s) URL, or the values the "
                "script's argument rules list.",
    "url": "Fetch only http(s) URLs of public hosts: no localhost, private, link-local or metadata addresses, "
           "and no other schemes.",
    "unknown_tool": "Call only the tools you were given.",
    "bad_arguments": "Send the arguments as a JSON object with every required field.",
    "unjudgeable": "Call only the tools you were given, as plain function calls: that output could not be judged.",
}
# Said after a path's rejection where no project root is known (DESIGN invariant 10): absolute paths are then
# outside any project, and a search or a relative write that could reach a protected file is refused.
UNROOTED = ("No project root is known for this client, so its paths cannot be judged inside a project: start the "
            "client with `allowlist-proxy run CLIENT`, give it a project key (`allowlist-proxy keys create --root "
            "DIR`), or set `paths.project_root` in the policy.")
_UNROOTED_REASONS = frozenset({"absolute_path", "protected_path"})
_PLACEHOLDER = re.compile(r"\{(reasons|scripts|command|tool|shape|hint|decision|suggestion)\}")
_MAX_COMMAND = 300


def _scripts(policy: Policy) -> str:
    try:
        matcher = matcher_for(policy)
        names = matcher.script_names()
    except Exception:
        names = sorted(policy.bash.scripts)
        matcher = None
    parts = []
    for name in names:
        flags = matcher.flags_for(name) if matcher is not None else None
        listed = f"{policy.bash.scripts_dir}/{name}.py"
        parts.append(f"{listed} [{' '.join(sorted(flags))}]" if flags else listed)
    return ", ".join(parts) or "none"


def _command(policy: Policy, tool: str, arguments: Any) -> str:
    value = call_command(policy, tool, arguments)
    text = value if value is not None else json.dumps(arguments, ensure_ascii=False, default=str)
    return text if len(text) <= _MAX_COMMAND else text[:_MAX_COMMAND] + "..."


def _hint(verdict: Verdict) -> str:
    """The primary reason's sentence; an argument or URL refusal also names the value refused (its shape
    is `argument:<script>.<flag or #position>` or `url:<tool>.<argument>`)."""
    if not verdict.reasons:
        return ""
    primary = verdict.reasons[0]
    hint = HINTS.get(primary, "")
    if primary in ("argument", "url") and verdict.shape and ":" in verdict.shape:
        where = verdict.shape.split(":", 1)[1]
        detail = f" ({verdict.reasons[1]})" if len(verdict.reasons) > 1 else ""
        hint = f"The argument {where} is refused{detail}. {hint}"
    return hint


def capability_of(verdict: Verdict) -> str:
    """`shell`, `paths` or `other`: what the rejection's primary reason is about."""
    primary = verdict.reasons[0] if verdict.reasons else ""
    if primary in BASH_FORM or primary in BASH_CONTENT:
        return "shell"
    if primary in ("absolute_path", "path_escape", "protected_path"):
        return "paths"
    if primary == "argument":
        return "shell"
    return "other"


def template_for(policy: Policy, variant: str | None, capability: str = "shell") -> str:
    """The template a rejection of `capability` is told with: the session's feedback variant's (a shell
    rejection only: the experiment is about getting the model to run an allowed script), else the policy's
    template for that capability."""
    if capability == "shell" and variant is not None and variant in policy.feedback_variants:
        return policy.feedback_variants[variant]
    try:
        return policy.feedback_template(capability)
    except Exception:
        return str(policy.feedback)


def format_feedback(policy: Policy, verdict: Verdict, *, tool: str, arguments: dict[str, Any] | None,
                    variant: str | None = None, unrooted: bool = False) -> str:
    """Fill `{reasons}`, `{scripts}`, `{command}`, `{suggestion}` (and `{tool}`, `{shape}`, `{hint}`,
    `{decision}`) in the template for the rejection's capability (a rejected read is never told which
    commands may run), or the session's feedback `variant` for a shell rejection.

    Only these exact placeholders are replaced and everything else is left as written, so a template with
    stray braces or `{reasons.__class__}` never raises and never reaches into objects. `{suggestion}` is
    the nearest allowed command (proxy/policy/feedback/suggest.py), or nothing; the text is stripped at its end so
    an empty last placeholder leaves no trailing space. `unrooted`: the call was judged where no project root
    was known; a path rejection then says how to bind the project (`UNROOTED`), in `{hint}` or after the text.
    """
    values: dict[str, str] = {}
    template = str(template_for(policy, variant, capability_of(verdict)))
    told = unrooted and bool(verdict.reasons) and verdict.reasons[0] in _UNROOTED_REASONS

    def fill(m: re.Match[str]) -> str:
        key = m.group(1)
        if key not in values:
            try:
                if key == "reasons":
                    values[key] = ", ".join(verdict.reasons) or "none"
                elif key == "scripts":
                    values[key] = _scripts(policy)
                elif key == "command":
                    values[key] = _command(policy, tool, arguments)
                elif key == "tool":
                    values[key] = str(tool)
                elif key == "shape":
                    values[key] = verdict.shape or ""
                elif key == "hint":
                    values[key] = " ".join(filter(None, (_hint(verdict), UNROOTED if told else "")))
                elif key == "suggestion":
                    found = suggest(policy, tool, arguments, verdict)
                    values[key] = found.text if found is not None else ""
                else:
                    values[key] = verdict.decision
            except Exception:
                values[key] = ""
        return values[key]

    try:
        text = _PLACEHOLDER.sub(fill, template).rstrip()
    except Exception:
        text = template
    return text + " " + UNROOTED if told and UNROOTED not in text else text
