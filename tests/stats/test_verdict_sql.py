"""`Verdict.is_error` / `Verdict.loop_key` and their SQL twin (`proxy.store.verdict_sql`) agree on every
decision and a table of shapes, run by the real database (SQLite, and Postgres when configured)."""

from __future__ import annotations

import itertools

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from proxy.policy.verdict import DECISIONS, Verdict, is_error, loop_key
from proxy.store.tables import tool_calls
from proxy.store.verdict_sql import is_error_sql, loop_key_sql

from .builder import ALLOWED, Store

pytestmark = pytest.mark.each_database

SHAPES = (None, "", "pipe:head", "unknown_tool:curl", "parse_error")
PRIMARY_REASONS = (None, "pipe", "parse_error")


def test_the_error_decisions_are_reject_malformed_and_repaired() -> None:
    assert [d for d in DECISIONS if is_error(d)] == ["reject", "malformed", "repaired"]
    assert not Verdict("allow").is_error and Verdict("repaired", ("pipe",), "pipe:head").is_error


async def test_python_and_sql_forms_agree(engine: AsyncEngine, store: Store) -> None:
    request = store.session("m").request()
    cases: dict[str, Verdict] = {}
    for decision, shape, primary in itertools.product(DECISIONS, SHAPES, PRIMARY_REASONS):
        verdict = Verdict(decision, () if primary is None else (primary, "other"), shape)
        row = request.call(ALLOWED)
        row.update(decision=decision, shape=shape, primary_reason=primary, reasons=",".join(verdict.reasons))
        cases[row["id"]] = verdict
    store.rows["tool_call_reasons"].clear()
    await store.save(engine)

    t = tool_calls.c
    async with engine.connect() as conn:
        stored = (await conn.execute(select(t.id, t.decision, t.shape, t.primary_reason,
                                            is_error_sql(t.decision).label("is_error"),
                                            loop_key_sql(t).label("loop_key")))).all()
    assert len(stored) == len(cases) == len(DECISIONS) * len(SHAPES) * len(PRIMARY_REASONS)
    for row in stored:
        verdict = cases[row.id]
        assert bool(row.is_error) is verdict.is_error is is_error(row.decision), row
        assert row.loop_key == verdict.loop_key == loop_key(row.shape, row.primary_reason, row.decision), row
