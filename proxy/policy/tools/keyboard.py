"""Which tools no profile knows type into a screen or a terminal: computer use and key typing are a shell.

A tool is read as one when its schema has an action argument whose values include typing or pressing keys
(`action: {enum: [type, key, left_click, ...]}`), when its name says it types (`type_text`, `send_keys`,
`press_key`, `keyboard`, `xdotool`, `computer`) or works on a terminal (`terminal_send`, `pty_write`,
`send_to_console`, `repl_input`), or - its schema unreadable, as
Anthropic's `computer_20250124` tool is offered - when a call's own `action` is a computer-use action.
Its typed text and keys are then judged by the keyboard rules (proxy/policy/shell/keyboard.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..schema import KeyboardMap
from .offered import _words, properties

__all__ = ["KEY_ACTIONS", "LOOK_ACTIONS", "TYPE_ACTIONS", "keyboard_map", "keyboard_map_of_call"]

# What one call of a computer-use tool does, by its action's name (Anthropic's, OpenAI's, and common aliases).
TYPE_ACTIONS = frozenset({"type", "type_text", "typetext", "input_text", "typewrite", "write", "text", "send_text",
                          "paste", "insert_text"})
KEY_ACTIONS = frozenset({"key", "keys", "keypress", "key_press", "press", "press_key", "presskey", "hotkey",
                         "key_down", "keydown", "key_up", "keyup", "hold_key", "send_keys", "sendkeys",
                         "key_combination"})
LOOK_ACTIONS = frozenset({"screenshot", "get_screenshot", "wait", "cursor_position", "get_cursor_position",
                          "mouse_move", "move", "scroll", "zoom", "noop"})

# Anthropic's and OpenAI's computer-use actions that neither type nor only look.
_POINTER_ACTIONS = frozenset({"click", "left_click", "right_click", "middle_click", "double_click", "triple_click",
                              "left_click_drag", "drag", "left_mouse_down", "left_mouse_up", "mouse_down",
                              "mouse_up"})
_ACTIONS = TYPE_ACTIONS | KEY_ACTIONS | LOOK_ACTIONS | _POINTER_ACTIONS
_ACTION_ARGS = ("action", "type", "operation", "kind", "event", "command")
_TEXT_ARGS = ("text", "input", "chars", "characters", "string", "content", "value", "data", "keystrokes")
_KEY_ARGS = ("keys", "key", "hotkey", "combo", "combination", "shortcut")
_TYPING_NAMES = frozenset({"keyboard", "keystroke", "keystrokes", "xdotool", "typewrite", "sendkeys", "hotkey",
                           "computer", "autogui", "pyautogui"})
_TYPING_PAIRS = ({"type", "text"}, {"type", "keys"}, {"type", "string"}, {"press", "key"}, {"press", "keys"},
                 {"send", "keys"}, {"send", "key"})
# What a tool's name may say it works on that reads typed text as commands: whatever it does there (send, write,
# input, paste), its text and keys are what a shell gets. A tool of these that only reads (`read_terminal_output`)
# has no text or key argument, so nothing of it is judged as typed.
_TERMINALS = frozenset({"terminal", "tty", "pty", "stdin", "console", "repl", "tmux"})


def _named_typing(tool: str) -> bool:
    words = _words(tool)
    return bool(words & (_TYPING_NAMES | _TERMINALS)) or any(pair <= words for pair in _TYPING_PAIRS)


def _values(prop: Any) -> set[str]:
    if not isinstance(prop, Mapping):
        return set()
    found: set[str] = set()
    for key in ("enum", "examples"):
        listed = prop.get(key)
        if isinstance(listed, list):
            found |= {v.strip().lower() for v in listed if isinstance(v, str)}
    if isinstance(prop.get("const"), str):
        found.add(prop["const"].strip().lower())
    for branch_key in ("anyOf", "oneOf"):
        branches = prop.get(branch_key)
        if isinstance(branches, list):
            for branch in branches:
                found |= _values(branch)
    return found


def keyboard_map(tool: str, schema: Mapping[str, Any] | None) -> KeyboardMap | None:
    """The keyboard map of a tool no profile knows, from its name and readable schema; None: it types nothing."""
    props = properties(schema)
    action = next((name for name in _ACTION_ARGS if _values(props.get(name)) & (TYPE_ACTIONS | KEY_ACTIONS)), None)
    return _mapped(tool, action, props)


def keyboard_map_of_call(tool: str, arguments: Mapping[str, Any]) -> KeyboardMap | None:
    """The keyboard map of one call of a tool whose schema could not be read: its `action` is a computer-use
    action, or its name says it types."""
    action = next((name for name in _ACTION_ARGS if isinstance(arguments.get(name), str)
                   and arguments[name].strip().lower() in _ACTIONS), None)
    return _mapped(tool, action, arguments)


def _mapped(tool: str, action: str | None, names: Mapping[str, Any]) -> KeyboardMap | None:
    """The map from the action argument found (or None) and the argument names there are (a schema's
    properties or a call's arguments); None where nothing says the tool types."""
    if action is None and not _named_typing(tool):
        return None
    text = next((name for name in _TEXT_ARGS if name in names and name != action), None)
    keys = next((name for name in _KEY_ARGS if name in names and name != action), None)
    if action is None and text is None and keys is None:
        return None
    return KeyboardMap(action=action, text=text, keys=keys)
