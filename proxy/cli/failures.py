"""Start-up and configuration errors said in one or two lines: the setting, what is wrong, what to do.

`explain(exc)` returns None for an error it does not know, which then keeps its traceback.
"""

from __future__ import annotations

import errno
import socket

from pydantic import ValidationError
from pydantic_settings import SettingsError
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError, SQLAlchemyError

from proxy.config import FLAT, ConfigError
from proxy.policy.errors import PolicyError
from proxy.store.db import StoreError

__all__ = ["explain"]


def _flag(setting: str) -> str:
    return f"--{setting.replace('_', '-')} / ALLOWLIST_PROXY_{setting.upper()}"


def _flat_name(loc: tuple[int | str, ...]) -> str:
    """A validation error's place as the setting's flat name (`("store", "batch_size")` is `store_batch_size`),
    with any place inside the value after it (`upstreams.0.url`)."""
    parts = [str(part) for part in loc]
    if len(parts) >= 2:
        flat = next((name for name, (group, field) in FLAT.items() if (group, field) == (parts[0], parts[1])), None)
        if flat is not None:
            return ".".join([flat, *parts[2:]])
    return ".".join(parts) or "settings"


def _validation(exc: ValidationError) -> str:
    lines = []
    for error in exc.errors()[:2]:
        setting = _flat_name(error["loc"])
        message = error["msg"].removeprefix("Value error, ")
        given = error.get("input")
        got = f" (got {given!r})" if isinstance(given, str | int | float) and repr(given) not in message else ""
        lines.append(f"setting {setting}: {message}{got}. Set it with {_flag(setting.split('.')[0])}.")
    return "\n".join(lines)


def _database(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).splitlines()[0]
    if isinstance(exc, NoSuchModuleError | ArgumentError):
        return (f"setting db: not a database URL this proxy can open ({text}). "
                "Use sqlite:///FILE.db or postgresql://USER:PASSWORD@HOST/DBNAME.")
    if "unable to open database file" in text:
        return ("setting db: SQLite cannot open the file (does its directory exist, may this user write there?). "
                "Create the directory or give another sqlite:///PATH.")
    return (f"setting db: cannot use the store: {text}. Is the database server running and are "
            "the user, password and database name right?")


def explain(exc: BaseException) -> str | None:
    """A short message for an error an operator can fix, or None."""
    if isinstance(exc, ConfigError):
        return f"setting {exc.setting}: {exc.message}"
    if isinstance(exc, ValidationError):
        return _validation(exc)
    if isinstance(exc, SettingsError):
        return f"{exc}: check the value of that ALLOWLIST_PROXY_ variable (a JSON value is expected)."
    if isinstance(exc, PolicyError):
        return (f"setting policy: the policy file is refused: {exc}\n"
                "Fix the file (allowlist-proxy check --policy FILE 'uv run scripts/x.py' tries it) or point "
                "--policy at another.")
    if isinstance(exc, StoreError):
        return f"setting db: {exc}"
    if isinstance(exc, DBAPIError | NoSuchModuleError | ArgumentError | SQLAlchemyError):
        return _database(exc)
    if isinstance(exc, socket.gaierror):
        return f"setting host: cannot resolve the address ({exc.strerror}). Use an IP address or a known name."
    if isinstance(exc, OSError) and exc.errno in (errno.ECONNREFUSED, errno.ETIMEDOUT, errno.EHOSTUNREACH):
        return _database(exc)
    return None
