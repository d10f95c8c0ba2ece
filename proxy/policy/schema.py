"""The policy file schema (DESIGN.md "Policy files"): what an operator may write, checked strictly.

Strict mode: YAML's `yes`/`1` are not quietly turned into strings, and any key the schema does not know
is refused, so a typo never silently loosens a policy.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar

import re2
from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    StringConstraints,
    field_validator,
    model_validator,
)

from .roots import SYSTEM_DIRS, normal_root, root_problem

__all__ = [
    "DEFAULT_FEEDBACK",
    "DEFAULT_OTHER_FEEDBACK",
    "DEFAULT_PASSTHROUGH_ROUTES",
    "DEFAULT_PATHS",
    "DEFAULT_PATHS_FEEDBACK",
    "ArgPath",
    "BashRules",
    "Examples",
    "Feedback",
    "KeyboardMap",
    "NewModules",
    "PathRules",
    "Policy",
    "Profile",
    "ScriptArgs",
    "ScriptRule",
    "ShellMap",
    "ToolExample",
    "ToolMap",
    "UrlRules",
]

# The built-in feedback, per capability: what a policy without `feedback:` gives the model. The shipped
# policies set none of their own, so this is the one source of what a model is told (with what to do instead,
# `{hint}`, and the nearest allowed command, `{suggestion}`).
DEFAULT_FEEDBACK = ("Rejected ({reasons}): `{tool}` may only run `uv run scripts/<name>.py [args]`. {hint} "
                    "Scripts: {scripts}. {suggestion}")
DEFAULT_PATHS_FEEDBACK = "Rejected ({reasons}): `{tool}` may only use files inside the project. {hint}"
# What a rejected call that is not a shell command (a file path, an unknown tool, bad arguments) is told
# when the policy gives one template only: never the shell rules, which have nothing to do with it.
DEFAULT_OTHER_FEEDBACK = "Rejected ({reasons}): `{tool}` call refused. {hint}"
DEFAULT_PATHS: dict[str, str | list[str]] = {
    "read": "filePath",
    "edit": "filePath",
    "write": "filePath",
    "glob": "path",
    "grep": "path",
}
# The /v1/* routes forwarded as they are: none of them can carry a model's tool call (proxy/dialects/routes.py).
DEFAULT_PASSTHROUGH_ROUTES = (
    "/v1/models",
    "/v1/tokenize",
    "/v1/detokenize",
    "/v1/embeddings",
    "/v1/score",
    "/v1/rerank",
)
# The largest command the lexer ever looks at, whatever a policy says: it bounds judging time.
HARD_MAX_COMMAND_LENGTH = 65536

Identifier = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
# A flag must itself be a word of the unquoted alphabet, so the shells pass it unchanged.
Flag = Annotated[str, StringConstraints(pattern=r"^-[A-Za-z0-9_.:,+@%-]*$")]
RepairName = Literal["output_filters", "stderr_redirect", "timeout", "cd_workdir"]
ToolName = Annotated[str, StringConstraints(min_length=1, max_length=200)]
ArgName = Annotated[str, StringConstraints(min_length=1, max_length=200)]
# A route is a literal /v1 path (it also covers the paths below it), never a pattern.
RoutePath = Annotated[str, StringConstraints(pattern=r"^/v1(/[A-Za-z0-9_-][A-Za-z0-9_.~-]*)+$", max_length=200)]
# Where a value sits in a tool's arguments: `file_path`, `operation.path`, `files[].path` (each item of
# the list `files`), `paths[]`.
ArgPath = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_$@-]+(\[\]|\.[A-Za-z0-9_$@-]+)*(\[\])?$",
                                           max_length=200)]
ProfileName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]
_SCRIPTS_DIR = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.,+@%-]*(/[A-Za-z0-9_][A-Za-z0-9_.,+@%-]*)*$")


def _regex(value: str) -> str:
    try:
        re.compile(value)
    except re.error as exc:
        raise ValueError(f"expected a regular expression ({exc})") from None
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


HostPattern = Annotated[str, StringConstraints(min_length=1, max_length=253)]


class UrlRules(_Strict):
    """`urls:` what a URL argument may name (web-fetch tools, classified URL arguments, script arguments
    whose rule is `url`). Hosts: an exact name, `*.example.com` (its subdomains), an address, or a network
    (`10.0.0.0/8`). Loopback, private, link-local and otherwise special addresses and `localhost` names
    are refused unless `allow_hosts` names them; `deny_hosts` wins over everything."""

    schemes: list[Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9+.-]*$")]] = Field(
        default_factory=lambda: ["http", "https"])
    allow_hosts: list[HostPattern] = Field(default_factory=list)
    deny_hosts: list[HostPattern] = Field(default_factory=list)
    # Resolve a host name when judging and refuse it when any answer is a refused address (proxy/policy/
    # resolve.py): off unless a policy turns it on (the shipped policies do); a lookup slower than the
    # timeout is refused.
    resolve: bool = False
    resolve_timeout_ms: int = Field(default=250, ge=1, le=5000)


ArgKind = Literal["path", "url", "int", "any"]


class ArgEnum(_Strict):
    enum: list[Annotated[str, StringConstraints(max_length=1000)]]


class ArgRegex(_Strict):
    regex: Annotated[str, StringConstraints(min_length=1, max_length=1000)]

    @field_validator("regex")
    @classmethod
    def _compiles(cls, value: str) -> str:
        return _regex(value)


class ArgUrl(_Strict):
    url: UrlRules


ArgRule = ArgKind | ArgEnum | ArgRegex | ArgUrl


class ScriptArgs(_Strict):
    """`scripts.<name>.args`: a rule for the positionals (one for all, or one per position) and for the
    value of each flag listed here (such a flag takes a value: `--f V` or `--f=V`)."""

    positional: ArgRule | list[ArgRule] | None = None
    flags: dict[Flag, ArgRule] = Field(default_factory=dict)


class ScriptRule(_Strict):
    flags: list[Flag] = Field(default_factory=list, description="the only flags the script may get")
    args: ScriptArgs | None = Field(default=None, description="rules for the script's arguments")

    @model_validator(mode="after")
    def _ruled_flags_declared(self) -> ScriptRule:
        missing = [f for f in (self.args.flags if self.args else {}) if f not in self.flags]
        if missing:
            raise ValueError(f"args.flags names flags the script does not declare in flags: {', '.join(missing)}")
        return self
    description: str | None = None
    # Programs (or intents) this script stands in for: a rejected `curl URL` is pointed at the script.
    instead_of: list[Annotated[str, StringConstraints(min_length=1, max_length=100)]] = Field(default_factory=list)


class BashRules(_Strict):
    tools: list[ToolName] = Field(default_factory=lambda: ["bash"])
    command_argument: ArgName = "command"
    workdir_argument: ArgName | None = "workdir"
    scripts_dir: str = "scripts"
    scripts: dict[Identifier, ScriptRule | None] = Field(default_factory=dict)
    scripts_path: str | None = None
    max_command_length: int = Field(default=2000, ge=16, le=HARD_MAX_COMMAND_LENGTH)
    # Commands allowed verbatim (byte for byte), whatever the script rules say: a client's protocol commands.
    exact: list[str] = Field(default_factory=list)

    @field_validator("scripts_dir")
    @classmethod
    def _plain_relative_dir(cls, value: str) -> str:
        # The directory is part of the one unquoted word the lexer accepts as the script path, so it must
        # be relative, free of `.`/`..` components and made of characters every shell passes unchanged.
        parts = value.split("/")
        if not _SCRIPTS_DIR.match(value) or any(p in (".", "..") for p in parts):
            raise ValueError(f"expected a plain relative directory like 'scripts' (got {value!r})")
        return value


class ShellMap(_Strict):
    """Where a shell tool's command is: exactly one of `command` (a string), `commands` (a list of strings,
    each one command) or `argv` (an argv array; `bash|sh -c|-lc STRING` is unwrapped and STRING judged)."""

    command: ArgPath | None = None
    commands: ArgPath | None = None
    argv: ArgPath | None = None
    workdir: ArgPath | None = Field(default=None, description="the working directory argument, judged as a path")
    env: ArgPath | None = Field(default=None, description="variables set for the command: must be empty")
    interpreter: ArgPath | None = Field(
        default=None, description="the program the command runs in (Codex's `shell`): must be a POSIX shell")
    shells: list[Annotated[str, StringConstraints(min_length=1, max_length=40)]] = Field(
        default_factory=list, description=(
            "the `interpreter` values this client runs the command in a POSIX shell for, besides bash, sh, dash "
            "and zsh (Open Interpreter's language `shell`)"))

    @model_validator(mode="after")
    def _one_command(self) -> ShellMap:
        given = [k for k in ("command", "commands", "argv") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"expected exactly one of command, commands, argv (got {', '.join(given) or 'none'})")
        return self

    @property
    def source(self) -> str:
        return self.command or self.commands or self.argv or ""


class KeyboardMap(_Strict):
    """A tool that types into a screen or a terminal (computer use, key typing) is a shell: the text it types
    is judged as a command line (one trailing newline is the Enter that runs it), a key it presses must be
    Enter alone, and any other action (a click, a drag) cannot be judged and is refused. `action`: the
    argument naming what one call does (`type`, `key`, `click`, `screenshot` ...), where the tool has one."""

    text: ArgPath | None = Field(default=None, description="the argument holding the text typed")
    keys: ArgPath | None = Field(default=None, description="the argument holding the keys pressed")
    action: ArgPath | None = Field(default=None, description="the argument naming the action of a call")

    def specs(self) -> list[str]:
        return [s for s in (self.action, self.text, self.keys) if s]


class ToolMap(_Strict):
    """One tool of a client mapped onto the capabilities; a tool with neither is known and follows
    `other_tools`."""

    shell: ShellMap | None = None
    keyboard: KeyboardMap | None = Field(default=None, description=(
        "a tool that types into a screen or terminal: its typed text judged as a command line"))
    paths: list[ArgPath] = Field(
        default_factory=list, description="arguments holding file paths the tool may write (or read)")
    read_paths: list[ArgPath] = Field(
        default_factory=list, description="arguments holding file paths the tool only reads")
    patch: list[ArgPath] = Field(default_factory=list, description="arguments holding patch text naming files")
    urls: list[ArgPath] = Field(default_factory=list, description="arguments holding URLs (judged by `urls:`)")
    globs: list[ArgPath] = Field(default_factory=list, description=(
        "arguments holding glob filters that choose the files the tool reads or lists (a grep's `include`, a "
        "glob tool's `pattern`): refused when they could select a protected read"))
    searches: list[ArgPath] = Field(default_factory=list, description=(
        "arguments holding a directory whose files' contents the tool reads (a grep's `path`; left out: the "
        "project root), judged as a read path and by the protected files found under it"))
    known: list[ArgPath] = Field(default_factory=list, description=(
        "arguments named like a command, file or URL that carry none (OpenCode's `task.command` names a slash "
        "command); any other such argument the offered schema has is judged by its classification"))
    reads_when: dict[ArgName, list[Annotated[str, StringConstraints(min_length=1, max_length=100)]]] = Field(
        default_factory=dict, description=(
            "the `paths` are only read when an argument named here holds one of its values (an editor's "
            "`command: view`); otherwise they are written"))

    @field_validator("paths", "read_paths", "patch", "urls", "globs", "searches", "known", mode="before")
    @classmethod
    def _one_or_list(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    def arguments(self) -> list[str]:
        """The top-level argument names this map reads."""
        specs = [*self.paths, *self.read_paths, *self.patch, *self.urls, *self.globs, *self.searches]
        if self.keyboard is not None:
            specs += self.keyboard.specs()
        if self.shell is not None:
            specs.append(self.shell.source)
        return [re.split(r"[.\[]", spec, maxsplit=1)[0] for spec in specs]

    def claimed(self) -> list[str]:
        """Every argument this map says what it is: the ones it judges, the shell's workdir, environment
        and interpreter, and `known`."""
        specs = [*self.paths, *self.read_paths, *self.patch, *self.urls, *self.globs, *self.searches, *self.known,
                 *self.reads_when]
        if self.keyboard is not None:
            specs += self.keyboard.specs()
        if self.shell is not None:
            specs += [s for s in (self.shell.source, self.shell.workdir, self.shell.env, self.shell.interpreter) if s]
        return specs

    @property
    def governed(self) -> bool:
        return (self.shell is not None or bool(self.paths) or bool(self.read_paths) or bool(self.patch)
                or bool(self.urls) or bool(self.globs) or bool(self.searches) or self.keyboard is not None)


# A file a client loads, written as a `protected:` pattern (ProtectedPattern's form).
ClientFilePattern = Annotated[str, StringConstraints(min_length=1, max_length=300, pattern=r"^[^\x00]+$")]


class Profile(_Strict):
    """A client's tools mapped onto capabilities. Chosen per request from the offered tools."""

    description: str | None = None
    user_agent: str | None = Field(default=None, description="a regex searched in the User-Agent header")
    tools: dict[ToolName, ToolMap] = Field(default_factory=dict)
    files: list[ClientFilePattern] = Field(default_factory=list, description=(
        "the files this client loads into the model's context or runs on its own (instructions, rules, "
        "settings, hooks), as `protected:` patterns: protected from writing for every client"))

    @field_validator("user_agent")
    @classmethod
    def _regex(cls, value: str | None) -> str | None:
        return _regex(value) if value is not None else None


