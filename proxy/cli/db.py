"""`allowlist-proxy db`: `upgrade` brings the store's schema to the newest migration (or a named one),
`downgrade` takes it back to an older one, `current` says where the store is, `history` lists the migrations,
`backup` copies the store (SQLite) or prints the `pg_dump` line (Postgres), `rebuild-rollups` computes the stats'
hourly rollups and error runs again from the stored rows, `prune` removes what is older than a date (with its
rollups) and gives the space back, `export` writes the calls or the requests as CSV, JSON Lines or Parquet.

Every time is a date, a date-time, epoch seconds or a duration ago (`90d`, `1h`), as `stats --since` takes it."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from proxy.cli.command import HelpFormatter
from proxy.config import Settings

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

__all__ = ["parse_date", "register"]

T = TypeVar("T")

EXAMPLES = """examples:
  allowlist-proxy db upgrade                     the configured store (default ./allowlist-proxy.db)
  allowlist-proxy db upgrade --db postgresql://allowlist:secret@db-host/allowlist
  allowlist-proxy db current
  allowlist-proxy db history
  allowlist-proxy db backup --to store-copy.db   a consistent copy, while the proxy serves
  allowlist-proxy db downgrade --to 0016         before running an older version (docs/upgrade.md)
  allowlist-proxy db rebuild-rollups             after rows were restored or edited by hand
  allowlist-proxy db prune --before 90d          remove what is older, with its hourly figures
  allowlist-proxy db export --format csv > calls.csv
  allowlist-proxy db export --table requests --format jsonl --since 1h -o requests.jsonl
  allowlist-proxy db export --format parquet -o calls.parquet     (with the [parquet] extra)
"""

_WHEN = "a date, date-time or epoch seconds (UTC unless it names a zone), or a duration ago: 90d, 12h, 30m"


def _with_db(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", default=None, help="database URL [env ALLOWLIST_PROXY_DB]")


def register(sub: Any) -> None:
    parser = sub.add_parser("db", help="manage the store's schema", epilog=EXAMPLES,
                            formatter_class=HelpFormatter)
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    def action(name: str, func: Callable[[argparse.Namespace], int], help: str, *,
               db: bool = True) -> argparse.ArgumentParser:
        """A `db` action running `func`, with --db unless it reads no store."""
        added = actions.add_parser(name, help=help, epilog=EXAMPLES, formatter_class=HelpFormatter)
        if db:
            _with_db(added)
        added.set_defaults(func=func)
        return added

    upgrade = action("upgrade", run_upgrade, "apply the migrations up to head (start-up does this too)")
    upgrade.add_argument("--revision", default="head",
                         help="stop at this revision (default head); a store past it is left as it is (exit 1): "
                              "`db downgrade` takes a store back")
    down = action("downgrade", run_downgrade,
                  "take the schema back to an older revision with the migrations' downgrade steps, before running an "
                  "older version of the proxy (stop the proxies first; a SQLite store is copied first; what only the "
                  "newer revisions hold is dropped)")
    down.add_argument("--to", required=True, metavar="REV", dest="revision",
                      help="the revision to go back to (`db history` lists them; `base` drops the whole schema)")
    backup = action("backup", run_backup,
                    "copy a SQLite store with SQLite's online backup (consistent while the proxy serves); for "
                    "Postgres, print the pg_dump command line to run")
    backup.add_argument("--to", metavar="FILE", default=None,
                        help="where the copy goes (default: beside the store, named with the time); never written "
                             "over")
    action("current", run_current, "the store's schema revision and the newest this proxy knows")
    action("history", run_history, "the migrations this proxy carries, oldest first", db=False)
    action("rebuild-rollups", run_rebuild,
           "recompute the stats' hourly rollups and error runs from the rows (after rows were changed by hand or "
           "copied in behind the proxy); SQLite proxies wait for it, Postgres replicas should be stopped")
    prune = action("prune", run_prune,
                   "remove the calls, requests and throughput windows older than a date, with their hourly figures "
                   "(the date is taken down to the hour, so the figures of what remains stay exact)")
    prune.add_argument("--before", required=True, type=parse_date, metavar="WHEN", help=_WHEN)
    prune.add_argument("--no-vacuum", dest="vacuum", action="store_false",
                       help="leave the space of the deleted rows to new rows (SQLite's VACUUM holds the write lock "
                            "while it copies the store: a serving proxy's writes wait that long)")
    export = action("export", run_export,
                    "write the tool calls or the requests as CSV, JSON Lines or Parquet; times in ISO 8601 (UTC)")
    export.add_argument("--table", choices=("calls", "requests"), default="calls",
                        help="what to write (default: %(default)s)")
    export.add_argument("--format", choices=("csv", "jsonl", "parquet"), default="csv",
                        help="default: %(default)s; parquet needs pyarrow (pip install 'allowlist-proxy[parquet]') "
                             "and -o")
    export.add_argument("--since", type=parse_date, metavar="WHEN", help=f"only rows at or after this time: {_WHEN}")
    export.add_argument("--until", type=parse_date, metavar="WHEN", help="only rows before this time")
    export.add_argument("-o", "--output", metavar="FILE", help="write here instead of standard output")


def parse_date(text: str) -> float:
    """A time as Unix seconds, read as `stats --since` reads it (proxy.stats.models.parse_time)."""
    from proxy.stats.models import parse_time

    try:
        moment = parse_time(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if moment is None:
        raise argparse.ArgumentTypeError(f"expected {_WHEN} (got an empty value)")
    return moment


def _url(args: argparse.Namespace) -> str:
    return args.db or Settings().store.url


def _where(url: str) -> str:
    return url.split("@")[-1]


def _on_store(url: str, work: Callable[[AsyncEngine], Awaitable[T]]) -> T:
    """`work(engine)` on the store at `url`, the engine closed after."""
    from proxy.store.db import create_engine

    async def _go() -> T:
        engine = create_engine(url)
        try:
            return await work(engine)
        finally:
            await engine.dispose()

    return asyncio.run(_go())


def _revisions(url: str) -> tuple[str | None, str]:
    from proxy.store.db import schema_revisions

    return _on_store(url, schema_revisions)


def _no_store(url: str) -> bool:
    """Whether `url` names a SQLite file that does not exist (said on stderr): a command that only reads or
    copies a store never creates one."""
    from proxy.cli.stats import sqlite_path

    path = sqlite_path(url)
    if path is not None and not path.is_file():
        print(f"error: no store at {path}", file=sys.stderr)
        return True
    return False


def _existing_store(args: argparse.Namespace) -> str | None:
    """The command's store URL; None (said on stderr) where it names a SQLite file that does not exist."""
    url = _url(args)
    return None if _no_store(url) else url


