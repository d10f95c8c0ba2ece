"""Tool profiles: which of a client's tools carry a shell command or file paths, and where.

The built-in profiles are data (`proxy/default_policies/tool-profiles.yaml`); a policy adds or replaces
profiles under `profiles:`, and its older `bash:`/`paths:` tool keys still map tools too. Per request a
`ToolSet` picks the profiles that fit the offered tools (names and parameter schemas; the User-Agent
breaks ties) and answers, for each called tool, the maps that govern it. Several maps may govern one
tool name (two clients both call a tool `edit`): then every map that fits is applied, so the stricter
one decides. A tool no profile knows is judged as a shell when its schema looks like one runs commands,
and otherwise follows `other_tools`.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from ..paths.client_files import BUILTIN_PROFILES_FILE
from ..paths.modules import warm_root
from ..roots import normal_root, root_problem
from ..schema import Policy, Profile, ShellMap, ToolMap
from .classify import _PLAIN_NAME, Declared, classify, classify_arguments, misfits
from .keyboard import keyboard_map, keyboard_map_of_call
from .offered import Offered, command_named, offered_tools, properties, shell_like

__all__ = [
    "HEURISTIC_PROFILE",
    "LEGACY_PROFILE",
    "Offered",
    "ProfileTable",
    "ToolSet",
    "builtin_profiles",
    "call_rules",
    "misfit_rules",
    "offered_tools",
    "profile_table",
    "shell_like",
    "unknown_tool_rules",
]

_BUILTIN_FILE = BUILTIN_PROFILES_FILE
# The maps the policy's own `bash:`/`paths:` tool keys make; applied wherever they fit, never recorded.
LEGACY_PROFILE = "policy"
# The rule of a tool no profile knows whose schema looks like it runs commands (`shell_like`).
HEURISTIC_PROFILE = "heuristic"
_READ_ONLY_NAMES = frozenset({"read", "glob", "grep", "list", "ls", "read_file", "view", "search", "find"})


@functools.cache
def builtin_profiles() -> dict[str, Profile]:
    """The profiles that ship with the package, validated like a policy's own."""
    data = yaml.safe_load(_BUILTIN_FILE.read_text(encoding="utf-8"))
    return {name: Profile.model_validate(value) for name, value in data.items()}


# -- the compiled table of one policy -------------------------------------------------------------------


@dataclass(kw_only=True, frozen=True, slots=True)
class Rule:
    """One map that governs a tool, and the profile it came from."""

    profile: str
    tool: str
    map: ToolMap
    # Precomputed, since selection looks at every offered tool of every request: the argument a shell
    # map needs, and the top-level arguments any map reads.
    needs: str | None = None
    reads: tuple[str, ...] = ()
    governed: bool = False
    # A tool no profile describes: each whole argument value that is a path or a URL is judged too
    # (`content`); with an unreadable schema (`readable` False) each call's arguments are classified.
    content: bool = False
    readable: bool = True
    # What the offered schema declares each argument to be; a call's argument that is something else is
    # classified by itself (`misfit_rules`).
    declared: Declared | None = None
    # The argument paths this map judges, indices left out (`files.path`): their values are its to judge.
    judges: frozenset[str] = frozenset()
    # A call's argument that can carry a command, path or URL under a name no rule can address.
    unaddressable: bool = False

    @classmethod
    def of(cls, profile: str, tool: str, tool_map: ToolMap, *, content: bool = False,
           readable: bool = True, declared: Declared | None = None) -> Rule:
        reads = tuple(tool_map.arguments())
        needs = reads[-1] if tool_map.shell is not None else None
        return cls(profile=profile, tool=tool, map=tool_map, needs=needs, reads=reads, governed=tool_map.governed,
                   content=content, readable=readable, declared=declared,
                   judges=frozenset(spec.replace("[]", "") for spec in tool_map.claimed()))

    def fits(self, names: Any) -> bool:
        """Whether the arguments this map reads exist: its command argument, or any of its path arguments."""
        if self.needs is not None:
            return self.needs in names
        return not self.reads or any(name in names for name in self.reads)


