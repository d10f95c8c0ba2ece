"""Project keys (issue 37, DESIGN invariant 10 "Told, not guessed"): a request that presents a key is judged under
the key's project root, tool profile and policy, whatever its text states; its sessions are its key's alone; the
key never reaches the upstream, the logs or an error; `require_keys` refuses a request without a known key; a
revoked key is refused within `key_cache_seconds`; the store keeps only a hash."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import select

from proxy.keys.store import ProjectKey, create_key, find_key, list_keys, mark_used, revoke_keys
from proxy.keys.tokens import KEY_PATTERN, PREFIX, is_key, key_hash, masked, new_key, presented
from proxy.policy.roots import root_problem
from proxy.store.tables import project_keys
from proxy.testing.scripted_upstream import Reply
from tests.conftest import MODEL, ROOT, RunningProxy, chat

PROJECT = "/srv/projects/app"
STATED = "/srv/projects/other"
TOOLS = json.loads((ROOT / "tests" / "policy" / "client_tools" / "claude-code.json").read_text())["tools"]
QWEN_TOOLS = json.loads((ROOT / "tests" / "policy" / "client_tools" / "qwen-code.json").read_text())["tools"]


def _in_loop(proxy: RunningProxy, coroutine: Any) -> Any:
    return asyncio.run_coroutine_threadsafe(coroutine, proxy.app.state.loop).result(15)


def make_key(proxy: RunningProxy, root: str = PROJECT, **kwargs: Any) -> tuple[str, ProjectKey]:
    async def go() -> tuple[str, ProjectKey]:
        async with proxy.services.engine.begin() as conn:
            return await create_key(conn, root=root, **kwargs)

    return _in_loop(proxy, go())


def revoke(proxy: RunningProxy, what: str) -> list[ProjectKey]:
    async def go() -> list[ProjectKey]:
        async with proxy.services.engine.begin() as conn:
            return await revoke_keys(conn, what)

    return _in_loop(proxy, go())


def _qwen(conversation_root: str = STATED) -> dict[str, Any]:
    """A Qwen Code (0.15) request whose own text states `conversation_root`, in the client's own position."""
    return chat([{"role": "system", "content": "You are Qwen Code, an interactive CLI agent."},
                 {"role": "user", "content": "This is the Qwen Code. We are setting up the context for our chat.\n"
                                             "Today's date is Sunday, December 6, 2026.\n"
                                             "My operating system is: linux\n"
                                             f"I'm currently working in the directory: {conversation_root}\n"},
                 {"role": "assistant", "content": "Got it. Thanks for the context!"},  # the client's own answer
                 {"role": "user", "content": "read the notes"}], tools=QWEN_TOOLS)


def _read(path: str) -> Reply:
    return Reply(tool_calls=[("read_file", {"file_path": path})])


# ------------------------------------------------------------------------------------------- the key as text


def test_a_key_is_prefixed_high_entropy_and_checksummed():
    keys = {new_key() for _ in range(200)}
    assert len(keys) == 200
    for key in keys:
        assert key.startswith(PREFIX) and len(key) == 46 and is_key(key) and KEY_PATTERN.fullmatch(key)
        assert key_hash(key) != key and len(key_hash(key)) == 64
        assert masked(key) == key[:8] + "…" and key[8:] not in masked(key)
    key = next(iter(keys))
    typo = key[:10] + ("A" if key[10] != "A" else "B") + key[11:]
    assert not is_key(typo) and not is_key(key[:-1]) and not is_key(key + "x") and not is_key("alp_" + "0" * 42)


def test_the_headers_a_key_is_read_from():
    assert presented({"authorization": "Bearer alp_x"}) == ["alp_x"]
    assert presented({"authorization": "bearer  alp_x "}) == ["alp_x"]
    assert presented({"x-api-key": "alp_y"}) == ["alp_y"]
    assert presented({"authorization": "Basic abc", "x-api-key": ""}) == []
    assert presented({"authorization": "Bearer a", "x-api-key": "a"}) == ["a"]


@pytest.mark.parametrize("root", ["/", "/etc", "/etc/cron.d", "/usr/local/src/app", "/var/lib/app", "/proc/1",
                                  "/root", "/root/.ssh", "/home/dev", "/home/dev/.config/app", "/Users/x",
                                  "/Users/x/.aws", "/tmp", "/srv", "relative/dir", "/root/proj/../.ssh"])
