"""Values that are, whole, a path or a URL: judged wherever no rule says what an argument holds.

The arguments of a tool no profile describes, and the arguments of an allowed script, are free values;
one whose whole value names a place outside the project (an absolute path not under a root, `~`, a
`..` escape, a `file://` URI) or a URL the policy refuses is refused. Free text that merely mentions a
path (`read /etc/passwd`) is not a path: it is not one whole value.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from .paths import path_problem
from .schema import UrlRules
from .urls import is_url, url_problem

__all__ = ["content_findings", "value_problem"]

_DRIVE_PATH = re.compile(r"^[A-Za-z]:[\\/]")
_FILE_URI = re.compile(r"^file:", re.IGNORECASE)
_MAX_VALUES = 2000
_MAX_DEPTH = 16


def value_problem(value: str, roots: tuple[str, ...], urls: UrlRules) -> str | None:
    """`absolute_path`, `path_escape`, `url` or None for one whole string value."""
    if not value or "\n" in value or value != value.strip():
        return None
    if _FILE_URI.match(value):
        return "absolute_path"
    if is_url(value):
        return url_problem(value, urls)
    if value.startswith(("/", "\\", "~")) or _DRIVE_PATH.match(value):
        return path_problem(value, roots)
    if " " not in value and ".." in value:
        problem = path_problem(value, roots)
        return problem if problem == "path_escape" else None
    return None


def _strings(value: Any, label: str, depth: int) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield label, value
    elif depth < _MAX_DEPTH and isinstance(value, Mapping):
        for key, inner in value.items():
            yield from _strings(inner, f"{label}.{key}" if label else str(key), depth + 1)
    elif depth < _MAX_DEPTH and isinstance(value, list):
        for index, inner in enumerate(value):
            yield from _strings(inner, f"{label}[{index}]", depth + 1)


def content_findings(arguments: Mapping[str, Any], roots: tuple[str, ...], urls: UrlRules,
                     skip: frozenset[str] = frozenset(),
                     protected: Callable[[str], str | None] | None = None) -> list[tuple[str, str]]:
    """(reason, argument label) for each whole value of the arguments (nested too) that is a refused path or
    URL; arguments named in `skip` (the ones a rule already judges) are left to that rule. `protected`
    judges a whole value that could be a path (one word) against the protected paths."""
    found: list[tuple[str, str]] = []
    for count, (label, value) in enumerate(_strings({k: v for k, v in arguments.items() if k not in skip}, "", 0)):
        if count >= _MAX_VALUES:
            found.append(("bad_arguments", label))  # more values than any tool takes: not judged, refused
            break
        problem = value_problem(value, roots, urls)
        if problem is None and protected is not None and value and not any(c.isspace() for c in value):
            problem = protected(value)
        if problem is not None:
            found.append((problem, label))
    return found
