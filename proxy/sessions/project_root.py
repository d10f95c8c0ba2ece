"""The project root a client states in the part of the request it writes itself: a fallback, read only where no
key, pin or header names the root (DESIGN invariant 10).

A statement counts only in the exact position its client writes it, in the form it writes there:
- the system text (a Messages `system` field, a Responses `instructions`, the system or developer messages that
  open the conversation): Claude Code 2.x's environment block (`# Environment` / `You have been invoked in the
  following environment:` / ` - Primary working directory: DIR`), Claude Code 1.x's and Continue's
  (`<env>` / `Working directory: DIR`), OpenCode's (`<env>` / `  Working directory: DIR`; its `Workspace root
  folder:` is not read), Cline's (`<env>` / `N. Working Directory: DIR`; Cline 2's `Current Working Directory
  (DIR)`);
- a context message the client writes into the conversation's first user turn, read only under that client's
  own system text: Qwen Code up to 0.23 (the whole first user turn, answered by the client's own `Got it. Thanks
  for the context!`), Qwen Code 0.24 (a `<system-reminder>` part of the first user turn that more parts follow),
  Codex (an `<environment_context>` part whose first line is `<cwd>DIR</cwd>`, the user's words following);
- Kilo's `<environment_details>` part appended after the user's words in the first user turn;
- Claude Code from 2.1.332 on: the `role: "system"` message that follows the first user turn on the Messages
  route, opening with its environment block.
Never a model's output or a tool's result, and never the body of a file the client copies into its prompt:
instruction files (AGENTS.md, CLAUDE.md, CONTEXT.md, QWEN.md, GEMINI.md, rules, memories) are written by the
model as easily as by the user. A system text is read only up to the first place a client starts such a body
(`_BODY_OPENERS`: OpenCode's and Kilo's `Instructions from: PATH`, Qwen Code's `--- Context from: NAME ---` and
its memories' `## PATH`, Claude Code's `Contents of PATH (...)`, Codex's `# AGENTS.md instructions for DIR` and
`<INSTRUCTIONS>`, Cline's `# Rules`, Continue's `<context name=...>`): every client writes its environment block
before them, and whatever follows the first one (a second, forged closing mark included) is the file's.

A stated root is learned only when it names a project (`root_problem`, proxy/policy/roots.py): `/`, a top-level
folder, a home directory itself, a system directory or a home's dot-directory is ignored. Statements that
disagree within one request are ignored too (none is learned; the session keeps the root it had).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from proxy.policy.roots import normal_root, root_problem

__all__ = ["CONTEXT", "DETAILS", "ENVIRONMENT", "SYSTEM", "ClientText", "client_parts", "stated_root"]

# Where a client text stands (`ClientText.where`): each has its own forms.
SYSTEM = "system"
CONTEXT = "context"
DETAILS = "details"
ENVIRONMENT = "environment"


class ClientText(NamedTuple):
    """A text the client wrote about itself, and the position it stands in."""

    text: str
    where: str


_CLAUDE_BLOCK = r"# Environment\nYou have been invoked in the following environment: ?\n ?- Primary working directory: "
_FORMS: dict[str, tuple[re.Pattern[str], ...]] = {
    SYSTEM: tuple(re.compile(p, re.MULTILINE) for p in (
        rf"^{_CLAUDE_BLOCK}(/[^\n]*)$",  # Claude Code 2.x up to 2.1.331
        r"^<env>\nWorking directory: (/[^\n]*)$",  # Claude Code 1.x, Continue 1.5
        r"^<env>\n  Working directory: (/[^\n]*)$",  # OpenCode 1.x
        r"^<env>\n(?:\d+\. [^\n]*\n){0,8}\d+\. Working Directory: (/[^\n]*)$",  # Cline 3.x
        r"^Current Working Directory \((/[^\n)]*)\)",  # Cline 2.x
    )),
    CONTEXT: tuple(re.compile(p, re.MULTILINE) for p in (
        # Qwen Code (and Gemini CLI's wording): the directory line after the date and the operating system
        r"\AThis is the Qwen Code\. We are setting up the context for our chat\.\nToday's date is [^\n]*\n"
        r"(?:My operating system is: [^\n]*\n)?I'm currently working in the directory: (/[^\n]*)$",
        r"\A<environment_context>\n[ \t]*<cwd>(/[^<\n]*)</cwd>",  # Codex
    )),
    DETAILS: (re.compile(r"^Working directory: (/[^\n]*)$", re.MULTILINE),),  # Kilo 7
    ENVIRONMENT: (re.compile(rf"\A{_CLAUDE_BLOCK}(/[^\n]*)$", re.MULTILINE),),  # Claude Code 2.1.332
}
# Where a client starts the body of a file it copies into its system text (see the module's docstring).
_BODY_OPENERS = re.compile(
    r"^(?:Instructions from: |--- Context from: |Contents of [/~.]|# AGENTS\.md instructions for |<INSTRUCTIONS>"
    r"|<user_instructions>|# Rules\n## |<context name=|USER'S CUSTOM INSTRUCTIONS|## [/~][^\n]*\.md$)",
    re.MULTILINE)
# Context messages a client writes into the conversation's first user turn, each read only under the system text
# of the client that writes it: a first user turn is the model's own words where a model prompts a sub-agent
# (OpenCode's and Kilo's `task`, an SDK's agent-as-tool), and those may open the same way.
_QWEN = "You are Qwen Code"
_QWEN_OPENER = "This is the Qwen Code. We are setting up the context for our chat.\n"
_QWEN_THANKS = "Got it. Thanks for the context!"
_REMINDER = "<system-reminder>\n"
_CODEX = "Codex CLI"
_CODEX_OPENER = "<environment_context>"
_CLAUDE = ("Claude Agent SDK", "Claude Code")
# A block a client appends to the user's first message as a text part of its own (Kilo 7).
_DETAILS_PART = re.compile(r"<environment_details>\n(.*)\n</environment_details>", re.DOTALL)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text") or "") for p in content if isinstance(p, Mapping)
                         and p.get("type") in (None, "text", "input_text"))
    return ""


def _parts(content: Any) -> list[str]:
    """A message's text parts, in order (a string is one part)."""
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [str(p.get("text") or "") for p in content if isinstance(p, Mapping)
                and p.get("type") in (None, "text", "input_text")]
    return []


