"""Values that are, whole, a path or a URL: judged wherever no rule says what an argument holds.

The arguments of a tool no profile describes, and the arguments of an allowed script, are free values;
one whose whole value names a place outside the project (an absolute path not under a root, `~`, a
`..` escape, a `file://` URI) or a URL the policy refuses is refused. Free text that merely mentions a
path (`read /etc/passwd`) is not a path: it is not one whole value.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ..paths.inside import LOOKALIKES, VARIABLE_PATH, path_problem
from ..schema import UrlRules
from ..urls.rules import is_url, url_problem

__all__ = ["content_findings", "value_problem"]

_DRIVE_PATH = re.compile(r"^[A-Za-z]:[\\/]")
_FILE_URI = re.compile(r"^file:", re.IGNORECASE)
# A bare host that is an address or a local name, with a port or a path (`127.0.0.1:8080`, `[::1]/x`,
# `localhost:3000`, `169.254.169.254/latest`): a client that completes it to a URL fetches it.
_BARE_HOST = re.compile(r"^(?:\[[0-9A-Fa-f:.]+\]|[0-9]+(?:\.[0-9]+){3}|localhost)(?::[0-9]*)?(?:[/?#]|$)|"
                        r"^[A-Za-z0-9-]+\.[A-Za-z0-9.-]+:[0-9]+(?:[/?#]|$)", re.IGNORECASE)
# One value can hold several (`--out=src,/etc/passwd`, `key=/etc/x`, curl's `@/etc/passwd`).
_PIECES = re.compile(r"[=,;]|^@")
_MARKERS = re.compile(r"[/\\~$%:.=,;@]")
_INDEX = re.compile(r"\[[0-9]+\]")
_MAX_VALUES = 2000
_MAX_DEPTH = 16


def value_problem(value: str, roots: tuple[str, ...], urls: UrlRules) -> str | None:
    """`absolute_path`, `path_escape`, `url` or None for one whole string value: the value as sent, with the
    surrounding whitespace a tool strips, and with Unicode look-alikes of `/`, `\\` and `.` folded; a value
    without spaces that is not a URL is also read piece by piece (`a=/x`, `a,/x`, `@/x`)."""
    if value.isascii() and not _MARKERS.search(value):
        return None  # no separator, dot, colon, tilde or variable: no spelling of a place (most values)
    value = value.strip()
    if not value or "\n" in value:
        return None
    problem = _one_value(value, roots, urls)
    if problem is None and not value.isascii():
        folded = unicodedata.normalize("NFKC", value.translate(LOOKALIKES))
        problem = _one_value(folded, roots, urls) if folded != value else None
    if problem is None and _PIECES.search(value) and not is_url(value) and not any(c.isspace() for c in value):
        for piece in _PIECES.split(value):
            if piece and piece != value and (problem := value_problem(piece, roots, urls)) is not None:
                break
    return problem


def _one_value(value: str, roots: tuple[str, ...], urls: UrlRules) -> str | None:
    if _FILE_URI.match(value):
        return "absolute_path"
    if is_url(value):
        return url_problem(value, urls)
    if value.startswith(("/", "\\", "~")) or _DRIVE_PATH.match(value):
        return path_problem(value, roots)
    if VARIABLE_PATH.match(value):
        return "path_escape"
    if _BARE_HOST.match(value):
        return url_problem("http://" + value, urls)
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
    URL; the values at the argument paths in `skip` (`files.path`, indices left out: the ones a rule
    already judges) are left to that rule, and only those (`files[0].note` beside them is not). `protected`
    judges a whole value that could be a path (one word) against the protected paths."""
    found: list[tuple[str, str]] = []
    for count, (label, value) in enumerate(_strings(arguments, "", 0)):
        if count >= _MAX_VALUES:
            found.append(("bad_arguments", label))  # more values than any tool takes: not judged, refused
            break
        if skip and (_INDEX.sub("", label) if "[" in label else label) in skip:
            continue
        problem = value_problem(value, roots, urls)
        if problem is None and protected is not None and value and not any(c.isspace() for c in value):
            problem = protected(value)
        if problem is not None:
            found.append((problem, label))
    return found
