"""The stats routes' figures computed in a worker process of their own (`FiguresProcess`): the same answers as
in the proxy's process, errors included, and a worker that dies replaced without an ask failing."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import httpx
import pytest

from proxy.stats.figures_process import FiguresProcess
from proxy.stats.models import model_stats

from .builder import PIPE, Store
from .seed_data import build_seed
from .test_loops import HEAD_10, TAIL_3
from .test_stats_api import make_app

pytestmark = pytest.mark.each_database

PATHS = ["/stats/models", "/stats/models?model=qwen3.5-27b", "/stats/variants", "/stats/loops?limit=5",
         "/stats/sessions/ses_fig", "/stats/sessions/ses_missing", "/stats/compare?models=qwen3.5-9b,qwen3.5-27b",
         "/stats/overview?range=bogus"]


async def _answers(client: httpx.AsyncClient) -> list[tuple[int, object]]:
    return [((r := await client.get(path)).status_code, r.json()) for path in PATHS]


async def _started(figures: FiguresProcess, timeout: float = 60.0) -> int:
    deadline = time.monotonic() + timeout
    while figures.pid is None:
        assert time.monotonic() < deadline, "the figures' worker did not start"
        await asyncio.sleep(0.05)
    assert figures.pid is not None
    return figures.pid


async def test_the_worker_answers_as_the_proxys_process_does_and_a_dead_one_is_replaced(engine, db_url, store: Store):
    build_seed(store)
    store.session("qwen3.5-27b", "ses_fig").request().calls(PIPE, HEAD_10, TAIL_3)
    await store.save(engine)
    here = make_app(engine)
    away = make_app(engine)
    figures = away.state.proxy.figures = FiguresProcess(db_url)
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=here), base_url="http://t") as local, \
                httpx.AsyncClient(transport=httpx.ASGITransport(app=away), base_url="http://t") as remote:
            expected = await _answers(local)
            assert [status for status, _ in expected] == [200, 200, 200, 200, 200, 404, 200, 400]
            assert await _answers(remote) == expected  # the first ask: computed here while the worker starts
            pid = await _started(figures)
            assert pid != os.getpid()
            assert await _answers(remote) == expected  # computed there

            os.kill(pid, signal.SIGKILL)
            assert await _answers(remote) == expected  # the lost worker's ask computed here
            assert await _started(figures) != pid
            assert await _answers(remote) == expected
    finally:
        await figures.close()
    assert figures.pid is None


async def test_a_memory_store_keeps_its_figures_in_the_proxy():
    from proxy.store.db import create_engine

    for url, shared in (("sqlite://", False), ("sqlite:///:memory:", False), ("sqlite:///stats.db", True),
                        ("postgresql://u@h/db", True)):
        engine = create_engine(url)
        assert FiguresProcess.can_share(engine) is shared, url
        await engine.dispose()


async def test_where_no_worker_can_start_the_figures_stay_in_the_proxy(engine, store: Store, monkeypatch):
    build_seed(store)
    await store.save(engine)
    expected = await model_stats(engine)

    broken = FiguresProcess("sqlite:///" + "/nonexistent-dir/x" * 3)  # the worker cannot open that store
    try:
        assert await broken.compute(model_stats, engine) == expected  # here, while the worker starts
        await _started(broken)
        assert await broken.compute(model_stats, engine) == expected  # failed there, answered here
        assert broken.pid is None
        assert await broken.compute(model_stats, engine) == expected and broken.pid is None  # given up
    finally:
        await broken.close()

    def refused(*args, **kwargs):
        raise OSError("no more processes")

    monkeypatch.setattr("proxy.stats.figures_process.ProcessPoolExecutor", refused)
    none = FiguresProcess("sqlite:///unused.db")
    assert await none.compute(model_stats, engine) == expected
    assert await none.compute(model_stats, engine) == expected and none.pid is None
