"""Filters and searched directories of read and search tools (issue 24): a glob that could select a secret
is refused whatever spelling it takes (braces, `**`, classes, case, trailing dots), on every client's
filter argument; a search over a directory is refused when a protected read exists below it on this
machine and its filter selects it, and passes otherwise (an ordinary `grep pattern .`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from proxy.policy import Policy, judge_call, load_policy_file
from proxy.policy.paths.globs import compile_glob, matches
from proxy.policy.paths.protected import glob_problem, protected_for

from .conftest import ROOT


@pytest.fixture(scope="module")
def policy() -> Policy:
    return load_policy_file(ROOT / "policies" / "strict.yaml").policy


# (tool, the filter's argument, other arguments): each client's filter, from its captured schema or docs.
FILTERS = [
    ("grep", "include", {"pattern": "."}),                 # OpenCode, Kilo
    ("glob", "pattern", {}),                               # OpenCode, Kilo, Qwen Code
    ("grep_search", "glob", {"pattern": "."}),             # Qwen Code
    ("Grep", "glob", {"pattern": "."}),                    # Claude Code
    ("Glob", "pattern", {}),                               # Claude Code
    ("search_files", "file_pattern", {"regex": "."}),      # Cline
    ("Search", "file_pattern", {"pattern": "."}),          # Continue
]
SECRET_GLOBS = [
    "{.env,x}", "**/.env*", "**/id_rsa*", ".env.local", ".env.prod*", ".e*.local", "*.Env", ".ENV.", "*.pem ",
    "**/*.p12", "*.{pfx,md}", "{src/*.py,**/*.key}", "{a,{b,*.pem}}", "*_rsa", "id_ed25519*", ".[e]nv",
    "*.[Pp][Ee][Mm]", "**/.aws/credentials", "**/.azure/*", "./.netrc", "deploy//.pgpass", "**/.vault-token",
    "**/.git-credentials", "*.?em", "ｉｄ_ｒｓａ", "**/.*", ".??*", ".[!.]*", "*.k?y", "id_*", "**/.git/config",
    "**/.ssh/*", "*.tfstate", "**/credentials.json",
]
ORDINARY_GLOBS = ["*.py", "**/*.py", "src/**/*.ts", "*.{js,ts,tsx}", "*.json", "*.md", "Dockerfile", "*test*",
                  "*", "**/*", "", "*.yaml", "package.json", "*.ke", "*.*", "*.tf", "*.toml", "*.yml", "*.config",
                  "docs/**", ".github/**/*.yml", "*.lock"]


def _judge(policy: Policy, tool: str, arguments: dict[str, Any], roots: tuple[str, ...] = ()) -> tuple[str, ...]:
    if roots:
        policy = policy.model_copy(update={"paths": policy.paths.model_copy(update={"project_root": list(roots)})})
    return judge_call(policy, tool, arguments).reasons


@pytest.mark.parametrize(("tool", "argument", "other"), FILTERS)
@pytest.mark.parametrize("glob", SECRET_GLOBS)
def test_a_filter_that_could_select_a_secret_is_refused(policy: Policy, tool: str, argument: str,
                                                        other: dict[str, Any], glob: str) -> None:
    assert _judge(policy, tool, {**other, argument: glob}) == ("protected_path",)


@pytest.mark.parametrize(("tool", "argument", "other"), FILTERS)
@pytest.mark.parametrize("glob", ORDINARY_GLOBS)
def test_an_ordinary_filter_passes(policy: Policy, tool: str, argument: str, other: dict[str, Any],
                                   glob: str) -> None:
    assert _judge(policy, tool, {**other, argument: glob}) == ()


@pytest.mark.parametrize(("glob", "reason"), [
    ("../*", "path_escape"), ("src/../../x/*.py", "path_escape"), ("/etc/*.conf", "absolute_path"),
    ("~/.ssh/*", "path_escape"), ("{src/*.py,/etc/*}", "absolute_path"),
    # More alternatives than are expanded, or a filter too long to read: refused, not judged in part.
    ("{a,b}{c,d}{e,f}{g,h}{i,j}{k,l}{m,n}", "protected_path"), ("x" * 1001, "protected_path"),
])
def test_a_filter_outside_the_project_or_unreadable_is_refused(policy: Policy, glob: str, reason: str) -> None:
    assert glob_problem(policy, glob) == reason
    assert _judge(policy, "glob", {"pattern": glob}) == (reason,)


def test_a_filter_list_is_judged_item_by_item(policy: Policy) -> None:
    # Qwen Code's read_many_files takes glob patterns in `paths` and `include`.
    assert _judge(policy, "read_many_files", {"paths": ["src/**/*.py"], "include": ["*.md"]}) == ()
    assert _judge(policy, "read_many_files", {"paths": ["src/**/*.py"], "include": ["**/.env*"]}) == (
        "protected_path",)
    assert _judge(policy, "read_many_files", {"paths": ["docs/*.md", "**/*.pem"]}) == ("protected_path",)


def test_a_policy_that_reads_no_secrets_refuses_no_filter(policy: Policy) -> None:
    open_policy = policy.model_copy(update={"protected": policy.protected.model_copy(update={"read": []})})
    assert judge_call(open_policy, "grep", {"pattern": ".", "include": "*.pem"}).reasons == ()


@pytest.mark.parametrize(("glob", "path", "selected"), [
    ("*.py", "src/a.py", True), ("*.py", "a.py", True), ("src/*.py", "src/a.py", True),
    ("src/*.py", "src/x/a.py", False), ("**/*.key", "certs/server.key", True), ("*.{key,pem}", "a.pem", True),
    ("*.py", "certs/server.key", False), ("*", "certs/server.key", True), ("", "x/.env", True),
    ("!*.py", "server.key", True),
])
def test_a_filter_selects_a_file_as_ripgrep_does_or_wider(glob: str, path: str, selected: bool) -> None:
    assert matches(compile_glob(glob), path) is selected


# -- a search over a directory, with the project on this machine -------------------------------------


def _project(tmp_path: Path, files: list[str]) -> Path:
    project = tmp_path / "project"
    for name in ["src/app.py", "README.md", *files]:
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text("x\n")
    return project


def _search(policy: Policy, project: Path, arguments: dict[str, Any], tool: str = "grep") -> tuple[str, ...]:
    protected_for(policy).inventories.clear()  # listings are kept a few seconds; each case lists anew
    protected_for(policy).searches.clear()
    return _judge(policy, tool, arguments, roots=(str(project),))


@pytest.mark.parametrize("secret", ["certs/server.key", ".env", "deploy/prod.pem", "a/b/c/id_rsa",
                                    ".config/gcloud/credentials.db", "Server.KEY"])
def test_a_search_over_a_directory_holding_a_secret_is_refused(policy: Policy, tmp_path: Path,
                                                               secret: str) -> None:
    project = _project(tmp_path, [secret])
    assert _search(policy, project, {"pattern": "BEGIN", "path": "."}) == ("protected_path",)
    assert _search(policy, project, {"pattern": "BEGIN"}) == ("protected_path",)  # left out: the project root
    assert _search(policy, project, {"pattern": "BEGIN", "path": str(project)}) == ("protected_path",)
    assert _search(policy, project, {"pattern": "BEGIN", "include": "*"}) == ("protected_path",)
    # A narrower directory, or a filter that leaves the secret out, passes.
    assert _search(policy, project, {"pattern": "BEGIN", "path": "src"}) == ()
    assert _search(policy, project, {"pattern": "BEGIN", "path": ".", "include": "*.py"}) == ()
    # Claude Code's Grep, Qwen Code's grep_search, Cline's search_files and Continue's Search alike.
    assert _search(policy, project, {"pattern": "BEGIN", "path": "."}, tool="Grep") == ("protected_path",)
    assert _search(policy, project, {"pattern": "BEGIN", "path": "."}, tool="grep_search") == ("protected_path",)
    assert _search(policy, project, {"regex": "BEGIN", "path": "."}, tool="search_files") == ("protected_path",)
    assert _search(policy, project, {"pattern": "BEGIN", "path": "."}, tool="Search") == ("protected_path",)


def test_an_ordinary_search_of_a_project_without_secrets_passes(policy: Policy, tmp_path: Path) -> None:
    project = _project(tmp_path, ["lib/x.ts", "docs/index.md", "pyproject.toml"])
    # A virtual environment's CA bundle and node_modules are not the project's secrets; git's store is git's.
    for name in [".venv/pyvenv.cfg", ".venv/lib/certifi/cacert.pem", "node_modules/x/test.key", ".git/x.pem"]:
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text("x")
    assert _search(policy, project, {"pattern": "TODO", "path": "."}) == ()
    assert _search(policy, project, {"pattern": "TODO"}) == ()
    assert _search(policy, project, {"pattern": "TODO", "path": "src"}, tool="Grep") == ()


def test_a_link_to_a_secret_counts_as_the_secret(policy: Policy, tmp_path: Path) -> None:
    project = _project(tmp_path, [])
    outside = tmp_path / "home" / ".ssh"
    outside.mkdir(parents=True)
    (outside / "id_ed25519").write_text("key")
    os.symlink(outside / "id_ed25519", project / "src" / "notes.txt")
    assert _search(policy, project, {"pattern": "x", "path": "src"}) == ("protected_path",)


def test_a_directory_too_large_to_list_is_refused(policy: Policy, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from proxy.policy.paths import on_disk
    project = _project(tmp_path, [f"src/m{i}.py" for i in range(10)])
    monkeypatch.setattr(on_disk, "_MAX_ENTRIES", 5)
    assert _search(policy, project, {"pattern": "x", "path": "."}) == ("protected_path",)
    monkeypatch.setattr(on_disk, "_MAX_ENTRIES", 50)
    assert _search(policy, project, {"pattern": "x", "path": "."}) == ()


def test_a_project_the_proxy_cannot_see_is_judged_by_names(policy: Policy, tmp_path: Path) -> None:
    # The documented limit: no listing where the root is not on this machine.
    missing = tmp_path / "elsewhere"
    assert _judge(policy, "grep", {"pattern": "BEGIN", "path": "."}, roots=(str(missing),)) == ()
    assert _judge(policy, "grep", {"pattern": "BEGIN", "path": "certs/server.key"}) == ("protected_path",)


@pytest.mark.parametrize("path", [None, ".", "src", "./deploy", "a/b/c"])
def test_without_a_root_a_search_that_could_read_a_secret_is_refused(policy: Policy, path: str | None) -> None:
    """Where no root is known the directory cannot be listed: a search without a filter could read any secret
    below it (OpenCode's grep runs `rg --hidden`), so it is refused; one whose filter cannot select a secret is
    judged, and passes."""
    arguments = {"pattern": "BEGIN"} if path is None else {"pattern": "BEGIN", "path": path}
    assert _judge(policy, "grep", arguments) == ("protected_path",)
    assert _judge(policy, "grep", {**arguments, "include": "*.py"}) == ()
    assert _judge(policy, "grep", {**arguments, "include": "*.{env,py}"}) == ("protected_path",)
    assert _judge(policy, "grep_search", {k.replace("include", "glob"): v for k, v in arguments.items()}) == (
        "protected_path",)


# -- tools no profile describes ---------------------------------------------------------------------------


def _offered(policy: Policy, name: str, properties: dict[str, Any]) -> Any:
    from proxy.policy.tools.profiles import ToolSet
    payload = {"tools": [{"type": "function", "function": {"name": name, "parameters": {
        "type": "object", "properties": properties}}}]}
    return ToolSet.for_request(policy, payload, {})


@pytest.mark.parametrize(("properties", "argument"), [
    ({"pattern": {"type": "string"}, "path": {"type": "string"}, "glob": {"type": "string"}}, "glob"),
    ({"query": {"type": "string"}, "include": {"type": "string"}}, "include"),
    ({"regex": {"type": "string"}, "filePattern": {"type": "string"}}, "filePattern"),
    ({"dir_path": {"type": "string"}, "pattern": {"type": "string", "description": "Unix shell regex, where * "
                                                                                  "matches everything."}},
     "pattern"),
    ({"patterns": {"type": "array", "items": {"type": "string"}, "description": "glob patterns of the files"}},
     "patterns"),
])
def test_a_filter_of_a_tool_no_profile_knows_is_judged(policy: Policy, properties: dict[str, Any],
                                                       argument: str) -> None:
    tools = _offered(policy, "mystery_search", properties)
    def judge(value: str) -> tuple[str, ...]:
        sent = [value] if properties[argument].get("type") == "array" else value
        return judge_call(policy, "mystery_search", {argument: sent}, offered_tools={"mystery_search"},
                          tools=tools).reasons
    assert judge("**/*.pem") == ("protected_path",)
    assert judge("{.env,x}") == ("protected_path",)
    assert judge("*.py") == ()


def test_a_one_word_wildcard_value_of_an_unknown_tool_is_judged_as_a_filter(policy: Policy) -> None:
    tools = _offered(policy, "mystery", {"target": {"type": "string"}, "note": {"type": "string"}})
    def judge(value: str) -> tuple[str, ...]:
        return judge_call(policy, "mystery", {"target": value}, offered_tools={"mystery"}, tools=tools).reasons
    assert judge("{.env,notes.txt}") == ("protected_path",)
    assert judge("**/id_ed25519*") == ("protected_path",)
    assert judge("*.py") == ()
    assert judge("https://docs.python.org/3/search.html?q=glob*") == ()
    assert judge_call(policy, "mystery", {"note": "read the *.pem files"}, offered_tools={"mystery"},
                      tools=tools).reasons == ()  # free text that mentions a glob is not one


def test_a_linked_directory_is_listed_where_it_leads(policy: Policy, tmp_path: Path) -> None:
    project = _project(tmp_path, ["vault/db.key"])
    (project / "src" / "vault").symlink_to(project / "vault")  # inside the project: listed there
    assert _search(policy, project, {"pattern": "x", "path": "src"}) == ("protected_path",)
    assert _search(policy, project, {"pattern": "x", "path": "src", "include": "*.py"}) == ()
    other = _project(tmp_path / "b", [])
    (tmp_path / "home" / "docs").mkdir(parents=True)
    (other / "src" / "home").symlink_to(tmp_path / "home")  # out of the project: out of sight, refused
    assert _search(policy, other, {"pattern": "x", "path": "src"}) == ("protected_path",)
    (other / "src" / "home").unlink()
    (other / "src" / "loop").symlink_to(other / "src")  # a cycle ends
    assert _search(policy, other, {"pattern": "x", "path": "src"}) == ()


def test_read_many_files_reads_below_the_root(policy: Policy, tmp_path: Path) -> None:
    project = _project(tmp_path, [".env"])
    assert _search(policy, project, {"paths": ["**/*"]}, tool="read_many_files") == ("protected_path",)
    assert _search(policy, project, {"paths": ["src/**/*.py", "README.md"]}, tool="read_many_files") == ()


@pytest.mark.parametrize(("glob", "path", "selected"), [
    ("**/.env", ".env", True), ("src/**/*.py", "src/a.py", True), ("a/**/**/b", "a/b", True),
    ("**/*", "server.key", True), ("x/**/y", "x/z/y", True), ("x/**/y", "xy", False),
])
def test_a_globstar_directory_may_be_none(glob: str, path: str, selected: bool) -> None:
    assert matches(compile_glob(glob), path) is selected


def test_a_filter_with_too_many_globstars_is_refused(policy: Policy) -> None:
    assert glob_problem(policy, "**/a/**/b/**/c/**/d/**/*.py") == "protected_path"
    assert glob_problem(policy, "**/a/**/b/**/*.py") is None


@pytest.mark.parametrize(("glob", "reason"), [
    ("*.@(pem|txt)", "protected_path"), ("@(.env|x)", "protected_path"), ("+(id_rsa|x)", "protected_path"),
    ("?(.)env", "protected_path"), ("@(src|@(lib|.ssh))/*", "protected_path"), ("*.@(py|ts)", None),
    ("!(*.py)", None),
])
def test_extended_globs_are_read_as_their_alternatives(policy: Policy, glob: str, reason: str | None) -> None:
    assert glob_problem(policy, glob) == reason


def test_a_script_path_argument_with_wildcards_is_judged_as_a_filter() -> None:
    from proxy.policy import judge_command
    ruled = Policy.model_validate({"name": "t", "bash": {"scripts": {"index": {"args": {"positional": "path"}}}}})
    assert judge_command(ruled, 'uv run scripts/index.py ".e?v"').reasons == ("argument", "protected_path")
    assert judge_command(ruled, 'uv run scripts/index.py "certs/*.{pem,crt}"').reasons == (
        "argument", "protected_path")
    assert judge_command(ruled, 'uv run scripts/index.py "docs/*.md"').reasons == ()


def test_an_unknown_search_tool_is_judged_by_what_lies_below_its_path(policy: Policy, tmp_path: Path) -> None:
    project = _project(tmp_path, ["certs/server.key"])
    rooted = policy.model_copy(update={"paths": policy.paths.model_copy(update={"project_root": [str(project)]})})
    tools = _offered(rooted, "rg_search", {"pattern": {"type": "string"}, "path": {"type": "string"},
                                           "glob": {"type": "string"}})
    protected_for(rooted).searches.clear()
    def judge(arguments: dict[str, Any]) -> tuple[str, ...]:
        return judge_call(rooted, "rg_search", arguments, offered_tools={"rg_search"}, tools=tools).reasons
    assert judge({"pattern": "BEGIN", "path": "."}) == ("protected_path",)
    assert judge({"pattern": "BEGIN", "path": "src"}) == ()
    assert judge({"pattern": "BEGIN", "path": ".", "glob": "*.py"}) == ()
