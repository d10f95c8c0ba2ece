"""The options every command that reads the store spells the same way: the window, the database, loops."""

from __future__ import annotations

import argparse

__all__ = ["add_db", "add_loop_min_attempts", "add_window"]


def add_window(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--since", metavar="T", help="epoch seconds, ISO 8601, or a duration ago (24h, 7d)")
    parser.add_argument("--until", metavar="T", help="epoch seconds, ISO 8601, or a duration ago")


def add_db(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", metavar="URL", default=None, help="database URL [env ALLOWLIST_PROXY_DB]")


def add_loop_min_attempts(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--loop-min-attempts", type=int, default=3, metavar="N",
                        help="shortest run of same-shape rejections counted as a loop (default 3)")
