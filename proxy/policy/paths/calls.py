"""The paths capability of a call: the files it writes or reads, what a search reads, the files a patch names."""

from __future__ import annotations

from collections.abc import Iterator

from ..call import BadArguments, Call, Finding, strings
from .inside import patch_paths, path_value_problem
from .on_disk import searched_secret
from .protected import glob_problem, protected_for, protected_problem

__all__ = ["patch_findings", "path_findings", "search_findings"]


def path_findings(call: Call) -> Iterator[Finding]:
    # `paths` may be written (a map that does not say counts as writing: fail closed), `read_paths` only read;
    # a writing tool reads too, so it is judged against both protected lists. An editor's `view` only reads.
    reads = any(isinstance(value, str) and value in values
                for argument, values in call.map.reads_when.items() for _, value in call.values(argument))
    for specs, write in ((call.map.paths, not reads), (call.map.read_paths, False)):
        for spec in specs:
            for label, value in call.values(spec):
                for path in strings(value):
                    problem = (path_value_problem(path, call.roots)
                               or protected_problem(call.policy, path, call.roots, write=write, imports=write))
                    if problem is not None:
                        yield call.found(problem, label)


def search_findings(call: Call) -> Iterator[Finding]:
    """Filter globs (`globs`: what they could select) and searched directories (`searches`: read paths, and
    the protected files on this machine the search's filters select; left out, the project root). Where no
    project root is known, a search without a filter could read any secret below it: refused."""
    tool_map, roots = call.map, call.roots
    if not (tool_map.globs or tool_map.searches):
        return
    filters: list[str] = []
    for spec in tool_map.globs:
        for label, value in call.values(spec):
            for glob in strings(value):
                filters.append(glob)
                problem = glob_problem(call.policy, glob, roots)
                if problem is not None:
                    yield call.found(problem, label)
    protected = protected_for(call.policy)
    for spec in tool_map.searches:
        given = call.values(spec)
        for label, value in given or [(spec, ".")]:
            for directory in strings(value):
                # Left out, the search is of the project root: no path to judge, only what lies below it.
                problem = (path_value_problem(directory, roots)
                           or protected_problem(call.policy, directory, roots, write=False)) if given else None
                if problem is None and roots and searched_secret(protected, directory.strip() or ".", filters, roots):
                    problem = "protected_path"
                elif problem is None and not roots and not filters and (protected.read is not None
                                                                       or protected.read_absolute is not None):
                    # No root known: where the search runs, and what lies below it, is unknown. Only a filter that
                    # cannot select a protected read (judged above) makes it safe to pass.
                    problem = "protected_path"
                if problem is not None:
                    yield call.found(problem, label)


def patch_findings(call: Call) -> Iterator[Finding]:
    for spec in call.map.patch:
        for label, value in call.values(spec):
            if not isinstance(value, str):
                raise BadArguments
            for path in patch_paths(value):
                problem = ((path_value_problem(path, call.roots)
                            or protected_problem(call.policy, path, call.roots, imports=True))
                           if "\x00" not in path else "path_escape")
                if problem is not None:
                    yield call.found(problem, label)
