"""An optional webhook for the events the Prometheus alerting rules name (docker/prometheus/alerts.yaml), for
operators without an Alertmanager: every `check_seconds` the proxy reads its own metrics and POSTs one JSON
object per event, at most one per event and subject (model, upstream, file) per `interval_seconds`.

Events: `model_loop_rate_high`, `blocked_turns_high` (per model, over the requests since the last check,
at least `_MIN_REQUESTS` of them), `upstream_down`, `policy_reload_refused`, `policy_held` (a widening
edit held until SIGHUP: what it widens and the command), `store_degraded`,
`release_wait_high` (more than 1% of judged calls waited over 250 ms). The body carries `text` too, so a
Slack or Mattermost incoming webhook shows it as it is, and `status`: `firing`, or `resolved` once, at the first
check where an event that was posted no longer holds (as Alertmanager resolves an alert whose rule stopped
matching: a rate condition with no traffic since the last check no longer holds).
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import httpx

from proxy import __version__
from proxy.logs import get_logger
from proxy.policy.file.manager import held_summary
from proxy.stats.prometheus import scrape_registry
from proxy.tasks import cancel_and_wait

__all__ = ["Webhook"]

log = get_logger("proxy.stats.webhook")

LOOP_RATE = 0.05
BLOCKED_RATE = 0.02
RELEASE_WAIT_SECONDS = 0.25
RELEASE_WAIT_SHARE = 0.01
_MIN_REQUESTS = 20

Key = tuple[str, tuple[tuple[str, str], ...]]


def _snapshot() -> dict[Key, float]:
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for metric in scrape_registry().collect() for sample in metric.samples}


def _by_model(now: dict[Key, float], before: dict[Key, float], name: str) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for (sample, labels), value in now.items():
        if sample == name:
            model = dict(labels).get("model_name", "")
            out[model] += value - before.get((sample, labels), 0.0)
    return out


def _sum(now: dict[Key, float], before: dict[Key, float], name: str, **match: str) -> float:
    return sum(value - before.get((sample, labels), 0.0) for (sample, labels), value in now.items()
               if sample == name and all(dict(labels).get(k) == v for k, v in match.items()))


def events(now: dict[Key, float], before: dict[Key, float]) -> Iterator[tuple[str, str, str]]:
    """(event, subject, what happened) for every condition that holds between two snapshots."""
    for (sample, labels), value in now.items():
        label = dict(labels)
        if sample == "allowlist_proxy_upstream_up" and value == 0:
            yield "upstream_down", label.get("upstream", ""), "the upstream does not answer: requests get 502"
        elif sample == "allowlist_proxy_policy_valid" and value == 0:
            yield ("policy_reload_refused", label.get("file", ""),
                   "the policy file was refused; the last good policy keeps serving (GET /policies says why)")
        elif sample == "allowlist_proxy_policy_held" and value == 1:
            yield ("policy_held", label.get("file", ""),
                   "an edit of the file widens the policy and is held; the policy before it keeps serving "
                   "(allowlist-proxy policy status says what it widens; SIGHUP to the proxy applies it)")
        elif sample == "allowlist_proxy_store_up" and value == 0:
            yield "store_degraded", "", "the store cannot record: /health is degraded"
    if (lost := _sum(now, before, "allowlist_proxy_store_rows_lost_total")) > 0:
        yield "store_degraded", "", f"{lost:.0f} rows lost since the last check"
    requests = _by_model(now, before, "allowlist_proxy_requests_total")
    for event, name, threshold in (("model_loop_rate_high", "allowlist_proxy_loops_total", LOOP_RATE),
                                   ("blocked_turns_high", "allowlist_proxy_blocked_turns_total", BLOCKED_RATE)):
        for model, count in _by_model(now, before, name).items():
            total = requests.get(model, 0.0)
            if total >= _MIN_REQUESTS and count / total > threshold:
                yield event, model, f"{count:.0f} of {total:.0f} requests ({count / total:.0%}) since the last check"
    waits = _sum(now, before, "allowlist_proxy_release_wait_seconds_bucket", le="+Inf")
    fast = _sum(now, before, "allowlist_proxy_release_wait_seconds_bucket", le=str(RELEASE_WAIT_SECONDS))
    if waits >= _MIN_REQUESTS and (waits - fast) / waits > RELEASE_WAIT_SHARE:
        yield ("release_wait_high", "",
               f"{waits - fast:.0f} of {waits:.0f} judged calls waited over {RELEASE_WAIT_SECONDS * 1000:.0f} ms")


class Webhook:
    def __init__(self, url: str, *, interval_seconds: float, check_seconds: float = 15.0,
                 held: Callable[[], list[dict[str, Any]]] | None = None) -> None:
        self.url = url
        # The held policy edits (`PolicyManager.held`): a `policy_held` post says what each widens.
        self._held = held
        self.interval_seconds = interval_seconds
        self.check_seconds = check_seconds
        self._last_sent: dict[tuple[str, str], float] = {}
        self._firing: dict[tuple[str, str], str] = {}  # posted as firing and not yet resolved -> since when
        self._before = _snapshot()
        self._task: asyncio.Task[None] | None = None
        self._client = httpx.AsyncClient(timeout=10.0)

    async def check_once(self) -> list[dict[str, Any]]:
        """Post the events that hold now and were not posted within the interval, and `resolved` for those posted
        that no longer hold; returns what was sent."""
        now = _snapshot()
        sent = []
        holding = set()
        for event, subject, detail in events(now, self._before):
            key = (event, subject)
            holding.add(key)
            at = time.monotonic()
            if at - self._last_sent.get(key, -self.interval_seconds) < self.interval_seconds:
                continue
            self._last_sent[key] = at
            if event == "policy_held" and self._held is not None:
                detail = next((held_summary(e) for e in self._held() if e["file"] == subject), detail)
            body = self._body(event, subject, "firing", detail)
            if await self._post(body):
                self._firing.setdefault(key, body["at"])
                sent.append(body)
        for key in [k for k in self._firing if k not in holding]:
            event, subject = key
            body = self._body(event, subject, "resolved", f"no longer holds (firing since {self._firing[key]})")
            if await self._post(body):  # else tried again at the next check
                del self._firing[key]
                sent.append(body)
        self._before = now
        return sent

    @staticmethod
    def _body(event: str, subject: str, status: str, detail: str) -> dict[str, Any]:
        said = f"{event}{f' ({subject})' if subject else ''}"
        return {"event": event, "subject": subject, "status": status, "detail": detail, "proxy": __version__,
                "at": datetime.now(UTC).isoformat(timespec="seconds"),
                "text": f"allowlist-proxy: {'resolved: ' if status == 'resolved' else ''}{said}: {detail}"}

    async def _post(self, body: dict[str, Any]) -> bool:
        try:
            answer = await self._client.post(self.url, json=body)
            answer.raise_for_status()
        except httpx.HTTPError as exc:
            log.warning("alert.webhook_failed", url=self.url, alert=body["event"], status=body["status"],
                        error=str(exc))
            return False
        return True

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.check_seconds)
            await self.check_once()

    async def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="alert-webhook")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        await self._client.aclose()
