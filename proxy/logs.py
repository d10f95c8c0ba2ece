"""structlog set up for one JSON line per event for machines, a console line for people; secrets never reach a log line.

`log_format: auto` (the default) decides by where the log goes: a terminal gets structlog's console lines,
anything else (a file, a pipe, journald, a container's log) one JSON object a line, as vLLM and LiteLLM do.
Lines written while the start-up banner is being made are held (`hold`) and written after it (`release`), so
a person reads the banner first and its warnings under it.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import MutableMapping
from typing import Any, TextIO, cast

import structlog

__all__ = ["configure_logging", "get_logger", "hold", "on_terminal", "release", "renderer_for"]

_SECRET_KEYS = {"authorization", "api_key", "upstream_api_key", "admin_token", "x-api-key"}


def _drop_secrets(_logger: Any, _name: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    for key in list(event):
        if key.lower() in _SECRET_KEYS:
            event[key] = "[redacted]"
    return event


class _CurrentStderr:
    """Whatever `sys.stderr` is at the time of writing; or, while held, a list written out on release.

    structlog caches a logger (and so its file) on first use; a file bound at configure time would
    keep writing to a stream that was since replaced (a test's capture, a daemon's redirect).
    """

    def __init__(self) -> None:
        self.held: list[str] | None = None
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        with self._lock:
            if self.held is not None:
                self.held.append(text)
                return len(text)
        return sys.stderr.write(text)

    def flush(self) -> None:
        if self.held is None:
            sys.stderr.flush()

    def hold(self) -> None:
        with self._lock:
            if self.held is None:
                self.held = []

    def release(self) -> None:
        with self._lock:
            held, self.held = self.held, None
        if held:
            sys.stderr.write("".join(held))
            sys.stderr.flush()


_STDERR = _CurrentStderr()


def hold() -> None:
    """Keep log lines back from now on (until `release`): the start-up banner is being made."""
    _STDERR.hold()


def release() -> None:
    """Write the lines held since `hold`, in order; from now on lines go out at once."""
    _STDERR.release()


def on_terminal(stream: Any = None) -> bool:
    """Whether `stream` (default: standard error) is a terminal a person reads."""
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def renderer_for(fmt: str) -> Any:
    """`console`: plain console lines; `json`: one JSON object a line; `auto`: console lines in colour on a
    terminal (unless NO_COLOR is set), JSON anywhere else."""
    if fmt == "auto":
        if not on_terminal():
            return structlog.processors.JSONRenderer()
        return structlog.dev.ConsoleRenderer(colors=not os.environ.get("NO_COLOR"))
    if fmt == "console":
        return structlog.dev.ConsoleRenderer(colors=False)
    return structlog.processors.JSONRenderer()


def configure_logging(level: str = "info", fmt: str = "auto") -> None:
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        numeric = logging.INFO
    renderer = renderer_for(fmt)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            _drop_secrets,
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=cast(TextIO, _STDERR)),
        cache_logger_on_first_use=True,
    )


def get_logger(name: str) -> Any:
    return structlog.get_logger(name)
