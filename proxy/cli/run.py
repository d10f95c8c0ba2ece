"""`allowlist-proxy run CLIENT [-- ARGS...]`: starts an agent client bound to the current directory.

It makes a project key for this directory and client (or reuses the one it made before, kept in
$XDG_STATE_HOME/allowlist-proxy/run-keys.json, readable by you alone, while the store still knows it), then
starts the client with the proxy's URL and that key set for the client's process only: environment variables,
command-line options, or a configuration file in a private temporary directory, never your own configuration.
The proxy then judges every call under this directory as the project root, whatever the client's prompt says.
ARGS go to the client as they are. Clients: opencode, claude-code, codex, qwen-code, continue (cn), kilo, aider.

The model is the first the proxy lists (GET /v1/models with the key) unless --model names one. The client
replaces this process (exec) where nothing is left to clean up; where a configuration file was written
(Continue), the launcher waits, passes signals on, removes the file and exits with the client's code.
`--print` shows what would be set, the key masked, and starts nothing (nor makes a key)."""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from proxy.cli.command import add_command
from proxy.cli.keys import check_root, make_key
from proxy.cli.store_options import add_db
from proxy.config import Settings

__all__ = ["register", "run"]


def register(subparsers: Any) -> None:
    from proxy.keys.launch import CLIENTS

    parser = add_command(subparsers, "run", help="start an agent client bound to this directory by a project key",
                         description=__doc__, examples=[
                             "allowlist-proxy run opencode", "allowlist-proxy run claude-code -- -p 'fix the test'",
                             "allowlist-proxy run --print codex", "allowlist-proxy run qwen-code --model qwen3.5-27b",
                         ])
    parser.add_argument("client", choices=sorted(CLIENTS), metavar="CLIENT", help=", ".join(CLIENTS))
    parser.add_argument("args", nargs=argparse.REMAINDER, metavar="-- ARGS", help="passed to the client")
    parser.add_argument("--print", action="store_true", dest="show",
                        help="print what would be set (the key masked) and start nothing")
    parser.add_argument("--model", help="the model the client asks for (default: the first the proxy lists)")
    parser.add_argument("--proxy-url", metavar="URL",
                        help="where the client reaches the proxy [env ALLOWLIST_PROXY_PROXY_URL; default "
                             "http://HOST:PORT of the settings]")
    parser.add_argument("--key", help="use this project key instead of making one (a proxy whose store you cannot "
                                      "reach: `allowlist-proxy keys create` there)")
    parser.add_argument("--policy", metavar="FILE", help="the policy the key binds (keys create --policy)")
    parser.add_argument("--label", metavar="TEXT", help="the label of a key made now (default run:CLIENT:DIR)")
    parser.add_argument("--bin", metavar="PATH", help="the client's executable (default: found on PATH)")
    add_db(parser)
    parser.set_defaults(func=run)


def _state_file() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "allowlist-proxy" / "run-keys.json"


def _store_id(db: str) -> str:
    """Which store a kept key belongs to, without keeping its URL (which may hold a password)."""
    return hashlib.sha256(db.encode()).hexdigest()[:16]


def _kept(state: Path) -> list[dict[str, Any]]:
    try:
        data = json.loads(state.read_text())
    except (OSError, ValueError):
        return []
    return [entry for entry in data if isinstance(entry, dict)] if isinstance(data, list) else []


def _keep(state: Path, entries: list[dict[str, Any]]) -> None:
    state.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, temp = tempfile.mkstemp(dir=state.parent, prefix=".run-keys-")
    with os.fdopen(fd, "w") as out:  # mkstemp's file is the user's alone (0600)
        json.dump(entries, out, indent=1)
    os.replace(temp, state)


def _still_known(db: str, key: str) -> bool:
    """The store knows `key` and it is not revoked."""
    import asyncio

    from proxy.keys.store import find_key
    from proxy.keys.tokens import key_hash
    from proxy.store.db import create_engine, migrate

    async def _go() -> bool:
        engine = create_engine(db)
        try:
            await migrate(engine)
            async with engine.connect() as conn:
                found = await find_key(conn, key_hash(key))
        finally:
            await engine.dispose()
        return found is not None and not found.revoked

    return asyncio.run(_go())


def _identity(entry: dict[str, Any]) -> tuple[Any, ...]:
    return entry.get("root"), entry.get("client"), entry.get("store"), entry.get("policy")


