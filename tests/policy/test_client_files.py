"""The files each agent client loads on its own, read from the released packages (issue 38).

Every built-in profile names the files its client loads into the model's context or runs by itself
(proxy/default_policies/tool-profiles.yaml `files`), and all of them are protected writes for every client.
This reads each release the end-to-end suite installs (scripts/install-opencode.sh, install-agent-clis.sh) and
those unpacked by scripts/install-client-releases.sh - the JavaScript bundles and the compiled binaries, as bytes
- for every name shaped like an agent's instruction, rules or settings file:
- an upper-case Markdown name (`AGENTS.md`, `CONTEXT.md`, `AGENTS.override.md`, `CLAUDE.local.md`);
- a Markdown name that says it instructs (`copilot-instructions.md`, `review-rules.md`);
- a `*rules` file (`.clinerules`, `.kilocoderules`);
- an agent client's dot-directory or dot-file (`.claude`, `.kilocodemodes`, `.mcp.json`, `.aider.conf.yml`), and
  those a client obeys in a working tree (`.lsp.json`, `.claude-plugin`, `.mcpb-cache`, `.worktreeinclude`);
- a client's own config name (`opencode.jsonc`, `kilo.json`).
Each name found must be one the client's profile lists, or one known not to be loaded, with the reason (named
only in a prompt the client sends, read from a directory the profile protects whole, documentation). A new
release that starts loading a new file fails here until its profile lists it.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from proxy.policy import judge_call, load_policy_file
from proxy.policy.tools.profiles import builtin_profiles

from .conftest import ROOT

# The literal text each kind of name holds, searched with `bytes.find` (binaries run to hundreds of MB), and the
# whole name around each hit (the characters a file name is made of) matched against the kinds.
_NAME_CHARS = re.compile(rb"[A-Za-z0-9_.-]*")
_NAME_BEFORE = re.compile(rb"[A-Za-z0-9_.-]*\Z")
_AGENT_DOTS = ("opencode", "claude", "codex", "qwen", "gemini", "kilo", "kilocode", "kilocodemodes", "roo", "roomodes",
               "continue", "continuerc.json", "cline", "cursor", "windsurf", "agents", "junie", "amazonq", "augment",
               "crush", "goosehints", "aider", "mcp.json", "lsp.json", "claude-plugin", "mcpb-cache", "worktreeinclude")
_CONFIGS = ("opencode", "kilo", "crush", "qwen", "gemini", "codex", "claude", "cline", "continue")
_LITERALS = (b".md", b"rules", *(b"." + word.encode() for word in _AGENT_DOTS),
             *(word.encode() + b".json" for word in _CONFIGS))
_KINDS = re.compile(
    r"[A-Z][A-Z0-9_]{2,}(?:\.[A-Za-z]+)?\.md"  # AGENTS.md, CLAUDE.local.md
    r"|[a-z][a-z0-9_-]*(?:instructions?|rules|conventions|guidelines)[a-z0-9_-]*\.md"  # copilot-instructions.md
    r"|\.[a-z][a-z0-9_-]*rules"  # .clinerules, .kilocoderules
    rf"|\.(?:{'|'.join(re.escape(w) for w in _AGENT_DOTS)})"  # .claude, .aider.conf.yml, .claude.json
    r"(?:\.(?:[a-z]+\.)*(?:json|jsonc|ya?ml|md|toml|txt|history))?"
    rf"|(?:{'|'.join(_CONFIGS)})\.jsonc?")  # opencode.jsonc


_DOCS = "documentation of the package, not loaded"
_SKILL = "a skill's own file, read only under a skills directory the profile protects whole"
_PROMPT = "named only in a prompt the client sends (/init, review), which tells the model to read it"
_MEMORY = "auto memory, kept under the client's home directory (protected whole)"
_CREDENTIALS = "a client's credentials in a table of secret files (directory, name) kept from the model's reads"
_LICENSE = "a plugin's licence file, looked for when a plugin is checked"
_SDK_SCHEMA = "Claude Code's plugin settings schema, bundled with the Claude Agent SDK its provider runs"
_COMMON = {"README.md": _DOCS, "CHANGELOG.md": _DOCS, "CONTRIBUTING.md": _DOCS, "LICENSE.md": _DOCS,
           "SECURITY.md": _DOCS, "HISTORY.md": _DOCS, "SKILL.md": _SKILL, "MEMORY.md": _MEMORY,
           ".github/copilot-instructions.md": _PROMPT, "settings.local.json": "read as .claude/settings.local.json"}
# Per client: a name its release carries that it does not load, and why (read from the bundle around the name).
NOT_LOADED: dict[str, dict[str, str]] = {
    "opencode": {"CONVENTIONS.md": _PROMPT, ".cursorrules": _PROMPT, ".cursor": "a folder icon table",
                 ".gemini": "a provider option's name", ".github/instructions": _PROMPT,
                 ".continue": "a property's name"},
    "kilo": {"CONVENTIONS.md": _PROMPT, ".cursorrules": _PROMPT, ".cursor": "a folder icon table",
             ".gemini": "a provider option's name", ".github/instructions": _PROMPT,
             ".codex": "another client's home, read to import its sessions", ".continue": "a property's name",
             ".claude.json": "another client's settings, read to import its MCP servers"},
    "claude-code": {"NOTES.md": "a bundled skill's .design-sync/NOTES.md",
                    "ONBOARDING.md": "uploaded by a tool on request", "CONNECTORS.md": "plugin documentation",
                    ".clinerules": _PROMPT, ".windsurfrules": _PROMPT, ".windsurf": _PROMPT, ".continue": _PROMPT,
                    "conventions.md": "plugin documentation", "style-rules.md": "plugin documentation",
                    ".augment": _CREDENTIALS, ".opencode": _CREDENTIALS, ".qwen": _CREDENTIALS,
                    ".deny_rules": "a property's name (`g?.deny_rules`)",
                    ".session_allow_rules": "a property's name (`internal?.session_allow_rules`)",
                    ".session_ask_rules": "a property's name (`internal?.session_ask_rules`)",
                    ".session_deny_rules": "a property's name (`internal?.session_deny_rules`)",
                    ".gitrules": "a remote session's git rules, kept in the runner's own `_sessions` folder",
                    "COPYING.md": _LICENSE, "LICENCE.md": _LICENSE,
                    "DIAGNOSIS.md": "the write-up a bundled troubleshooting skill tells the model to write",
                    "SCHEMA.md": "a bundled skill's reference (shared/evals/report/SCHEMA.md)",
                    "ARCHITECTURE.md": "named by its own file-name guards, but loaded by no default path of this "
                                       "build; listing it would refuse every project's docs/architecture.md",
                    "claude.json": "`.claude.json` in a pattern of secret file names (the profile lists it)",
                    "project-instructions.md": "written by the claude.ai export import under its projects/ "
                                               "folder, read by nothing"},
    "codex": {"PLANS.md": "named in a bundled skill's prompt", "api-conventions.md": "a bundled skill's reference",
              "valuesinstructions.md": "`instructions.md` glued to the string before it: read from ~/.codex only"},
    "qwen-code": {"PROJECT_SUMMARY.md": "written by /summary under .qwen/", ".continue": "a gRPC option's name",
                  ".cursor": "a folder icon table",
                  "CHANNEL.md": "a channel's memory (its older name), kept under ~/.qwen/channels/ (protected whole)",
                  "CLAUDE.md": "named in the auto-mode classifier's prompt as a repository's instructions",
                  "GEMINI.md": "named in the auto-mode classifier's prompt as a repository's instructions",
                  "DESIGN.md": "a comment, and a bundled skill's design note left out of its digest",
                  "PROTOCOL.md": "a comment in the review checklist's code"},
    "cline": {"CLAUDE.md": "another client's file, read to import its rules on request", "rules.md": "read as "
              ".cline/rules.md", ".claude": "another client's home", ".codex": "another client's home",
              ".continue": "another client's home", ".cursor": "another client's home", ".agents": "another "
              "client's skills", ".mcp.json": "another client's MCP servers, imported on request",
              ".opencode": "another client's data, read to import its sessions",
              ".claude-plugin": _SDK_SCHEMA, ".lsp.json": _SDK_SCHEMA,
              ".claude.json": "another client's settings, read to import its MCP servers"},
    "continue": {".claude": "another client's home", ".cursor": "another client's home"},
    "gemini-cli": {"CONTEXT.md": "an example of a custom context file name in a settings hint",
                   ".claude": "another client's home", ".continue": "a gRPC option's name",
                   ".cursor": "a folder icon table"},
    "aider": {},
}


def _clients_cache() -> Path:
    return Path(os.environ.get("AGENT_CLIS_CACHE") or Path.home() / ".cache" / "allowlist-proxy-e2e-clients")


def _releases_cache() -> Path:
    return Path(os.environ.get("CLIENT_RELEASES_CACHE") or Path.home() / ".cache" / "allowlist-proxy-client-releases")


def _opencode_cache() -> Path:
    return Path(os.environ.get("OPENCODE_CACHE") or Path.home() / ".cache" / "allowlist-proxy-e2e")


# profile -> (where its release is, the files of it to read: globs under that place)
RELEASES: dict[str, tuple[Callable[[], Path], tuple[str, ...]]] = {
    "opencode": (_opencode_cache, ("node_modules/opencode-*/bin/opencode",)),
    "kilo": (_clients_cache, ("node_modules/@kilocode/cli-*/bin/kilo",)),
    "claude-code": (_clients_cache, ("node_modules/@anthropic-ai/claude-code-*/claude",)),
    "codex": (_clients_cache, ("node_modules/@openai/codex-*/vendor/*/bin/codex",)),
    "qwen-code": (_clients_cache, ("node_modules/@qwen-code/qwen-code/**/*.js",)),
    "cline": (_clients_cache, ("node_modules/@cline/cli-*/bin/cline",)),
    "continue": (_clients_cache, ("node_modules/@continuedev/cli/dist/*.js",)),
    "gemini-cli": (_releases_cache, ("google-gemini-cli-*/package/bundle/**/*.js",)),
    # Roo Code ships as a VS Code extension only (no npm or PyPI release to read): its profile's files are the
    # ones its documentation names.
    "aider": (_releases_cache, ("aider-chat-*/aider/*.py", "aider-chat-*/aider/coders/*.py")),
}


def _release_files(profile: str) -> list[Path]:
    place, globs = RELEASES[profile]
    root = place()
    found = {p for pattern in globs for p in root.glob(pattern) if p.is_file()}
    return sorted(p for p in found if "/vendor/ripgrep/" not in str(p))


def _found(files: list[Path]) -> Iterator[str]:
    """Each name of an instruction file's shape in the files: the whole run of name characters around a literal
    it must hold, standing alone (not a path's later component, not glued to other text)."""
    for path in files:
        data = path.read_bytes()
        for literal in _LITERALS:
            at = data.find(literal)
            while at >= 0:
                before = _NAME_BEFORE.search(data, max(0, at - 120), at)
                start = before.start() if before else at
                after = _NAME_CHARS.match(data, at + len(literal))
                end = after.end() if after else at + len(literal)
                name = data[start:end].decode("ascii", "replace").rstrip("-.")
                if (start == 0 or data[start - 1:start] != b"/") and _KINDS.fullmatch(name):
                    yield name
                at = data.find(literal, end)


def _listed(name: str, files: list[str]) -> bool:
    lowered = name.lower()
    for pattern in files:
        bare = pattern.rstrip("/").lower()
        if fnmatch.fnmatchcase(lowered, bare) or lowered.startswith(bare + "/"):
            return True
    return False


@pytest.mark.parametrize("profile", sorted(RELEASES))
def test_every_file_a_release_loads_is_listed(profile: str) -> None:
    files = _release_files(profile)
    if not files:
        reason = f"the {profile} release is not unpacked under {RELEASES[profile][0]()}: run the install scripts"
        if os.environ.get("E2E_REQUIRE_CLIENTS") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    listed = builtin_profiles()[profile].files
    known = {**_COMMON, **NOT_LOADED[profile]}
    found = set(_found(files))
    unexplained = sorted(name for name in found if not _listed(name, listed) and name not in known)
    assert unexplained == [], f"{profile}'s release names files its profile does not list: {unexplained}"
    # The extraction reads the release: the client's own instruction files are among what it finds.
    assert any(_listed(name, listed) for name in found), (profile, sorted(found))


def test_the_files_of_every_profile_are_protected_for_every_client() -> None:
    policy = load_policy_file(ROOT / "policies" / "strict.yaml").policy
    names = {name for profile in builtin_profiles().values() for name in profile.files}
    assert {"CONTEXT.md", "AGENTS.override.md", "AGENT.md", "CODEX.md", ".kilocodemodes", ".roomodes",
            "CONVENTIONS.md", "copilot-instructions.md", "QWEN.local.md", ".lsp.json", ".worktreeinclude",
            ".claude-plugin/", "REVIEW.md"} <= names
    for name in sorted(names):
        path = name.rstrip("/").replace("*", "x") + ("/rules.md" if name.endswith("/") else "")
        for tool, arguments in (("write", {"filePath": path, "content": "x"}),
                                ("Write", {"file_path": path, "content": "x"}),
                                ("apply_patch", {"patchText": f"*** Begin Patch\n*** Add File: {path}\n+x\n"
                                                              "*** End Patch"})):
            assert "protected_path" in judge_call(policy, tool, arguments).reasons, (tool, path)


def test_the_client_files_switch_turns_them_off() -> None:
    policy = load_policy_file(ROOT / "policies" / "strict.yaml").policy
    off = policy.model_copy(update={"protected": policy.protected.model_copy(update={"client_files": False})})
    arguments = {"filePath": "AGENTS.override.md", "content": "x"}
    assert judge_call(policy, "write", arguments).reasons == ("protected_path",)
    assert judge_call(off, "write", arguments).reasons == ()
