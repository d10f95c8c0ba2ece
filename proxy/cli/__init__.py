"""The `allowlist-proxy` command: one module per subcommand, each exposing `register(subparsers)`.

A subcommand module adds its parser with `set_defaults(func=...)`; `func(args)` returns the exit code.
Exit codes, one convention for every subcommand: 0 done; 1 done, and the answer is no (`check`: the call
is refused; `db current`: the store is behind; `stats`/`report`: there is no store to read); 2 the command
line or a setting is wrong, or something the operator can fix stops it (a setting, the policy file, the
store, the port, an unknown model), said in one or two lines (`--log-level debug` shows the traceback);
130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from proxy import __version__
from proxy.cli.command import HelpFormatter
from proxy.store.async_engine import light

# Order is the order of `--help`.
SUBCOMMANDS = ("serve", "run", "keys", "check", "extract", "stats", "report", "recheck", "policy", "db",
               "import-vllm-log", "demo", "completion")

EXAMPLES = """examples:
  allowlist-proxy demo                                  a first look, no GPU needed
  allowlist-proxy serve --upstream http://127.0.0.1:8000/v1
  allowlist-proxy check 'uv run scripts/search.py "rust async"'
  allowlist-proxy stats --markdown
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="allowlist-proxy",
        description="OpenAI-compatible proxy that enforces an allowlist on coding agents' tool calls.",
        epilog=EXAMPLES, formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"allowlist-proxy {__version__}")
    light()  # before any command's module: the commands use SQLAlchemy Core, never its ORM (7 MB of `serve`)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        importlib.import_module(f"proxy.cli.{name.replace('-', '_')}").register(sub)
    return parser


def _debugging(args: argparse.Namespace) -> bool:
    level = getattr(args, "log_level", None) or os.environ.get("ALLOWLIST_PROXY_LOG_LEVEL", "")
    return str(level).lower() == "debug"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # inside the try: a reader gone by now is the same quiet case
        return code
    except BrokenPipeError:
        # The reader went away (`stats | head`): nothing left to say, and nowhere to say it.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        from proxy.cli.failures import explain

        message = explain(exc)
        if message is None or _debugging(args):
            raise
        print(f"allowlist-proxy {args.command}: {message}", file=sys.stderr)
        return 2
