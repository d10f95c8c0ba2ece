"""`allowlist-proxy db`: `upgrade` brings the store's schema to the newest migration (or a named one),
`current` says where the store is, `history` lists the migrations, `rebuild-rollups` computes the stats'
hourly rollups and error runs again from the stored rows."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from proxy.config import Settings

__all__ = ["register"]

EXAMPLES = """examples:
  allowlist-proxy db upgrade                          the store of the settings (default ./allowlist-proxy.db)
  allowlist-proxy db upgrade --db postgresql://allowlist:secret@db-host/allowlist
  allowlist-proxy db current
  allowlist-proxy db history
"""


def _with_db(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", default=None, help="database URL [env ALLOWLIST_PROXY_DB]")


def register(sub: Any) -> None:
    parser = sub.add_parser("db", help="manage the store's schema", epilog=EXAMPLES,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    upgrade = actions.add_parser("upgrade", help="apply the migrations up to head (start-up does this too)",
                                 epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    _with_db(upgrade)
    upgrade.add_argument("--revision", default="head",
                         help="stop at this revision (default head); a store never goes back to an older one")
    upgrade.set_defaults(func=run_upgrade)
    current = actions.add_parser("current", help="the store's schema revision and the newest this proxy knows")
    _with_db(current)
    current.set_defaults(func=run_current)
    history = actions.add_parser("history", help="the migrations this proxy carries, oldest first")
    history.set_defaults(func=run_history)
    rebuild = actions.add_parser(
        "rebuild-rollups",
        help="recompute the stats' hourly rollups and error runs from the rows (after rows were changed by hand "
             "or copied in behind the proxy); SQLite proxies wait for it, Postgres replicas should be stopped",
    )
    _with_db(rebuild)
    rebuild.set_defaults(func=run_rebuild)


def _url(args: argparse.Namespace) -> str:
    return args.db or Settings().db


def _where(url: str) -> str:
    return url.split("@")[-1]


def _revisions(url: str) -> tuple[str | None, str]:
    from proxy.store.db import create_engine, schema_revisions

    async def _go() -> tuple[str | None, str]:
        engine = create_engine(url)
        try:
            return await schema_revisions(engine)
        finally:
            await engine.dispose()

    return asyncio.run(_go())


def run_upgrade(args: argparse.Namespace) -> int:
    from proxy.store.db import create_engine, migrate

    url = _url(args)
    before, _head = _revisions(url)

    async def _go() -> None:
        engine = create_engine(url)
        try:
            await migrate(engine, args.revision)
        finally:
            await engine.dispose()

    asyncio.run(_go())
    after, head = _revisions(url)
    note = ""
    if args.revision not in ("head", after):
        note = f" (asked for {args.revision}; upgrade never takes a store back to an older revision)"
    elif after == before:
        note = " (already there)"
    print(f"schema at {after}{' (head)' if after == head else ''} in {_where(url)}{note}")
    return 0


def run_current(args: argparse.Namespace) -> int:
    url = _url(args)
    current, head = _revisions(url)
    state = "up to date" if current == head else "behind: run `allowlist-proxy db upgrade`"
    print(f"{_where(url)}: schema at {current or 'none (empty database)'}; this proxy's newest is {head} ({state})")
    return 0 if current == head else 1


def run_history(_args: argparse.Namespace) -> int:
    from alembic.script import ScriptDirectory

    from proxy.store.db import alembic_config

    scripts = ScriptDirectory.from_config(alembic_config())
    for script in reversed(list(scripts.walk_revisions())):
        doc = (script.doc or "").strip().splitlines()[0] if script.doc else ""
        print(f"{script.revision}  {doc}")
    return 0


def run_rebuild(args: argparse.Namespace) -> int:
    from proxy.store import rollups
    from proxy.store.db import create_engine, migrate

    url = _url(args)

    async def _go() -> None:
        engine = create_engine(url)
        try:
            await migrate(engine)
            async with engine.begin() as conn:  # one transaction: readers see the old rollups or the new
                await conn.run_sync(rollups.rebuild)
        finally:
            await engine.dispose()

    asyncio.run(_go())
    print(f"rollups rebuilt in {_where(url)}")
    return 0
