"""The SQL twin of `proxy.policy.verdict`'s error decision and loop key, for every query over stored calls.

`tests/stats/test_verdict_sql.py` runs both forms over every decision and a table of shapes, on SQLite and
on Postgres, so the figures the database computes and the ones Python computes count the same thing.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func
from sqlalchemy.sql.elements import ColumnElement

from proxy.policy.verdict import ERROR_DECISIONS

__all__ = ["is_error_sql", "loop_key_sql"]


def is_error_sql(decision: Any) -> ColumnElement[bool]:
    """`decision` (a column) counts as an error: `proxy.policy.verdict.is_error`."""
    return decision.in_(ERROR_DECISIONS)


def loop_key_sql(calls: Any) -> ColumnElement[Any]:
    """The loop key of the calls' columns (`table.c`, or an alias's `.c`, with shape, primary_reason and
    decision): `proxy.policy.verdict.loop_key`."""
    return func.coalesce(calls.shape, calls.primary_reason, calls.decision)