@dataclass(kw_only=True, slots=True)
class ProfileTable:
    """A policy's profiles in order of precedence (the policy's own first) and an index by tool name."""

    profiles: dict[str, Profile]
    user_agents: dict[str, re.Pattern[str]]
    by_tool: dict[str, list[Rule]]
    legacy: dict[str, list[Rule]]
    roots: tuple[str, ...]
    source: tuple[Any, ...] = ()
    # Selections already made, by what decides them: clients send the same tools with every request.
    selections: OrderedDict[Any, tuple[list[str], dict[str, list[Rule]]]] = field(default_factory=OrderedDict)

    @classmethod
    def build(cls, policy: Policy) -> ProfileTable:
        profiles: dict[str, Profile] = {}
        for name, profile in policy.profiles.items():
            if profile is not None:
                profiles[name] = profile
        if policy.builtin_profiles:
            for name, profile in builtin_profiles().items():
                if name not in policy.profiles:
                    profiles[name] = profile
        by_tool: dict[str, list[Rule]] = {}
        for name, profile in profiles.items():
            for tool, tool_map in profile.tools.items():
                by_tool.setdefault(tool, []).append(Rule.of(name, tool, tool_map))
        legacy: dict[str, list[Rule]] = {}
        bash = policy.bash
        for tool in bash.tools:
            shell = ShellMap(command=bash.command_argument, workdir=bash.workdir_argument)
            legacy.setdefault(tool, []).append(Rule.of(LEGACY_PROFILE, tool, ToolMap(shell=shell)))
        for tool in policy.paths.tools:
            # `paths:` never said which tools write; only the plainly read-only names are read-only here.
            arguments = list(policy.path_arguments(tool))
            tool_map = (ToolMap(read_paths=arguments) if tool.lower() in _READ_ONLY_NAMES
                        else ToolMap(paths=arguments))
            legacy.setdefault(tool, []).append(Rule.of(LEGACY_PROFILE, tool, tool_map))
        agents = {name: re.compile(p.user_agent) for name, p in profiles.items() if p.user_agent}
        return cls(profiles=profiles, user_agents=agents, by_tool=by_tool, legacy=legacy,
                   roots=tuple(policy.paths.project_root),
                   source=(policy.profiles, policy.builtin_profiles, policy.bash, policy.paths))


def profile_table(policy: Policy) -> ProfileTable:
    private = policy.__pydantic_private__
    table = private.get("_profiles") if private is not None else None
    # `model_copy(update=...)` copies private attributes too: rebuild when the parts changed.
    source = (policy.profiles, policy.builtin_profiles, policy.bash, policy.paths)
    if table is None or any(a is not b for a, b in zip(table.source, source, strict=True)):
        table = ProfileTable.build(policy)
        policy._profiles = table
    return table


_SELECTIONS_KEPT = 256


# -- one request ----------------------------------------------------------------------------------------


