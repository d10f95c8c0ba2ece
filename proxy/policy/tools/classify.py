"""What a tool no profile describes can do, read from its parameter schema: fail closed on tools.

A tool passes under `other_tools: allow` only when its schema was read and no argument can carry a
command, a file path, a directory, a URL or patch text. Each argument is read by its name, its
description, its `format` and its shape (strings, lists of strings, nested objects and arrays of objects,
`anyOf [string, null]` optionals, local `$ref`s). A schema that cannot be read this way (none, no
properties, a top-level `$ref`/`anyOf`/`allOf`/`oneOf`, open `additionalProperties`) is not waved
through: such a tool is governed by what each call's arguments contain (`classify_arguments`).

Classification runs once per offered tool list (the profile selection is cached by it), never per call,
except for unreadable schemas, whose calls are read by their own arguments.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..schema import ShellMap, ToolMap
from .offered import _ARGV_WORDS, _SHELL_DESCRIPTION, _words

__all__ = ["Arg", "Classification", "Declared", "classify", "classify_arguments", "misfits"]

_COMMAND_WORDS = frozenset({"command", "commands", "cmd", "cmds", "script", "scripts", "code", "shell", "bash",
                            "argv", "exec", "shellcommand", "run", "execute", "executable", "program", "cmdline",
                            "commandline", "sh", "zsh", "powershell", "pwsh", "terminal", "python", "javascript",
                            "snippet"})
# Words of an argument name that make it a file or directory (`filePath`, `dir_path`, `notebook_path`,
# `cwd`, `workdir`, `filepath`, `paths`, `target_file`).
_PATH_WORDS = frozenset({"path", "paths", "file", "files", "filename", "filenames", "filepath", "filepaths",
                         "dir", "dirs", "dirpath", "directory", "directories", "folder", "folders", "cwd",
                         "workdir", "workdirs", "root", "notebook", "pathname", "dirname", "destination",
                         "src", "dst", "dest"})
_PATH_SUFFIXES = ("path", "paths", "file", "files", "dir", "directory", "folder", "filename", "filepath", "cwd")
_NOT_PATH = frozenset({"profile", "profiles"})
# `shell_id`, `command_name`: a handle on a command, not one.
_ID_WORDS = frozenset({"id", "ids", "name", "names", "type", "kind", "index"})
_WORKDIR_WORDS = frozenset({"cwd", "workdir", "directory", "dir", "folder", "working", "workingdirectory"})
_URL_WORDS = frozenset({"url", "urls", "uri", "uris", "link", "links", "href", "endpoint", "website", "webpage",
                        "homepage"})
_PATCH_WORDS = frozenset({"patch", "diff", "patchtext", "patches", "diffs", "unidiff"})
# A filter that chooses files (a grep's `include`, `file_pattern`, a glob tool's `glob`): judged as a glob.
_GLOB_WORDS = frozenset({"glob", "globs", "include", "includes", "wildcard", "wildcards", "globpattern"})
_GLOB_DESCRIPTION = re.compile(r"\b(?:glob|wildcard|fnmatch|file\s+pattern|shell\s+(?:regex|pattern))", re.I)
_URL_FORMATS = frozenset({"uri", "url", "iri", "uri-reference", "iri-reference", "uri-template"})
_PATH_FORMATS = frozenset({"path", "file-path", "filepath", "directory", "file"})
_PATH_DESCRIPTION = re.compile(r"\b(?:(?:absolute|relative)\s+path|path\s+(?:to|of)\b|file\s*path|"
                               r"(?:file|directory|folder)\s+(?:name|path|to)\b|working\s+directory)", re.I)
_URL_DESCRIPTION = re.compile(r"\b(?:url|uri|web\s*page|web\s+address|link\s+to)\b", re.I)
_PATCH_DESCRIPTION = re.compile(r"\b(?:patch|unified\s+diff|diff\s+to\s+apply)\b", re.I)
# A list of strings under one of these names is an argv: the words a program gets (Agno's `run_shell_command
# {args}`), not a list of command lines.
# A command argument whose description lists the values it takes picks an operation (Strands' `editor {command:
# "view" | "create" | ...}`): a list of two or more quoted names introduced as its choices ("The commands to run:
# `view`, `create`, ..."), not shown as examples of commands.
_CHOICE_LIST = re.compile(
    r"\b(?:one of|either|options?|choices?|operations?|actions?|commands?|modes?|sub-?commands?|values?|allowed|"
    r"supported|available)\b[^:\n.`'\"]{0,40}:?\s*((?:[`'\"][A-Za-z_][A-Za-z0-9_-]{0,39}[`'\"]"
    r"(?:\s*(?:,|\||/|\bor\b|\band\b)\s*)*){2,})", re.I)
_CHOICE = re.compile(r"[`'\"]([A-Za-z_][A-Za-z0-9_-]{0,39})[`'\"]")
_NOT_CHOICES = re.compile(r"\b(?:e\.g\.|eg\b|for example|for instance|such as|shell|bash|terminal|command[- ]line|"
                          r"program|executable)", re.I)
# The choices of such an argument under which its tool only reads its paths.
# Not `get`, `fetch` or `download`: they may bring something to the path named, a write (fails closed as one).
_READ_CHOICES = frozenset({"view", "read", "list", "ls", "show", "find", "find_line", "search", "grep", "cat",
                           "stat", "exists", "info", "describe", "print", "display", "peek", "head", "tail", "count"})
_MAX_DEPTH = 8
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_$@-]+")
# Keywords under which an object takes arguments its `properties` do not list.
_OPEN_KEYWORDS = ("additionalProperties", "patternProperties", "unevaluatedProperties", "dependentSchemas",
                  "dependencies", "propertyNames", "if", "then", "else", "not")
_MAX_PROPERTIES = 400


# Per argument what its schema declares it to be (`Arg`).
Declared = Mapping[str, "Arg"]


@dataclass(frozen=True, slots=True)
class Classification:
    """What one tool's arguments can carry. `map` is the tool map that governs it (None: nothing found);
    `readable` False: the schema could not be read and each call's arguments decide. `declared`: what the
    schema says each top-level argument is, so that a call sending something else (an undeclared argument,
    a value outside an `enum`, a string where an object was declared) has that argument read by itself."""

    readable: bool
    maps: tuple[ToolMap, ...] = ()
    declared: Declared | None = None
    unaddressable: bool = False

    @property
    def capable(self) -> bool:
        return any(m.governed for m in self.maps)


class _Unreadable(Exception):
    """The schema says its arguments are something this reading cannot enumerate."""


def _name_words(name: str) -> set[str]:
    words = _words(name)
    return words | {"".join(sorted(words, key=name.lower().find))} if words else words


def _kinds(prop: Mapping[str, Any]) -> set[str]:
    kind = prop.get("type")
    if isinstance(kind, list):
        return {k for k in kind if isinstance(k, str)}
    return {kind} if isinstance(kind, str) else set()


@dataclass
class _Walk:
    defs: Mapping[str, Any]
    shell: list[tuple[str, str]]  # (kind "command" | "commands", spec)
    paths: list[str]
    workdirs: list[str]
    urls: list[str]
    patch: list[str]
    texts: list[tuple[str, str]]  # (spec, kind) of every string argument, for the description heuristic
    globs: list[str] = field(default_factory=list)
    # Command-named arguments that pick an operation (an `enum`, or the values their description lists), by spec.
    choices: dict[str, list[str]] = field(default_factory=dict)
    described: bool = True  # whether descriptions count (not for a known tool's prose: names, formats)
    count: int = 0

    def resolve(self, prop: Any, depth: int) -> Mapping[str, Any]:
        seen = 0
        while isinstance(prop, Mapping) and "$ref" in prop:
            ref = prop["$ref"]
            seen += 1
            if not isinstance(ref, str) or seen > _MAX_DEPTH:
                raise _Unreadable
            match = re.fullmatch(r"#/(?:\$defs|definitions)/([^/]+)", ref)
            target = self.defs.get(match.group(1)) if match else None
            if not isinstance(target, Mapping):
                raise _Unreadable
            prop = target
        if not isinstance(prop, Mapping):
            raise _Unreadable
        return prop

    def branches(self, prop: Mapping[str, Any], depth: int) -> list[Mapping[str, Any]]:
        """A property's alternatives (`anyOf`/`oneOf`, each of `allOf`), resolved; null branches dropped."""
        out: list[Mapping[str, Any]] = []
        for key in ("anyOf", "oneOf", "allOf"):
            found = prop.get(key)
            if found is None:
                continue
            if not isinstance(found, list):
                raise _Unreadable
            for branch in found:
                branch = self.resolve(branch, depth)
                if _kinds(branch) != {"null"}:
                    out.extend(self.branches(branch, depth))
        rest = {k: v for k, v in prop.items() if k not in ("anyOf", "oneOf", "allOf")}
        if not out or _kinds(rest) or "properties" in rest or "items" in rest:
            out.append(rest)
        return out

    def argument(self, name: str, spec: str, prop: Any, depth: int) -> None:
        self.count += 1
        if depth > _MAX_DEPTH or self.count > _MAX_PROPERTIES:
            raise _Unreadable
        prop = self.resolve(prop, depth)
        branches = self.branches(prop, depth)
        words = _name_words(name)
        description = " ".join(str(b.get("description", "")) for b in [prop, *branches]
                               if b.get("description")) if self.described else ""
        formats = {str(b.get("format", "")).lower() for b in branches}
        string = list_of_strings = False
        closed: list[str] = []
        for branch in branches:
            if "enum" in branch or "const" in branch:
                enum = branch.get("enum")
                closed += [v for v in (enum if isinstance(enum, list) else [branch.get("const")]) if isinstance(v, str)]
                continue  # a closed set of values carries no free text
            kinds = _kinds(branch)
            if "string" in kinds or (not kinds and "properties" not in branch and "items" not in branch):
                string = True
            if "array" in kinds or "items" in branch or "prefixItems" in branch:
                items = branch.get("items")
                prefix = branch.get("prefixItems")
                listed: list[Any] = [items] if isinstance(items, Mapping) else list(items) if isinstance(
                    items, list) else []
                listed += prefix if isinstance(prefix, list) else []
                each = [b for item in listed for b in self.branches(self.resolve(item, depth), depth)]
                for item in each or [{}]:
                    if "properties" in item or "object" in _kinds(item):
                        self.object(item, f"{spec}[]", depth + 1)
                    elif ("string" in _kinds(item) or not _kinds(item)) and "enum" not in item:
                        list_of_strings = True
            if "properties" in branch or "object" in kinds:
                self.object(branch, spec, depth + 1)
        if words & _COMMAND_WORDS and not list_of_strings:
            own = " ".join(str(b.get("description", "")) for b in [prop, *branches] if b.get("description"))
            offered = _choices(own) if string and self.described else []
            if (closed and not string) or offered:
                self.choices[spec] = [*closed, *offered]  # it picks an operation: not a command line
                return
        if not (string or list_of_strings):
            return
        target = spec  # a string or a list of strings, whichever the call sends
        argv = list_of_strings and bool(words & _ARGV_WORDS)
        if words & _COMMAND_WORDS and not words & (_PATH_WORDS | _ID_WORDS):
            self.shell.append(("argv" if argv else "commands" if list_of_strings else "command", spec))
            return
        if words & _PATCH_WORDS or (description and _PATCH_DESCRIPTION.search(description)
                                    and not words & (_URL_WORDS | _PATH_WORDS)):
            self.patch.append(spec)
            return
        if words & _URL_WORDS or formats & _URL_FORMATS or (description and _URL_DESCRIPTION.search(description)
                                                           and not words & _PATH_WORDS):
            self.urls.append(target)
            return
        if (words & _GLOB_WORDS or ("pattern" in words and words & (_PATH_WORDS | {"name"}))
                or (description and _GLOB_DESCRIPTION.search(description))):
            self.globs.append(target)
            return
        path_named = bool(words & _PATH_WORDS) or any(
            w.endswith(_PATH_SUFFIXES) and w not in _NOT_PATH for w in words)
        if path_named or formats & _PATH_FORMATS or (description and _PATH_DESCRIPTION.search(description)):
            if words & _WORKDIR_WORDS and string:
                self.workdirs.append(spec)
            self.paths.append(target)
            return
        kind = "argv" if argv else "commands" if list_of_strings else "command"
        self.texts.append((spec, kind))
        if description and _SHELL_DESCRIPTION.search(description):
            self.shell.append((kind, spec))

    def object(self, schema: Mapping[str, Any], prefix: str, depth: int) -> None:
        props = schema.get("properties")
        if props is None:
            props = {}
        if not isinstance(props, Mapping):
            raise _Unreadable
        if any(schema.get(key) not in (None, False) for key in _OPEN_KEYWORDS):
            raise _Unreadable  # names the schema does not list can carry anything
        for name, prop in props.items():
            # A name an argument path cannot spell (`file.path`, `a b`) makes no spec a rule could read.
            part = str(name) if _PLAIN_NAME.fullmatch(str(name)) else "\x00"
            self.argument(str(name), f"{prefix}.{part}" if prefix else part, prop, depth)


