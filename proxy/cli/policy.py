"""`allowlist-proxy policy status`: what the running proxy serves, and whether the policy files say the same;
`allowlist-proxy policy schema`: the JSON Schema of policy files, for editors.

It asks the running proxy (`GET /policies`, with the admin token): only the serving process knows which version
of each file it took, which edit it holds because it widens the policy (applied only by SIGHUP) and which file
it refused. Exit codes: 0 every policy file is what serves; 1 an edit is held or a file refused (the files
on disk are not what serves); 2 the proxy cannot be asked (not running there, or the token is wrong).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from proxy.cli.command import HelpFormatter, add_command

__all__ = ["register"]

EXAMPLES = [
    "allowlist-proxy policy status                          the proxy at the configured host and port",
    "allowlist-proxy policy status --url http://10.0.0.5:8080 --json",
    "ALLOWLIST_PROXY_ADMIN_TOKEN=... allowlist-proxy policy status",
]


def register(sub: Any) -> None:
    parser = sub.add_parser("policy", help="what the running proxy's policy is (held edits, refused files)",
                            description=__doc__, formatter_class=HelpFormatter)
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    status = add_command(actions, "status", help="the served policy, held widening edits and refused files",
                         description=__doc__, examples=EXAMPLES)
    status.add_argument("--url", default=None,
                        help="the proxy's base URL (default: http://HOST:PORT from the settings, 127.0.0.1:8080)")
    status.add_argument("--admin-token", default=None,
                        help="the proxy's admin token [env ALLOWLIST_PROXY_ADMIN_TOKEN]")
    status.add_argument("--json", action="store_true", help="print the answer as one JSON object")
    status.set_defaults(func=run_status)
    schema = add_command(actions, "schema", help="the JSON Schema of policy files, for editors",
                         description="Print the JSON Schema of policy files (docs/policy.schema.json), or with "
                                     "--check FILE exit 1 when FILE is not what this version generates.",
                         examples=["allowlist-proxy policy schema > docs/policy.schema.json",
                                   "allowlist-proxy policy schema --check docs/policy.schema.json"])
    schema.add_argument("--check", metavar="FILE", default=None, help="exit 1 when FILE differs from the schema")
    schema.set_defaults(func=run_schema)


def run_schema(args: argparse.Namespace) -> int:
    from proxy.policy.file.json_schema import main

    return main(["--check", args.check] if args.check else [])


def _target(args: argparse.Namespace) -> tuple[str, str | None]:
    """The URL and token: the flags, else the settings `serve` would read (environment, config file)."""
    token = args.admin_token or os.environ.get("ALLOWLIST_PROXY_ADMIN_TOKEN")
    if args.url:
        return args.url.rstrip("/"), token
    from proxy.config import Settings

    settings = Settings()
    host = settings.http.host
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    elif ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{settings.http.port}", token or settings.http.admin_token


def run_status(args: argparse.Namespace) -> int:
    import httpx

    url, token = _target(args)
    headers = {"authorization": f"Bearer {token}"} if token else {}
    try:
        response = httpx.get(f"{url}/policies", headers=headers, timeout=10)
    except httpx.HTTPError as exc:
        print(f"allowlist-proxy policy status: cannot reach the proxy at {url} ({type(exc).__name__}: {exc}). "
              "Is it running? Give its address with --url.", file=sys.stderr)
        return 2
    if response.status_code in (401, 403):
        print(f"allowlist-proxy policy status: the proxy at {url} wants its admin token: set "
              "ALLOWLIST_PROXY_ADMIN_TOKEN or give --admin-token.", file=sys.stderr)
        return 2
    try:
        response.raise_for_status()
        status = response.json()
        active, held, errors = status["active"], status.get("held", []), status.get("errors", [])
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
        print(f"allowlist-proxy policy status: {url}/policies did not answer as an allowlist-proxy does "
              f"({response.status_code}: {exc})", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"proxy": url, "active": active, "held": held, "errors": errors}, indent=2))
    else:
        print(render(url, active, held, errors))
    return 1 if held or errors else 0


def render(url: str, active: dict[str, Any], held: list[dict[str, Any]], errors: list[dict[str, Any]]) -> str:
    lines = [f"proxy     {url}",
             f"serving   {active['name']} ({active['mode']}) from {active.get('path') or 'the package'}, "
             f"hash {str(active.get('hash', ''))[:12]}"]
    for entry in held:
        lines.append(f"held      {entry['file']}: an edit that widens the policy, held since {entry.get('at', '?')}")
        lines.append("          it allows what the served version rejects:")
        lines += [f"            - {item}" for item in entry.get("widens") or [entry.get("reason", "")]]
        lines.append(f"          apply it: {entry.get('apply', 'kill -HUP <pid of the proxy>')}   (or revert the file)")
    for error in errors:
        where = ":".join(str(x) for x in (error.get("file"), error.get("line")) if x is not None)
        key = f"{error['key']}: " if error.get("key") else ""
        lines.append(f"refused   {where}: {key}{error.get('message')} (the last good version serves)")
    if not held and not errors:
        lines.append("every policy file is what serves: nothing held, nothing refused")
    return "\n".join(lines)
