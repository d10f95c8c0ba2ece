"""`allowlist-proxy db`: `upgrade` brings the store's schema to the newest migration (or a named one),
`current` says where the store is, `history` lists the migrations, `rebuild-rollups` computes the stats'
hourly rollups and error runs again from the stored rows, `prune` removes what is older than a date (with
its rollups), `export` writes the calls or the requests as CSV or JSON Lines."""

from __future__ import annotations

import argparse
import asyncio
import sys
from datetime import UTC, datetime
from typing import Any

from proxy.cli.command import HelpFormatter
from proxy.config import Settings

__all__ = ["register"]

EXAMPLES = """examples:
  allowlist-proxy db upgrade                     the configured store (default ./allowlist-proxy.db)
  allowlist-proxy db upgrade --db postgresql://allowlist:secret@db-host/allowlist
  allowlist-proxy db current
  allowlist-proxy db history
  allowlist-proxy db rebuild-rollups             after rows were restored or edited by hand
  allowlist-proxy db prune --before 2026-01-01   remove what is older, with its hourly figures
  allowlist-proxy db export --format csv > calls.csv
  allowlist-proxy db export --table requests --format jsonl --since 2026-03-01 -o requests.jsonl
"""


def _with_db(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", default=None, help="database URL [env ALLOWLIST_PROXY_DB]")


def register(sub: Any) -> None:
    parser = sub.add_parser("db", help="manage the store's schema", epilog=EXAMPLES,
                            formatter_class=HelpFormatter)
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    upgrade = actions.add_parser("upgrade", help="apply the migrations up to head (start-up does this too)",
                                 epilog=EXAMPLES, formatter_class=HelpFormatter)
    _with_db(upgrade)
    upgrade.add_argument("--revision", default="head",
                         help="stop at this revision (default head); a store never goes back to an older one")
    upgrade.set_defaults(func=run_upgrade)
    current = actions.add_parser("current", help="the store's schema revision and the newest this proxy knows",
                                 epilog=EXAMPLES, formatter_class=HelpFormatter)
    _with_db(current)
    current.set_defaults(func=run_current)
    history = actions.add_parser("history", help="the migrations this proxy carries, oldest first",
                                 epilog=EXAMPLES, formatter_class=HelpFormatter)
    history.set_defaults(func=run_history)
    rebuild = actions.add_parser(
        "rebuild-rollups",
        help="recompute the stats' hourly rollups and error runs from the rows (after rows were changed by hand "
             "or copied in behind the proxy); SQLite proxies wait for it, Postgres replicas should be stopped",
        epilog=EXAMPLES, formatter_class=HelpFormatter,
    )
    _with_db(rebuild)
    rebuild.set_defaults(func=run_rebuild)
    prune = actions.add_parser(
        "prune", epilog=EXAMPLES, formatter_class=HelpFormatter,
        help="remove the calls, requests and throughput windows older than a date, with their hourly figures "
             "(the date is taken down to the hour, so the figures of what remains stay exact)")
    _with_db(prune)
    prune.add_argument("--before", required=True, type=parse_date, metavar="DATE",
                       help="ISO date or date-time, UTC unless it names a zone (2026-01-01, 2026-01-01T12:00)")
    prune.set_defaults(func=run_prune)
    export = actions.add_parser("export", help="write the tool calls or the requests as CSV or JSON Lines",
                                epilog=EXAMPLES, formatter_class=HelpFormatter)
    _with_db(export)
    export.add_argument("--table", choices=("calls", "requests"), default="calls",
                        help="what to write (default: %(default)s)")
    export.add_argument("--format", choices=("csv", "jsonl"), default="csv", help="default: %(default)s")
    export.add_argument("--since", type=parse_date, metavar="DATE", help="only rows at or after this date")
    export.add_argument("--until", type=parse_date, metavar="DATE", help="only rows before this date")
    export.add_argument("-o", "--output", metavar="FILE", help="write here instead of standard output")
    export.set_defaults(func=run_export)


def parse_date(text: str) -> float:
    """An ISO date or date-time as Unix seconds; UTC unless it names a zone."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO date (2026-01-31 or 2026-01-31T12:00)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def _url(args: argparse.Namespace) -> str:
    return args.db or Settings().store.url


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


def run_prune(args: argparse.Namespace) -> int:
    from proxy.store.db import create_engine, migrate
    from proxy.store.retention import prune_store

    url = _url(args)

    async def _go() -> dict[str, int]:
        engine = create_engine(url)
        try:
            await migrate(engine)
            return await prune_store(engine, args.before)
        finally:
            await engine.dispose()

    deleted = asyncio.run(_go())
    cut = datetime.fromtimestamp(args.before, UTC).replace(minute=0, second=0, microsecond=0)
    rows = ", ".join(f"{n} {table}" for table, n in deleted.items() if n) or "nothing"
    print(f"pruned before {cut.isoformat(timespec='minutes')} in {_where(url)}: {rows}")
    return 0


def run_export(args: argparse.Namespace) -> int:
    from proxy.store.db import create_engine
    from proxy.store.export import export_rows

    url = _url(args)
    out = open(args.output, "w", newline="", encoding="utf-8") if args.output else sys.stdout  # noqa: SIM115

    async def _go() -> int:
        engine = create_engine(url)
        try:
            return await export_rows(engine, out, table=args.table, fmt=args.format, since=args.since,
                                     until=args.until)
        finally:
            await engine.dispose()

    try:
        count = asyncio.run(_go())
    finally:
        if out is not sys.stdout:
            out.close()
    print(f"{count} {args.table} written", file=sys.stderr)
    return 0