def client_parts(preamble: Iterable[Any], conversation: Any, *, system_messages: bool = True) -> Iterator[ClientText]:
    """The texts the client wrote about itself, each with its position: `preamble` (an API's instructions or system
    field), the system or developer messages before the conversation (`system_messages`: where the API carries
    them as messages; on the Messages route, where it does not, the system message that follows the first user
    turn instead), and the context parts of the first user turn. Each judged route says where its parts are
    (`Dialect.client_texts`)."""
    own = ""
    for value in preamble:
        text = _text(value)
        own += "\n" + text
        yield ClientText(text, SYSTEM)
    items: Sequence[Any] = conversation if isinstance(conversation, list) else ()
    for index, item in enumerate(items):
        if not isinstance(item, Mapping) or item.get("type") not in (None, "message"):
            return
        role = item.get("role")
        if role in ("system", "developer") and system_messages:
            text = _text(item.get("content"))
            own += "\n" + text
            yield ClientText(text, SYSTEM)
            continue
        if role == "user":
            yield from _first_turn(item.get("content"), items[index + 1:], own)
            if not system_messages and any(mark in own for mark in _CLAUDE):
                following = items[index + 1] if index + 1 < len(items) else None
                if isinstance(following, Mapping) and following.get("role") == "system":
                    yield ClientText(_text(following.get("content")), ENVIRONMENT)
        return


def _first_turn(content: Any, rest: Sequence[Any], own: str) -> Iterator[ClientText]:
    """The parts of the first user turn the client writes: its context (under its own system text) and the
    `<environment_details>` block it appends after the user's words."""
    parts = _parts(content)
    following = rest[0] if rest and isinstance(rest[0], Mapping) else None
    if _QWEN in own:
        # Up to 0.23 the context is the whole first turn, which the client answers itself; from 0.24 a reminder
        # part of that turn, which the user's words (or a sub-agent's prompt) follow as a later part.
        if (len(parts) == 1 and parts[0].lstrip().startswith(_QWEN_OPENER) and following is not None
                and following.get("role") == "assistant" and _text(following.get("content")).strip() == _QWEN_THANKS):
            yield ClientText(parts[0].lstrip(), CONTEXT)
        for part in parts[:-1]:
            if part.startswith(_REMINDER + _QWEN_OPENER):
                yield ClientText(part[len(_REMINDER):], CONTEXT)
    if _CODEX in own and following is not None:  # the user's words follow as an item of their own
        for part in parts:
            if part.lstrip().startswith(_CODEX_OPENER):
                yield ClientText(part.lstrip(), CONTEXT)
    if not isinstance(content, list):
        return
    for part in content[1:]:  # never the first part: the user's words, or a prompt a model wrote
        if isinstance(part, Mapping) and part.get("type") in (None, "text", "input_text"):
            found = _DETAILS_PART.fullmatch(str(part.get("text") or "").strip())
            if found is not None:
                yield ClientText(found.group(1), DETAILS)


def _readable(text: str, where: str) -> str:
    """The part of a text a statement may stand in: a system text up to the first file body it copies."""
    if where != SYSTEM:
        return text
    opener = _BODY_OPENERS.search(text)
    return text if opener is None else text[:opener.start()]


_KEPT_CHARS = 1 << 17  # 64 kept texts hold at most 8 MB


@functools.lru_cache(maxsize=64)
def _stated_in(text: str, where: str) -> frozenset[str]:
    # Kept: a client sends the same system text (tens of KB) with every request of every session.
    found = set()
    readable = _readable(text, where)
    for pattern in _FORMS.get(where, ()):
        for match in pattern.finditer(readable):
            # A statement that names no usable root (`/` itself) still counts: it makes any other one ambiguous.
            found.add(normal_root(match.group(1).strip()) or "/")
    return frozenset(found)


def stated_root(texts: Iterable[ClientText]) -> str | None:
    """The project root the client states in its own parts of a request (`client_parts`), or None (none stated,
    not a project, or ambiguous)."""
    found: set[str] = set()
    for text, where in texts:
        found |= _stated_in(text, where) if len(text) <= _KEPT_CHARS else _stated_in.__wrapped__(text, where)
    if len(found) != 1:
        return None
    (root,) = found
    return None if root_problem(root) is not None else root