def test_what_can_never_be_a_root(root):
    assert root_problem(root) is not None


@pytest.mark.parametrize("root", ["/srv/projects/app", "/root/proj", "/home/dev/src/app", "/tmp/work/app",
                                  "/Users/x/code/app", "/var/home/dev/app"])
def test_what_can_be_a_root(root):
    assert root_problem(root) is None


# ------------------------------------------------------------------------------------------------ the store


@pytest.mark.each_database
async def test_the_store_keeps_a_hash_and_revokes_by_key_id_or_label(engine):
    async with engine.begin() as conn:
        key, made = await create_key(conn, root=PROJECT, client="opencode", label="app")
        other, _ = await create_key(conn, root="/srv/b", label="b")
        rows = [dict(r._mapping) for r in await conn.execute(select(project_keys))]
    assert all(key not in json.dumps(row) and other not in json.dumps(row) for row in rows)
    assert {row["key_hash"] for row in rows} == {key_hash(key), key_hash(other)}
    async with engine.begin() as conn:
        found = await find_key(conn, key_hash(key))
        assert found is not None and (found.id, found.root, found.client, found.revoked) == (made.id, PROJECT,
                                                                                              "opencode", False)
        assert await find_key(conn, key_hash(new_key())) is None
        assert await revoke_keys(conn, "nothing-by-that-name") == []
        assert await revoke_keys(conn, new_key()) == []
        assert [k.id for k in await revoke_keys(conn, "app")] == [made.id]
        assert await revoke_keys(conn, key) == []  # already revoked
        assert [k.label for k in await revoke_keys(conn, other)] == ["b"]
        await mark_used(conn, {made.id: 200.0})
        await mark_used(conn, {made.id: 100.0})  # an older time from another replica does not go back
        listed = await list_keys(conn)
        assert await list_keys(conn, revoked=False) == []
    assert [k.label for k in listed] == ["app", "b"] and all(k.revoked for k in listed)
    assert listed[0].last_used_at == 200.0


@pytest.mark.each_database
async def test_migration_0018_goes_down_and_up(empty_db_url):
    from proxy.store.db import create_engine, migrate

    engine = create_engine(empty_db_url)
    try:
        await migrate(engine)
        await migrate_to(engine, "0017", down=True)
        async with engine.connect() as conn:
            tables = await conn.run_sync(lambda sync: __import__("sqlalchemy").inspect(sync).get_table_names())
        assert "project_keys" not in tables
        await migrate(engine)
        async with engine.begin() as conn:
            await create_key(conn, root=PROJECT)
            assert len(await list_keys(conn)) == 1
    finally:
        await engine.dispose()


async def migrate_to(engine: Any, revision: str, *, down: bool) -> None:
    from alembic import command

    from proxy.store.db import alembic_config

    cfg = alembic_config()

    def run(sync: Any) -> None:
        cfg.attributes["connection"] = sync
        (command.downgrade if down else command.upgrade)(cfg, revision)

    async with engine.begin() as conn:
        await conn.run_sync(run)


# --------------------------------------------------------------------------------------- a keyed request


@pytest.mark.parametrize("backend", ["sqlite"])
def test_a_keys_root_wins_over_the_root_its_text_states(upstream, proxy):
    key, _ = make_key(proxy)
    upstream.script(_read(STATED + "/notes.txt"), _read(PROJECT + "/notes.txt"))
    with proxy.client() as client:
        answer = client.post("/v1/chat/completions", json=_qwen(), headers={"authorization": f"Bearer {key}"})
    assert answer.status_code == 200, answer.text
    rows = proxy.rows("SELECT decision, delivered FROM tool_calls ORDER BY created_at")
    assert [tuple(r) for r in rows] == [("reject", 0), ("allow", 1)]
    assert [r[0] for r in proxy.rows("SELECT project_root FROM requests")] == [PROJECT]


@pytest.mark.parametrize("backend", ["sqlite"])
def test_the_same_request_unkeyed_learns_its_stated_root(upstream, proxy):
    upstream.script(_read(STATED + "/notes.txt"))
    with proxy.client() as client:
        assert client.post("/v1/chat/completions", json=_qwen()).status_code == 200
    assert [tuple(r) for r in proxy.rows("SELECT decision, delivered FROM tool_calls")] == [("allow", 1)]