def _choices(description: str) -> list[str]:
    """The values a command-named argument's own description offers as its choices; [] when it names none, or
    shows examples of commands instead."""
    if not description or _NOT_CHOICES.search(description):
        return []
    found = _CHOICE_LIST.search(description)
    names = list(dict.fromkeys(_CHOICE.findall(found.group(1)))) if found else []
    return names if len(names) >= 2 else []


def _spec_ok(spec: str) -> bool:
    return re.fullmatch(r"[A-Za-z0-9_$@-]+(\[\]|\.[A-Za-z0-9_$@-]+)*(\[\])?", spec) is not None


def classify(schema: Mapping[str, Any] | None, description: str | None = None, *,
             described: bool = True) -> Classification:
    """The classification of a tool no profile knows, from its offered schema and description.
    `described` False reads names, formats and shapes only (a known tool's prose mentions URLs and paths
    its arguments do not hold: Claude Code's `Bash.description`)."""
    if not isinstance(schema, Mapping):
        return Classification(readable=False)
    if any(k in schema for k in ("$ref", "anyOf", "allOf", "oneOf", "not", "if")):
        return Classification(readable=False)
    props = schema.get("properties")
    if props == {} and schema.get("additionalProperties") is False:
        return Classification(readable=True, declared={})  # a tool without arguments
    if not isinstance(props, Mapping) or not props:
        return Classification(readable=False)
    defs: dict[str, Any] = {}
    for key in ("$defs", "definitions"):
        if isinstance(schema.get(key), Mapping):
            defs.update(schema[key])
    walk = _Walk(defs=defs, shell=[], paths=[], workdirs=[], urls=[], patch=[], texts=[], described=described)
    try:
        walk.object(schema, "", 0)
    except _Unreadable:
        return Classification(readable=False)
    if not walk.shell and described and description and _SHELL_DESCRIPTION.search(description) and walk.texts:
        # "Executes a shell command": the first required string argument carries it.
        required = schema.get("required")
        order = [s for s, _ in walk.texts if isinstance(required, list) and s in required]
        order += [s for s, _ in walk.texts if s not in order]
        kind = dict(walk.texts)[order[0]]
        walk.shell.append((kind, order[0]))
    specs = [s for _, s in walk.shell] + walk.paths + walk.urls + walk.patch
    if not all(_spec_ok(s) for s in specs):
        # An argument that can carry a command, path or URL under a name no argument path can address
        # (`shell command`, `a.b`): not judged by rules, so a call that uses one is refused.
        return Classification(readable=False, unaddressable=True)
    declared = _declared(props, walk)
    for spec, values in walk.choices.items():  # a value it does not list is read by itself (`misfits`)
        if spec in declared:
            declared[spec] = Arg(frozenset({"string"}), frozenset(values))
    return Classification(readable=True, maps=_tool_maps(walk), declared=declared)