def _binding(args: argparse.Namespace, settings: Settings, root: str) -> tuple[str | None, str]:
    """(the key, where it came from): given, kept from an earlier run, or made now (None under --print when none
    is kept)."""
    if args.key:
        return args.key, "given"
    state, store = _state_file(), _store_id(settings.store.url)
    entries = _kept(state)
    wanted = (root, args.client, store, args.policy)
    for entry in entries:
        kept = entry.get("key")
        if _identity(entry) == wanted and isinstance(kept, str) and _still_known(settings.store.url, kept):
            return kept, f"kept in {state}"
    if args.show:
        return None, "a new one would be made"
    policy = None
    if args.policy:
        from proxy.cli.keys import _policy_name

        policy = _policy_name(args.policy, settings)
    label = args.label or f"run:{args.client}:{Path(root).name}"
    key, made = make_key(settings.store.url, root=root, client=args.client, policy=policy, label=label)
    entries = [e for e in entries if _identity(e) != wanted]
    entries.append({"root": root, "client": args.client, "store": store, "policy": args.policy, "key": key,
                    "id": made.id})
    _keep(state, entries)
    return key, f"made now ({made.id}, label {label})"


def _models(url: str, key: str | None) -> list[str]:
    """The models the proxy lists for this key; empty when it cannot be asked."""
    import httpx

    try:
        answer = httpx.get(url + "/v1/models", headers={"authorization": f"Bearer {key}"} if key else {}, timeout=5)
        data = answer.json().get("data") if answer.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return []
    return [m["id"] for m in data or [] if isinstance(m, dict) and isinstance(m.get("id"), str)]


def run(args: argparse.Namespace) -> int:
    from proxy.keys.launch import CLIENTS, plan
    from proxy.keys.tokens import masked

    overrides = {k: v for k, v in (("db", args.db), ("proxy_url", args.proxy_url)) if v}
    settings = Settings.of(**overrides)
    spec = CLIENTS[args.client]
    try:
        root = check_root(os.getcwd())
    except ValueError as exc:
        print(f"allowlist-proxy run: this directory cannot be a project root: {exc}; start it from the "
              "project's directory", file=sys.stderr)
        return 2
    key, origin = _binding(args, settings, root)
    url = settings.client_url()
    models = _models(url, key)
    model = args.model or (models[0] if models else None)
    if model is None and not args.show:
        print(f"allowlist-proxy run: {url}/v1/models lists no model (is the proxy running there?): give --model",
              file=sys.stderr)
        return 2
    launch = plan(args.client, proxy_url=url, key=key or "<new key>", model=model or "MODEL", models=models)
    extra = args.args[1:] if args.args[:1] == ["--"] else list(args.args)
    if args.show:
        print(f"root: {root}\nproxy: {url}\nkey: {origin}")
        print(launch.shown())
        argv = shlex.join([spec.binary, *launch.options, *extra])
        print("argv: " + (argv.replace(key, masked(key)) if key else argv))
        return 0
    binary = args.bin or shutil.which(spec.binary)
    if binary is None:
        print(f"allowlist-proxy run: {spec.binary} is not on PATH: {spec.install} (or give --bin)", file=sys.stderr)
        return 2
    env = {k: v for k, v in os.environ.items() if k not in launch.unset}
    env.update(launch.env)
    if not launch.files:
        os.execve(binary, [binary, *launch.options, *extra], env)  # nothing to clean up: the client replaces us
    with tempfile.TemporaryDirectory(prefix="allowlist-proxy-run-") as folder:  # 0700: the user's alone
        for name, text in launch.files.items():
            descriptor = os.open(Path(folder) / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "w") as out:
                out.write(text)
        options = [o.replace("{dir}", folder) for o in launch.options]
        return _wait(subprocess.Popen([binary, *options, *extra], env=env))


_PASSED_ON = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


def _wait(child: subprocess.Popen[bytes]) -> int:
    """Waits for the client, passing on the signals sent to the launcher; the client's exit code, or 128 + the
    signal that ended it. Ctrl-C reaches the client from the terminal itself (one process group): ignored here."""
    previous = {sig: signal.signal(sig, lambda number, _frame: child.send_signal(number)) for sig in _PASSED_ON}
    previous[signal.SIGINT] = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        code = child.wait()
    finally:
        for sig, handler in previous.items():
            with contextlib.suppress(ValueError, TypeError):
                signal.signal(sig, handler)
    return 128 - code if code < 0 else code