@pytest.mark.parametrize("backend", ["sqlite"])
def test_a_key_on_the_messages_route_by_x_api_key_binds_and_its_error_is_anthropics(upstream, start_proxy):
    proxy = start_proxy(upstream.url, require_keys=True)
    key, _ = make_key(proxy)
    body = {"model": MODEL, "max_tokens": 64, "tools": TOOLS,
            "system": f"Here is useful information about the environment you are running in:\n"
                      f" - Primary working directory: {STATED}\n",
            "messages": [{"role": "user", "content": "read"}]}
    upstream.script(Reply(tool_calls=[("Read", {"file_path": PROJECT + "/a.txt"})]))
    with proxy.client() as client:
        refused = client.post("/v1/messages", json=body)
        answer = client.post("/v1/messages", json=body, headers={"x-api-key": key})
    assert refused.status_code == 401
    assert refused.json()["type"] == "error" and refused.json()["error"]["type"] == "authentication_error"
    assert answer.status_code == 200, answer.text
    assert [tuple(r) for r in proxy.rows("SELECT decision, delivered FROM tool_calls")] == [("allow", 1)]
    assert len(upstream.requests) == 1


@pytest.mark.parametrize("backend", ["sqlite"])
def test_require_keys_refuses_every_route_without_a_known_key(upstream, start_proxy):
    proxy = start_proxy(upstream.url, require_keys=True)
    key, _ = make_key(proxy)
    made_up = new_key()
    with proxy.client() as client:
        for headers in ({}, {"authorization": "Bearer sk-upstream-key"}, {"authorization": f"Bearer {made_up}"},
                        {"authorization": "Bearer alp_short"}):
            for method, path, body in (("POST", "/v1/chat/completions", chat()), ("POST", "/v1/responses",
                                       {"model": MODEL, "input": "hi"}), ("POST", "/v1/completions",
                                       {"model": MODEL, "prompt": "hi"}), ("GET", "/v1/models", None),
                                       ("POST", "/v1/embeddings", {"model": MODEL, "input": "x"})):
                answer = client.request(method, path, json=body, headers=headers)
                assert answer.status_code == 401, (path, headers, answer.text)
                assert answer.json()["error"]["type"] == "authentication_error"
                assert made_up not in answer.text
        assert client.get("/v1/models", headers={"authorization": f"Bearer {key}"}).status_code == 200
        assert client.get("/health").status_code == 200  # not a /v1 route
    assert upstream.requests == []


@pytest.mark.parametrize("backend", ["sqlite"])
def test_a_key_shaped_credential_that_is_not_known_is_refused_even_without_require_keys(upstream, proxy):
    with proxy.client() as client:
        unknown = client.post("/v1/chat/completions", json=chat(), headers={"authorization": f"Bearer {new_key()}"})
        plain = client.post("/v1/chat/completions", json=chat(), headers={"authorization": "Bearer sk-mine"})
    assert unknown.status_code == 401 and plain.status_code == 200
    assert upstream.headers[-1]["authorization"] == "Bearer sk-mine"  # an unkeyed client's own credential, as ever


@pytest.mark.parametrize("backend", ["sqlite"])
def test_a_revoked_key_is_refused_within_the_cache_time(upstream, start_proxy):
    proxy = start_proxy(upstream.url, key_cache_seconds=0.2)
    key, made = make_key(proxy, label="to-go")
    auth = {"authorization": f"Bearer {key}"}
    with proxy.client() as client:
        assert client.post("/v1/chat/completions", json=chat(), headers=auth).status_code == 200
        assert [k.id for k in revoke(proxy, "to-go")] == [made.id]
        # A second proxy sharing the store (a replica) never saw the key: it reads the store, which says revoked.
        import time

        time.sleep(0.25)
        refused = client.post("/v1/chat/completions", json=chat(), headers=auth)
    assert refused.status_code == 401 and "revoked" in refused.json()["error"]["message"]
    assert key not in refused.text
    assert len(upstream.requests) == 1


