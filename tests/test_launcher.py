"""`allowlist-proxy keys` and `allowlist-proxy run CLIENT`, run as a user runs them (subprocesses): a key made
for a directory that may be a root, shown once, listed without it, revoked; the launcher starts each client with
the proxy's URL and a key set for its process only (a stand-in client records what it got), reuses its key,
passes the exit code on, and `--print` masks the key and starts nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from proxy.keys.launch import CLIENTS, plan
from proxy.keys.tokens import KEY_PATTERN, is_key
from tests.conftest import MODEL, RunningProxy

# A stand-in for a client: records its argv, its environment and the files its options name, then exits with
# the code $FAKE_EXIT says.
FAKE = """#!{python}
import json, os, sys
files = {{a: open(a).read() for a in sys.argv[1:] if os.path.isfile(a)}}
with open({out!r}, "w") as out:
    json.dump({{"argv": sys.argv[1:], "env": dict(os.environ), "files": files, "cwd": os.getcwd()}}, out)
sys.exit(int(os.environ.get("FAKE_EXIT", "0")))
"""


def cli(*argv: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "proxy", *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=60, env={**os.environ, **(env or {})})


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "work" / "app"
    folder.mkdir(parents=True)
    return folder


@pytest.fixture
def home(tmp_path: Path) -> dict[str, str]:
    return {"HOME": str(tmp_path / "home"), "XDG_STATE_HOME": str(tmp_path / "home" / ".local" / "state")}


def fake_client(tmp_path: Path) -> tuple[Path, Path]:
    out = tmp_path / "fake-run.json"
    binary = tmp_path / "fake-client"
    binary.write_text(FAKE.format(python=sys.executable, out=str(out)))
    binary.chmod(0o755)
    return binary, out


@pytest.mark.parametrize("backend", ["sqlite"])
def test_keys_create_list_revoke(tmp_path, project, db_url):
    made = cli("keys", "create", "--root", str(project), "--client", "opencode", "--label", "app", "--db", db_url,
               cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    key = made.stdout.strip()
    assert is_key(key) and "shown only now" in made.stderr and key not in made.stderr
    listed = cli("keys", "list", "--db", db_url, cwd=tmp_path)
    assert listed.returncode == 0 and "app" in listed.stdout and str(project) in listed.stdout
    assert key not in listed.stdout and key[:8] + "…" in listed.stdout
    rows = [json.loads(line) for line in cli("keys", "list", "--json", "--db", db_url, cwd=tmp_path).stdout.split("\n")
            if line]
    assert [(r["label"], r["root"], r["client"], r["revoked_at"]) for r in rows] == [("app", str(project),
                                                                                        "opencode", None)]
    assert not KEY_PATTERN.search(json.dumps(rows))
    revoked = cli("keys", "revoke", "app", "--db", db_url, cwd=tmp_path)
    assert revoked.returncode == 0 and rows[0]["id"] in revoked.stdout
    assert cli("keys", "revoke", "app", "--db", db_url, cwd=tmp_path).returncode == 1
    assert cli("keys", "list", "--active", "--db", db_url, cwd=tmp_path).stdout == ""


@pytest.mark.parametrize("backend", ["sqlite"])
@pytest.mark.parametrize("root", ["/", "/etc", "/etc/cron.d", "/usr/lib", "relative", "{home}", "{home}/.ssh",
                                  "{missing}", "{link}"])
def test_keys_create_refuses_what_cannot_be_a_root(tmp_path, db_url, root, monkeypatch):
    home = Path("/root") if Path("/root").is_dir() else Path.home()
    (tmp_path / "link").symlink_to("/etc")
    given = root.format(home=home, missing=tmp_path / "missing", link=tmp_path / "link")
    done = cli("keys", "create", "--root", given, "--db", db_url, cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == "", done.stdout
    assert "--root" in done.stderr


@pytest.mark.parametrize("backend", ["sqlite"])
def test_keys_create_refuses_an_unknown_client(tmp_path, project, db_url):
    done = cli("keys", "create", "--root", str(project), "--client", "notepad", "--db", db_url, cwd=tmp_path)
    assert done.returncode == 2 and "known:" in done.stderr


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_each_clients_plan_points_it_at_the_proxy_with_the_key(client):
    key = "alp_" + "A" * 42
    launch = plan(client, proxy_url="http://proxy:9/", key=key, model=MODEL, models=[MODEL, "other"])
    text = json.dumps([launch.options, launch.env, launch.files])
    assert "http://proxy:9" in text and key in text and "//v1" not in text
    if client == "claude-code":
        assert launch.env["ANTHROPIC_BASE_URL"] == "http://proxy:9" and "ANTHROPIC_API_KEY" in launch.unset
    shown = launch.shown()
    assert key not in shown and "alp_AAAA…" in shown


@pytest.mark.parametrize("backend", ["sqlite"])
def test_run_print_shows_what_it_would_set_and_starts_nothing(tmp_path, project, db_url, home):
    binary, out = fake_client(tmp_path)
    done = cli("run", "--print", "--model", MODEL, "--db", db_url, "--bin", str(binary), "claude-code", "--", "-p",
               "hi", cwd=project, env=home)
    assert done.returncode == 0, done.stderr
    assert "ANTHROPIC_BASE_URL=http://127.0.0.1:8080" in done.stdout and f"root: {project}" in done.stdout
    assert "a new one would be made" in done.stdout and not KEY_PATTERN.search(done.stdout)
    assert not out.exists()
    assert cli("keys", "list", "--json", "--db", db_url, cwd=project).stdout == ""  # no key made


@pytest.mark.parametrize("backend", ["sqlite"])
def test_run_starts_the_client_bound_by_a_key_it_reuses(tmp_path, project, upstream, proxy: RunningProxy, home):
    binary, out = fake_client(tmp_path)
    args = ("run", "--db", proxy.db_url, "--proxy-url", proxy.url, "--bin", str(binary))
    first = cli(*args, "opencode", "--", "run", "hello", cwd=project, env=home)
    assert first.returncode == 0, first.stderr
    got = json.loads(out.read_text())
    assert got["argv"] == ["run", "hello"] and got["cwd"] == str(project)
    config = json.loads(got["env"]["OPENCODE_CONFIG_CONTENT"])
    provider = config["provider"]["allowlist-proxy"]
    assert provider["options"]["baseURL"] == proxy.url + "/v1"
    key = provider["options"]["apiKey"]
    assert is_key(key) and config["model"] == f"allowlist-proxy/{MODEL}"  # the first model the proxy lists
    # The key binds this directory: a request with it is judged under the project's root.
    with proxy.client() as client:
        assert client.post("/v1/chat/completions", json={"model": MODEL, "messages": [{"role": "user",
                           "content": "hi"}]}, headers={"authorization": f"Bearer {key}"}).status_code == 200
    assert proxy.rows("SELECT project_root FROM requests")[-1][0] == str(project)
    state = Path(home["XDG_STATE_HOME"]) / "allowlist-proxy" / "run-keys.json"
    assert state.stat().st_mode & 0o077 == 0
    # Again: the same key (the store still knows it); none made in the user's own configuration.
    assert cli(*args, "opencode", cwd=project, env=home).returncode == 0
    again = json.loads(out.read_text())
    assert json.loads(again["env"]["OPENCODE_CONFIG_CONTENT"])["provider"]["allowlist-proxy"]["options"][
        "apiKey"] == key
    assert not (Path(home["HOME"]) / ".config").exists()
    assert len(proxy.rows("SELECT id FROM project_keys")) == 1
    # Revoked: the next run makes a new one.
    assert cli("keys", "revoke", key, "--db", proxy.db_url, cwd=project).returncode == 0
    assert cli(*args, "opencode", cwd=project, env=home).returncode == 0
    third = json.loads(json.loads(out.read_text())["env"]["OPENCODE_CONFIG_CONTENT"])
    assert third["provider"]["allowlist-proxy"]["options"]["apiKey"] != key


@pytest.mark.parametrize("backend", ["sqlite"])
def test_run_with_a_config_file_waits_and_passes_the_exit_code_on(tmp_path, project, db_url, home):
    binary, out = fake_client(tmp_path)
    done = cli("run", "--db", db_url, "--model", MODEL, "--proxy-url", "http://127.0.0.1:9", "--bin", str(binary),
               "continue", "--", "-p", "hi", cwd=project, env={**home, "FAKE_EXIT": "7"})
    assert done.returncode == 7, done.stderr
    got = json.loads(out.read_text())
    config_path = got["argv"][got["argv"].index("--config") + 1]
    assert got["argv"][-2:] == ["-p", "hi"] and not Path(config_path).exists()  # removed once the client ended
    config = got["files"][config_path]
    assert "apiBase: http://127.0.0.1:9/v1" in config and KEY_PATTERN.search(config)


@pytest.mark.parametrize("backend", ["sqlite"])
def test_claude_code_gets_the_key_as_its_only_credential(tmp_path, project, db_url, home):
    binary, out = fake_client(tmp_path)
    done = cli("run", "--db", db_url, "--model", MODEL, "--proxy-url", "http://127.0.0.1:9", "--bin", str(binary),
               "claude-code", cwd=project, env={**home, "ANTHROPIC_API_KEY": "sk-ant-users-own"})
    assert done.returncode == 0, done.stderr
    env: dict[str, Any] = json.loads(out.read_text())["env"]
    assert "ANTHROPIC_API_KEY" not in env and is_key(env["ANTHROPIC_AUTH_TOKEN"])
    assert env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:9" and env["ANTHROPIC_MODEL"] == MODEL


@pytest.mark.parametrize("backend", ["sqlite"])
def test_run_refuses_a_directory_that_cannot_be_a_root(tmp_path, db_url, home):
    done = cli("run", "--print", "--db", db_url, "opencode", cwd=Path("/etc"), env=home)
    assert done.returncode == 2 and "project root" in done.stderr


@pytest.mark.parametrize("backend", ["sqlite"])
def test_run_without_a_model_or_a_proxy_says_so(tmp_path, project, db_url, home):
    done = cli("run", "--db", db_url, "--proxy-url", "http://127.0.0.1:9", "qwen-code", cwd=project, env=home)
    assert done.returncode == 2 and "--model" in done.stderr
