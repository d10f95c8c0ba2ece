"""How a subcommand that explains itself is added: its description shown as written, its examples below."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

__all__ = ["add_command"]


def add_command(subparsers: Any, name: str, *, help: str, description: str | None,
                examples: Sequence[str] = ()) -> argparse.ArgumentParser:
    """`description` is usually the module's docstring; `examples` are whole command lines."""
    epilog = "examples:\n" + "".join(f"  {line}\n" for line in examples) if examples else None
    parser: argparse.ArgumentParser = subparsers.add_parser(
        name, help=help, description=description, epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return parser
