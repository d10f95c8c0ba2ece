"""`allowlist-proxy completion bash|zsh`: a shell completion script made from the command's own parser, so it
always knows every subcommand and option. Load it with `eval "$(allowlist-proxy completion bash)"` (add the
line to ~/.bashrc), or for zsh `eval "$(allowlist-proxy completion zsh)"` (~/.zshrc)."""

from __future__ import annotations

import argparse
import shlex
from typing import Any

from proxy.cli.command import add_command

__all__ = ["register", "script"]


def register(subparsers: Any) -> None:
    parser = add_command(subparsers, "completion", help="print a shell completion script (bash or zsh)",
                         description=__doc__,
                         examples=['eval "$(allowlist-proxy completion bash)"     in ~/.bashrc',
                                   'eval "$(allowlist-proxy completion zsh)"      in ~/.zshrc'])
    parser.add_argument("shell", choices=("bash", "zsh"), help="the shell to complete in")
    parser.set_defaults(func=run)


def _words(parser: argparse.ArgumentParser) -> tuple[dict[str, list[str]], list[str]]:
    """Per subcommand (and `db ACTION`) the words that may follow it; the top level's words."""
    table: dict[str, list[str]] = {}
    top: list[str] = ["--help", "--version"]
    for action in parser._actions:  # argparse exposes subcommands only this way
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                top.append(name)
                words = [o for a in sub._actions for o in a.option_strings]
                for inner in sub._actions:
                    if isinstance(inner, argparse._SubParsersAction):
                        for child, child_parser in inner.choices.items():
                            words.append(child)
                            table[f"{name} {child}"] = [o for a in child_parser._actions for o in a.option_strings]
                    elif inner.choices and not inner.option_strings:
                        words.extend(str(c) for c in inner.choices)
                table[name] = words
    return table, top


def script(shell: str) -> str:
    from proxy.cli import build_parser

    table, top = _words(build_parser())
    cases = "".join(f"    {shlex.quote(key)}) words={shlex.quote(' '.join(words))} ;;\n"
                    for key, words in sorted(table.items()))
    body = f"""_allowlist_proxy_words() {{
  case "$1" in
{cases}  esac
}}
_allowlist_proxy() {{
  local cur="${{COMP_WORDS[COMP_CWORD]}}" words=""
  if [ "$COMP_CWORD" -le 1 ]; then
    words={shlex.quote(' '.join(top))}
  else
    [ "$COMP_CWORD" -ge 3 ] && _allowlist_proxy_words "${{COMP_WORDS[1]}} ${{COMP_WORDS[2]}}"
    [ -z "$words" ] && _allowlist_proxy_words "${{COMP_WORDS[1]}}"
  fi
  COMPREPLY=( $(compgen -W "$words" -- "$cur") )
}}
complete -o default -F _allowlist_proxy allowlist-proxy
"""
    if shell == "zsh":
        return "autoload -U +X bashcompinit && bashcompinit\n" + body
    return body


def run(args: argparse.Namespace) -> int:
    print(script(args.shell), end="")
    return 0
