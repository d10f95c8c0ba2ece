"""The per-model figures and the dashboard's per-model columns, each declared once."""

from __future__ import annotations

import re
from dataclasses import asdict, fields
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from proxy.http.dashboard import STATIC_DIR
from proxy.http.dashboard import router as dashboard_router
from proxy.stats.models import MODEL_COLUMNS, model_stats
from proxy.stats.providers import PROVIDERS, ModelFigures, gather
from proxy.store import queries
from proxy.store.queries import Filters

from .builder import Store
from .seed_data import build_seed

pytestmark = pytest.mark.each_database


def test_every_figure_declares_its_provider():
    assert list(PROVIDERS) == [f.name for f in fields(ModelFigures)]
    assert all(callable(p.compute) for p in PROVIDERS.values())
    assert {name for name, p in PROVIDERS.items() if p.lists_models} == {"calls", "requests"}


async def test_figures_come_back_by_name_and_equal_the_rows(engine, store: Store):
    build_seed(store)
    await store.save(engine)
    f = Filters()
    async with engine.connect() as conn:
        found = await gather(conn, f, loop_min_attempts=3)
        calls = await queries.call_counts_from_rows(conn, f)
        reqs = await queries.request_counts_from_rows(conn, f)
        reasons = await queries.reason_counts_from_rows(conn, f)
    assert list(found) == sorted(set(calls) | set(reqs))
    for model, figures in found.items():
        assert figures.calls == calls[model] and figures.requests == reqs[model]
        assert figures.calls.errors <= figures.calls.calls
        assert figures.reasons == reasons.get(model, {})
    assert ModelFigures().calls.calls == 0 and ModelFigures().loops.count == 0  # a model a figure never saw


def _at(entry: dict[str, Any], path: str) -> Any:
    value: Any = entry
    for key in path.split("."):
        value = value[key]  # a KeyError is a column that names no field
    return value


async def test_each_dashboard_column_reads_a_field_of_stats_models(engine, store: Store):
    build_seed(store)
    await store.save(engine)
    stats = await model_stats(engine)
    assert stats["models"]
    for entry in stats["models"]:
        for column in MODEL_COLUMNS:
            value = _at(entry, column.path)
            expected = {"text": str, "count": int, "percent": float}[column.format]
            assert value is None or isinstance(value, expected), (column, value)


async def test_the_page_takes_its_columns_from_the_declaration():
    app = FastAPI()
    app.include_router(dashboard_router)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        response = await client.get("/dashboard/columns.json")
    assert response.status_code == 200
    assert "default-src 'none'" in response.headers["content-security-policy"]
    assert response.json() == {"models": [asdict(c) for c in MODEL_COLUMNS]}
    page = (STATIC_DIR / "dashboard.html").read_text()
    table = re.search(r'<table id="table-models">.*?</table>', page, re.S)
    assert table is not None and "<th>" not in table.group(0)  # no header written twice
