"""`allowlist-proxy keys`: project keys, each binding a client to its project root (and a tool profile and a
policy) through the one channel every client has and no model can write, its API key.

A request that presents a key (`Authorization: Bearer KEY`, or `x-api-key: KEY`) is judged under the key's
root, profile and policy, whatever its text states; its sessions are its key's alone; the key never goes
upstream. `create` prints the key once (the store keeps only its hash); `list` shows every key but never one;
`revoke` refuses a key from then on, in every proxy sharing the store within `key_cache_seconds` (5 s).
`allowlist-proxy run CLIENT` makes a key for the current directory and starts the client with it."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from proxy.cli.command import add_command
from proxy.cli.store_options import add_db
from proxy.config import Settings

__all__ = ["CLIENT_NAMES", "check_root", "make_key", "register"]

# The clients `allowlist-proxy run` starts, beside the tool profiles' names (`--client` takes either).
CLIENT_NAMES = ("opencode", "claude-code", "codex", "qwen-code", "continue", "kilo", "aider", "cline")


def register(subparsers: Any) -> None:
    parser = add_command(subparsers, "keys", help="make, list and revoke project keys", description=__doc__,
                         examples=["allowlist-proxy keys create --root $PWD --client opencode --label my-app",
                                   "allowlist-proxy keys list", "allowlist-proxy keys revoke my-app"])
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    create = actions.add_parser("create", help="make a key bound to a project root; prints it once")
    create.add_argument("--root", required=True, metavar="DIR",
                        help="the project's directory: absolute, existing, never a system or home directory")
    create.add_argument("--client", metavar="NAME", help="the client's tool profile (opencode, claude-code, ...); "
                                                         "default: chosen from each request's tools")
    create.add_argument("--policy", metavar="FILE", help="a policy file the proxy serves (its directory); its "
                                                         "requests are judged by it; default: the served policy")
    create.add_argument("--label", metavar="TEXT", help="a name to list and revoke the key by")
    create.add_argument("--json", action="store_true", help="print the key and its row as one JSON object")
    add_db(create)
    create.set_defaults(func=run_create)
    listing = actions.add_parser("list", help="every key's label, root, client, policy and dates (never the key)")
    listing.add_argument("--json", action="store_true", help="one JSON object per key, a line each")
    listing.add_argument("--active", action="store_true", help="leave the revoked keys out")
    add_db(listing)
    listing.set_defaults(func=run_list)
    revoke = actions.add_parser("revoke", help="refuse a key from now on (by the key, its id or its label)")
    revoke.add_argument("key", metavar="KEY_OR_LABEL", help="the key itself, its id (k...), or its label (every "
                                                              "unrevoked key with it)")
    add_db(revoke)
    revoke.set_defaults(func=run_revoke)


def check_root(given: str) -> str:
    """The project root a key may bind: `given` absolute and existing, its links resolved, and neither it nor where
    it leads a place `root_problem` refuses. Raises ValueError with the reason."""
    from proxy.policy.roots import normal_root, root_problem

    if not given.startswith("/"):
        raise ValueError(f"--root must be an absolute path (got {given!r}; from the project's directory: "
                         "--root \"$PWD\")")
    if (problem := root_problem(given)) is not None:
        raise ValueError(f"--root {problem}")
    path = Path(given)
    if not path.is_dir():
        raise ValueError(f"--root {given} is not an existing directory")
    real = normal_root(os.path.realpath(path))
    if real is None or (problem := root_problem(real)) is not None:
        raise ValueError(f"--root {given} leads to {real}: {problem}")
    return real


def _policy_name(file: str, settings: Settings) -> str:
    from proxy.policy import default_policy_path, load_policy_file

    path = Path(file)
    loaded = load_policy_file(path)
    served = Path(settings.policy.file or default_policy_path()).absolute().parent
    if path.absolute().parent != served:
        print(f"note: the proxy serves the policies in {served}; a key's policy is found there by its name "
              f"({loaded.name!r}): copy {file} there", file=sys.stderr)
    return loaded.name


def _check_client(name: str, settings: Settings) -> str:
    from proxy.policy.tools.profiles import builtin_profiles

    known = {*CLIENT_NAMES, *builtin_profiles()}
    if name not in known:
        raise ValueError(f"--client {name!r} is no client or tool profile this proxy knows; known: "
                         f"{', '.join(sorted(known))}")
    return name


def make_key(url: str, *, root: str, client: str | None = None, policy: str | None = None,
             label: str | None = None) -> tuple[str, Any]:
    """A new key in the store at `url` (migrated first): (the key, its row). `root` already checked."""
    from proxy.keys.store import create_key
    from proxy.store.db import create_engine, migrate

    async def _go() -> tuple[str, Any]:
        engine = create_engine(url)
        try:
            await migrate(engine)
            async with engine.begin() as conn:
                return await create_key(conn, root=root, client=client, policy=policy, label=label)
        finally:
            await engine.dispose()

    return asyncio.run(_go())


def _settings(args: argparse.Namespace) -> Settings:
    return Settings.of(**({"db": args.db} if args.db else {}))


def run_create(args: argparse.Namespace) -> int:
    settings = _settings(args)
    try:
        root = check_root(args.root)
        client = _check_client(args.client, settings) if args.client else None
    except ValueError as exc:
        print(f"allowlist-proxy keys create: {exc}", file=sys.stderr)
        return 2
    policy = _policy_name(args.policy, settings) if args.policy else None
    key, made = make_key(settings.store.url, root=root, client=client, policy=policy, label=args.label)
    if args.json:
        print(json.dumps({"key": key, **_row(made)}))
    else:
        print(key)
    bound = ", ".join(f"{what} {value}" for what, value in (("client", client), ("policy", policy)) if value)
    print(f"key {made.id}{f' ({made.label})' if made.label else ''} binds {root}{', ' + bound if bound else ''}. "
          "It is shown only now: give it to the client as its API key.", file=sys.stderr)
    return 0


def _read(url: str, active_only: bool) -> list[Any]:
    from proxy.keys.store import list_keys
    from proxy.store.db import create_engine, migrate

    async def _go() -> list[Any]:
        engine = create_engine(url)
        try:
            await migrate(engine)
            async with engine.connect() as conn:
                return await list_keys(conn, revoked=not active_only)
        finally:
            await engine.dispose()

    return asyncio.run(_go())


def _row(key: Any) -> dict[str, Any]:
    return {"id": key.id, "prefix": key.prefix, "label": key.label, "root": key.root, "client": key.client,
            "policy": key.policy, "created_at": key.created_at, "last_used_at": key.last_used_at,
            "revoked_at": key.revoked_at}


def _when(at: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(at)) if at is not None else "-"


def run_list(args: argparse.Namespace) -> int:
    keys = _read(_settings(args).store.url, args.active)
    if args.json:
        for key in keys:
            print(json.dumps(_row(key)))
        return 0
    if not keys:
        print("no project keys (allowlist-proxy keys create --root DIR makes one)", file=sys.stderr)
        return 0
    header = ("ID", "KEY", "LABEL", "ROOT", "CLIENT", "POLICY", "CREATED", "LAST USED", "REVOKED")
    rows = [(k.id, k.prefix + "…", k.label or "-", k.root, k.client or "-", k.policy or "-", _when(k.created_at),
             _when(k.last_used_at), _when(k.revoked_at)) for k in keys]
    widths = [max(len(str(r[i])) for r in (header, *rows)) for i in range(len(header))]
    for row in (header, *rows):
        print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    return 0


def run_revoke(args: argparse.Namespace) -> int:
    from proxy.keys.store import revoke_keys
    from proxy.store.db import create_engine, migrate

    async def _go() -> list[Any]:
        engine = create_engine(_settings(args).store.url)
        try:
            await migrate(engine)
            async with engine.begin() as conn:
                return await revoke_keys(conn, args.key)
        finally:
            await engine.dispose()

    revoked = asyncio.run(_go())
    if not revoked:
        print("allowlist-proxy keys revoke: no unrevoked key is that key, id or label (allowlist-proxy keys list)",
              file=sys.stderr)
        return 1
    for key in revoked:
        print(f"revoked {key.id}{f' ({key.label})' if key.label else ''} for {key.root}")
    print("Running proxies refuse it within key_cache_seconds (default 5 s).", file=sys.stderr)
    return 0
