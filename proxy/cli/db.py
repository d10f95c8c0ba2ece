"""`allowlist-proxy db upgrade`: bring the store's schema to the newest migration."""

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
