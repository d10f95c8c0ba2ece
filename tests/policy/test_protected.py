"""The protected-path matcher and the patch headers it is given, judged the way the proxy judges them."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.policy.file.loader import load_policy_file, load_policy_text
from proxy.policy.judge import judge_call
from proxy.policy.paths.inside import patch_paths

STRICT = Path(__file__).resolve().parents[2] / "policies" / "strict.yaml"
POLICY = load_policy_file(STRICT).policy
ROOT = "/home/me/project"
# The shipped policy judging a project whose root is known (here pinned): where a relative path lands is known.
ROOTED = POLICY.model_copy(update={"paths": POLICY.paths.model_copy(update={"project_root": [ROOT]})})


def _reasons(tool: str, arguments: dict) -> tuple[str, ...]:
    return judge_call(POLICY, tool, arguments).reasons


@pytest.mark.parametrize("path", [
    "scripts/search.py", "scripts/new/deep.py", "SCRIPTS/x.py", "./scripts//x.py", "src/../scripts/x.py",
    "ｓｃｒｉｐｔｓ/x.py", "scripts./x.py", "scripts /x.py", "scripts\\x.py", "pyproject.toml", "PyProject.Toml",
    "pyproject.toml.", "uv.lock", "uv.toml", ".python-version", ".venv/bin/python", "lib/site-packages/evil.pth",
    "src/sitecustomize.py", "usercustomize.py", ".git/config", ".git/hooks/pre-commit", ".GIT/HEAD",
    "sub/.git/config", ".gitattributes", ".gitmodules", ".envrc", ".vscode/tasks.json", ".idea/workspace.xml",
    ".opencode/plugin/x.ts", "opencode.json", "opencode.jsonc", ".claude/settings.json", ".claude/hooks/x.sh",
    ".codex/config.toml", ".qwen/settings.json", ".clinerules", ".continue/config.yaml", ".kilocode/x",
    ".mcp.json", ".cursor/rules/x.mdc", ".roo/x", "AGENTS.md", f"{ROOT}/scripts/x.py", f"{ROOT}/.git/config",
    # What Python loads on its own: a cached module (imported instead of a source whose mtime and size its
    # header holds), start-up hooks anywhere, an environment's settings and installed packages.
    "src/__pycache__/app.cpython-311.pyc", "lib/mod.pyc", "lib/mod.opt-1.pyo", "src/__PYCACHE__/x", "a/b/c.pth",
    "python311._pth", "tools/usercustomize.py", "env/pyvenv.cfg", "vendor/lib/site-packages/requests/api.py",
    "dist-packages/x.py", ".pdbrc", "hatch_build.py", "pdm_build.py", ".python-versions",
    # git: `.git` as a file (`gitdir: ELSEWHERE`, whose config then runs), LFS settings, commit hooks' config.
    "src/.git", "vendor/lib/.git", ".lfsconfig", ".pre-commit-config.yaml",
    # The shell and tool managers on entering the directory; start-up files where the root is the home.
    "mise.toml", ".mise.toml", ".mise/tasks/x", ".tool-versions", ".bashrc", ".profile", ".zshrc", ".zshenv",
    ".gitconfig", ".config/git/config", ".config/uv/uv.toml", ".local/lib/python3.11/x.py",
    # Package managers' settings that load code, editors' tasks and language servers, dev containers.
    ".yarnrc.yml", ".pnpmfile.cjs", "bunfig.toml", ".npmrc", ".zed/settings.json", ".helix/languages.toml",
    ".nvim.lua", ".exrc", ".devcontainer/devcontainer.json", ".devcontainer.json",
    # Agent clients' config and the instructions they load into every request.
    ".kilo/config.json", "kilo.json", "CLAUDE.local.md", ".aider.conf.yml", ".goosehints",
    ".github/copilot-instructions.md", ".github/instructions/py.instructions.md", ".junie/guidelines.md",
    ".crush.json",
    # Other version control: Mercurial loads `[extensions]` and runs `[hooks]` from `.hg/hgrc`.
    ".hg/hgrc", ".jj/repo/config.toml", ".hgrc",
])
def test_protected_writes(path: str) -> None:
    for tool, arguments in (("write", {"filePath": path, "content": "x"}),
                            ("Edit", {"file_path": path, "old_string": "a", "new_string": "b"}),
                            ("MultiEdit", {"file_path": path, "edits": []}),
                            ("multiedit", {"filePath": path, "edits": []}),
                            ("write_to_file", {"path": path, "content": "x"}),
                            ("replace_in_file", {"path": path, "diff": "x"})):
        reasons = judge_call(POLICY, tool, arguments, tools=None).reasons
        assert "protected_path" in reasons or "absolute_path" in reasons, (tool, path, reasons)
    from proxy.policy.paths.protected import protected_problem
    assert protected_problem(POLICY, path, (ROOT,)) == "protected_path", path


@pytest.mark.parametrize("path", ["src/app/main.py", "scripts_notes.md", "docs/scripts.md", "notes/pyproject.md",
                                  "src/git/config.py", "README.md", "tests/test_x.py", "tests/conftest.py",
                                  "Makefile", "package.json", "src/app/profile.py", "docs/.bashrc.md",
                                  "src/config/settings.py", "src/app/pycache.py", "src/site_packages.md"])
def test_ordinary_files_stay_writable(path: str) -> None:
    assert judge_call(ROOTED, "write", {"filePath": path, "content": "x"}).reasons == ()


@pytest.mark.parametrize("path", ["src/app/cli.py", "tests/conftest.py", "lib/native.so", "app/scripts/x.md",
                                  "nested/project/scripts/run.py", "home/.bashrc", "sub/.config/x"])
def test_without_a_root_a_relative_write_that_could_land_on_a_protected_file_is_refused(path: str) -> None:
    """Where no root is known, the folder a relative path starts from is unknown: a pattern anchored at the root
    (`/scripts/`, `/.bashrc`) may match below any folder of it, and which modules the scripts import cannot be
    read, so a Python module is refused too. What no such rule could match stays writable."""
    assert _reasons("write", {"filePath": path, "content": "x"}) == ("protected_path",)
    assert judge_call(ROOTED, "write", {"filePath": path.replace("scripts/", "x/").replace("/.", "/"),
                                        "content": "x"}).reasons == ()
    for ordinary in ("README.md", "docs/guide.md", "package.json", "data/a.csv"):
        assert _reasons("write", {"filePath": ordinary, "content": "x"}) == ()


@pytest.mark.parametrize("path", [".env", ".env.local", "deploy/.ENV.production", "certs/server.pem", "tls.key",
                                  "id_rsa", ".ssh/id_ed25519.pub", ".netrc", ".npmrc", ".pypirc",
                                  ".git-credentials", ".aws/credentials", ".aws/config", ".config/gcloud/x.json",
                                  ".azure/a", ".kube/config", ".docker/config.json",
                                  # a remote URL's token, home-directory key folders, tools' credentials
                                  ".git/config", ".ssh/deploy_key", ".gnupg/private-keys-v1.d/x.key",
                                  "vault.kdbx", "release.jks", ".htpasswd", ".my.cnf", ".s3cfg",
                                  "infra/terraform.tfstate", ".terraformrc", ".cargo/credentials.toml",
                                  ".config/gh/hosts.yml", ".streamlit/secrets.toml", "service-account-prod.json",
                                  "credentials.json", "client_secret_123.json"])
def test_secrets_unreadable(path: str) -> None:
    assert _reasons("read", {"filePath": path}) == ("protected_path",)
    assert _reasons("grep", {"pattern": "x", "path": path}) == ("protected_path",)


def test_protected_files_stay_readable() -> None:
    for path in ("pyproject.toml", "scripts/search.py", ".git/HEAD", "AGENTS.md"):
        assert _reasons("read", {"filePath": path}) == (), path


@pytest.mark.parametrize("header", [
    "*** Add File: {}", "  *** Update File: {}", "\t*** Delete File: {}", "\u3000*** Add File: {}",
    "\u00a0*** Update File: {}", "*** Add File: {}   ", "\u200b*** Add File: {}", "*** add file: {}",
    "***  Add File: {}", "*** Add File:{}",
])
def test_patch_headers_in_every_form_are_judged(header: str) -> None:
    text = "*** Begin Patch\n" + header.format("scripts/x.py") + "\n+x\n*** End Patch"
    assert judge_call(POLICY, "apply_patch", {"patchText": text}).reasons, repr(header)


def test_patch_move_and_git_rename_are_writes() -> None:
    move = "*** Begin Patch\n*** Update File: src/a.py\n*** Move to: .git/hooks/post-checkout\n@@\n+x\n*** End Patch"
    assert _reasons("apply_patch", {"patchText": move}) == ("protected_path",)
    rename = ("diff --git a/src/a.py b/scripts/a.py\nsimilarity index 100%\n"
              "rename from src/a.py\nrename to scripts/a.py\n")
    assert "scripts/a.py" in patch_paths(rename)
    assert _reasons("patch", {"patchText": rename}) == ("protected_path",)


def test_responses_apply_patch_call_operations() -> None:
    for operation in ({"type": "create_file", "path": "scripts/x.py", "diff": "+x"},
                      {"type": "delete_file", "path": ".git/config"},
                      {"type": "update_file", "path": "src/a.py", "diff": "*** Move to: pyproject.toml\n+x"}):
        assert judge_call(POLICY, "apply_patch_call", operation).reasons, operation
    assert judge_call(ROOTED, "apply_patch_call", {"type": "update_file", "path": "src/app/a.py",
                                                    "diff": "@@\n-a\n+b"}).allowed


def test_script_path_argument_and_unknown_tool_values() -> None:
    text = STRICT.read_text().replace("      args: {flags: {--max-results: int}}",
                                      "      args: {positional: path, flags: {--max-results: int}}", 1)
    policy = load_policy_text(text.encode()).policy
    assert judge_call(policy, "bash", {"command": "uv run scripts/search.py .git/config"}).reasons[:2] == (
        "argument", "protected_path")
    rooted = policy.model_copy(update={"paths": policy.paths.model_copy(update={"project_root": [ROOT]})})
    assert judge_call(rooted, "bash", {"command": "uv run scripts/search.py src/a.py"}).allowed
    # Without a root, the script may write the module a script imports: not judged, refused.
    assert judge_call(policy, "bash", {"command": "uv run scripts/search.py src/a.py"}).reasons[:2] == (
        "argument", "protected_path")
    assert "protected_path" in judge_call(POLICY, "save_it", {"target": ".git/hooks/pre-push", "body": "x"}).reasons


def test_protected_lists_can_be_turned_off() -> None:
    text = STRICT.read_text().replace("  scripts_dir: true ", "  write: []\n  read: []\n  scripts_dir: false ", 1)
    # The shipped examples of protected paths are judged at load: they go with the lists.
    shipped = ("filePath: scripts/search.py", "filePath: .git/", "filePath: .env")
    text = "\n".join(line for line in text.splitlines() if not any(p in line for p in shipped))
    policy = load_policy_text(text.encode()).policy
    assert judge_call(policy, "write", {"filePath": "pyproject.toml", "content": "x"}).allowed
    assert judge_call(policy, "read", {"filePath": ".env"}).allowed


def test_the_project_modules_the_scripts_import_are_protected(tmp_path: Path) -> None:
    """What `uv run scripts/x.py` runs besides the script: the project's modules it imports by name (the root,
    `src/`, the directories the environment's `.pth` files add), followed through each other; the standard
    library's names are never the project's (they come first on `sys.path`)."""
    from proxy.policy.paths.protected import protected_problem
    project = tmp_path / "project"
    files = {"scripts/search.py": "import json, http\nimport mylib.core\nfrom tools import x\n",
             "src/mylib/__init__.py": "from helpers import y\n", "src/mylib/core.py": "",
             "lib/tools/__init__.py": "", "helpers.py": "", "src/app.py": "", "http/handlers.py": "",
             ".venv/lib/python3.11/site-packages/_tools.pth": f"{project / 'lib'}\n"}
    for name, text in files.items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(text)
    roots = (str(project),)
    for path in ["src/mylib/core.py", "src/mylib/new.py", "SRC/MyLib/__init__.py", "lib/tools/__init__.py",
                 "helpers.py", "src/helpers.py", "mylib.py", f"{project}/src/mylib/core.py"]:
        assert protected_problem(POLICY, path, roots, imports=True) == "protected_path", path
    for path in ["src/app.py", "http/handlers.py", "lib/other.py", "docs/mylib.md"]:
        assert protected_problem(POLICY, path, roots, imports=True) is None, path
    # A module named like the standard library's is refused where it would stand first (issue 38).
    assert protected_problem(POLICY, "json.py", roots, imports=True) == "protected_path"
    # Reading them stays allowed.
    assert protected_problem(POLICY, "src/mylib/core.py", roots, write=False) is None
