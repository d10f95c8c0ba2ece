"""`allowlist-proxy serve`: each setting is a flag, an environment variable, or its default."""

from __future__ import annotations

import argparse
from typing import Any

from proxy.config import Settings

__all__ = ["register"]

# The settings offered as flags; every one of them is also ALLOWLIST_PROXY_<NAME>.
FLAGS = ("host", "port", "upstream", "db", "policy", "log_level", "session_header", "project_root_header")


def register(sub: Any) -> None:
    parser = sub.add_parser("serve", help="run the proxy", description="Run the proxy in front of an upstream.")
    for name in FLAGS:
        info = Settings.model_fields[name]
        parser.add_argument(f"--{name.replace('_', '-')}", dest=name, default=None,
                            help=f"{info.description} [env ALLOWLIST_PROXY_{name.upper()}; "
                                 f"default {_shown(info.get_default(call_default_factory=True))}]")
    parser.set_defaults(func=run)


def _shown(value: Any) -> str:
    return ",".join(value) if isinstance(value, list) else str(value)


def settings_from(args: argparse.Namespace) -> Settings:
    overrides = {name: getattr(args, name) for name in FLAGS if getattr(args, name, None) is not None}
    return Settings(**overrides)


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from proxy.app import create_app
    from proxy.connections import raise_open_file_limit, server_options

    settings = settings_from(args)
    app = create_app(settings)
    raise_open_file_limit(settings.max_connections)
    uvicorn.run(app, host=settings.host, port=settings.port, log_level="warning", access_log=False,
                timeout_graceful_shutdown=30, **server_options(settings))
    return 0
