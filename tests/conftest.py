"""Real servers on 127.0.0.1: the scripted upstream where vLLM would be, and the proxy in front."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.app import create_app
from proxy.config import Settings
from proxy.testing.scripted_upstream import ScriptedUpstream
from proxy.testing.server import ServerThread

ROOT = Path(__file__).resolve().parents[1]
STRICT_POLICY = ROOT / "policies" / "strict.yaml"
MODEL = "qwen3.5-27b"


@dataclass
class RunningProxy:
    server: ServerThread
    app: Any
    db_path: Path

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def state(self) -> Any:
        return self.app.state.proxy

    def flush(self) -> None:
        """Wait until the writer has stored every row queued so far."""
        future = asyncio.run_coroutine_threadsafe(self.state.writer.flush(10), self.app.state.loop)
        future.result(15)

    def rows(self, sql: str, *params: Any) -> list[sqlite3.Row]:
        self.flush()
        with sqlite3.connect(self.db_path) as conn:
            conn.row_factory = sqlite3.Row
            return list(conn.execute(sql, params))

    def client(self, **kwargs: Any) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=kwargs.pop("timeout", 30), **kwargs)


@pytest.fixture
def upstream() -> Iterator[ScriptedUpstream]:
    scripted = ScriptedUpstream(models=[MODEL, "qwen3.6-35b-a3b"])
    with ServerThread(scripted.app) as server:
        scripted.url = server.url + "/v1"
        yield scripted


@pytest.fixture
def start_proxy(tmp_path: Path) -> Iterator[Callable[..., RunningProxy]]:
    started: list[RunningProxy] = []

    def _start(upstream_url: str, **overrides: Any) -> RunningProxy:
        db_path = overrides.pop("db_path", tmp_path / f"proxy{len(started)}.db")
        settings = Settings(upstream=upstream_url, db=f"sqlite:///{db_path}",
                            policy=overrides.pop("policy", STRICT_POLICY), log_level="warning", **overrides)
        app = create_app(settings)
        server = ServerThread(app).start()
        running = RunningProxy(server, app, db_path)
        started.append(running)
        return running

    yield _start
    for running in started:
        running.server.stop()


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


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()
