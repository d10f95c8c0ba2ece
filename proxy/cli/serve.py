"""`allowlist-proxy serve`: each setting is a flag, an environment variable, a key of the config file, or its
default. Everything that can be wrong with the settings is found before the server starts, and said in a line."""

from __future__ import annotations

import argparse
import asyncio
import errno
import socket
import types
import typing
from pathlib import Path
from typing import Any, Literal

from proxy.cli.command import HelpFormatter
from proxy.config import FLAT, GROUPS, LOG_FORMATS, LOG_LEVELS, ConfigError, Settings, flat_settings

__all__ = ["bind", "register", "settings_from"]

EXAMPLES = """examples:
  allowlist-proxy serve
  allowlist-proxy serve --upstream http://gpu-box:8000/v1 --port 9000
  allowlist-proxy serve --config allowlist-proxy.yaml        (several upstreams, routed by model)
  ALLOWLIST_PROXY_POLICY=policies/observe.yaml allowlist-proxy serve --log-format console
"""


# Settings kept as plain strings (their validators accept any case) whose values are still a fixed list.
_CHOICES = {"log_level": tuple(LOG_LEVELS), "log_format": tuple(LOG_FORMATS)}


def register(sub: Any) -> None:
    parser = sub.add_parser("serve", help="run the proxy", description="Run the proxy in front of an upstream.",
                            epilog=EXAMPLES, formatter_class=HelpFormatter)
    config = Settings.model_fields["config"]
    parser.add_argument("--config", dest="config", default=None, metavar="CONFIG",
                        help=f"{config.description} [env ALLOWLIST_PROXY_CONFIG; default unset]")
    sections = {group: parser.add_argument_group(f"{group} settings", (model.__doc__ or "").strip())
                for group, model in GROUPS.items()}
    for name, group, _, info in flat_settings():
        default = info.get_default(call_default_factory=True)
        shown = "unset" if default in (None, [], {}) else _shown(default)
        flag = f"--{name.replace('_', '-')}"
        text = f"{info.description} [env ALLOWLIST_PROXY_{name.upper()}; default {shown}]"
        kind = _plain(info.annotation)
        choices = _CHOICES.get(name) or (typing.get_args(kind) if typing.get_origin(kind) is Literal else None)
        section = sections[group]
        if choices:  # listed in the usage; the settings check the value, so a wrong one is the usual one line
            section.add_argument(flag, dest=name, default=None, metavar="{" + ",".join(map(str, choices)) + "}",
                                 help=text)
        elif kind is bool:  # a switch: --flag / --no-flag
            section.add_argument(flag, dest=name, default=None, action=argparse.BooleanOptionalAction, help=text)
        else:
            section.add_argument(flag, dest=name, default=None, metavar=name.upper(), help=text)
    sections["store"].add_argument(
        "--no-migrate", dest="migrate_on_start", action="store_const", const=False, default=None,
        help="the same as --no-migrate-on-start: serve a store another proxy or `db upgrade` migrates (replicas); "
             "a store behind is refused")
    parser.set_defaults(func=run)


def _plain(annotation: Any) -> Any:
    """`X | None` as X; anything else as it is."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
        return args[0]
    return annotation


def _shown(value: Any) -> str:
    return ",".join(value) if isinstance(value, list) else str(value)


def settings_from(args: argparse.Namespace) -> Settings:
    names = ("config", *FLAT)
    overrides = {name: getattr(args, name) for name in names if getattr(args, name, None) is not None}
    settings = Settings.of(**overrides)
    check_exposure(settings)
    return settings


def check_exposure(settings: Settings) -> None:
    """Off loopback, anyone who reaches the port could read every session's commands: an admin token is required."""
    if settings.http.admin_token or _loopback(settings.http.host):
        return
    host = settings.http.host
    raise ConfigError("admin_token", f"listening on {host} (not a loopback address) needs an admin token: "
                                     "set ALLOWLIST_PROXY_ADMIN_TOKEN (or --admin-token), or listen on 127.0.0.1.")


def _loopback(host: str) -> bool:
    import ipaddress

    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name that may resolve anywhere


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound before the app starts so that a busy port is one clear line and port 0
    has its real number for the banner."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise ConfigError("port", f"{host}:{port} is already in use (another proxy, or `demo`?). "
                                      "Stop it, or pick another port with --port (0 picks a free one).") from None
        if isinstance(exc, socket.gaierror) or exc.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
            raise ConfigError("host", f"cannot listen on {host!r} ({exc.strerror}). Use 127.0.0.1, 0.0.0.0 "
                                      "or an address of this machine.") from None
        raise ConfigError("port", f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(2048)
    return sock


async def preflight(settings: Settings) -> None:
    """Load the policy and open and migrate the store once, so that their errors come before the server."""
    from sqlalchemy.engine import make_url

    from proxy.policy import default_policy_path
    from proxy.policy.file.loader import load_policy_file
    from proxy.stats.traces import TracesUnavailable, check_available
    from proxy.store.db import create_engine, prepare_schema
    from proxy.store.migrate_apart import migrate_apart

    path = settings.policy.file or default_policy_path()
    if not Path(path).is_file():
        raise ConfigError("policy", f"{path} does not exist. Give a policy file with --policy "
                                    "(policies/strict.yaml in the repository, or leave it unset for the packaged one).")
    load_policy_file(path)
    try:
        check_available(settings.telemetry.otel_endpoint)
    except TracesUnavailable as exc:
        raise ConfigError("otel_endpoint", str(exc)) from None
    if settings.store.url.startswith("sqlite"):
        file = make_url(settings.store.url).database
        parent = Path(file).parent if file and file != ":memory:" else None
        if parent is not None and not parent.is_dir():
            raise ConfigError("db", f"the directory {parent} of the SQLite file does not exist. "
                                    "Create it, or give another sqlite:///PATH.")
    engine = create_engine(settings.store.url)
    try:
        try:
            await asyncio.wait_for(_reach(engine), timeout=30)
        except TimeoutError:
            raise ConfigError("db", "the database did not answer in 30 s. Is it running and reachable?") from None
        # Not under the 30 s: a large store's first migration (and its copy) may take minutes, logged as it goes.
        if settings.store.migrate_on_start:
            # In a child where there is anything to migrate: the serving process never loads alembic.
            await migrate_apart(settings.store.url, engine, log_level=settings.telemetry.log_level,
                                log_format=settings.telemetry.log_format)
        else:
            await prepare_schema(engine, migrate_on_start=False)
    finally:
        await engine.dispose()


async def _reach(engine: Any) -> None:
    async with engine.connect():
        pass


def run(args: argparse.Namespace) -> int:
    from proxy.http.worker import serve_on
    from proxy.logs import configure_logging
    from proxy.logs import hold as hold_logs
    from proxy.logs import release as release_logs

    settings = settings_from(args)
    # What the checks before the server log (a migration, say) is said under the banner, as the app's start is.
    configure_logging(settings.telemetry.log_level, settings.telemetry.log_format)
    hold_logs()
    try:
        asyncio.run(preflight(settings))
        sock = bind(settings.http.host, settings.http.port)
    except BaseException:
        release_logs()
        raise
    if (count := settings.http.worker_count()) > 1:
        from proxy.http.supervisor import Supervisor

        release_logs()  # the parent prints no banner (worker 0 does): what it found is said at once
        try:
            return Supervisor(settings, sock, count).run()
        finally:
            sock.close()
    return serve_on(sock, settings)
