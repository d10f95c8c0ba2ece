"""The stats router mounted on a small app of its own, served in-process through httpx.ASGITransport."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from types import SimpleNamespace

import httpx
import pytest
from fastapi import FastAPI

from proxy.http.stats_routes import router

from .builder import ALLOWED, PIPE, START, Store
from .seed_data import SEED, build_seed
from .test_loops import HEAD_10, TAIL_3
from .test_model_stats import MODEL_KEYS

pytestmark = pytest.mark.each_database

ClientFactory = Callable[..., httpx.AsyncClient]


def make_app(engine, *, admin_token: str | None = None, loop_min_attempts: int = 3) -> FastAPI:
    app = FastAPI()
    app.include_router(router)
    policy = SimpleNamespace(policy=SimpleNamespace(loop_min_attempts=loop_min_attempts))
    app.state.proxy = SimpleNamespace(
        engine=engine, settings=SimpleNamespace(http=SimpleNamespace(admin_token=admin_token)),
        policies=SimpleNamespace(current=lambda: policy, get=lambda _name: None),
    )
    return app


@pytest.fixture
async def client_for(engine) -> AsyncIterator[ClientFactory]:
    opened: list[httpx.AsyncClient] = []

    def make(**kw) -> httpx.AsyncClient:
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=make_app(engine, **kw)), base_url="http://t")
        opened.append(client)
        return client

    yield make
    for client in opened:
        await client.aclose()


def assert_error_shape(body: dict, type_: str) -> None:
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["type"] == type_ and body["error"]["message"]


async def test_models_json_shape(engine, store: Store, client_for: ClientFactory):
    build_seed(store)
    await store.save(engine)
    response = await client_for().get("/stats/models")
    assert response.status_code == 200
    body = response.json()
    assert body["window"] == {"since": None, "until": None}
    assert [m["model"] for m in body["models"]] == sorted(m for m, *_ in SEED)
    for m in body["models"]:
        assert set(m) == MODEL_KEYS
        assert set(m["loops"]) == {"count", "max_attempts", "mean_attempts", "exact_repeats"}
        assert isinstance(m["reasons"], dict) and isinstance(m["throughput"], dict)
    by_model = {m["model"]: m for m in body["models"]}
    assert [round(by_model[m]["error_rate"] * 100, 1) for m, *_ in SEED] == [5.6, 10.2, 12.0]


async def test_models_filters_accept_epoch_and_iso(engine, store: Store, client_for: ClientFactory):
    store.session("m").request().calls(ALLOWED, PIPE)
    store.now = START + 7200
    store.session("n").request(at=START + 7200).calls(PIPE)
    await store.save(engine)
    client = client_for()
    iso = datetime.fromtimestamp(START + 3600, UTC).isoformat()
    for since in (str(START + 3600), iso, iso.replace("+00:00", "Z"), iso.replace("+00:00", "")):
        body = (await client.get("/stats/models", params={"since": since})).json()
        assert [m["model"] for m in body["models"]] == ["n"], since
        assert body["window"] == {"since": START + 3600, "until": None}
    body = (await client.get("/stats/models", params={"until": START + 3600, "model": "m"})).json()
    assert [(m["model"], m["tool_calls"]) for m in body["models"]] == [("m", 2)]
    assert (await client.get("/stats/models", params={"policy": "none"})).json()["models"] == []
    assert (await client.get("/stats/models", params={"route": "completions"})).json()["models"] == []


async def test_bad_time_is_a_400_in_the_error_shape(engine, client_for: ClientFactory):
    response = await client_for().get("/stats/models", params={"since": "yesterday-ish"})
    assert response.status_code == 400
    assert_error_shape(response.json(), "invalid_request_error")
    assert response.json()["error"]["param"] == "since"
    response = await client_for().get("/stats/loops", params={"limit": "0"})
    assert response.status_code == 400 and response.json()["error"]["param"] == "limit"


async def test_loop_threshold_comes_from_the_policy(engine, store: Store, client_for: ClientFactory):
    store.session("m").request().calls(PIPE, HEAD_10, ALLOWED)
    await store.save(engine)
    three = (await client_for(loop_min_attempts=3).get("/stats/models")).json()["models"][0]["loops"]
    two = (await client_for(loop_min_attempts=2).get("/stats/models")).json()["models"][0]["loops"]
    assert (three["count"], two["count"]) == (0, 1)
    override = await client_for(loop_min_attempts=3).get("/stats/models", params={"loop_min_attempts": "2"})
    assert override.json()["models"][0]["loops"]["count"] == 1


async def test_session_detail_and_404(engine, store: Store, client_for: ClientFactory):
    store.session("m", "ses_1").request().calls(PIPE, HEAD_10, TAIL_3, ALLOWED)
    await store.save(engine)
    client = client_for()
    response = await client.get("/stats/sessions/ses_1")
    assert response.status_code == 200
    body = response.json()
    assert body["session_id"] == "ses_1" and body["tool_calls"] == 4 and len(body["loops"]) == 1
    assert [c["loop"] and c["loop"]["position"] for c in body["calls"]] == [1, 2, 3, None]
    missing = await client.get("/stats/sessions/ses_missing")
    assert missing.status_code == 404
    assert_error_shape(missing.json(), "invalid_request_error")
    assert missing.json()["error"]["code"] == "session_not_found"


async def test_loops_endpoint(engine, store: Store, client_for: ClientFactory):
    store.session("m", "ses_1").request().calls(PIPE, HEAD_10, TAIL_3, ALLOWED)
    await store.save(engine)
    body = (await client_for().get("/stats/loops")).json()
    assert [(lp["session_id"], lp["attempts"], lp["commands"]) for lp in body["loops"]] == [
        ("ses_1", 3, [PIPE, HEAD_10, TAIL_3])]


@pytest.mark.parametrize("path", ["/stats/models", "/stats/sessions/ses_1", "/stats/loops"])
async def test_admin_token(engine, store: Store, client_for: ClientFactory, path: str):
    store.session("m", "ses_1").request().calls(PIPE)
    await store.save(engine)
    client = client_for(admin_token="s3cret")
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
        response = await client.get(path, headers=headers)
        assert response.status_code == 401, headers
        assert_error_shape(response.json(), "authentication_error")
    assert (await client.get(path, headers={"Authorization": "Bearer s3cret"})).status_code == 200
    # No token configured: open.
    assert (await client_for().get(path)).status_code == 200