@pytest.mark.parametrize("backend", ["sqlite"])
def test_a_key_made_after_start_binds_at_once_and_replicas_agree(upstream, start_proxy):
    first = start_proxy(upstream.url)
    second = start_proxy(upstream.url, db=first.db_url, key_cache_seconds=0)
    with first.client() as client:  # an unknown key is remembered as unknown ...
        assert client.post("/v1/chat/completions", json=chat(),
                           headers={"authorization": f"Bearer {new_key()}"}).status_code == 401
    key, _ = make_key(first)
    for proxy in (first, second):  # ... but a new key is another key: known at once, on each replica
        with proxy.client() as client:
            assert client.post("/v1/chat/completions", json=chat(),
                               headers={"authorization": f"Bearer {key}"}).status_code == 200
    revoke(second, key)
    with second.client() as client:
        assert client.post("/v1/chat/completions", json=chat(),
                           headers={"authorization": f"Bearer {key}"}).status_code == 401


@pytest.mark.parametrize("backend", ["sqlite"])
def test_the_key_never_goes_upstream_the_configured_key_does(upstream, start_proxy, capfd):
    proxy = start_proxy(upstream.url, upstream_api_key="upstream-secret", log_level="debug")
    key, _ = make_key(proxy)
    revoked, _ = make_key(proxy, label="gone")
    revoke(proxy, "gone")
    # A refused call: its `call.rejected` line is a warning, logged whatever level the loggers were cached at.
    upstream.script(Reply(tool_calls=[("bash", {"command": "uv run scripts/search.py x | head"})]))
    with proxy.client() as client:
        for headers in ({"authorization": f"Bearer {key}"}, {"x-api-key": key},
                        {"authorization": f"Bearer {key}", "x-api-key": key, "api-key": key, "x-other": key}):
            assert client.post("/v1/chat/completions", json=chat(), headers=headers).status_code == 200
        assert client.get("/v1/models", headers={"authorization": f"Bearer {key}"}).status_code == 200
        assert client.post("/v1/chat/completions", json=chat(),
                           headers={"authorization": f"Bearer {revoked}"}).status_code == 401
    sent = json.dumps([*upstream.headers, *upstream.models_headers])
    assert key not in sent and revoked not in sent
    assert all(h.get("authorization") == "Bearer upstream-secret" for h in upstream.headers)
    assert not any(name in h for h in upstream.headers for name in ("x-api-key", "api-key", "x-other"))
    stored = json.dumps([list(map(str, r)) for table in ("requests", "sessions", "tool_calls", "project_keys")
                         for r in proxy.rows(f"SELECT * FROM {table}")])
    assert key not in stored and revoked not in stored
    logs = capfd.readouterr()
    assert "call.rejected" in logs.out + logs.err  # the proxy's log lines were captured
    assert key not in logs.out + logs.err and revoked not in logs.out + logs.err


@pytest.mark.parametrize("backend", ["sqlite"])
def test_a_key_shaped_value_in_any_header_of_an_unkeyed_request_stays_here(upstream, proxy):
    key = new_key()
    with proxy.client() as client:
        assert client.post("/v1/chat/completions", json=chat(), headers={"x-custom": key}).status_code == 200
    assert "x-custom" not in upstream.headers[-1]


@pytest.mark.parametrize("backend", ["sqlite"])
def test_keyed_sessions_never_merge_with_another_keys(upstream, proxy):
    one, first = make_key(proxy)
    two, second = make_key(proxy, root="/srv/projects/b")
    with proxy.client() as client:
        for key in (one, two, None):
            headers = {"x-session-id": "ses_same"} | ({"authorization": f"Bearer {key}"} if key else {})
            assert client.post("/v1/chat/completions", json=chat(), headers=headers).status_code == 200
    sessions = sorted(r[0] for r in proxy.rows("SELECT session_id FROM requests"))
    assert sessions == sorted([f"{first.id}:ses_same", f"{second.id}:ses_same", "ses_same"])


@pytest.mark.parametrize("backend", ["sqlite"])
def test_keyed_lineage_continues_only_within_its_key(upstream, proxy):
    """Without a session header, a conversation that extends a turn the proxy delivered continues its session,
    but only under the same key: the same history presented with another key is a session of that key."""
    one, _ = make_key(proxy)
    two, _ = make_key(proxy, root="/srv/projects/b")
    upstream.script(Reply(content="first answer"), Reply(content="second"), Reply(content="third"))
    history = [{"role": "user", "content": "hello"}]
    with proxy.client() as client:
        reply = client.post("/v1/chat/completions", json=chat(history), headers={"authorization": f"Bearer {one}"})
        turn = reply.json()["choices"][0]["message"]
        follow = chat([*history, {"role": "assistant", "content": turn["content"]},
                       {"role": "user", "content": "more"}])
        client.post("/v1/chat/completions", json=follow, headers={"authorization": f"Bearer {one}"})
        client.post("/v1/chat/completions", json=follow, headers={"authorization": f"Bearer {two}"})
    sessions = [r[0] for r in proxy.rows("SELECT session_id FROM requests ORDER BY started_at")]
    assert sessions[0] == sessions[1] != sessions[2]