class PathRules(_Strict):
    """`paths:` the project root(s) absolute paths may name, and (the older form) tool -> path argument."""

    project_root: list[str] = Field(default_factory=list)
    # Learn each request's root from what its client states about its working directory (Claude Code, Codex,
    # Cline, Qwen Code; proxy/sessions/project_root.py) when no root is pinned here or by project_root_header.
    infer_project_root: bool = True
    tools: dict[ToolName, ArgName | list[ArgName]] = Field(default_factory=lambda: dict(DEFAULT_PATHS))

    @model_validator(mode="before")
    @classmethod
    def _legacy_keys(cls, data: Any) -> Any:
        # `paths: {read: filePath, ...}` is the original form: every key but the reserved ones names a tool.
        if not isinstance(data, dict) or "tools" in data:
            return data
        reserved = ("project_root", "infer_project_root")
        tools = {k: v for k, v in data.items() if k not in reserved}
        out = {k: v for k, v in data.items() if k in reserved}
        if tools or "project_root" not in data:
            out["tools"] = tools
        return out

    @field_validator("project_root", mode="before")
    @classmethod
    def _roots(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("project_root")
    @classmethod
    def _absolute_roots(cls, value: list[str]) -> list[str]:
        out = []
        for root in value:
            normal = normal_root(root)
            if normal is None:
                raise ValueError(f"expected an absolute directory other than / (got {root!r})")
            problem = root_problem(normal)
            if problem is not None:
                raise ValueError(f"{root!r} cannot be a project root: {problem} (proxy/policy/roots.py)")
            out.append(normal)
        return out


# What no file-writing capability may create, change, rename or delete (proxy/policy/paths/protected.py): every
# file something other than the model runs or loads on its own. Gitignore-like: `/x` from a project root
# only, `x` at any depth, everything beneath a match included.
DEFAULT_PROTECTED_WRITE: tuple[str, ...] = (
    # uv and the build backends it runs (hatchling's and pdm's build hooks)
    "pyproject.toml", "uv.lock", "uv.toml", ".python-version", ".python-versions", "setup.py", "setup.cfg",
    "hatch_build.py", "pdm_build.py",
    # Python: an environment and what its interpreter loads at start or instead of a source (a `.pyc` whose
    # header holds the source's mtime and size is imported in its place)
    ".venv/", "pyvenv.cfg", "site-packages/", "dist-packages/", "*.pth", "*._pth", "sitecustomize.py",
    "usercustomize.py", "__pycache__/", "*.pyc", "*.pyo", ".pdbrc",
    # git (`.git` as a directory, or as a file naming another git dir), its attribute filters, submodules, LFS
    ".git/", ".gitattributes", ".gitmodules", ".lfsconfig", ".pre-commit-config.yaml", ".hg/", ".jj/",
    # the shell and tool managers on entering the directory; a shell's or git's start-up files where the
    # project root is the home directory (containers often make it so)
    ".envrc", "mise.toml", ".mise.toml", ".mise.local.toml", ".mise/", ".tool-versions",
    "/.bashrc", "/.bash_profile", "/.bash_login", "/.profile", "/.bash_logout", "/.zshrc", "/.zshenv",
    "/.zprofile", "/.zlogin", "/.gitconfig", "/.hgrc", "/.config/", "/.local/",
    # package managers' own settings that load code (`.npmrc` is a protected read as well)
    ".yarnrc", ".yarnrc.yml", ".pnpmfile.cjs", "bunfig.toml",
    # editors: tasks, settings, language servers, project-local init files, dev containers
    ".vscode/", ".idea/", ".zed/", ".helix/", ".nvim.lua", ".nvimrc", ".exrc", ".devcontainer/",
    ".devcontainer.json",
    # agent clients: config, plugins, hooks, commands, and the instructions they load into every request
    ".opencode/", "opencode.json", "opencode.jsonc", ".kilo/", "kilo.json", "kilo.jsonc", ".claude/",
    "CLAUDE.md", "CLAUDE.local.md", ".codex/", ".qwen/", "QWEN.md", ".clinerules", ".clinerules/", ".continue/",
    ".continuerc.json", ".kilocode/", ".mcp.json", ".cursor/", ".cursorrules", ".roo/", ".windsurf/", ".gemini/",
    "GEMINI.md", "AGENTS.md", ".agents/", ".aider.conf.yml", ".goosehints", ".github/copilot-instructions.md",
    ".github/instructions/", ".github/prompts/", ".junie/", ".amazonq/", ".augment/", ".crush/", "crush.json",
    ".crush.json",
    # the proxy's own files by their usual names (the loaded ones wherever they are: `own_files`)
    "allowlist-proxy*.yaml", "allowlist-proxy*.toml",
    # outside any project, whatever the root (or none): the system's own trees (proxy/policy/roots.py, the places
    # that are never roots), every home's dot-files and dot-directories (shell start-up, ssh, cron-like user
    # units, every agent client's config) and macOS's per-user launch agents
    *("/" + top + "/" for top in SYSTEM_DIRS), "~/.*", "~/Library/LaunchAgents/",
)
# Secrets no read capability may open: an allowed read followed by an allowed fetch is exfiltration.
DEFAULT_PROTECTED_READ: tuple[str, ...] = (
    ".env", ".env.*", "*.pem", "*.key", "id_rsa*", "id_ed25519*", "id_ecdsa*", "id_dsa*", ".netrc", ".npmrc",
    ".pypirc", ".git-credentials", ".aws/credentials", ".aws/config", ".config/gcloud/", ".azure/",
    ".kube/config", ".docker/config.json", "application_default_credentials.json", ".pgpass", ".vault-token",
    "*.p12", "*.pfx",
    # key stores and a home directory's secret folders, where the project root is one
    ".ssh/", ".gnupg/", ".password-store/", "*.kdbx", "*.jks", "*.keystore", ".htpasswd",
    # tools' credential files: a remote URL's token in git's config, database, S3, Docker, Terraform, Cargo,
    # RubyGems, Composer, GitHub CLI, Streamlit, Google service accounts and OAuth clients
    ".git/config", ".my.cnf", ".s3cfg", ".boto", ".dockercfg", ".terraformrc", "terraform.rc", "*.tfstate",
    "*.tfstate.backup", ".cargo/credentials", ".cargo/credentials.toml", ".gem/credentials",
    ".composer/auth.json", ".config/gh/hosts.yml", ".streamlit/secrets.toml", "service-account*.json",
    "credentials.json", "client_secret*.json",
    # environment and deploy-time secrets (issue 38): direnv's `.envrc`; Terraform's variable files
    # (`terraform.tfvars`, `*.auto.tfvars`, their JSON form); Cloudflare Wrangler's `.dev.vars`; SOPS/Helm and
    # ASP.NET user-secrets files and the `NAME.secrets.EXT` convention; cookiecutter-django's `.envs/` tree
    # (`.envs/.production/.django`)
    ".envrc", "*.tfvars", "*.tfvars.json", ".dev.vars", ".dev.vars.*", "secrets.yaml", "secrets.yml",
    "secrets.json", "*.secrets.*", ".secrets/", ".envs/",
    # cluster and registry credentials: kubectl's config by its other names (`kubeconfig`, `kubeconfig.yaml`)
    # and its token cache (`.kube/`), Windows' `_netrc` (curl, git), Yarn 2+'s npmAuthToken, Maven's and
    # Gradle's repository passwords, rclone's remotes, hub's token, the AWS CLI's SSO and role caches
    "kubeconfig*", ".kube/", "_netrc", ".yarnrc.yml", ".m2/settings.xml", ".gradle/gradle.properties",
    ".config/rclone/rclone.conf", ".config/hub", ".aws/sso/", ".aws/cli/cache/", ".gcloud/",
    # a submodule's remote URL with its token (`.git/modules/NAME/config`, submodules of submodules below)
    ".git/modules/",
    # the coding agents' own logins, read from the released clients: Codex (`~/.codex/auth.json`), Claude
    # Code (`~/.claude/.credentials.json`), OpenCode (`~/.local/share/opencode/auth.json`), Gemini CLI and
    # Qwen Code (`~/.gemini/oauth_creds.json`, `~/.qwen/oauth_creds.json`), GitHub Copilot's tokens
    ".codex/auth.json", ".claude/.credentials.json", ".local/share/opencode/auth.json", ".gemini/oauth_creds.json",
    ".qwen/oauth_creds.json", ".config/github-copilot/",
    # outside any project, whatever the root (or none): a home's dot-files and dot-directories (keys, tokens,
    # every tool's credentials), processes' environments, the system's password hashes and host keys, and the
    # secrets containers and Kubernetes mount
    "~/.*", "//proc/", "//etc/shadow", "//etc/gshadow", "//etc/ssh/", "//run/secrets/", "//var/run/secrets/",
)
ProtectedPattern = Annotated[str, StringConstraints(min_length=1, max_length=300, pattern=r"^[^\x00]+$")]


ModuleName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,199}$")]


