"""The top-level module names Python source imports, read as text (never imported, never run).

Used for the project's scripts (proxy/policy/paths/imported.py) and for every file of an environment's installed
distributions (proxy/policy/paths/importable.py, which runs `scan` in a child process: this module imports
only the standard library, so it also runs as a script).

Read: `import a.b as c, d`, `from a.b import c` (absolute only: a relative import names the file's own
package), wherever they stand - indented in a function, after `try:` or `;` -, outside comments and
docstrings; a call whose function name holds `import` or is `find_spec` with a literal name
(`importlib.import_module("x")`, `__import__("x")`, `find_spec("x")`, `import_optional_dependency("x")`);
and a loop over literal names feeding such a call (`for lib in ("chardet", "charset_normalizer"):
import_module(lib)`). A name computed any other way is not seen (a documented limit). A text pass, not the
parser: an environment holds tens of megabytes of source, read in a second this way.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Iterable

__all__ = ["imported_names", "scan", "stdlib_names"]

# Every statement or call that imports holds one of these words: each occurrence's line is read.
_WORD = re.compile(rb"import|find_spec")
_STATEMENT = re.compile(rb"(?:^|[;:])[ \t]*(?:from[ \t]+([A-Za-z_][A-Za-z0-9_]*)[A-Za-z0-9_.]*[ \t]+import\b"
                        rb"|import[ \t]+([^#;]+))")
_LITERAL_CALL = re.compile(rb"""(?:import|find_spec)\w*[ \t]*\([ \t]*[rbuRBU]?['"]([A-Za-z_][A-Za-z0-9_]*)""")
_NAMED_CALL = re.compile(rb"(?:import|find_spec)\w*[ \t]*\([ \t]*([A-Za-z_][A-Za-z0-9_]*)[ \t]*[,)]")
_LOOP = re.compile(rb"\bfor[ \t]+([A-Za-z_][A-Za-z0-9_]*)[ \t]+in[ \t]+[(\[{]([^)\]}]*)[)\]}]")
_ASSIGNED = re.compile(rb"""\b([A-Za-z_][A-Za-z0-9_]*)[ \t]*=[ \t]*[rbuRBU]?['"]([A-Za-z_][A-Za-z0-9_.]*)['"]""")
_STRING = re.compile(rb"""['"]([A-Za-z_][A-Za-z0-9_]*)(?:\.[A-Za-z_][A-Za-z0-9_]*)*['"]""")
_DOCSTRING_QUOTES = (b'"""', b"'''")
_LOOP_LINES = 4  # how far above a call by variable its loop over literal names may stand
_MAX_FILE_BYTES = 8 << 20

# Standard library modules of the Pythons after the oldest one the proxy runs on (3.11): a project's
# interpreter may be newer than the proxy's own (`sys.stdlib_module_names` is the proxy's).
_LATER_STDLIB = frozenset({
    "_android_support", "_apple_support", "_colorize", "_hmac", "_interpchannels", "_interpqueues",
    "_interpreters", "_ios_support", "_opcode_metadata", "_pydatetime", "_pylong", "_pyrepl", "_remote_debugging",
    "_suggestions", "_sysconfig", "_tokenize", "_types", "_wmi", "_zstd", "annotationlib", "compression",
})


def stdlib_names() -> frozenset[str]:
    """The standard library's top-level names as far as this process knows them: its own, its built-in
    modules, and those the newer Pythons added."""
    return frozenset(sys.stdlib_module_names) | frozenset(sys.builtin_module_names) | _LATER_STDLIB


def _quoted_spans(data: bytes) -> list[tuple[int, int]]:
    """Where triple-quoted strings (docstrings, text blocks) stand, approximately: from each opening
    triple quote to the next of the same kind."""
    spans: list[tuple[int, int]] = []
    for quote in _DOCSTRING_QUOTES:
        start = data.find(quote)
        while start >= 0:
            end = data.find(quote, start + 3)
            if end < 0:
                spans.append((start, len(data)))
                break
            spans.append((start, end + 3))
            start = data.find(quote, end + 3)
    spans.sort()
    return spans


def _inside(spans: list[tuple[int, int]], position: int, hint: list[int]) -> bool:
    """Whether `position` lies in one of `spans` (positions come in increasing order: `hint` walks along)."""
    index = hint[0]
    while index < len(spans) and spans[index][1] <= position:
        index += 1
    hint[0] = index
    return index < len(spans) and spans[index][0] <= position


def _first_names(listed: bytes) -> Iterable[bytes]:
    for part in listed.split(b","):
        words = part.strip().strip(b"()\\").split()
        if words:
            yield words[0].split(b".")[0]


def imported_names(data: bytes) -> set[str]:
    """The top-level names `data` (Python source) imports by name."""
    found: set[bytes] = set()
    spans = _quoted_spans(data) if b'"""' in data or b"'''" in data else []
    hint = [0]
    line_start = -1
    for match in _WORD.finditer(data):
        start = data.rfind(b"\n", 0, match.start()) + 1
        if start == line_start:
            continue
        line_start = start
        if spans and _inside(spans, match.start(), hint):
            continue
        end = data.find(b"\n", match.end())
        line = data[start:end if end >= 0 else len(data)]
        comment = line.find(b"#")
        code = line if comment < 0 else line[:comment]
        for name, listed in _STATEMENT.findall(code):
            if name:
                found.add(name)
            else:
                found.update(_first_names(listed))
        found.update(_LITERAL_CALL.findall(code))
        for variable in _NAMED_CALL.findall(code):
            found.update(_loop_names(data, start, variable, code))
    return {text for name in found if (text := name.decode("ascii", "replace")).isidentifier()}


def _loop_names(data: bytes, start: int, variable: bytes, line: bytes) -> set[bytes]:
    """The literal names a call's variable takes from a loop or an assignment on its line or the few above."""
    above = start
    for _ in range(_LOOP_LINES):
        if above <= 0:
            break
        above = data.rfind(b"\n", 0, above - 1) + 1
    region = data[above:start] + line
    names: set[bytes] = set()
    for target, items in _LOOP.findall(region):
        if target == variable:
            names.update(_STRING.findall(items))
    for target, value in _ASSIGNED.findall(region):
        if target == variable:
            names.add(value.split(b".")[0])
    return names


def _pth_names(path: str) -> set[str]:
    """The modules a `.pth` file's `import` lines load at every start."""
    names: set[str] = set()
    try:
        with open(path, "rb") as handle:
            data = handle.read(_MAX_FILE_BYTES)
    except OSError:
        return names
    for line in data.splitlines():
        if line.startswith((b"import ", b"import\t")):
            names |= imported_names(line)
    return names


def _own_package(site: str, parent: str) -> str | None:
    """The top-level package a file under `site` belongs to (its self-imports are no other importer's)."""
    relative = os.path.relpath(parent, site)
    return None if relative == "." else relative.split(os.sep, 1)[0]


class _Reading:
    def __init__(self) -> None:
        self.names: set[str] = set()
        self.files = 0
        self.bytes = 0

    def tree(self, top: str, skipped: frozenset[str]) -> None:
        """Every Python file under `top` (a directory on `sys.path`), but the directories named in `skipped`."""
        for parent, subdirs, filenames in os.walk(top):
            subdirs[:] = [d for d in subdirs if d not in skipped and not d.endswith((".dist-info", ".egg-info"))]
            own = _own_package(top, parent)
            for filename in filenames:
                if not filename.endswith((".py", ".pyw")):
                    continue
                try:
                    with open(os.path.join(parent, filename), "rb") as handle:
                        data = handle.read(_MAX_FILE_BYTES)
                except OSError:
                    continue
                self.files += 1
                self.bytes += len(data)
                found = imported_names(data)
                found.discard(own or "")
                self.names |= found


# Not read in the standard library's directory: other installs, and the test suites nothing imports by name.
_STDLIB_SKIPPED = frozenset({"__pycache__", "site-packages", "dist-packages", "test", "tests", "idle_test",
                             "idlelib", "turtledemo", "lib2to3", "ensurepip"})


def scan(site_dirs: Iterable[str], stdlib_dirs: Iterable[str] = ()) -> dict[str, object]:
    """Every top-level name the installed distributions in `site_dirs` and the standard library in
    `stdlib_dirs` import (each file read as text: `copy` tries `org.python.core`), and the standard library's
    names (this process's, and those found in `stdlib_dirs`), with what was read."""
    started = time.perf_counter()
    reading = _Reading()
    distributions = 0
    for site in site_dirs:
        try:
            entries = os.listdir(site)
        except OSError:
            continue
        distributions += sum(1 for entry in entries if entry.endswith((".dist-info", ".egg-info")))
        for entry in entries:
            if entry.endswith(".pth"):
                reading.names |= _pth_names(os.path.join(site, entry))
        reading.tree(site, frozenset({"__pycache__"}))
    stdlib = set(stdlib_names())
    for place in stdlib_dirs:
        try:
            entries = os.listdir(place)
        except OSError:
            continue
        for entry in entries:
            name = entry.split(".", 1)[0]
            if name.isidentifier() and entry not in ("site-packages", "dist-packages"):
                stdlib.add(name)
        reading.tree(place, _STDLIB_SKIPPED)
    return {"imported": sorted(reading.names), "stdlib": sorted(stdlib), "distributions": distributions,
            "files": reading.files, "bytes": reading.bytes, "seconds": round(time.perf_counter() - started, 3)}


if __name__ == "__main__":  # python -I -S import_text.py '{"site": [...], "stdlib": [...]}'
    request = json.loads(sys.argv[1])
    json.dump(scan(request["site"], request.get("stdlib", ())), sys.stdout)