@pytest.mark.parametrize("backend", ["sqlite"])
def test_a_keys_client_profile_and_policy_are_used(upstream, start_proxy, tmp_path: Path):
    folder = tmp_path / "policies"
    folder.mkdir()
    main = yaml.safe_load((ROOT / "policies" / "strict.yaml").read_text())
    (folder / "strict.yaml").write_text(yaml.safe_dump(main, sort_keys=False))
    observe = {**main, "name": "watching", "mode": "observe"}
    (folder / "watching.yaml").write_text(yaml.safe_dump(observe, sort_keys=False))
    proxy = start_proxy(upstream.url, policy=folder / "strict.yaml")
    key, _ = make_key(proxy, client="qwen-code", policy="watching")
    missing, _ = make_key(proxy, policy="nowhere")
    upstream.script(_read("/etc/passwd"))
    with proxy.client() as client:
        answer = client.post("/v1/chat/completions", json=_qwen(),
                             headers={"authorization": f"Bearer {key}", "x-allowlist-policy": "strict-uv-scripts"})
        refused = client.post("/v1/chat/completions", json=chat(), headers={"authorization": f"Bearer {missing}"})
    assert answer.status_code == 200
    assert refused.status_code == 403 and "nowhere" in refused.json()["error"]["message"]
    row = proxy.rows("SELECT policy_name, mode, profiles FROM requests")[0]
    assert (row[0], row[1]) == ("watching", "observe") and row[2].split(",")[0] == "qwen-code"


@pytest.mark.parametrize("backend", ["sqlite"])
def test_last_used_is_written_in_batches_not_per_request(upstream, proxy):
    key, _ = make_key(proxy)
    with proxy.client() as client:
        for _ in range(3):
            client.post("/v1/chat/completions", json=chat(), headers={"authorization": f"Bearer {key}"})
    assert proxy.rows("SELECT last_used_at FROM project_keys")[0][0] is None  # nothing written per request
    _in_loop(proxy, proxy.services.keys.write_used())
    assert proxy.rows("SELECT last_used_at FROM project_keys")[0][0] is not None


# ------------------------------------------------------------------------------------------- the key ring


async def test_requests_that_find_a_key_stale_together_read_the_store_once(engine):
    from proxy.keys.ring import KeyRing

    async with engine.begin() as conn:
        key, made = await create_key(conn, root=PROJECT)
    ring = KeyRing(engine, cache_seconds=60)
    reads = 0
    read = ring._read

    async def counted(hashed: str) -> ProjectKey | None:
        nonlocal reads
        reads += 1
        await asyncio.sleep(0.05)
        return await read(hashed)

    ring._read = counted  # type: ignore[method-assign]
    found = await asyncio.gather(*(ring.bind({"authorization": f"Bearer {key}"}) for _ in range(10)))
    assert reads == 1 and {k.id for k in found if k} == {made.id}
    await ring.bind({"x-api-key": key})
    assert reads == 1  # kept for key_cache_seconds


async def test_a_key_that_cannot_be_checked_is_refused_with_503(tmp_path):
    from proxy.errors import StoreUnavailable, Unauthorized
    from proxy.keys.ring import KeyRing
    from proxy.store.db import create_engine

    engine = create_engine(f"sqlite:///{tmp_path / 'no-schema.db'}")  # no tables: every read fails
    try:
        ring = KeyRing(engine, require=True)
        with pytest.raises(StoreUnavailable):
            await ring.bind({"authorization": f"Bearer {new_key()}"})
        with pytest.raises(Unauthorized):
            await ring.bind({})
        with pytest.raises(Unauthorized, match="two different"):
            await ring.bind({"authorization": f"Bearer {new_key()}", "x-api-key": new_key()})
    finally:
        await engine.dispose()
