"""Column lists for the migrations: `required(name=type, ...)` and `optional(...)`, in the order given.

The migrations are history, and they build their tables from these: what these return must never change.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa


def required(**types: sa.types.TypeEngine[Any]) -> list[sa.Column[Any]]:
    """NOT NULL columns."""
    return [sa.Column(name, type_, nullable=False) for name, type_ in types.items()]


def optional(**types: sa.types.TypeEngine[Any]) -> list[sa.Column[Any]]:
    """Nullable columns."""
    return [sa.Column(name, type_, nullable=True) for name, type_ in types.items()]
