"""`allowlist-proxy import-vllm-log FILE...`: the seed's throughput-by-concurrency tables from vLLM logs.

Tables go to stdout (aligned text, `--markdown`, or `--json`); the line counts, warnings and a
progress line (only when stderr is a terminal) go to stderr, so stdout can be piped as it is.
Exit codes: 0 done (garbage lines are counted, never fatal), 2 usage error or unreadable file.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from proxy.cli.command import add_command
from proxy.throughput import DEFAULT_WINDOW_SECONDS, LogImport, render_markdown, render_text, tables_to_json

__all__ = ["register", "run"]

_PROG = "import-vllm-log"


def register(subparsers: Any) -> None:
    parser = add_command(
        subparsers, _PROG,
        help="rebuild throughput-by-concurrency tables from vLLM server logs",
        description=(
            "Reads vLLM server logs (plain, or docker/compose/kubectl logs output) and prints, per model, "
            "generation and prefill throughput and completed requests per minute by concurrency "
            "(the `Running: N` of each stats window), plus speculative-decoding acceptance when logged."
        ),
        examples=["allowlist-proxy import-vllm-log vllm.log",
                  "docker compose logs vllm-dense | allowlist-proxy import-vllm-log - --markdown"],
    )
    parser.add_argument("files", nargs="+", metavar="FILE", help="vLLM server log; '-' reads stdin")
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print one JSON object for machines")
    output.add_argument("--markdown", action="store_true", help="print Markdown tables")
    parser.add_argument(
        "--window-seconds",
        type=_positive_float,
        default=DEFAULT_WINDOW_SECONDS,
        metavar="S",
        help="length of one stats window, vLLM's log interval (default: %(default)s)",
    )
    parser.add_argument(
        "--model",
        action="append",
        metavar="NAME",
        help="model (column) name: once for all files, or once per FILE in order "
        "(default: the served model named in the log, else the file name)",
    )
    parser.set_defaults(func=run)


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds (got {text!r})") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds (got {text!r})")
    return value


def run(args: argparse.Namespace) -> int:
    files: list[str] = args.files
    models: list[str] | None = args.model
    for f in files:
        if f != "-" and not Path(f).is_file():
            what = "is not a file" if Path(f).exists() else "no such file"
            return _fail(f"{f}: {what}")
    if models and len(models) not in (1, len(files)):
        return _fail(f"--model given {len(models)} times for {len(files)} files: once, or once per file")

    importer = LogImport(window_seconds=args.window_seconds)
    for i, f in enumerate(files):
        model = None if not models else models[0] if len(models) == 1 else models[i]
        progress = _ProgressLine(f, sys.stderr) if sys.stderr.isatty() else None
        try:
            importer.feed_file(f, model=model, progress=progress)
        except OSError as e:
            return _fail(f"{f}: cannot read: {e.strerror or e}")
        finally:
            if progress:
                progress.clear()
    result = importer.result()
    counts = result.lines

    if args.json:
        print(json.dumps({
            "window_seconds": result.window_seconds,
            "files": files,
            "models": tables_to_json(result.tables),
            "lines": counts.as_dict(),
        }, indent=2))
    else:
        sys.stdout.write(render_markdown(result.tables) if args.markdown else render_text(result.tables))
        print(
            f"{_PROG}: {counts.total:,} lines read: {counts.stats:,} stats, {counts.completions:,} completed "
            f"requests ({counts.completions_failed:,} failed, {counts.completions_unbinned:,} after the last "
            f"window), {counts.spec_decode:,} spec-decode, {counts.ignored:,} other",
            file=sys.stderr,
        )
    if counts.malformed_stats or counts.malformed_spec_decode:
        print(
            f"{_PROG}: warning: {counts.malformed_stats:,} lines looked like vLLM stats lines and "
            f"{counts.malformed_spec_decode:,} like spec-decode lines but did not parse; they were skipped",
            file=sys.stderr,
        )
    if not counts.stats:
        print(f"{_PROG}: warning: no vLLM stats lines ('Avg prompt throughput: ...') found", file=sys.stderr)
    return 0


def _fail(message: str) -> int:
    print(f"{_PROG}: error: {message}", file=sys.stderr)
    return 2


class _ProgressLine:
    """One self-overwriting stderr line; redrawn at most every 0.2 s so it never slows the import."""

    def __init__(self, name: str, stream: TextIO) -> None:
        self._name = name
        self._stream = stream
        self._last = 0.0

    def __call__(self, done: int, total: int | None) -> None:
        now = time.monotonic()
        if now - self._last < 0.2:
            return
        self._last = now
        share = f"{100 * done / total:3.0f}% " if total else ""
        self._stream.write(f"\r{_PROG}: {self._name} {share}({done / 2**20:,.1f} MiB)")
        self._stream.flush()

    def clear(self) -> None:
        if self._last:
            self._stream.write("\r\x1b[K")
            self._stream.flush()
