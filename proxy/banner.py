"""What the proxy says when it starts: where it listens, what it talks to, and what looks wrong.

One dict (`startup_report`) feeds both the JSON log line `proxy.started` and the few lines a person reads
on stderr (`render`); the warnings come from the settings alone (`config_warnings`) and from asking each
upstream for its models and asking the upstream probe (proxy/upstream/probe.py) whether each answers.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from proxy import __version__
from proxy.config import Settings, flat_settings
from proxy.services import Services

__all__ = ["changed_settings", "config_warnings", "is_loopback", "render", "startup_report"]


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def upstream_warnings(url: str) -> list[str]:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return [f"upstream {url!r} has no http:// or https:// scheme: write http://{url.split('://')[-1]}"]
    if not parts.path.rstrip("/").endswith("/v1"):
        return [f"upstream {url} does not end in /v1: vLLM serves the OpenAI API under /v1 "
                f"(write {url.rstrip('/')}/v1 unless this upstream really lives elsewhere)"]
    return []


def config_warnings(settings: Settings) -> list[str]:
    warnings = [w for u in settings.upstream.routes() for w in upstream_warnings(u.url)]
    if not is_loopback(settings.http.host) and not settings.http.admin_token:
        warnings.append(f"listening on {settings.http.host} beyond this machine without admin_token: anyone who "
                        "reaches the port reads /stats, /policies and /metrics (set ALLOWLIST_PROXY_ADMIN_TOKEN)")
    return warnings


def _display_host(host: str) -> str:
    if host in ("0.0.0.0", "::", ""):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host


async def startup_report(state: Services, *, host: str, port: int) -> dict[str, Any]:
    settings = state.settings
    base = f"http://{_display_host(host)}:{port}"
    served, probed = await asyncio.gather(state.models.served({}), state.probe.check())
    upstreams = [{"url": upstream.base_url, "reachable": result.up, "models": names}
                 for (upstream, names), result in zip(served, probed, strict=True)]
    warnings = config_warnings(settings)
    warnings += [f"upstream {u['url']} is unreachable: requests will fail with 502 until it answers"
                 for u in upstreams if not u["reachable"]]
    policy = state.policies.current()
    policy_errors = state.policies.status()["errors"]
    return {
        "version": __version__,
        "listen": f"{base}/v1",
        "dashboard": f"{base}/dashboard",
        "upstreams": upstreams,
        "policy": {"name": policy.name, "mode": policy.mode, "file": _shown_path(policy.path)},
        "policy_errors": policy_errors,
        "store": _safe_db_url(settings.store.url),
        "settings": changed_settings(settings),
        "pid": os.getpid(),
        "workers": state.role.count if state.role is not None else 1,
        "parent": state.role.leader if state.role is not None else None,
        "warnings": warnings,
    }


_SECRET = ("token", "api_key", "upstreams")


def changed_settings(settings: Settings) -> dict[str, dict[str, str]]:
    """The settings away from their defaults, by group and flat name; secrets shown as `***`."""
    changed: dict[str, dict[str, str]] = {}
    for flat, group, name, info in flat_settings():
        value = getattr(getattr(settings, group), name)
        if value == info.get_default(call_default_factory=True):
            continue
        if flat in ("upstream", "db", "policy"):
            continue  # on lines of their own
        shown = "***" if any(word in flat for word in _SECRET) and value else str(value)
        changed.setdefault(group, {})[flat] = shown
    return changed


def _shown_path(path: Path | None) -> str | None:
    """Relative to the working directory when it is under it, as the operator would write it."""
    if path is None:
        return None
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _safe_db_url(url: str) -> str:
    """The store URL without its password."""
    scheme, sep, rest = url.partition("://")
    if sep and "@" in rest:
        credentials, _, host = rest.rpartition("@")
        user = credentials.split(":", 1)[0]
        return f"{scheme}://{user}:***@{host}" if ":" in credentials else url
    return url


def render(report: dict[str, Any]) -> str:
    lines = [f"allowlist-proxy {report['version']}",
             f"  listening   {report['listen']}   (point agents here: baseURL {report['listen']})",
             f"  dashboard   {report['dashboard']}"]
    for upstream in report["upstreams"]:
        state = "reachable" if upstream["reachable"] else "UNREACHABLE"
        models = ", ".join(upstream["models"]) if upstream["models"] else "models unknown"
        lines.append(f"  upstream    {upstream['url']}  {state}; {models}")
    policy = report["policy"]
    lines.append(f"  policy      {policy['name']} ({policy['mode']}) from {policy['file'] or 'the package'}")
    lines.append(f"  store       {report['store']}")
    groups = report.get("settings") or {}
    if groups:  # what the operator set, grouped as `serve --help` groups it
        lines.append("  settings    " + "; ".join(
            f"{group}: " + ", ".join(f"{k}={v}" for k, v in values.items()) for group, values in groups.items()))
    if report.get("workers", 1) > 1:
        lines.append(f"  workers     {report['workers']} processes on one port (parent pid {report['parent']}: "
                     "SIGHUP applies a held policy edit in all, SIGTERM stops all)")
    if report.get("xml_rules"):  # how XML calls in content are read, where the proxy knows the upstream's vLLM
        lines.append(f"  xml rules   {report['xml_rules']}")
    lines += [f"  warning: {w}" for w in report["warnings"]]
    return "\n".join(lines)