@dataclass(kw_only=True)
class ToolSet:
    """The tools of one request as the judge sees them: which profiles apply and what governs each tool.

    `offered` None means nothing is known about the request (a CLI check, a recheck of stored calls):
    then every map that fits a call's arguments applies.
    """

    table: ProfileTable
    offered: dict[str, Offered] | None = None
    user_agent: str | None = None
    client: str | None = None  # the profile a project key names: ranked first, before the User-Agent's
    extra_roots: tuple[str, ...] = ()
    # Commands allowed verbatim in this request's shell calls: the protocol commands of the client it comes from
    # (mini-swe-agent's submit sentinel), recognised by its own prompt (proxy/enforce/text_clients.py).
    exact: tuple[str, ...] = ()
    profiles: list[str] = field(default_factory=list)
    _rules: dict[str, list[Rule]] = field(default_factory=dict)

    @classmethod
    def for_request(cls, policy: Policy, payload: Mapping[str, Any], headers: Mapping[str, str], *,
                    root_header: str | None = None, stated_root: str | None = None, bound_root: str | None = None,
                    client: str | None = None) -> ToolSet:
        """`stated_root`: the root the client states for itself (proxy/sessions/project_root.py), used only where
        the operator pinned none (`paths.project_root`, or the request's `root_header`). `bound_root` and `client`:
        what the request's project key binds (proxy/keys/), which wins over any header or text; the policy's
        own `paths.project_root` still applies beside it."""
        roots: tuple[str, ...] = ()
        if bound_root:
            roots = (bound_root,)
        elif root_header:
            value = _header(headers, root_header)
            root = normal_root(value) if value else None
            # A header naming a system directory or a home's dot-directory names no root (proxy/policy/roots.py).
            roots = (root,) if root and root_problem(root) is None else ()
        if not bound_root and not roots and stated_root and not policy.paths.project_root and \
                policy.paths.infer_project_root:
            roots = (stated_root,)
        tools = cls(table=profile_table(policy), offered=offered_tools(payload),
                    user_agent=_header(headers, "user-agent"), client=client, extra_roots=roots)
        tools.select()
        for root in tools.roots:  # what the project's environment imports, read before its first write is judged
            warm_root(root, policy.bash.scripts_dir)
        return tools

    @property
    def roots(self) -> tuple[str, ...]:
        return self.table.roots + self.extra_roots

    def select(self) -> None:
        """Pick the profiles that govern the offered tools (remembered for the next request offering the
        same tools to the same User-Agent)."""
        assert self.offered is not None
        key = self._selection_key()
        found = self.table.selections.get(key)
        if found is None:
            found = self._select()
            self.table.selections[key] = found
            while len(self.table.selections) > _SELECTIONS_KEPT:
                self.table.selections.popitem(last=False)
        else:
            self.table.selections.move_to_end(key)
        self.profiles, self._rules = found

    def _selection_key(self) -> Any:
        """What the selection depends on: each tool's name, whole schema and description (classification
        reads names, descriptions, formats and shapes)."""
        assert self.offered is not None
        parts: list[tuple[Any, ...]] = []
        for tool, spec in self.offered.items():
            # A known tool's schema is classified too (arguments its profile does not claim): all of it counts.
            # `repr` is a third of `json.dumps`'s time; a client that reorders keys only misses the cache.
            parts.append((tool, repr(spec.schema), spec.description))
        return (self.client, self.user_agent, tuple(parts))

    def _select(self) -> tuple[list[str], dict[str, list[Rule]]]:
        """Those matching the User-Agent first, then the ones that know the most offered tools, each kept
        only when it covers a tool no earlier one did; then each offered tool's rules."""
        assert self.offered is not None
        agent = self.user_agent or ""
        known: dict[str, set[str]] = {}
        for tool, spec in self.offered.items():
            names = properties(spec.schema).keys() if spec.schema is not None else None
            for rule in self.table.by_tool.get(tool, ()):
                if (names is None or rule.fits(names)) and not _foreign(rule, spec.schema):
                    known.setdefault(rule.profile, set()).add(tool)
        order = list(self.table.profiles)

        def rank(name: str) -> tuple[int, int, int, int]:
            pattern = self.table.user_agents.get(name)
            matched = bool(pattern and agent and pattern.search(agent))
            return (-int(name == self.client), -int(matched), -len(known[name]), order.index(name))

        profiles: list[str] = []
        covered: set[str] = set()
        for name in sorted(known, key=rank):
            if known[name] - covered:
                profiles.append(name)
                covered |= known[name]
        chosen = set(profiles)
        by_tool: dict[str, list[Rule]] = {}
        for tool, spec in self.offered.items():
            names = properties(spec.schema).keys() if spec.schema is not None else None
            rules = [r for r in self.table.by_tool.get(tool, ()) if r.profile in chosen
                     and (names is None or r.fits(names)) and not _foreign(r, spec.schema)]
            rules += [r for r in self.table.legacy.get(tool, ()) if names is None or r.fits(names)]
            rules = _unique(rules)
            if not rules:
                rules = unknown_tool_rules(tool, spec.schema, spec.description)
            else:
                rules += _known_name_rules(tool, spec, rules)
            by_tool[tool] = [r for r in rules if r.governed or r.content] or rules
        # Tools governed by their schema's classification are recorded as such, beside the profiles.
        if any(r.profile == HEURISTIC_PROFILE and (r.governed or not r.readable)
               for rules in by_tool.values() for r in rules):
            profiles.append(HEURISTIC_PROFILE)
        return profiles, by_tool

    def rules(self, tool: str, arguments: Mapping[str, Any]) -> list[Rule]:
        """The maps governing one call: empty for a tool that only `other_tools` governs."""
        if self.offered is not None and tool in self._rules:
            return self._rules[tool]
        # Nothing known about the tool: every map of that name whose arguments the call has, else all of
        # them (so a missing command argument is `bad_arguments`), else what the arguments look like.
        candidates = self.table.by_tool.get(tool, []) + self.table.legacy.get(tool, [])
        if candidates:
            fitting = [r for r in candidates if r.fits(arguments)]
            return _unique(fitting or candidates)
        return unknown_tool_rules(tool, None, None)

    def governed(self) -> list[str]:
        """The offered tools a shell, path or URL rule governs (or, unreadable, what each call carries)."""
        return [tool for tool, rules in self._rules.items() if any(r.governed or not r.readable for r in rules)]


