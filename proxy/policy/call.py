"""One tool call as a check sees it: the tool's map onto the capabilities, its arguments, the project roots.

The terms every check shares (`judge` runs the checks, each lives in its room): a check is a function
`check(call) -> Iterable[Finding]`, reading the call's values by the argument paths of its map
(`call.values("files[].path")`); a value of a type the tool could not use raises `BadArguments`, which makes the
call `malformed` (`bad_arguments`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from .schema import Policy, ToolMap

__all__ = ["BadArguments", "Call", "Check", "Finding", "strings"]


class BadArguments(Exception):
    """An argument a rule reads is not of a type the tool could use."""


class Finding(NamedTuple):
    """What a check found wrong: the reason codes, the shape, and whether it is a rejected command's (whose
    shape names the blocked form and outranks a path problem's)."""

    reasons: tuple[str, ...]
    shape: str | None
    command: bool = False


_MISSING = object()


@dataclass(frozen=True, slots=True)
class Call:
    policy: Policy
    tool: str
    map: ToolMap
    arguments: Mapping[str, Any]
    roots: tuple[str, ...]
    # A command argument found by classification may be absent (nothing runs); a profile's may not.
    command_optional: bool = False
    # Commands allowed verbatim for the client the request comes from (its protocol's, ToolSet.exact).
    exact: tuple[str, ...] = ()

    def values(self, spec: str) -> list[tuple[str, Any]]:
        """The values at an argument path (`file_path`, `operation.path`, `files[].path`, `paths[]`) with the
        label each is reported under; an absent key gives nothing, a wrong container type is bad arguments."""
        arguments = self.arguments
        if "." not in spec and "[" not in spec:  # a top-level argument: most of them
            if not isinstance(arguments, Mapping):
                raise BadArguments
            value = arguments.get(spec)
            return [] if value is None else [(spec, value)]
        tokens = [t for t in spec.replace("[]", ".[]").split(".") if t]
        found: list[tuple[str, Any]] = [("", arguments)]
        for token in tokens:
            step: list[tuple[str, Any]] = []
            for label, value in found:
                if token == "[]":
                    if not isinstance(value, list):
                        raise BadArguments
                    step += [(f"{label}[{i}]", item) for i, item in enumerate(value)]
                else:
                    if not isinstance(value, Mapping):
                        raise BadArguments
                    item = value.get(token, _MISSING)
                    if item is not _MISSING and item is not None:
                        step.append((f"{label}.{token}" if label else token, item))
            found = step
        return found

    def found(self, problem: str, label: str) -> Finding:
        """The finding of one value: its reason, shaped `reason:tool.label`."""
        return Finding((problem,), f"{problem}:{self.tool}.{label}")


def strings(value: Any) -> list[str]:
    """A path or URL argument's strings: a string, or a list of strings."""
    if isinstance(value, str) and "\x00" not in value:
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) and "\x00" not in v for v in value):
        return list(value)
    raise BadArguments


class Check(Protocol):
    def __call__(self, call: Call) -> Iterable[Finding]: ...