class NewModules(_Strict):
    """`protected.new_modules`: top-level modules the agent may create in the project's import directories
    (the root, `src/`, the `.pth` directories) where the project's environment cannot be read, and which the
    standard library's or the installed distributions' names do not cover (proxy/policy/paths/modules.py)."""

    allow: list[ModuleName] = Field(default_factory=list, description=(
        "module or package names (`mypkg`, `tests`) a write may create at the top level of an import directory"))


class ProtectedRules(_Strict):
    """`protected:` paths no tool may write (`write`) or read (`read`); a policy without the key gets the
    shipped lists. `scripts_dir`: every file under `shell.scripts_dir` is protected from writing too;
    `own_files`: so are the proxy's loaded policy and config files, wherever they are. A write that changes
    what an import of the project's interpreter resolves to is protected as well (`new_modules`)."""

    write: list[ProtectedPattern] = Field(default_factory=lambda: list(DEFAULT_PROTECTED_WRITE))
    read: list[ProtectedPattern] = Field(default_factory=lambda: list(DEFAULT_PROTECTED_READ))
    scripts_dir: bool = True
    own_files: bool = True
    # The instructions, rules and settings each tool profile's client loads (`profiles.*.files`, the built-in
    # ones and the policy's own): a model must not rewrite what the next session of any client is told.
    client_files: bool = True
    new_modules: NewModules = Field(default_factory=NewModules)