def _foreign(rule: Rule, schema: Mapping[str, Any] | None) -> bool:
    """Another client's tool of the rule's name, as its schema shows: it requires a command argument the map neither
    judges nor knows (Strands' `editor {command, path}` is not Cline's `editor {path}`), or its command argument takes
    a shape the map does not read it in (Strands' `shell {command: string | [string | {command, work_dir}]}`, a list
    of commands, is not Codex's `shell {command: [argv]}`). A map of no capability (a tool its profile declares
    harmless) is kept."""
    if not rule.governed or not isinstance(schema, Mapping):
        return False
    shell = rule.map.shell
    if shell is not None and _PLAIN_NAME.fullmatch(shell.source):
        shapes = _shapes(properties(schema).get(shell.source))
        takes = {"argv"} if shell.argv else {"string"} if shell.command else {"string", "argv"}
        if shapes - takes:
            return True
    required = schema.get("required")
    if not isinstance(required, list):
        return False
    claimed = {re.split(r"[.\[]", spec, maxsplit=1)[0] for spec in rule.map.claimed()}
    return any(isinstance(name, str) and name not in claimed and command_named(name) for name in required)




def _shapes(prop: Any, depth: int = 0) -> set[str]:
    """The shapes an argument's schema takes: `string`, `argv` (a list of strings), `other` (a list of anything else,
    an object); nothing for a schema that does not say (no `type`, a `$ref`)."""
    if not isinstance(prop, Mapping) or depth > 4:
        return set()
    out: set[str] = set()
    for key in ("anyOf", "oneOf"):
        for branch in prop.get(key) or []:
            out |= _shapes(branch, depth + 1)
    kinds = prop.get("type")
    kinds = set(kinds) if isinstance(kinds, list) else {kinds}
    if "string" in kinds:
        out.add("string")
    if "object" in kinds:
        out.add("other")
    if "array" in kinds:
        items = _shapes(prop.get("items"), depth + 1)
        out.add("argv" if items <= {"string"} else "other")
    return out


