"""The policy file schema (DESIGN.md "Policy files"): what an operator may write, checked strictly.

Strict mode: YAML's `yes`/`1` are not quietly turned into strings, and any key the schema does not know
is refused, so a typo never silently loosens a policy.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, StringConstraints, field_validator

__all__ = [
    "DEFAULT_FEEDBACK",
    "DEFAULT_PASSTHROUGH_ROUTES",
    "DEFAULT_PATHS",
    "BashRules",
    "Examples",
    "Policy",
    "ScriptRule",
    "ToolExample",
]

DEFAULT_FEEDBACK = "Rejected ({reasons}): only `uv run scripts/<name>.py [args]` may run. Scripts: {scripts}."
DEFAULT_PATHS: dict[str, str | list[str]] = {
    "read": "filePath",
    "edit": "filePath",
    "write": "filePath",
    "glob": "path",
    "grep": "path",
}
# The /v1/* routes forwarded as they are: none of them can carry a model's tool call (proxy/routes_policy.py).
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
_SCRIPTS_DIR = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.,+@%-]*(/[A-Za-z0-9_][A-Za-z0-9_.,+@%-]*)*$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class ScriptRule(_Strict):
    flags: list[Flag] = Field(default_factory=list, description="the only flags the script may get")
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

    @field_validator("scripts_dir")
    @classmethod
    def _plain_relative_dir(cls, value: str) -> str:
        # The directory is part of the one unquoted word the lexer accepts as the script path, so it must
        # be relative, free of `.`/`..` components and made of characters every shell passes unchanged.
        parts = value.split("/")
        if not _SCRIPTS_DIR.match(value) or any(p in (".", "..") for p in parts):
            raise ValueError(f"expected a plain relative directory like 'scripts' (got {value!r})")
        return value

    def script_flags(self, name: str) -> frozenset[str] | None:
        """The declared flags of a listed script, None when the script is not listed."""
        if name not in self.scripts:
            return None
        rule = self.scripts[name]
        return frozenset(rule.flags) if rule is not None else frozenset()


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
    bash: BashRules = Field(default_factory=BashRules)
    paths: dict[ToolName, ArgName | list[ArgName]] = Field(default_factory=lambda: dict(DEFAULT_PATHS))
    other_tools: Literal["allow", "reject"] = "allow"
    feedback: str = DEFAULT_FEEDBACK
    loop_min_attempts: int = Field(default=3, ge=2, le=100)
    examples: Examples = Field(default_factory=Examples)
    passthrough_routes: list[RoutePath] = Field(default_factory=lambda: list(DEFAULT_PASSTHROUGH_ROUTES))
    # Opt-in repairs (proxy/policy/repair.py): a rejected call whose repaired form is allowed is delivered
    # repaired, recorded as `repaired`. Empty: every rejection goes back to the model.
    repair: list[RepairName] = Field(default_factory=list)
    # Feedback experiments: variant name -> template; each new session gets one (proxy/policy/variants.py).
    feedback_variants: dict[Identifier, str] = Field(default_factory=dict)

    # The compiled matcher (regex, script lookup), built on first use; the model is frozen so it never
    # goes stale.
    _compiled: Any = PrivateAttr(default=None)

    def path_arguments(self, tool: str) -> tuple[str, ...]:
        value = self.paths.get(tool)
        if value is None:
            return ()
        return (value,) if isinstance(value, str) else tuple(value)