class SecretRules(_Strict):
    """`secrets:` what the proxy does with secrets in the texts a client sends back to the model (tool results,
    the files it inlines; proxy/enforce/secrets.py): with `redact` each is replaced by `[redacted: TYPE]` before
    the request goes upstream. `allow`: RE2 patterns; a found secret that one of them matches is left as it is."""

    redact: bool = True
    allow: list[Annotated[str, StringConstraints(min_length=1, max_length=1000)]] = Field(default_factory=list)

    @field_validator("allow")
    @classmethod
    def _patterns_compile(cls, value: list[str]) -> list[str]:
        for index, pattern in enumerate(value):
            try:
                re2.compile(pattern.encode("utf-8"))
            except re2.error as exc:
                raise ValueError(f"allow[{index}] is not a pattern RE2 reads ({pattern!r}): {exc}") from None
        return value


class Feedback(_Strict):
    """What a rejected call is told, per capability (placeholders as in the one-string form)."""

    shell: str = DEFAULT_FEEDBACK
    paths: str = DEFAULT_PATHS_FEEDBACK
    other: str = DEFAULT_OTHER_FEEDBACK


class ToolExample(_Strict):
    tool: ToolName
    arguments: dict[str, Any] | None = None


Example = str | ToolExample


class Examples(_Strict):
    allow: list[Example] = Field(default_factory=list)
    reject: list[Example] = Field(default_factory=list)


