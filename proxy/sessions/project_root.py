"""The project root a client states in the part of the request it writes itself.

Agent clients name files by absolute path and say in their own request text where they work: Claude Code's
system prompt (` - Primary working directory: DIR`, older `Working directory: DIR`), Cline's
(`Working Directory: DIR`, older `Current Working Directory (DIR)`), Qwen Code's context message that opens the
conversation (`I'm currently working in the directory: DIR`), Codex's `<environment_context>` input item
(`<cwd>DIR</cwd>`), Continue's `<env>` block (`Working directory: DIR`), OpenCode's (the same line indented two
spaces, the first of the block; its `Workspace root folder:` is not read), Kilo's `<environment_details>` block
that it appends to the user's first message (`Working directory: DIR`; its `Workspace root folder:` is not
read). Only those parts are read, in the position the client puts them: the instructions, the system or
developer messages before the conversation, a context message the client writes as the first user turn
(Codex's environment context, Qwen Code's preamble), and the `<environment_details>` part the client appends
after the user's words in the first user turn. Never a model's output or a tool's result: a model that writes
"Working directory: /" in its answer, or a file that says so, changes nothing.

A stated root is learned only when it names a project: `/`, a top-level folder (`/tmp`, `/home`, `/srv`) or a
home directory itself (`/root`, `/home/NAME`, `/Users/NAME`) would let every file of the machine or the user
through, so such a statement is ignored (absolute paths are then refused as without a root). Statements that
disagree within one request are ignored too, a too broad one included: a second statement never stands in for it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from proxy.policy.roots import normal_root, root_problem

__all__ = ["client_parts", "stated_root"]

_LINE_PATTERNS = tuple(re.compile(p, re.MULTILINE) for p in (
    r"^ ?- Primary working directory: (/[^\n]*)$",  # Claude Code 2.x
    r"^Working directory: (/[^\n]*)$",  # Claude Code 1.x, Continue 1.5 (`<env>`), Kilo 7 (`<environment_details>`)
    r"^<env>\n  Working directory: (/[^\n]*)$",  # OpenCode 1.x
    r"^\d+\. Working Directory: (/[^\n]*)$",  # Cline 3.x
    r"^Current Working Directory \((/[^\n)]*)\)",  # Cline 2.x
    r"^I'm currently working in the directory: (/[^\n]*)$",  # Qwen Code, Gemini CLI
))
_CODEX_CWD = re.compile(r"<cwd>(/[^<\n]*)</cwd>")
# Context messages a client writes as the conversation's first user turn, each read only under the system or
# developer text of the client that writes it: a first user turn is the model's own words where a model prompts a
# sub-agent (OpenCode's and Kilo's `task`, an SDK's agent-as-tool), and those may open the same way.
_CONTEXT_OPENERS = {"<environment_context>": "Codex CLI",
                    "This is the Qwen Code. We are setting up the context": "You are Qwen Code"}
# A block a client appends to the user's first message as a text part of its own (Kilo 7).
_DETAILS_PART = re.compile(r"<environment_details>\n(.*)\n</environment_details>", re.DOTALL)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text") or "") for p in content if isinstance(p, Mapping)
                         and p.get("type") in (None, "text", "input_text"))
    return ""


def client_parts(preamble: Iterable[Any], conversation: Any, *, system_messages: bool = True) -> Iterator[str]:
    """The texts the client wrote about itself, in the positions it puts them: `preamble` (an API's instructions
    or system field), then the system or developer messages before the conversation (`system_messages`: where
    the API carries them as messages) and a context message the client writes as its first user turn, read only
    under that client's own system text. Each judged route says where its parts are (`Dialect.client_texts`)."""
    own = ""
    for value in preamble:
        text = _text(value)
        own += "\n" + text
        yield text
    for item in conversation if isinstance(conversation, list) else ():
        if not isinstance(item, Mapping) or item.get("type") not in (None, "message"):
            break
        role, text = item.get("role"), _text(item.get("content"))
        if role in ("system", "developer") and system_messages:
            own += "\n" + text
            yield text
        elif role == "user" and any(text.lstrip().startswith(opener) and client in own
                                    for opener, client in _CONTEXT_OPENERS.items()):
            yield text
            break  # the context message opens the conversation; what follows is the conversation
        else:
            if role == "user":
                yield from _appended_details(item.get("content"))
            break


def _appended_details(content: Any) -> Iterator[str]:
    """The `<environment_details>` block a client appends to the user's message as a part of its own, after the
    user's words: never a block written inside those words, which a model writes too when it prompts a
    sub-agent (Kilo's `task`), nor one in a message of a single part."""
    if not isinstance(content, list):
        return
    for part in content[1:]:
        if isinstance(part, Mapping) and part.get("type") in (None, "text", "input_text"):
            found = _DETAILS_PART.fullmatch(str(part.get("text") or "").strip())
            if found is not None:
                yield found.group(1)


_KEPT_CHARS = 1 << 17  # 64 kept texts hold at most 8 MB


@functools.lru_cache(maxsize=64)
def _stated_in(text: str) -> frozenset[str]:
    # Kept: a client sends the same system text (tens of KB) with every request of every session.
    found = set()
    patterns = (*_LINE_PATTERNS, _CODEX_CWD) if "<cwd>" in text else _LINE_PATTERNS
    for pattern in patterns:
        for match in pattern.finditer(text):
            # A statement that names no usable root (`/` itself) still counts: it makes any other one ambiguous.
            found.add(normal_root(match.group(1).strip()) or "/")
    return frozenset(found)


def stated_root(texts: Iterable[str]) -> str | None:
    """The project root the client states in its own parts of a request (`client_parts`), or None (none stated,
    too broad, or ambiguous)."""
    found: set[str] = set()
    for text in texts:
        found |= _stated_in(text) if len(text) <= _KEPT_CHARS else _stated_in.__wrapped__(text)
    if len(found) != 1:
        return None
    (root,) = found
    return None if root_problem(root) is not None else root
