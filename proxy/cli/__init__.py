"""The `allowlist-proxy` command: one module per subcommand, each exposing `register(subparsers)`.

A subcommand module adds its parser with `set_defaults(func=...)`; `func(args)` returns the exit code.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# Order is the order of `--help`.
SUBCOMMANDS = ("serve", "check", "extract", "stats", "report", "recheck", "db", "import-vllm-log", "demo")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="allowlist-proxy",
        description="OpenAI-compatible proxy that enforces an allowlist on coding agents' tool calls.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        importlib.import_module(f"proxy.cli.{name.replace('-', '_')}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return int(args.func(args) or 0)
