"""What can be a project root (`root_problem`, the one answer every channel asks) and the places protected
outside any project (`//x` and `~/x` patterns), whatever the root or none."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from proxy.policy.errors import PolicyError
from proxy.policy.file.loader import load_policy_file, load_policy_text
from proxy.policy.paths.protected import is_absolute_pattern, protected_problem
from proxy.policy.roots import SYSTEM_DIRS, root_problem

STRICT = Path(__file__).resolve().parents[2] / "policies" / "strict.yaml"
POLICY = load_policy_file(STRICT).policy

NEVER = [
    "/", "//", "/.", "relative/dir", "", "/tmp", "/home", "/srv", "/opt", "/workspace", "/root", "/home/u",
    "/home/u/", "/Users/Me", "/var/home/u",
    # the system's own trees, and anything in them
    "/etc", "/etc/cron.d", "/etc/cron.d/", "/etc/systemd/system", "/usr", "/usr/local/src/app", "/var",
    "/var/spool/cron", "/var/www/app", "/boot/efi", "/proc/1/cwd", "/sys/kernel", "/dev/shm", "/run/user/0",
    "/bin", "/sbin/x", "/lib/x", "/lib64/x", "/lib32/x", "/libx32/x", "/snap/x", "/nix/store/x",
    "/private/etc/x", "/private/var/x", "/System/Library", "/Library/LaunchDaemons",
    # spellings of them
    "/ETC/cron.d", "/home/u/../../etc/cron.d", "/srv/app/../../etc", "//etc/cron.d", "/./etc/./cron.d",
    # a home's dot-directories, and their subtrees; any dot-directory on the way
    "/root/.ssh", "/root/.ssh/x", "/home/u/.config", "/home/u/.config/nvim", "/Users/Me/.aws", "/home/u/.local/bin",
    "/var/home/u/.ssh", "/srv/app/.git", "/srv/app/.venv", "/home/u/project/.claude/worktrees/x",
    # an environment's packages
    "/srv/app/venv/lib/python3.12/site-packages", "/home/u/p/dist-packages/x",
]
PROJECTS = ["/srv/app", "/srv/projects/app", "/opt/app", "/workspace/repo", "/tmp/x/project", "/home/u/project",
            "/home/u/src/github.com/org/repo", "/root/project", "/Users/Me/code/app", "/var/home/u/project",
            "/mnt/data/repo", "/home/u/my.project", "/home/u/project/sub"]


@pytest.mark.parametrize("root", NEVER)
def test_never_a_root(root):
    assert root_problem(root) is not None, root


@pytest.mark.parametrize("root", PROJECTS)
def test_a_project_is_a_root(root):
    assert root_problem(root) is None, root


def test_a_link_to_a_system_directory_is_that_directory(tmp_path):
    (tmp_path / "project").mkdir()
    (tmp_path / "cron").symlink_to("/etc")
    assert root_problem(str(tmp_path / "project")) is None
    assert root_problem(str(tmp_path / "cron")) == "a system directory"
    assert root_problem(str(tmp_path / "cron" / "cron.d")) == "a system directory"


def test_the_policy_refuses_a_system_root_with_its_key():
    text = STRICT.read_text().replace("  project_root: []", "  project_root: [/root/.ssh]", 1)
    with pytest.raises(PolicyError) as failed:
        load_policy_text(text, file="strict.yaml")
    assert "project_root" in str(failed.value) and "/root/.ssh" in str(failed.value)
    assert "dot-directory" in str(failed.value)
    good = STRICT.read_text().replace("  project_root: []", "  project_root: [/srv/app]", 1)
    assert load_policy_text(good, file="strict.yaml").policy.paths.project_root == ["/srv/app"]


def test_the_shipped_policy_protects_the_system_and_every_homes_dot_files():
    write = POLICY.protected.write
    assert all("/" + top + "/" in write for top in SYSTEM_DIRS)
    assert "~/.*" in write and "~/.*" in POLICY.protected.read
    assert all(is_absolute_pattern(p) for p in ("//etc/", "~/.ssh/", " //x"))
    assert not any(is_absolute_pattern(p) for p in ("/scripts/", ".git/", "~x", "etc/"))


ABSOLUTE_WRITES = ["/root/.ssh/authorized_keys", "/etc/cron.d/x", "/ETC/Cron.d/x", "/etc/../etc/cron.d/x",
                   "/home/u/.bashrc", "/home/u/.config/opencode/opencode.json", "/Users/Me/.zshrc",
                   "/Users/Me/Library/LaunchAgents/x.plist", "/var/spool/cron/crontabs/root", "/usr/local/bin/uv",
                   "/var/home/u/.ssh/authorized_keys", "/root/.claude/settings.json", "/proc/self/environ",
                   "/lib/systemd/system/x.service"]
ABSOLUTE_READS = ["/root/.ssh/id_ed25519", "/home/u/.aws/credentials", "/home/u/.netrc", "/proc/1/environ",
                  "/etc/shadow", "/etc/ssh/ssh_host_ed25519_key", "/run/secrets/db", "/var/run/secrets/token"]


@pytest.mark.parametrize("roots", [(), ("/srv/app",), ("/home/u/project",), ("/root/project",)])
def test_absolute_protected_paths_whatever_the_root(roots):
    for path in ABSOLUTE_WRITES + ABSOLUTE_READS:
        assert protected_problem(POLICY, path, roots) == "protected_path", (path, roots)
    for path in ABSOLUTE_READS:
        assert protected_problem(POLICY, path, roots, write=False) == "protected_path", (path, roots)
    # What the patterns do not name: a project's own files, and folders of a project named like system ones.
    for path in ("/srv/app/etc/app.conf", "/srv/app/lib/x.py", "/home/u/project/bin/run", "/etc/hostname"):
        assert protected_problem(POLICY, path, roots, write=False) is None, path
    for relative in ("etc/cron.d/x", "lib/x.txt", "usr/share/x", "proc/x"):
        assert protected_problem(POLICY, relative, roots) is None, relative


def test_absolute_patterns_are_the_policys_data():
    text = "name: p\nprotected: {write: [//srv/shared/, ~/notes/], read: []}\n"
    policy = load_policy_text(text, file="p.yaml").policy
    assert protected_problem(policy, "/srv/shared/x") == "protected_path"
    assert protected_problem(policy, "/home/u/notes/a.md") == "protected_path"
    assert protected_problem(policy, "/root/notes") == "protected_path"
    assert protected_problem(policy, "/root/.ssh/x") is None  # not listed here
    assert protected_problem(policy, "srv/shared/x", ("/srv/app",)) is None  # a project's own `srv/`


def test_a_link_under_the_root_is_judged_where_it_leads(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "conf").symlink_to(os.path.expanduser("~"))
    assert protected_problem(POLICY, "conf/.bashrc", (str(project),)) == "protected_path"
