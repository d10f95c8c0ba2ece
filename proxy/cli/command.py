"""How a subcommand that explains itself is added: its description shown as written, its examples below."""

from __future__ import annotations

import argparse
import re
import textwrap
from collections.abc import Sequence
from typing import Any

__all__ = ["HelpFormatter", "add_command"]


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions and epilogs wrapped to the terminal, paragraph by paragraph; an indented line (an
    example, a list item, a code line) or a line ending with `:` starts a block kept as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        out: list[str] = []
        for paragraph in re.split(r"\n\s*\n", text.strip("\n")):
            lines = paragraph.splitlines()
            if any(line.startswith((" ", "\t")) or line.rstrip().endswith(":") for line in lines):
                out.append("\n".join(indent + line for line in lines))
            else:
                out.append(textwrap.fill(" ".join(line.strip() for line in lines), width,
                                         initial_indent=indent, subsequent_indent=indent))
        return "\n\n".join(out) + "\n"


def add_command(subparsers: Any, name: str, *, help: str, description: str | None,
                examples: Sequence[str] = ()) -> argparse.ArgumentParser:
    """`description` is usually the module's docstring; `examples` are whole command lines."""
    epilog = "examples:\n" + "".join(f"  {line}\n" for line in examples) if examples else None
    parser: argparse.ArgumentParser = subparsers.add_parser(
        name, help=help, description=description, epilog=epilog,
        formatter_class=HelpFormatter,
    )
    return parser
