"""Alembic environment: the URL comes from the proxy's settings (or `-x db=URL`), never from alembic.ini.

When the proxy migrates at start-up it hands over an open connection in `config.attributes`,
so the migrations run inside its own event loop.
"""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy import Connection
from sqlalchemy.ext.asyncio import create_async_engine

from proxy.config import Settings, normalize_db_url
from proxy.store.tables import metadata

config = context.config
target_metadata = metadata


def _url() -> str:
    x_args = context.get_x_argument(as_dictionary=True)
    return normalize_db_url(x_args.get("db") or Settings().store.url)


def _run(connection: Connection) -> None:
    context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


async def _run_async() -> None:
    engine = create_async_engine(_url())
    async with engine.begin() as connection:
        await connection.run_sync(_run)
    await engine.dispose()


if context.is_offline_mode():
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()
elif (connection := config.attributes.get("connection")) is not None:
    _run(connection)
else:
    asyncio.run(_run_async())
