"""Which vLLM the upstream runs, so that raw XML in content is read as that vLLM would read it.

`vllm_version: auto` (the default) reads `GET /version` (vLLM answers `{"version": "0.23.0"}` at
the server root, beside `/v1`) at start, and again after the upstream was lost and found again:
a restarted upstream may be a newer vLLM. A pinned `vllm_version` (`0.19`, `0.23.1`, ...) is used
as it stands. Until a version is known (an upstream that is down at start, or is not vLLM) the
default family (0.19, the proxy's rules before families) is used, and the log says so once; a
version newer than every family read is read as the newest, and the log says so once.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import httpx

from proxy.logs import get_logger
from proxy.toolcalls.families import DEFAULT_FAMILY, FAMILIES, XmlRules, family_of

__all__ = ["UpstreamVllm", "version_url"]

log = get_logger("proxy.upstream.vllm_version")


def version_url(base_url: str) -> str:
    """`GET /version` lives at the server root: `http://h:8000/v1` -> `http://h:8000/version`."""
    base = base_url.rstrip("/")
    return (base[: -len("/v1")] if base.endswith("/v1") else base) + "/version"


class UpstreamVllm:
    """The upstream's vLLM version and the XML rules that follow from it (and the tool parser)."""

    def __init__(self, *, vllm_version: str, tool_parser: str, upstream: Any) -> None:
        self.setting = vllm_version
        self.parser = tool_parser
        self._upstream = upstream  # proxy.upstream.client.Upstream: its `client`, `base_url`, `failures`
        self.version: str | None = None
        self.source = "pinned" if vllm_version != "auto" else "default"
        self._noted: set[str] = set()
        self.notes: list[str] = []  # what the log said about the version, once each
        self._failures_seen = 0
        self._refresh: asyncio.Task[None] | None = None
        if vllm_version != "auto":
            self._use(vllm_version)
        else:
            self.rules = FAMILIES[DEFAULT_FAMILY][tool_parser]

    @property
    def auto(self) -> bool:
        return self.setting == "auto"

    def current(self) -> XmlRules:
        """The rules for this request. After the upstream failed (it may come back as another
        version), `/version` is read again in the background; this request keeps the rules it has."""
        if self.auto:
            failures = getattr(self._upstream, "failures", 0)
            if failures != self._failures_seen and (self._refresh is None or self._refresh.done()):
                self._failures_seen = failures
                with contextlib.suppress(RuntimeError):  # no running loop: nothing to schedule on
                    self._refresh = asyncio.get_running_loop().create_task(self.detect())
        return self.rules

    async def detect(self) -> None:
        """Reads `GET /version` once; keeps the rules it has when the upstream does not answer."""
        if not self.auto:
            return
        url = version_url(self._upstream.base_url)
        try:
            # Bounded as a whole: start-up waits for this, and an upstream that is down must not hold it.
            response = await asyncio.wait_for(self._upstream.client.get(url, timeout=5.0), timeout=5.0)
            version = response.json().get("version") if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError, TimeoutError):
            version = None
        if not isinstance(version, str) or not version:
            if "unknown" not in self._noted:
                self._noted.add("unknown")
                self.notes.append(f"{url} gave no vLLM version: reading XML as {self.rules.label}")
                log.warning("vllm_version.unknown", url=url, using=self.rules.label,
                            hint="set vllm_version to the upstream's vLLM version")
            return
        if version != self.version:
            self.source = "detected"
            self._use(version)
            log.info("vllm_version.detected", version=version, rules=self.rules.label)

    def _use(self, version: str) -> None:
        family, note = family_of(version)
        self.version = version
        self.rules = FAMILIES[family][self.parser]
        if note and version not in self._noted:
            self._noted.add(version)
            self.notes.append(note)
            log.warning("vllm_version.newer", version=version, note=note)

    def describe(self) -> dict[str, Any]:
        return {"setting": self.setting, "version": self.version, "source": self.source,
                "family": self.rules.family, "tool_parser": self.parser, "notes": list(self.notes)}
