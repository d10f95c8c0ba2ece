"""Text the databases refuse, made safe: what a row keeps when the row as it came was refused.

Postgres refuses NUL in text and lone surrogates (not UTF-8), and enforces `VARCHAR(n)`; SQLite takes all
three. A refused row is stored with NUL written as the four characters `\\x00`, unencodable characters
backslash-escaped, and values over a column's length cut with a marker, so the record says what arrived.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import String, Table

__all__ = ["CUT_MARKER", "cut", "safe_row"]

CUT_MARKER = "…[cut]"


def cut(text: str, limit: int) -> str:
    """`text` at most `limit` characters, ending with CUT_MARKER when it was longer."""
    if len(text) <= limit:
        return text
    keep = max(0, limit - len(CUT_MARKER))
    return text[:keep] + CUT_MARKER[: limit - keep]


def _safe_text(text: str) -> str:
    text = text.replace("\x00", "\\x00")
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def safe_row(table: Table, row: dict[str, Any]) -> dict[str, Any]:
    """A copy of `row` that every supported database accepts."""
    out: dict[str, Any] = {}
    for key, value in row.items():
        if isinstance(value, str):
            value = _safe_text(value)
            column = table.c.get(key)
            length = getattr(column.type, "length", None) if column is not None else None
            if isinstance(column.type if column is not None else None, String) and length:
                value = cut(value, length)
        out[key] = value
    return out