def run_upgrade(args: argparse.Namespace) -> int:
    from proxy.store.db import migrate, revision_order, schema_state

    url = _url(args)
    found = _on_store(url, schema_state)
    order = revision_order()
    target = order[-1] if args.revision == "head" else args.revision
    if found.state != "ahead" and target in order and found.current in order and \
            order.index(found.current) > order.index(target):
        print(f"error: the store in {_where(url)} is at {found.current}, past {target}: upgrade never takes a store "
              f"back. `allowlist-proxy db downgrade --to {target}` does (docs/upgrade.md).", file=sys.stderr)
        return 1
    done = _on_store(url, lambda engine: migrate(engine, args.revision))
    after, head = _revisions(url)
    if done is None:
        note = " (already there)"
    else:
        note = f" (from {done.before or 'an empty database'}"
        note += f"; the store as it was is copied to {done.backup})" if done.backup else ")"
    print(f"schema at {after}{' (head)' if after == head else ''} in {_where(url)}{note}")
    return 0


def run_downgrade(args: argparse.Namespace) -> int:
    from proxy.store.db import SchemaAhead, SchemaError, downgrade

    if (url := _existing_store(args)) is None:
        return 1
    try:
        done = _on_store(url, lambda engine: downgrade(engine, args.revision))
    except SchemaAhead:
        raise
    except SchemaError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    copy = f"; the store as it was is copied to {done.backup}" if done.backup else ""
    print(f"schema at {done.after or 'none (base: no tables)'} in {_where(url)} (from {done.before}{copy})")
    return 0


def run_current(args: argparse.Namespace) -> int:
    from proxy.store.db import schema_state

    if (url := _existing_store(args)) is None:
        return 1
    found = _on_store(url, schema_state)
    state = {"head": "up to date", "empty": "empty: run `allowlist-proxy db upgrade`",
             "behind": "behind: run `allowlist-proxy db upgrade`",
             "ahead": "ahead: a newer version migrated it; run that version, or its `db downgrade --to "
                      f"{found.head}` (docs/upgrade.md)"}[found.state]
    print(f"{_where(url)}: schema at {found.current or 'none (empty database)'}; this proxy's newest is "
          f"{found.head} ({state})")
    return 0 if found.state == "head" else 1


