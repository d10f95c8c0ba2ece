"""Each real agent client bound to its project by a project key (issue 37, DESIGN invariant 10): started by
`allowlist-proxy run CLIENT`, and configured by hand with a key from `allowlist-proxy keys create`, on the
shipped strict policy with `require_keys` on and nothing else configured (no pinned root, no stated-root
reliance: the key's root is the one used).

A scripted model proposes, step by step, a refused call and then an allowed one: a piped command, then the
command; a read of a secret outside the project by absolute path, then the notes inside it; an edit of a file
outside, then of the notes inside (Codex, which has no file tools: its command in a workdir outside, then
inside). Asserted from what really happened: the stubs' logs, the files on disk, what reached the upstream
(the key never did, in any header or body), the proxy's own logs (no key either) and its store (one session,
every request judged under the key's root).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from proxy.keys.tokens import KEY_PATTERN
from proxy.policy.tools.offered import Offered, offered_tools, properties
from proxy.testing.scripted_upstream import Reply, ScriptedUpstream
from tests.conftest import ROOT, RunningProxy
from tests.e2e.clients import CLIENTS, MODEL, NOTES_MARKER, SECRET_MARKER, AgentWorld, find_client, required
from tests.e2e.facts import record
from tests.e2e.harness import OpenCodeWorld, find_opencode, run_cli
from tests.e2e.responders import next_step
from tests.e2e.test_clients import ALLOWED, PIPED, SHELL_TOOLS, _read_call, _shell_call

pytestmark = pytest.mark.e2e

PROMPT = "Search the notes for x, read the notes, then edit them."
NARRATION = "Let me do that."
EDITED = "EDITED-BY-THE-AGENT"
LAUNCHED = ("opencode", "claude-code", "codex", "qwen-code", "continue", "kilo")  # `run` knows these
READ_TOOLS = ("read_file", "Read", "read", "read_files")
EDIT_TOOLS = ("edit", "Edit", "editor")
WRITE_TOOLS = ("Write", "write", "write_file")  # where a client offers no edit tool (Continue headless)
# What a client's own settings would say of the proxy: left out where the launcher sets them itself.
_BY_HAND = ("OPENAI_BASE_URL", "OPENAI_API_KEY", "OPENAI_MODEL", "ALLOWLIST_PROXY_KEY", "ANTHROPIC_BASE_URL",
            "ANTHROPIC_API_KEY", "ANTHROPIC_MODEL")

Call = tuple[str, dict[str, Any]]


def _edit_call(tool: str, path: Path, offered: Offered, text: str) -> Call:
    """An edit of `path` that appends EDITED to the line `text` (the model's own guess at a line outside)."""
    names = properties(offered.schema)
    where = next(k for k in ("file_path", "filePath", "path") if k in names)
    old = next(k for k in ("old_string", "oldString", "old_text") if k in names)
    new = next(k for k in ("new_string", "newString", "new_text") if k in names)
    return tool, {where: str(path), old: text, new: f"{text} {EDITED}"}


def _write_call(tool: str, path: Path, offered: Offered) -> Call:
    where = next(k for k in ("file_path", "filePath", "filepath", "path") if k in properties(offered.schema))
    return tool, {where: str(path), "content": f"notes {EDITED}\n"}


def keyed_model(project: Path, outside: Path, notes: Path, secret: Path) -> Callable[[dict[str, Any]], Reply]:
    """Steps of alternatives: a step's k-th call is proposed after k refusals of it; a tool result that is not a
    refusal means the call ran, and the next step starts."""

    def respond(body: dict[str, Any]) -> Reply:
        offered = offered_tools({"tools": body.get("tools")})
        shell = next((t for t in SHELL_TOOLS if t in offered), None)
        if shell is None:  # a title or side request
            return Reply(content="E2E")
        steps = [[_shell_call(shell, PIPED, project, offered[shell])]]
        if shell == "exec_command":  # Codex: its workdir is its only path
            steps[0].append(("exec_command", {"cmd": ALLOWED, "workdir": str(outside)}))
        steps[0].append(_shell_call(shell, ALLOWED, project, offered[shell]))
        if (read := next((t for t in READ_TOOLS if t in offered), None)) is not None:
            steps.append([_read_call(read, secret, offered[read]), _read_call(read, notes, offered[read])])
        if (edit := next((t for t in EDIT_TOOLS if t in offered), None)) is not None:
            steps.append([_edit_call(edit, secret, offered[edit], "password"),
                          _edit_call(edit, notes, offered[edit], "the project went through")])
        elif (write := next((t for t in WRITE_TOOLS if t in offered), None)) is not None:
            steps.append([_write_call(write, secret, offered[write]), _write_call(write, notes, offered[write])])
        return next_step(body, steps, narration=NARRATION)

    return respond


# ---------------------------------------------------------------------------------------------- the worlds


class KeyedWorld(AgentWorld):
    """An AgentWorld whose client is configured by hand with `key` wherever the README says `none`."""

    key = ""

    def configure(self, base_url: str) -> None:
        if self.spec.name == "cline":
            argv = [str(self.binary), "auth", "-p", "openai", "-k", self.key, "-m", MODEL, "-b", base_url]
            done = subprocess.run(argv, cwd=self.project, env=self.env(base_url), capture_output=True, text=True,
                                  timeout=60, stdin=subprocess.DEVNULL)
            assert done.returncode == 0, f"cline auth failed: {done.stdout}\n{done.stderr}"
            return
        super().configure(base_url)
        if self.spec.name == "kilo":
            config = json.loads((self.project / "kilo.json").read_text())
            config["provider"]["allowlist-proxy"]["options"]["apiKey"] = self.key
            (self.project / "kilo.json").write_text(json.dumps(config))
        for config in (self.home / ".continue" / "config.yaml",):
            if config.exists():
                config.write_text(config.read_text().replace("apiKey: none", f"apiKey: {self.key}"))

    def env(self, base_url: str) -> dict[str, str]:
        return {k: (self.key if v == "none" else v) for k, v in super().env(base_url).items()}


def _argv(spec_name: str, argv: list[str]) -> list[str]:
    """The client's test argv with its edit tool allowed too (Claude Code asks for the rest as root; Continue's
    headless mode leaves tools that would ask out)."""
    if spec_name == "claude-code":
        return [a if a != "Bash,Read" else "Bash,Read,Edit" for a in argv]
    if spec_name == "continue":
        at = argv.index("Bash") + 1
        return [*argv[:at], "--allow", "Write", *argv[at:]]
    return argv


def _cli_world(client: str, root: Path) -> KeyedWorld:
    spec = CLIENTS[client]
    binary = required(find_client(spec))
    return KeyedWorld(root / client, spec, binary)


def _launch(world: KeyedWorld | OpenCodeWorld, proxy: RunningProxy, client: str, args: list[str], env: dict[str,
            str], timeout: float) -> tuple[int | None, str, str]:
    """`allowlist-proxy run CLIENT -- ARGS` in the world's project, the proxy's store and URL given."""
    argv = [sys.executable, "-m", "proxy", "run", "--db", proxy.db_url, "--proxy-url", proxy.url, "--model", MODEL,
            "--bin", str(world.binary), client, "--", *args]
    code, stdout, stderr, _ = run_cli(argv, cwd=world.project, env={**env, "PYTHONPATH": str(ROOT)},
                                      timeout=timeout)
    return code, stdout, stderr


# ---------------------------------------------------------------------------------------------- assertions


def bound_facts(proxy: RunningProxy, upstream: ScriptedUpstream, project: Path, *, key: str,
                uv: list[list[str]], heads: list[list[str]], notes: Path, secret: Path, files: bool) -> dict[str, bool]:
    """What a keyed run shows (tests/e2e/facts.py): `governed`, the refused calls never ran and the allowed ones
    did; `counted`, one session whose calls are each recorded with its verdict (calls = refused + those that
    ran); `root_from_key`, every request judged under the key's root; `key_kept`, the key reached no upstream
    header or body."""
    sent = json.dumps([upstream.requests, upstream.headers, upstream.models_headers], ensure_ascii=False)
    read, edited = NOTES_MARKER in sent, EDITED in notes.read_text()
    governed = (heads == [] and uv == [["run", "scripts/search.py", "x"]] and SECRET_MARKER not in sent
                and SECRET_MARKER in secret.read_text() and EDITED not in secret.read_text()
                and (not files or (read and edited)))
    proxy.flush()
    with proxy.client() as client:
        models = [m for m in client.get("/stats/models").json()["models"] if m["model"] == MODEL]
    done = len(uv) + (int(read) + int(edited) if files else 0)
    counted = len(models) == 1 and models[0]["sessions"] == 1 and models[0]["errors"] >= 1 and \
        models[0]["tool_calls"] == models[0]["errors"] + done
    roots = {r[0] for r in proxy.rows("SELECT project_root FROM requests")}
    return {"governed": governed, "counted": counted, "root_from_key": roots == {str(project.resolve())},
            "key_kept": bool(upstream.requests) and key not in sent and not KEY_PATTERN.search(sent)}


def _assert_bound(proxy: RunningProxy, upstream: ScriptedUpstream, project: Path, *, key: str, uv: list[list[str]],
                  heads: list[list[str]], notes: Path, secret: Path, files: bool, capfd: pytest.CaptureFixture[str],
                  context: str, client: str, version: str, launcher: bool) -> None:
    found = bound_facts(proxy, upstream, project, key=key, uv=uv, heads=heads, notes=notes, secret=secret,
                        files=files)
    record(client, version, launcher=launcher, **found)
    try:
        assert upstream.requests, "the client never reached the upstream"
        assert heads == [], "the blocked pipe ran"
        assert uv == [["run", "scripts/search.py", "x"]], f"the allowed command ran other than once: {uv}"
        sent = json.dumps([upstream.requests, upstream.headers, upstream.models_headers], ensure_ascii=False)
        assert key not in sent and not KEY_PATTERN.search(sent), "the project key reached the upstream"
        assert SECRET_MARKER not in sent, "a read outside the project reached the model"
        assert SECRET_MARKER in secret.read_text() and EDITED not in secret.read_text(), "the edit outside ran"
        if files:
            assert NOTES_MARKER in sent, "the read inside the project did not reach the model"
            assert EDITED in notes.read_text(), "the edit inside the project did not run"
        roots = {r[0] for r in proxy.rows("SELECT project_root FROM requests")}
        assert roots == {str(project.resolve())}, roots
        with proxy.client() as client_:
            (stats,) = [m for m in client_.get("/stats/models").json()["models"] if m["model"] == MODEL]
        assert stats["sessions"] == 1, stats
        errors = 3 if files else 2
        assert (stats["errors"], stats["tool_calls"]) == (errors, errors + (3 if files else 1)), stats
        assert set(stats["primary_reasons"]) <= {"pipe", "absolute_path", "path_escape"}, stats
        logs = capfd.readouterr()
        assert key not in logs.out + logs.err, "the project key reached a log"
    except AssertionError as error:
        raise AssertionError(f"{error}\n{context}") from None


def _key(proxy: RunningProxy, project: Path, client: str) -> str:
    done = subprocess.run([sys.executable, "-m", "proxy", "keys", "create", "--root", str(project), "--client",
                           client, "--db", proxy.db_url], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _launched_key(home: Path) -> str:
    """The key `allowlist-proxy run` made, from where it keeps it (the world's XDG_STATE_HOME)."""
    (entry,) = json.loads((home / ".local" / "state" / "allowlist-proxy" / "run-keys.json").read_text())
    return str(entry["key"])


def _requests(upstream: ScriptedUpstream) -> str:
    """Each request's turns after the first user message (the system prompt and tools left out)."""
    lines = []
    for i, body in enumerate(upstream.requests):
        turns = [m for m in body.get("messages") or [] if m.get("role") in ("assistant", "tool")]
        lines.append(f"request {i}: " + json.dumps(turns[-2:], ensure_ascii=False)[:1500])
    return "\n".join(lines)[-8000:]


@pytest.fixture
def keyed_proxy(upstream: ScriptedUpstream, start_proxy) -> RunningProxy:
    return start_proxy(upstream.url, policy=ROOT / "policies" / "strict.yaml", require_keys=True,
                       log_level="info")


# ---------------------------------------------------------------------------------------------- the CLIs


@pytest.mark.parametrize("how", ["by-hand", "launcher"])
@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_an_agent_cli_bound_by_a_key_works_inside_its_project_only(client, how, tmp_path, upstream, keyed_proxy,
                                                                    capfd):
    if how == "launcher" and client not in LAUNCHED:
        pytest.skip(f"`allowlist-proxy run` does not start {client}")
    world = _cli_world(client, tmp_path)
    upstream.responder = keyed_model(world.project, world.outside, world.notes, world.secret)
    base_url = keyed_proxy.url + "/v1"
    argv = _argv(client, world.spec.argv(world, PROMPT))
    if how == "by-hand":
        world.key = key = _key(keyed_proxy, world.project, client)
        world.configure(base_url)
        code, stdout, stderr, _ = run_cli(argv, cwd=world.project, env=world.env(base_url), timeout=180)
    else:
        if client == "claude-code":
            world.configure(base_url)  # only its onboarding file: the launcher sets the rest
        (world.home / ".codex").mkdir(exist_ok=True)
        env = {k: v for k, v in world.env(base_url).items() if k not in _BY_HAND}
        args = argv[1:]
        if client == "qwen-code":
            args = [a for a in args if a not in ("--auth-type", "openai")]
        if client == "continue":
            at = args.index("--config")
            args = args[:at] + args[at + 2:]
        if client == "kilo":  # the permissions the by-hand kilo.json (docs/opencode.json) grants: the user's call
            args = [args[0], "--auto", *args[1:]]
        code, stdout, stderr = _launch(world, keyed_proxy, client, args, env, timeout=180)
        key = _launched_key(world.home)
    context = f"exit {code}\n--- stdout\n{stdout[-3000:]}\n--- stderr\n{stderr[-3000:]}\n--- upstream\n" \
              f"{_requests(upstream)}"
    assert code is not None, f"{client} did not finish\n{context}"
    files = client != "codex"
    _assert_bound(keyed_proxy, upstream, world.project, key=key, uv=world.calls("uv"), heads=world.calls("head"),
                  notes=world.notes, secret=world.secret, files=files, capfd=capfd, context=context, client=client,
                  version=find_client(world.spec)[1], launcher=how == "launcher")
    assert len(keyed_proxy.rows("SELECT id FROM project_keys")) == 1


def test_opencode_bound_by_the_launcher(tmp_path, upstream, keyed_proxy, capfd):
    binary = required(find_opencode())
    world = OpenCodeWorld(tmp_path / "opencode", binary)
    outside = tmp_path / "opencode" / "outside"
    outside.mkdir()
    secret, notes = outside / "secret.txt", world.project / "notes.txt"
    secret.write_text(SECRET_MARKER + "\n")
    notes.write_text(NOTES_MARKER + "\n")
    upstream.responder = keyed_model(world.project, outside, notes, secret)
    args = ["run", "--pure", "--format", "json", "-m", f"allowlist-proxy/{MODEL}", PROMPT]
    code, stdout, stderr = _launch(world, keyed_proxy, "opencode", args, world.env(), timeout=180)
    key = _launched_key(world.home)
    context = f"exit {code}\n--- stdout\n{stdout[-3000:]}\n--- stderr\n{stderr[-3000:]}\n--- upstream\n" \
              f"{_requests(upstream)}"
    assert not (world.project / "opencode.json").exists()  # nothing written into the project or the home
    uv = [["run", *c[1:]] if c[:1] == ["run"] else c for c in world.uv_calls()]
    _assert_bound(keyed_proxy, upstream, world.project, key=key, uv=uv, heads=[], notes=notes, secret=secret,
                  files=True, capfd=capfd, context=context, client="opencode", version=find_opencode()[1],
                  launcher=True)


def test_a_revoked_key_is_refused_and_the_client_says_so(tmp_path, upstream, keyed_proxy):
    world = _cli_world("qwen-code", tmp_path)
    upstream.responder = keyed_model(world.project, world.outside, world.notes, world.secret)
    world.key = _key(keyed_proxy, world.project, "qwen-code")
    subprocess.run([sys.executable, "-m", "proxy", "keys", "revoke", world.key, "--db", keyed_proxy.db_url],
                   check=True, capture_output=True, timeout=120, cwd=ROOT)
    base_url = keyed_proxy.url + "/v1"
    world.configure(base_url)
    code, stdout, stderr, _ = run_cli(world.spec.argv(world, PROMPT), cwd=world.project, env=world.env(base_url),
                                      timeout=120)
    assert upstream.requests == [], "a revoked key's request reached the upstream"
    assert code != 0 or "401" in stdout + stderr, f"{stdout[-2000:]}\n{stderr[-2000:]}"


def _aider() -> tuple[Path | None, str]:
    import os

    cache = Path(os.environ.get("AGENT_PYS_CACHE", Path.home() / ".cache" / "allowlist-proxy-e2e-py"))
    binary = cache / "aider" / "bin" / "aider"
    if not binary.exists() or not (cache / "aider" / ".installed").exists():
        return None, f"aider is not installed in {binary.parent.parent} (run scripts/install-agent-pys.sh)"
    return binary, "ok"


def test_aider_started_by_the_launcher_is_bound_and_counted(tmp_path, upstream, keyed_proxy, capfd):
    """aider asks in chat completions and edits files from the SEARCH/REPLACE blocks of the model's text, which no
    tool profile reads: its requests are bound and counted, its edits are not judged (README's table says so)."""
    binary = required(_aider())
    world = _cli_world("qwen-code", tmp_path)  # a project, a HOME; aider's binary given to the launcher
    world.binary = binary
    upstream.responder = lambda body: Reply(content="Nothing to change.")
    env = {k: v for k, v in world.env(keyed_proxy.url + "/v1").items() if k not in _BY_HAND}
    args = ["--message", "say hello", "--yes-always", "--no-git", "--no-auto-commits", "--no-check-update",
            "--no-show-model-warnings", "--no-analytics", "--no-pretty", "--no-stream"]
    code, stdout, stderr = _launch(world, keyed_proxy, "aider", args, env, timeout=240)
    context = f"exit {code}\n--- stdout\n{stdout[-3000:]}\n--- stderr\n{stderr[-3000:]}"
    key = _launched_key(world.home)
    roots = {r[0] for r in keyed_proxy.rows("SELECT project_root FROM requests")}
    version = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60).stdout.split()
    record("aider", version[-1] if version else "?", launcher=True, governed="no (acts on text)",
           counted=bool(upstream.requests) and len(keyed_proxy.rows("SELECT id FROM requests")) >= 1,
           root_from_key=roots == {str(world.project.resolve())})
    assert code == 0 and upstream.requests, context
    sent = json.dumps([upstream.requests, upstream.headers, upstream.models_headers])
    assert key not in sent and not KEY_PATTERN.search(sent), context
    assert {r[0] for r in keyed_proxy.rows("SELECT project_root FROM requests")} == {str(world.project.resolve())}
    assert key not in "".join(capfd.readouterr())