_JSON_KINDS: dict[type, tuple[str, ...]] = {str: ("string",), bool: ("boolean",), int: ("integer", "number"),
                                            float: ("number",), list: ("array",), dict: ("object",),
                                            type(None): ("null",)}
_FITS = object()


@dataclass(frozen=True, slots=True)
class Arg:
    """What a schema declares one argument to be: its JSON types (empty: any), its closed set of values,
    the arguments of an object (`props`) and what an array holds (`items`)."""

    kinds: frozenset[str] = frozenset()
    values: frozenset[Any] | None = None
    props: Mapping[str, Arg] | None = None
    items: Arg | None = None


def _declared(props: Mapping[str, Any], walk: _Walk, depth: int = 0) -> dict[str, Arg]:
    return {str(name): _arg(prop, walk, depth) for name, prop in props.items()}


def _arg(prop: Any, walk: _Walk, depth: int) -> Arg:
    try:
        branches = walk.branches(walk.resolve(prop, depth), depth)
    except _Unreadable:
        return Arg()
    kinds: set[str] = set()
    any_kind = False
    values: set[Any] | None = set()
    children: dict[str, Arg] | None = None
    items: list[Any] = []
    for branch in branches:
        found = _kinds(branch)
        kinds |= found
        any_kind = any_kind or not found
        closed = branch.get("enum") if isinstance(branch.get("enum"), list) else (
            [branch["const"]] if "const" in branch else None)
        if closed is None or values is None:
            values = None
        else:
            values.update(v for v in closed if isinstance(v, str | int | float | bool) or v is None)
        if depth < _MAX_DEPTH and ("object" in found or "properties" in branch):
            inner = branch.get("properties")
            children = {**(children or {}), **(_declared(inner, walk, depth + 1) if isinstance(inner, Mapping) else {})}
        if depth < _MAX_DEPTH and ("array" in found or "items" in branch or "prefixItems" in branch):
            for key in ("items", "prefixItems"):
                listed = branch.get(key)
                items += [listed] if isinstance(listed, Mapping) else listed if isinstance(listed, list) else []
    item = None
    if items:
        merged = [_arg(i, walk, depth + 1) for i in items]
        item = merged[0] if len(merged) == 1 else Arg()  # several item schemas: any item is read by itself
    return Arg(frozenset() if any_kind else frozenset(kinds), frozenset(values) if values is not None else None,
               children, item)


