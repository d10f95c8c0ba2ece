"""Real servers on 127.0.0.1: the scripted upstream where vLLM would be, and the proxy in front."""

from __future__ import annotations

import asyncio
import json
import re
import ssl
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import httpx._transports.default as httpx_transports
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from proxy.config import Settings
from proxy.http.app import create_app
from proxy.http.connections import server_options
from proxy.store.db import create_engine
from proxy.testing.scripted_upstream import ScriptedUpstream
from proxy.testing.server import ServerThread
from proxy.upstream.transport import tls_context
from tests.databases import BACKENDS, database_url, drop_templates

ROOT = Path(__file__).resolve().parents[1]


def _one_tls_context() -> None:
    """httpx builds a TLS context for every client, reading the whole CA bundle into it (tens of milliseconds): a
    test polling with `httpx.get` spent seconds on that alone. Every client made with httpx's default verification
    gets the process's one context instead (proxy/upstream/transport.py's `tls_context`, as the proxy's own
    clients do); a client given its own `verify` keeps it."""
    made = httpx_transports.create_ssl_context

    def shared(verify: Any = True, cert: Any = None, trust_env: bool = True) -> ssl.SSLContext:
        if verify is True and cert is None and trust_env:
            return tls_context()
        return made(verify=verify, cert=cert, trust_env=trust_env)

    httpx_transports.create_ssl_context = shared


_one_tls_context()
STRICT_POLICY = ROOT / "policies" / "strict.yaml"
MODEL = "qwen3.5-27b"


class Row(tuple):
    """A result row readable by position and by column name, whatever the database."""

    def __new__(cls, values: Any, keys: list[str]) -> Row:
        row = super().__new__(cls, values)
        row._keys = keys  # type: ignore[attr-defined]
        return row

    def __getitem__(self, key: Any) -> Any:  # type: ignore[override]
        if isinstance(key, str):
            return super().__getitem__(self._keys.index(key))  # type: ignore[attr-defined]
        return super().__getitem__(key)

    def keys(self) -> list[str]:
        return list(self._keys)  # type: ignore[attr-defined]


@dataclass
class RunningProxy:
    server: ServerThread
    app: Any
    db_url: str

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def services(self) -> Any:
        return self.app.state.proxy

    def flush(self) -> None:
        """Wait until the writer has stored every row queued so far."""
        future = asyncio.run_coroutine_threadsafe(self.services.writer.flush(10), self.app.state.loop)
        future.result(15)

    def rows(self, sql: str, **params: Any) -> list[Row]:
        """Runs SQL on the proxy's own engine (SQLite or Postgres), after flushing its writer."""
        from sqlalchemy import text

        self.flush()

        async def query() -> list[Row]:
            async with self.services.engine.connect() as conn:
                result = await conn.execute(text(sql), params)
                keys = list(result.keys())
                return [Row(tuple(r), keys) for r in result]

        return asyncio.run_coroutine_threadsafe(query(), self.app.state.loop).result(15)

    def client(self, **kwargs: Any) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=kwargs.pop("timeout", 30), **kwargs)


class Servers:
    """The servers one test started; they stop side by side when the test ends, not one after another."""

    def __init__(self) -> None:
        self.running: list[ServerThread] = []

    def start(self, app: Any, **kwargs: Any) -> ServerThread:
        server = ServerThread(app, **kwargs).start()
        self.running.append(server)
        return server

    def stop_all(self) -> None:
        for server in self.running:
            server.request_stop()
        for server in reversed(self.running):
            server.stop()
        self.running.clear()


@pytest.fixture
def servers() -> Iterator[Servers]:
    started = Servers()
    yield started
    started.stop_all()


@pytest.fixture
def upstream(servers: Servers) -> ScriptedUpstream:
    scripted = ScriptedUpstream(models=[MODEL, "qwen3.6-35b-a3b"])
    scripted.url = servers.start(scripted.app).url + "/v1"
    return scripted


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test reaching a store runs on SQLite; on Postgres too where its behaviour can differ by database.

    Those tests say so with the `each_database` mark (the store, stats, durability and lineage tests);
    a relay test gets the same store whatever the database, so a second run would test nothing new.
    """
    if "backend" not in metafunc.fixturenames:
        return
    if any("backend" in str(mark.args[0]) for mark in metafunc.definition.iter_markers("parametrize")):
        return
    each = metafunc.definition.get_closest_marker("each_database") is not None
    metafunc.parametrize("backend", BACKENDS if each else ["sqlite"], indirect=True)


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def db_url(backend: str, tmp_path: Path) -> Iterator[str]:
    """The test's own database, already migrated to head (a copy of a template migrated once)."""
    with database_url(backend, tmp_path, migrated=True) as url:
        yield url


