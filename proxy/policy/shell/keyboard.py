"""The keyboard capability of a call: a computer-use or key-typing tool is a shell.

Whatever such a tool types may land in a terminal, so its text is judged as the command line it would be
(one trailing newline is the Enter that runs it, and is dropped first). A key press is judged the same way:
Enter alone submits a line that was judged when it was typed; any other key or combination (`ctrl+c`,
`alt+F2`, a letter spelling a command key by key) cannot be judged and is refused (`unjudgeable`). A
computer-use action that only looks (`screenshot`, `wait`, a mouse move or scroll) types nothing; any other
(`left_click`, `drag`, one not known) may press a button no rule can read, and is refused.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from ..call import BadArguments, Call, Finding
from ..tools.keyboard import KEY_ACTIONS, LOOK_ACTIONS, TYPE_ACTIONS
from .decision import judge_command

__all__ = ["keyboard_findings"]

_ENTER = frozenset({"enter", "return", "kp_enter", "\n", "\r"})
_UNJUDGEABLE = "unjudgeable"


def _one(call: Call, spec: str | None) -> Any:
    if not spec:
        return None
    values = call.values(spec)
    return values[0][1] if values else None


def _typed(call: Call, text: Any) -> Iterator[Finding]:
    if not isinstance(text, str):
        raise BadArguments
    line = text[:-2] if text.endswith("\r\n") else text[:-1] if text.endswith(("\n", "\r")) else text
    if not line:
        return  # nothing typed, or Enter alone
    verdict = judge_command(call.policy, line, roots=call.roots)
    if not verdict.allowed:
        yield Finding(verdict.reasons, verdict.shape, command=True)


def _pressed(call: Call, keys: Any, label: str) -> Iterator[Finding]:
    if isinstance(keys, str):
        keys = [keys]
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        raise BadArguments
    # `Return`, `["ENTER"]`, `Return Return`: Enter, which runs the line typed before (judged then). A key
    # combination (`ctrl+c`, `["CTRL", "C"]`) or any other key is no command line.
    names = [name for key in keys for name in re.split(r"[\s+]+", key.strip().lower()) if name]
    if keys and keys != [""] and (not names or len(keys) > 1 or any(name not in _ENTER for name in names)):
        yield call.found(_UNJUDGEABLE, label)


def keyboard_findings(call: Call) -> Iterator[Finding]:
    keyboard = call.map.keyboard
    if keyboard is None:
        return
    action = _one(call, keyboard.action)
    text = _one(call, keyboard.text)
    keys = _one(call, keyboard.keys)
    if keyboard.action and action is not None:
        if not isinstance(action, str):
            raise BadArguments
        verb = action.strip().lower()
        if verb in LOOK_ACTIONS:
            return
        if verb in TYPE_ACTIONS:
            typed = text if text is not None else keys if isinstance(keys, str) else None
            if typed is None:  # a paste of a clipboard, or keys typed as a list: nothing here says what is typed
                yield call.found(_UNJUDGEABLE, keyboard.text or keyboard.action)
                return
            yield from _typed(call, typed)
            return
        if verb in KEY_ACTIONS:
            yield from _pressed(call, keys if keys is not None else text if text is not None else "",
                                keyboard.keys or keyboard.text or keyboard.action)
            return
        yield call.found(_UNJUDGEABLE, keyboard.action)  # a click, a drag, an action not known
        return
    if text is not None and keyboard.text:
        yield from _typed(call, text)
    if keys is not None and keyboard.keys:
        yield from _pressed(call, keys, keyboard.keys)
