"""What a request offers: its tools by name with their parameter schemas, whatever the API's shape, and
whether a tool no profile knows looks like it runs commands (then the shell rules judge it: fail closed).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, NamedTuple

from ..schema import ShellMap

__all__ = ["Offered", "command_named", "offered_tools", "properties", "shell_like"]

# A string property named like one of these carries a command (`cmd`, `shellCommand`, `commands`, ...).
_COMMAND_WORDS = frozenset({"command", "commands", "cmd", "cmds", "script", "code", "shell", "bash"})
_ARGV_WORDS = frozenset({"args", "argv", "cmd"})
_SHELL_DESCRIPTION = re.compile(
    r"\b(?:execut\w*|run\w*|invok\w*)\b(?:\W+\w+){0,3}?\W+(?:a\s+|the\s+|any\s+)?"
    r"(?:shell|bash|terminal|command[- ]line|(?:shell\s+)?commands?)\b",
    re.IGNORECASE,
)


# Responses API tools that are not functions: the item type the model's action arrives as, and the
# arguments that item carries (proxy/dialects/responses.py hands those items to the judge under these names).
_RESPONSES_BUILTIN_TOOLS = {"local_shell": "local_shell_call", "shell": "shell_call",
                            "apply_patch": "apply_patch_call", "computer_use_preview": "computer_call",
                            "computer": "computer_call"}
_CUSTOM_INPUT = {"type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"]}


class Offered(NamedTuple):
    """One tool as a request offers it: its parameters' JSON schema and description, where given."""

    schema: dict[str, Any] | None = None
    description: str | None = None


def offered_tools(payload: Mapping[str, Any]) -> dict[str, Offered]:
    """The offered tools by name, whatever the request's dialect: chat (`{"type": "function", "function":
    {...}}`), Responses (`{"type": "function", "name", ...}`, `local_shell`, `shell`, `apply_patch`,
    `custom`) and Messages (`{"name", "input_schema"}`)."""
    tools = payload.get("tools")
    out: dict[str, Offered] = {}
    if not isinstance(tools, list):
        return out
    pending = list(tools)
    position = 0
    while position < len(pending):
        tool = pending[position]
        position += 1
        if not isinstance(tool, dict):
            continue
        kind = tool.get("type")
        if kind == "namespace":
            # A Responses namespace groups function tools (Codex's sub-agent tools), each offered by name.
            inner = tool.get("tools")
            if isinstance(inner, list):
                pending.extend(inner)
            continue
        spec = tool.get("function")
        if not isinstance(spec, dict):
            spec = tool
        name = spec.get("name")
        schema = spec.get("parameters", spec.get("input_schema"))
        if not isinstance(name, str):
            if kind not in _RESPONSES_BUILTIN_TOOLS:
                continue
            name = _RESPONSES_BUILTIN_TOOLS[kind]
        elif kind == "custom" and schema is None:
            schema = _CUSTOM_INPUT  # a custom (freeform) tool's call arrives as {"input": text}
        description = spec.get("description")
        out[name] = Offered(schema if isinstance(schema, dict) else None,
                            description if isinstance(description, str) else None)
    return out


def properties(schema: Mapping[str, Any] | None) -> dict[str, Any]:
    props = schema.get("properties") if isinstance(schema, Mapping) else None
    return props if isinstance(props, dict) else {}


def _words(name: str) -> set[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name)
    return {w.lower() for w in re.split(r"[^A-Za-z0-9]+", spaced) if w}


def command_named(name: str) -> bool:
    """An argument named like one that carries a command (`cmd`, `shellCommand`, `commands`)."""
    return bool(_words(name) & _COMMAND_WORDS)


def _stringy(prop: Any) -> str | None:
    """'str' for a string property, 'list' for an array of strings, else None."""
    if not isinstance(prop, dict):
        return None
    kind = prop.get("type")
    kinds = set(kind) if isinstance(kind, list) else {kind}
    if "string" in kinds:
        return "str"
    if "array" in kinds:
        items = prop.get("items")
        if not isinstance(items, dict) or items.get("type") in ("string", None):
            return "list"
    return None


def shell_like(schema: Mapping[str, Any] | None, description: str | None = None,
               arguments: Mapping[str, Any] | None = None) -> ShellMap | None:
    """The shell map of a tool no profile knows, when its schema (or, without one, its call's arguments)
    looks like it runs commands; None otherwise."""
    if schema is None and arguments is not None:
        schema = {"properties": {k: {"type": "string"} if isinstance(v, str) else
                                 {"type": "array"} if isinstance(v, list) else {} for k, v in arguments.items()}}
    props = properties(schema)
    for name, prop in props.items():
        kind = _stringy(prop)
        if kind and _words(name) & _COMMAND_WORDS:
            return _shell_map(name, kind)
    described: list[object] = [description] if description else []
    described += [p.get("description") for p in props.values() if isinstance(p, dict)]
    if not any(isinstance(d, str) and _SHELL_DESCRIPTION.search(d) for d in described):
        return None
    required = schema.get("required") if isinstance(schema, Mapping) else None
    order = [n for n in required if n in props] if isinstance(required, list) else []
    order += [n for n in props if n not in order]
    for name in order:
        kind = _stringy(props[name])
        if kind:
            return _shell_map(name, kind)
    return None


def _shell_map(name: str, kind: str) -> ShellMap:
    """A string is a command line; a list of strings named `args`/`argv`/`cmd` the argv a program gets, any other
    list a list of command lines."""
    if kind != "list":
        return ShellMap(command=name)
    return ShellMap(argv=name) if _words(name) & _ARGV_WORDS else ShellMap(commands=name)
