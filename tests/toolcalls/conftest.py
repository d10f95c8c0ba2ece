"""Fixtures shared by the tool-call tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from proxy.testing.scripted_upstream import ScriptedUpstream
from proxy.testing.server import ServerThread
from tests.conftest import MODEL


@pytest.fixture
def family_upstream() -> Iterator[Callable[..., ScriptedUpstream]]:
    """Starts scripted upstreams speaking a vLLM family's bytes (`family`, `tool_parser`); stops them after."""
    servers: list[ServerThread] = []

    def start(family: str | None = None, tool_parser: str = "qwen3_coder", **options: Any) -> ScriptedUpstream:
        scripted = ScriptedUpstream(models=[MODEL], family=family, tool_parser=tool_parser, **options)
        server = ServerThread(scripted.app).start()
        servers.append(server)
        scripted.url = server.url + "/v1"
        return scripted

    yield start
    for server in servers:
        server.stop()
