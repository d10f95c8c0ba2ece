"""`allowlist-proxy stats`: the per-model table, blocked turns and upstream errors, the reasons table and the loops,
from the store.

Read-only: it never creates or migrates a store, so pointing it at the wrong URL says so instead of
printing an empty table from a fresh file.
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from proxy.cli.command import add_command
from proxy.cli.store_options import add_db, add_loop_min_attempts, add_window
from proxy.config import Settings, normalize_db_url

__all__ = ["read_store", "register", "run", "sqlite_path"]


def register(subparsers: Any) -> None:
    parser = add_command(
        subparsers, "stats", help="per-model error rates, reason codes and retry loops from the store",
        description=__doc__, examples=[
            "allowlist-proxy stats", "allowlist-proxy stats --since 24h --markdown --throughput",
            "allowlist-proxy stats --json --db postgresql://allowlist:secret@db-host/allowlist",
        ],
    )
    out = parser.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the /stats/models JSON object")
    out.add_argument("--markdown", action="store_true", help="print Markdown tables")
    add_window(parser)
    add_db(parser)
    parser.add_argument("--model", help="only this model")
    parser.add_argument("--policy", help="only calls judged by this policy (its name)")
    parser.add_argument("--route", help="only this route, e.g. chat")
    parser.add_argument("--throughput", action="store_true",
                        help="also print the live throughput tables per concurrency (10-second windows)")
    parser.add_argument("--compare", metavar="A,B",
                        help="compare two models' error rates: difference, 95 %% interval, p-values, a sentence")
    add_loop_min_attempts(parser)
    parser.set_defaults(func=run)


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite URL (None for other databases and in-memory SQLite)."""
    url = normalize_db_url(url)
    if not url.startswith("sqlite"):
        return None
    path = url.split("///", 1)[1] if "///" in url else ""
    path = path.split("?", 1)[0]
    return Path(path) if path and path != ":memory:" else None


def read_store(url: str, query: Callable[[Any], Awaitable[Any]]) -> tuple[Any, int]:
    """Runs `query(engine)` on an existing store, read-only: (its result, 0), or (None, 1) with the
    reason printed when the store is missing (a SQLite file is never created here) or unreadable."""
    from sqlalchemy.exc import SQLAlchemyError

    from proxy.store.db import SchemaState, create_engine, schema_state

    path = sqlite_path(url)
    if path is not None and not path.is_file():
        print(f"error: no store at {path} (start the proxy or run `allowlist-proxy db upgrade`)", file=sys.stderr)
        return None, 1

    async def run_query() -> Any:
        engine = create_engine(url)
        try:
            found = await schema_state(engine)
            return found if found.state != "head" else await query(engine)
        finally:
            await engine.dispose()

    try:
        result = asyncio.run(run_query())
        if isinstance(result, SchemaState):
            where = url.split("@")[-1]
            if result.state == "ahead":
                print(f"error: the store at {where} has schema revision {result.current}, newer than this proxy "
                      f"knows ({result.head}): a newer version migrated it; read it with that version "
                      "(docs/upgrade.md)", file=sys.stderr)
            else:
                print(f"error: the store at {where} has schema revision {result.current or 'none'}, this "
                      f"proxy reads {result.head}: run `allowlist-proxy db upgrade` with the same --db (or start the "
                      "proxy once) first", file=sys.stderr)
            return None, 1
        return result, 0
    except SQLAlchemyError as exc:
        print(f"error: cannot read the store at {url.split('@')[-1]}: {exc}", file=sys.stderr)
        return None, 1


def run(args: argparse.Namespace) -> int:
    from proxy.stats.models import loops_table, model_stats, parse_time, reasons_table, seed_table, turns_table

    url = args.db or Settings().store.url
    try:
        since, until = parse_time(args.since), parse_time(args.until)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    if args.compare is not None:
        return _compare(args, url, since, until)
    stats, code = read_store(url, lambda engine: model_stats(
        engine, since=since, until=until, model=args.model, policy=args.policy, route=args.route,
        loop_min_attempts=args.loop_min_attempts))
    if code:
        return code
    if args.json:
        print(json.dumps(stats, indent=2))
        return 0
    md = bool(args.markdown)
    if not stats["models"] and args.model is not None and (code := _unknown(url, [args.model])):
        return code
    if not stats["models"]:
        print("no tool calls or requests in the store for this window")
        return 0
    print(seed_table(stats, markdown=md))
    print()
    if any(m["reasons"] for m in stats["models"]):
        print(reasons_table(stats, markdown=md))
        print()
    print(loops_table(stats, markdown=md))
    print()
    print(turns_table(stats, markdown=md))
    if args.throughput:
        from proxy.throughput.live import render_live_tables

        print()
        print(render_live_tables({m["model"]: m["throughput"] for m in stats["models"]}, markdown=md), end="")
    return 0


def _unknown(url: str, models: list[str]) -> int:
    """0 when every model named on the command line is in the store; 2 when one never was, said on stderr with
    the nearest name and the models that are there (1: the store cannot be read, said by `read_store`)."""
    from proxy.stats.models import model_stats

    known, code = read_store(url, lambda engine: model_stats(engine))
    if code:
        return code
    names = [m["model"] for m in known["models"]]
    missing = [name for name in models if name not in names]
    if not missing:
        return 0
    close = difflib.get_close_matches(missing[0], names, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    print(f"error: no model {missing[0]!r} in the store{hint} (models: {', '.join(names) or 'none yet'})",
          file=sys.stderr)
    return 2


def _compare(args: argparse.Namespace, url: str, since: float | None, until: float | None) -> int:
    from proxy.stats.compare import compare_models, comparison_table, parse_pair

    try:
        pair = parse_pair(args.compare)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if code := _unknown(url, list(pair)):
        return code
    result, code = read_store(url, lambda engine: compare_models(
        engine, pair, since=since, until=until, policy=args.policy, route=args.route))
    if code:
        return code
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(comparison_table(result, markdown=bool(args.markdown)))
    print()
    print(result["sentence"])
    return 0