def unknown_tool_rules(tool: str, schema: Mapping[str, Any] | None, description: str | None) -> list[Rule]:
    """The rules of a tool no profile describes: what its schema shows it can carry (shell, paths, URLs,
    patch text), each judged with its arguments' whole values; an unreadable schema leaves it to each
    call's arguments (`Rule.readable` False)."""
    found = classify(schema, description)
    if not found.readable:
        return [Rule.of(HEURISTIC_PROFILE, tool, ToolMap(), content=True, readable=False)]
    maps = found.maps or (ToolMap(),)
    rules = [Rule.of(HEURISTIC_PROFILE, tool, m, content=True, declared=found.declared if i == 0 else None)
             for i, m in enumerate(maps)]
    keyboard = keyboard_map(tool, schema)  # computer use, key typing: what it types is a command line
    return rules + ([Rule.of(HEURISTIC_PROFILE, tool, ToolMap(keyboard=keyboard))] if keyboard else [])


def _known_name_rules(tool: str, spec: Offered, known: list[Rule]) -> list[Rule]:
    """A tool a profile knows whose offered schema has command, file, URL or patch arguments the profile
    does not claim (another client's tool of the same name, a new version's argument): those are judged
    too, as the schema's classification reads them by names, formats and shapes (not prose). What a
    profile claims (the arguments it judges, and its `known` ones: OpenCode's `task.command` names a slash
    command, not a shell line) is left to it."""
    found = classify(spec.schema, spec.description, described=False)
    claimed = [_bare(c) for rule in known for c in rule.map.claimed()]

    def free(spec_: str) -> bool:
        bare = _bare(spec_)
        return not any(bare == c or bare.startswith(c + ".") for c in claimed)

    out = []
    for tool_map in found.maps:
        shell, paths = tool_map.shell, list(tool_map.paths)
        if shell is not None and shell.workdir:  # a directory is judged as a path unless the shell keeps it
            paths.append(shell.workdir)
            shell = shell.model_copy(update={"workdir": None})
        if shell is not None and not free(shell.source):
            shell = None
        kept = ToolMap(shell=shell, paths=[p for p in paths if free(p)],
                       urls=[u for u in tool_map.urls if free(u)], patch=[p for p in tool_map.patch if free(p)],
                       globs=[g for g in tool_map.globs if free(g)],
                       searches=[d for d in tool_map.searches if free(d)])
        if kept.governed:
            out.append(Rule.of(HEURISTIC_PROFILE, tool, kept))
    return out


def _bare(spec: str) -> str:
    return spec.replace("[]", "")


def call_rules(rule: Rule, arguments: Mapping[str, Any]) -> list[Rule]:
    """An unreadable schema's rule made concrete for one call: its arguments classified (names, shapes)."""
    return _argument_rules(rule, arguments) or [Rule.of(rule.profile, rule.tool, ToolMap(), content=True)]


def _argument_rules(rule: Rule, arguments: Mapping[str, Any]) -> list[Rule]:
    found = classify_arguments(arguments)
    if found.unaddressable:
        return [dataclasses.replace(Rule.of(rule.profile, rule.tool, ToolMap(), content=True), unaddressable=True)]
    keyboard = keyboard_map_of_call(rule.tool, arguments)
    return [Rule.of(rule.profile, rule.tool, m, content=True) for m in found.maps] + (
        [Rule.of(rule.profile, rule.tool, ToolMap(keyboard=keyboard))] if keyboard else [])


def misfit_rules(rule: Rule, arguments: Mapping[str, Any]) -> list[Rule]:
    """The rules of the call's arguments its schema does not describe (`classify.misfits`), read by their
    names and shapes: an undeclared `command`, a `command` outside its `enum`, a string for an object."""
    if rule.declared is None:
        return []
    extra = misfits(rule.declared, arguments)
    return _argument_rules(rule, extra) if extra else []


def _unique(rules: list[Rule]) -> list[Rule]:
    """One rule per distinct map: the policy's `bash:` keys and OpenCode's profile both map `bash`."""
    out: list[Rule] = []
    for rule in rules:
        if not any(rule.map == kept.map for kept in out):
            out.append(rule)
    return out


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    if value is None:
        lowered = name.lower()
        value = next((v for k, v in headers.items() if k.lower() == lowered), None)
    return value