@pytest.fixture
def empty_db_url(backend: str, tmp_path: Path) -> Iterator[str]:
    """The test's own database with no schema at all, for tests of the migrations themselves."""
    with database_url(backend, tmp_path) as url:
        yield url


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest tests first: soak tests, then the real clients, then the rest in file order.

    The suite runs on every core (`-n auto --dist worksteal`): a worker that is free takes queued tests
    from a busy one, so a long test started first runs beside the rest, not alone at the end.
    """
    def weight(item: pytest.Item) -> int:
        if item.get_closest_marker("slow") is not None:
            return 0
        return 1 if "/e2e/" in item.nodeid or item.nodeid.startswith("e2e/") else 2

    items.sort(key=weight)


def pytest_sessionfinish() -> None:
    drop_templates()


@pytest.fixture
async def engine(db_url: str) -> AsyncIterator[AsyncEngine]:
    """The store at `db_url`, migrated to head (the real migrations, run on its template)."""
    engine = create_engine(db_url)
    yield engine
    await engine.dispose()


@pytest.fixture
def start_proxy(tmp_path: Path, db_url: str, servers: Servers) -> Iterator[Callable[..., RunningProxy]]:
    """Starts proxies; the first gets the test's database, later ones a SQLite file unless told.

    The test's servers stop here, before its database is dropped, whichever fixture came first.
    """
    started: list[RunningProxy] = []

    def _start(upstream_url: str, **overrides: Any) -> RunningProxy:
        url = overrides.pop("db", db_url if not started else f"sqlite:///{tmp_path / f'proxy{len(started)}.db'}")
        settings = Settings(upstream=upstream_url, db=url, policy=overrides.pop("policy", STRICT_POLICY),
                            log_level=overrides.pop("log_level", "warning"), **overrides)
        app = create_app(settings)
        running = RunningProxy(servers.start(app, options=server_options(settings)), app, url)
        started.append(running)
        return running

    yield _start
    servers.stop_all()


@pytest.fixture
def proxy(upstream: ScriptedUpstream, start_proxy: Callable[..., RunningProxy]) -> RunningProxy:
    return start_proxy(upstream.url)


def chat(messages: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": MODEL, "messages": messages or [{"role": "user", "content": "hi"}]}
    body.update(extra)
    return body


def sse_events(raw: bytes) -> list[str]:
    return [block[len("data: "):] for block in raw.decode().split("\n\n") if block.startswith("data: ")]


def sse_json(raw: bytes) -> list[dict[str, Any]]:
    return [json.loads(e) for e in sse_events(raw) if e != "[DONE]"]


# The line a turn delivered after a refusal ends with (proxy/enforce/feedback_turns.py `refusal_note`), as it stands
# in a JSON string of a body or an event: it quotes the refused calls, which reach the client nowhere else.
REFUSAL_LINE = re.compile(rb'allowlist-proxy refused in this turn: (?:[^"\\]|\\.)*')


def without_refusal_line(raw: bytes) -> bytes:
    return REFUSAL_LINE.sub(b"", raw)


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def voluntary_switches(pid: int | str = "self") -> dict[str, int]:
    """Thread id -> how often that thread of `pid` went to sleep (Linux: /proc), to count what wakes a process."""
    switches: dict[str, int] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            status = (task / "status").read_text()
        except OSError:
            continue  # the thread ended
        switches[task.name] = next(int(line.split()[1]) for line in status.splitlines()
                                   if line.startswith("voluntary_ctxt_switches"))  # fmt: skip
    return switches


def woken(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """Thread id -> its wake-ups between two `voluntary_switches`, for the threads that woke."""
    return {tid: count - before.get(tid, 0) for tid, count in after.items() if count != before.get(tid, 0)}
