"""One shape for a judged route: every route of the table (`JUDGED`) declares every piece, a route lacking one is
refused naming it, and a new route is its module plus one table line (docs/DESIGN.md, "Where to change what")."""

from __future__ import annotations

import inspect
import re
from typing import Any

import pytest

import proxy.http.app as app_module
from proxy.config import Settings
from proxy.dialects.base import PIECES, REASK_PIECES, Dialect, DialectExchange, missing_pieces
from proxy.dialects.chat import ChatDialect
from proxy.dialects.routes import JUDGED, judged_table
from proxy.http.app import create_app
from proxy.testing.characters import OPENCODE_TOOLS
from proxy.testing.scripted_upstream import Reply
from tests.conftest import ROOT, chat, without_refusal_line

PIPED = "uv run scripts/search.py x | head -5"
ALLOWED = 'uv run scripts/search.py "rust async"'


def test_every_judged_route_declares_every_piece() -> None:
    assert set(JUDGED) == {"/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages"}
    for path, route in JUDGED.items():
        assert isinstance(route, Dialect), path
        assert missing_pieces(type(route)) == [], path
        assert path.startswith("/v1/") and route.path.startswith("/"), path
        # The conversation a retry appends to is held to `max_messages` (open_exchange counts these lists).
        assert route.history_key in route.counted_keys or not route.reasks, path
    names = [route.route for route in JUDGED.values()]
    assert len(set(names)) == len(names), "two routes record one name"


def test_the_pieces_name_methods_of_the_route_shape() -> None:
    """The pieces table cannot go stale: each piece is a method every route has."""
    for names in (*PIECES.values(), *REASK_PIECES.values()):
        for name in names:
            assert callable(getattr(Dialect, name)), name


class _NoRetry(Dialect, route="partial", path="/partial", history_key="messages"):
    """A route that reads requests and whole answers, and forgot its stream and everything a retry needs."""

    def validate(self, payload: dict[str, Any]) -> None:
        return None

    def offered(self, payload: dict[str, Any]) -> set[str]:
        return set()

    def conversation(self, payload: dict[str, Any]) -> None:
        return None

    def client_texts(self, payload: dict[str, Any]) -> list[str]:
        return []

    def read_whole(self, ex: DialectExchange, obj: dict[str, Any]) -> list[Any]:
        return []

    def text(self, obj: dict[str, Any]) -> str:
        return ""

    def usage(self, obj: dict[str, Any] | None) -> dict[str, Any] | None:
        return obj


class _NoClassLine(ChatDialect):
    """A whole route in every method, which forgot to say what it records and where it goes."""


class _SameName(ChatDialect, route="chat", path="/chat/completions", history_key="messages"):
    pass


def test_a_route_lacking_a_piece_is_refused_naming_it() -> None:
    with pytest.raises(TypeError) as refused:
        judged_table({"/v1/partial": _NoRetry})
    message = str(refused.value)
    for piece in ("call extraction, streamed: stream", "feedback and retry body: retry_items",
                  "re-encoding: delivered", "re-encoding: set_blocked", "re-encoding: set_usage", "re-encoding: reply"):
        assert piece in message
    assert "request reading" not in message and "call extraction, whole" not in message
    with pytest.raises(TypeError, match="class line: route"):
        judged_table({"/v1/forgot": _NoClassLine})
    with pytest.raises(TypeError, match="both record route 'chat'"):
        judged_table({"/v1/chat/completions": ChatDialect, "/v1/again": _SameName})


def test_each_route_is_a_module_of_its_own() -> None:
    modules = [inspect.getmodule(type(route)) for route in JUDGED.values()]
    names = [module.__name__ for module in modules if module is not None]
    assert len(set(names)) == len(JUDGED) and all(n.startswith("proxy.dialects.") for n in names)


def test_the_docs_name_every_route_and_its_recorded_name() -> None:
    routes_doc = (ROOT / "docs" / "routes.md").read_text()
    for path, route in JUDGED.items():
        row = re.search(rf"^\| `{re.escape(path)}` \|.*\| `{route.route}` \|$", routes_doc, re.MULTILINE)
        assert row is not None, f"docs/routes.md has no table row for {path} recording `{route.route}`"
    design = (ROOT / "docs" / "DESIGN.md").read_text()
    claim = design[design.index("- **A judged route**"):]
    claim = claim[:claim.index("\n- **", 1)]
    assert "(1 file and one table line)" in claim and "`JUDGED`" in claim and "proxy/dialects/routes.py" in claim
    for names in (*PIECES.values(), *REASK_PIECES.values()):
        for name in names:
            assert f"`{name}`" in claim, f"the claim in docs/DESIGN.md does not name the piece {name}"


class _ToyChat(ChatDialect, route="toy", path="/chat/completions", history_key="messages", asks_usage=True):
    """A new judged route: chat's shapes under a path and a recorded name of its own."""


@pytest.mark.parametrize("stream", [False, True])
def test_a_new_route_is_its_module_and_one_table_line(upstream, start_proxy, monkeypatch, stream) -> None:
    """With one line added to the table, the app mounts the route, judges and re-asks on it, and records it."""
    monkeypatch.setattr(app_module, "JUDGED", judged_table({**{p: type(r) for p, r in JUDGED.items()},
                                                            "/v1/toy/chat/completions": _ToyChat}))
    proxy = start_proxy(upstream.url)
    upstream.script(Reply(tool_calls=[("bash", {"command": PIPED})]),
                    Reply(tool_calls=[("bash", {"command": ALLOWED})]))
    body = chat([{"role": "user", "content": "find rust async docs"}], tools=OPENCODE_TOOLS, stream=stream)
    with proxy.client() as client:
        response = client.post("/v1/toy/chat/completions", json=body)
    assert response.status_code == 200
    assert b"head -5" not in without_refusal_line(response.content) and "rust async" in response.text
    assert len(upstream.requests) == 2  # re-asked once, with the reasons
    rows = proxy.rows("SELECT route, decision FROM tool_calls ORDER BY attempt")
    assert [tuple(r) for r in rows] == [("toy", "reject"), ("toy", "allow")]
    assert [r["route"] for r in proxy.rows("SELECT route FROM requests")] == ["toy"]


def test_the_app_mounts_every_route_of_the_table() -> None:
    app = create_app(Settings(upstream="http://127.0.0.1:9/v1"))
    posts = {route.path for route in app.routes if "POST" in (getattr(route, "methods", None) or ())}
    assert set(JUDGED) <= posts