def misfits(declared: Declared, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The parts of a call its schema does not describe, nested ones too: an undeclared argument, a value
    outside a closed set, or one of another JSON type than declared, each kept at its place (so that
    `classify_arguments` names it by its path: `opts.command`, `items[].command`)."""
    out: dict[str, Any] = {}
    for name, value in arguments.items():
        spec = declared.get(name)
        found = value if spec is None else _misfit(spec, value)
        if found is not _FITS:
            out[name] = found
    return out


def _misfit(spec: Arg, value: Any) -> Any:
    if spec.values is not None:
        try:
            if value in spec.values and not isinstance(value, bool | list | dict):
                return _FITS
        except TypeError:
            pass
        return value
    if spec.kinds and not spec.kinds.intersection(_JSON_KINDS.get(type(value), ())):
        return value
    if isinstance(value, Mapping) and spec.props is not None:
        inner = misfits(spec.props, value)
        return inner if inner else _FITS
    if isinstance(value, list) and spec.items is not None:
        found = [m for m in (_misfit(spec.items, v) for v in value) if m is not _FITS]
        return found if found else _FITS
    return _FITS


def _tool_maps(walk: _Walk) -> tuple[ToolMap, ...]:
    if not (walk.shell or walk.paths or walk.urls or walk.patch or walk.globs):
        return ()
    paths = list(walk.paths)
    shells: list[ShellMap] = []
    for index, (kind, spec) in enumerate(walk.shell):
        # The first command argument takes the tool's working directory; every other one is judged too.
        workdir = walk.workdirs[0] if walk.workdirs and index == 0 else None
        if workdir is not None:
            paths.remove(workdir)
        shells.append(ShellMap.model_validate({kind: spec, "workdir": workdir}))
    # A path beside a filter glob is where the filter applies (`{path, glob}`: a search): what lies below it
    # on this machine is judged too (proxy/policy/paths/on_disk.py).
    searches = [spec for spec in paths if "[" not in spec] if walk.globs else []
    # An operation that only reads (an editor's `view`) reads its paths; any other writes them.
    reads_when = {spec: sorted(v for v in values if v.lower() in _READ_CHOICES) for spec, values in walk.choices.items()
                  if _PLAIN_NAME.fullmatch(spec)}
    first = ToolMap(shell=shells[0] if shells else None, paths=paths, urls=walk.urls, patch=walk.patch,
                    globs=walk.globs, searches=searches,
                    reads_when={k: v for k, v in reads_when.items() if v} if paths else {})
    return (first, *(ToolMap(shell=shell) for shell in shells[1:]))


def classify_arguments(arguments: Mapping[str, Any]) -> Classification:
    """A call of a tool whose schema could not be read, classified by its own arguments' names and shapes."""
    if _deeper(arguments, _MAX_DEPTH - 2):
        return Classification(readable=False, unaddressable=True)  # nested past what the reading follows
    props = {str(name): _shape(value, 0) for name, value in arguments.items()}
    return classify({"type": "object", "properties": props}) if props else Classification(readable=False)


def _deeper(value: Any, levels: int) -> bool:
    """Whether objects and arrays nest more than `levels` deep."""
    if isinstance(value, Mapping):
        inner: Any = value.values()
    elif isinstance(value, list):
        inner = value
    else:
        return False
    return levels <= 0 or any(_deeper(v, levels - 1) for v in inner)


def _shape(value: Any, depth: int) -> dict[str, Any]:
    if isinstance(value, str):
        return {"type": "string"}
    if isinstance(value, list) and depth < _MAX_DEPTH:
        if value and all(isinstance(v, Mapping) for v in value):
            merged: dict[str, Any] = {}
            for item in value[:50]:
                for key, inner in item.items():
                    merged.setdefault(str(key), _shape(inner, depth + 1))
            return {"type": "array", "items": {"type": "object", "properties": merged}}
        return {"type": "array", "items": {"type": "string"}}
    if isinstance(value, Mapping) and depth < _MAX_DEPTH:
        return {"type": "object", "properties": {str(k): _shape(v, depth + 1) for k, v in value.items()}}
    return {"type": "integer"}
