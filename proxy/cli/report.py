"""`allowlist-proxy report`: every table of the statistics in one command, from the store.

Rule compliance with 95 % intervals (over calls and over sessions) and a comparison sentence for each pair
of models, reason codes, retry loops and recovery, feedback variants when an experiment ran, and throughput
per concurrency from the proxy's live windows - or from vLLM server logs with `--vllm-log FILE`.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from proxy.cli.command import add_command
from proxy.cli.store_options import add_db, add_loop_min_attempts, add_window
from proxy.config import Settings

__all__ = ["register", "run"]


def register(subparsers: Any) -> None:
    parser = add_command(
        subparsers, "report", help="the compliance, reasons, loops and throughput tables in one report",
        description=__doc__,
        examples=["allowlist-proxy report                                  the whole store, as text",
                  "allowlist-proxy report --since 24h --markdown > report.md",
                  "allowlist-proxy report --vllm-log vllm.log --json       throughput from a vLLM server log"],
    )
    out = parser.add_mutually_exclusive_group()
    out.add_argument("--markdown", action="store_true", help="print Markdown")
    out.add_argument("--json", action="store_true", help="print the figures behind the report as JSON")
    add_window(parser)
    add_db(parser)
    parser.add_argument("--vllm-log", metavar="FILE", action="append",
                        help="throughput from these vLLM server logs instead of the live windows (repeatable)")
    add_loop_min_attempts(parser)
    parser.set_defaults(func=run)


def _vllm_tables(files: list[str], markdown: bool) -> str:
    from proxy.throughput import LogImport, render_markdown, render_text

    importer = LogImport()
    for name in files:
        importer.feed_file(name)
    tables = importer.result().tables
    return render_markdown(tables) if markdown else render_text(tables)


def run(args: argparse.Namespace) -> int:
    from proxy.cli.stats import read_store
    from proxy.stats.models import parse_time
    from proxy.stats.report import build_report, render_report

    try:
        since, until = parse_time(args.since), parse_time(args.until)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    vllm = None
    if args.vllm_log:
        try:
            vllm = _vllm_tables(args.vllm_log, bool(args.markdown))
        except OSError as exc:
            print(f"error: cannot read a vLLM log: {exc}", file=sys.stderr)
            return 2
    report, code = read_store(args.db or Settings().store.url, lambda engine: build_report(
        engine, since=since, until=until, loop_min_attempts=args.loop_min_attempts))
    if code:
        return code
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    sys.stdout.write(render_report(report, markdown=bool(args.markdown), vllm_tables=vllm))
    return 0