class Policy(_Strict):
    name: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")]
    description: str | None = None
    mode: Literal["enforce", "observe"] = "enforce"
    retry_budget: int = Field(default=3, ge=0, le=20)
    # `shell:` is the capability's name; `bash:` the original one, still read.
    bash: BashRules = Field(default_factory=BashRules, validation_alias=AliasChoices("shell", "bash"))
    paths: PathRules = Field(default_factory=PathRules)
    profiles: dict[ProfileName, Profile | None] = Field(
        default_factory=dict, description="add or replace tool profiles; null removes a built-in one")
    builtin_profiles: bool = True
    other_tools: Literal["allow", "reject"] = "allow"
    urls: UrlRules = Field(default_factory=UrlRules)
    protected: ProtectedRules = Field(default_factory=ProtectedRules)
    secrets: SecretRules = Field(default_factory=SecretRules)
    feedback: str | Feedback = Field(default_factory=Feedback)
    loop_min_attempts: int = Field(default=3, ge=2, le=100)
    examples: Examples = Field(default_factory=Examples)
    passthrough_routes: list[RoutePath] = Field(default_factory=lambda: list(DEFAULT_PASSTHROUGH_ROUTES))
    # Opt-in repairs (proxy/policy/feedback/repair.py): a rejected call whose repaired form is allowed is delivered
    # repaired, recorded as `repaired`. Empty: every rejection goes back to the model.
    repair: list[RepairName] = Field(default_factory=list)
    # Feedback experiments: variant name -> template; each new session gets one (proxy/policy/feedback/variants.py).
    feedback_variants: dict[Identifier, str] = Field(default_factory=dict)

    # The compiled matcher (regex, script lookup), built on first use; the model is frozen so it never
    # goes stale.
    _compiled: Any = PrivateAttr(default=None)

    # The compiled profile table (proxy/policy/tools/profiles.py), built on first use like the matcher.
    _profiles: Any = PrivateAttr(default=None)

    # The compiled protected-path patterns (proxy/policy/paths/protected.py), built on first use like the matcher.
    _protected: Any = PrivateAttr(default=None)

    @model_validator(mode="before")
    @classmethod
    def _one_shell_section(cls, data: Any) -> Any:
        if isinstance(data, dict) and "shell" in data and "bash" in data:
            raise ValueError("give the shell rules once: `shell:` or its older name `bash:`, not both")
        return data

    def path_arguments(self, tool: str) -> tuple[str, ...]:
        value = self.paths.tools.get(tool)
        if value is None:
            return ()
        return (value,) if isinstance(value, str) else tuple(value)

    def feedback_template(self, capability: str) -> str:
        """The feedback template for a rejection of `capability` (shell | paths | other)."""
        if isinstance(self.feedback, str):
            return self.feedback if capability == "shell" else DEFAULT_OTHER_FEEDBACK
        return str(getattr(self.feedback, capability, self.feedback.other))


_Built = TypeVar("_Built")


def compiled_for(policy: Policy, slot: str, source: object, build: Callable[[Policy], _Built]) -> _Built:
    """What `build` makes of `policy`, kept in its private `slot` and made again only when `source` (the part
    of the policy it was made from) was replaced: `model_copy(update=...)` copies private attributes too.
    The slot is read directly: pydantic's attribute fallback for private attributes costs more than a
    whole shell decision."""
    private = policy.__pydantic_private__
    kept = private.get(slot) if private is not None else None
    if kept is None or kept[0] is not source:
        kept = (source, build(policy))
        setattr(policy, slot, kept)
    return kept[1]
