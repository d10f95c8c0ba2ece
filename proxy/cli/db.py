"""`allowlist-proxy db upgrade`: bring the store's schema to the newest migration; `db rebuild-rollups`:
compute the stats' hourly rollups and error runs again from the stored rows."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from proxy.config import Settings

__all__ = ["register"]


def register(sub: Any) -> None:
    parser = sub.add_parser("db", help="manage the store's schema")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    upgrade = actions.add_parser("upgrade", help="apply the migrations up to head (start-up does this too)")
    upgrade.add_argument("--db", default=None, help="database URL [env ALLOWLIST_PROXY_DB]")
    upgrade.add_argument("--revision", default="head")
    upgrade.set_defaults(func=run_upgrade)
    rebuild = actions.add_parser(
        "rebuild-rollups",
        help="recompute the stats' hourly rollups and error runs from the rows (after rows were changed by hand "
             "or copied in behind the proxy); SQLite proxies wait for it, Postgres replicas should be stopped",
    )
    rebuild.add_argument("--db", default=None, help="database URL [env ALLOWLIST_PROXY_DB]")
    rebuild.set_defaults(func=run_rebuild)


def run_upgrade(args: argparse.Namespace) -> int:
    from proxy.store.db import create_engine, migrate

    url = args.db or Settings().db

    async def _go() -> None:
        engine = create_engine(url)
        try:
            await migrate(engine, args.revision)
        finally:
            await engine.dispose()

    asyncio.run(_go())
    print(f"schema at {args.revision} in {url.split('@')[-1]}")
    return 0


def run_rebuild(args: argparse.Namespace) -> int:
    from proxy.store import rollups
    from proxy.store.db import create_engine, migrate

    url = args.db or Settings().db

    async def _go() -> None:
        engine = create_engine(url)
        try:
            await migrate(engine)
            async with engine.begin() as conn:  # one transaction: readers see the old rollups or the new
                await conn.run_sync(rollups.rebuild)
        finally:
            await engine.dispose()

    asyncio.run(_go())
    print(f"rollups rebuilt in {url.split('@')[-1]}")
    return 0
