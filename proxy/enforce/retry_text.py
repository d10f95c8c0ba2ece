"""What of a delivered retry's text is new to the client, and where the proxy's own lines go in a turn's text.

A streamed turn whose first attempt was refused has already shown the client that attempt's text (its
narration, live); the attempt that is delivered says what it says, which often begins with the same narration.
Per text field (chat `content` and the thinking's field; a Responses `message` and `reasoning` item; a Messages
`text` and `thinking` block) the client holds `held`, and the delivered attempt says `said`:

- `said`, leading whitespace aside, begins with `held`, whitespace around it aside: the client has that much, and
  gets only what follows (its leading whitespace dropped where `held` already ends in whitespace);
- `said`, trailing whitespace aside, is a beginning of `held` (the retry says less of the same): nothing is new;
- anything else is new as a whole; a chat field gets it after a paragraph break where neither side has one (the
  structured routes put it in an item or block of its own).

Exact characters, no other normalisation: text that differs is the model saying something else, and is sent.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["Continuation", "continuation", "line_break"]


class Continuation(NamedTuple):
    """The client gets `separator + said[skip:]`."""

    skip: int
    separator: str


def continuation(held: str, said: str, *, separate: bool = True) -> Continuation:
    """What of `said` the client, holding `held` of the field, still gets (the module's rule). `separate`: a text
    that does not continue `held` gets a paragraph break before it where neither side has whitespace there."""
    core = held.strip()
    if not core:
        return Continuation(0, "")
    start = len(said) - len(said.lstrip())
    if said.startswith(core, start):
        skip = start + len(core)
        if held[-1].isspace():
            skip += len(said[skip:]) - len(said[skip:].lstrip())
        return Continuation(skip, "")
    if core.startswith(said.strip()):
        return Continuation(len(said), "")
    if separate and said and not held[-1].isspace() and not said[0].isspace():
        return Continuation(0, "\n\n")
    return Continuation(0, "")


def line_break(held: str) -> str:
    """What goes before a line the proxy adds to a text the client holds, so that it stands as a paragraph of its
    own: nothing at the start, else up to a blank line."""
    if not held or held.endswith("\n\n"):
        return ""
    return "\n" if held.endswith("\n") else "\n\n"