def run_history(_args: argparse.Namespace) -> int:
    from alembic.script import ScriptDirectory

    from proxy.store.db import alembic_config

    scripts = ScriptDirectory.from_config(alembic_config())
    for script in reversed(list(scripts.walk_revisions())):
        doc = (script.doc or "").strip().splitlines()[0] if script.doc else ""
        print(f"{script.revision}  {doc}")
    return 0


def run_backup(args: argparse.Namespace) -> int:
    from proxy.cli.stats import sqlite_path
    from proxy.store import upkeep

    url = _url(args)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = sqlite_path(url)
    if url.startswith(("postgres", "postgresql")):
        target = args.to or f"allowlist-proxy-{stamp}.dump"
        print(upkeep.backup_command(url, target))
        print("run the line above (pg_dump of the same major version as the server, or newer); restore with "
              f"`pg_restore --clean --if-exists --no-owner --dbname=URL {target}`", file=sys.stderr)
        return 0
    if path is None:
        print(f"error: {_where(url)} is not a SQLite file or a Postgres database: nothing to copy", file=sys.stderr)
        return 2
    if _no_store(url):
        return 1
    target = Path(args.to) if args.to else upkeep.free_name(path, f".backup-{stamp}")
    if target.exists():
        print(f"error: {target} exists: name another file (a copy is never written over)", file=sys.stderr)
        return 2
    if not target.parent.is_dir():
        print(f"error: the directory {target.parent} does not exist", file=sys.stderr)
        return 2
    upkeep.backup_sqlite(path, target)
    revision, _head = _revisions(f"sqlite:///{target}")
    print(f"copied {path} to {target} ({_size(target.stat().st_size)}, schema {revision or 'none'})")
    return 0


def _size(n: float) -> str:
    for unit in ("bytes", "KB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"


def run_rebuild(args: argparse.Namespace) -> int:
    from proxy.store import rollups
    from proxy.store.db import migrate

    url = _url(args)

    async def _go(engine: AsyncEngine) -> None:
        await migrate(engine)
        async with engine.begin() as conn:  # one transaction: readers see the old rollups or the new
            await conn.run_sync(rollups.rebuild)

    _on_store(url, _go)
    print(f"rollups rebuilt in {_where(url)}")
    return 0


def run_prune(args: argparse.Namespace) -> int:
    from proxy.store.db import migrate
    from proxy.store.retention import prune_store
    from proxy.store.upkeep import Reclaimed, reclaim

    url = _url(args)

    async def _go(engine: AsyncEngine) -> tuple[dict[str, int], Reclaimed | None]:
        await migrate(engine)
        deleted = await prune_store(engine, args.before)
        if not args.vacuum:
            return deleted, None
        return deleted, await reclaim(engine, [table for table, n in deleted.items() if n])

    deleted, space = _on_store(url, _go)
    cut = datetime.fromtimestamp(args.before, UTC).replace(minute=0, second=0, microsecond=0)
    rows = ", ".join(f"{n} {table}" for table, n in deleted.items() if n) or "nothing"
    print(f"pruned before {cut.isoformat(timespec='minutes')} in {_where(url)}: {rows}")
    if space is not None:
        freed = space.before - space.after
        print(f"{space.how}: {_size(space.before)} before, {_size(space.after)} after "
              f"({_size(max(freed, 0))} given back)")
    return 0


def run_export(args: argparse.Namespace) -> int:
    from proxy.store.export import export_rows, parquet_available

    url = _url(args)
    binary = args.format == "parquet"
    if binary and not args.output:
        print("error: --format parquet writes a file: give it with -o FILE", file=sys.stderr)
        return 2
    if binary and not parquet_available():
        print("error: Parquet needs pyarrow: pip install 'allowlist-proxy[parquet]' (or use --format csv or jsonl)",
              file=sys.stderr)
        return 2
    if _no_store(url):
        return 1
    out: Any = sys.stdout
    if args.output:
        out = open(args.output, "wb") if binary else open(args.output, "w", newline="", encoding="utf-8")  # noqa: SIM115
    try:
        count = _on_store(url, lambda engine: export_rows(engine, out, table=args.table, fmt=args.format,
                                                          since=args.since, until=args.until))
    finally:
        if out is not sys.stdout:
            out.close()
    print(f"{count} {args.table} written", file=sys.stderr)
    return 0
