"""The upstreams' served model names: cached briefly, aliases applied, unknown names refused early, and each
request routed to the upstream that serves its model.

vLLM serves a model only under its `--served-model-name`; a client that asks for the Hugging Face
name gets a bare 404 from vLLM. Refusing here lists the names that would work.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass

from proxy import telemetry
from proxy.errors import ModelNotFound, ProxyError
from proxy.logs import get_logger
from proxy.upstream.client import Upstream, Upstreams, without_credentials

__all__ = ["ModelCatalog", "ModelsAnswer"]

log = get_logger("proxy.upstream.model_catalog")


@dataclass(kw_only=True, slots=True)
class ModelsAnswer:
    status: int
    body: bytes
    content_type: str
    names: list[str] | None
    fetched_at: float


_MAX_KEYS = 1024


class ModelCatalog:
    def __init__(self, upstream: Upstream | Upstreams, *, ttl: float, aliases: Mapping[str, str]) -> None:
        self._router = upstream if isinstance(upstream, Upstreams) else None
        self._members: list[Upstream] = list(upstream.all) if isinstance(upstream, Upstreams) else [upstream]
        self._listed: list[list[str] | None] = (
            [c.models if isinstance(c.models, list) else None for c in upstream.configs]
            if isinstance(upstream, Upstreams) else [None])
        self._ttl = ttl
        self.aliases = dict(aliases)
        for listed in self._listed:
            telemetry.emit(telemetry.ModelsServed(tuple(listed or ())))
        self._cache: dict[tuple[int, str], ModelsAnswer] = {}
        self._pending: dict[tuple[int, str], asyncio.Future[ModelsAnswer]] = {}

    @staticmethod
    def _key(headers: Mapping[str, str]) -> str:
        # Different keys may see different models; the key itself is never kept.
        auth = headers.get("authorization", "")
        return hashlib.sha256(auth.encode()).hexdigest()[:16]

    async def fetch(self, headers: Mapping[str, str]) -> ModelsAnswer:
        """The /v1/models answer: the upstream's own with one upstream, the union of all with several."""
        if len(self._members) == 1:
            return await self._fetch_one(0, headers)
        results = await asyncio.gather(*(self._fetch_one(i, headers) for i in range(len(self._members))),
                                       return_exceptions=True)
        answers = [r for r in results if isinstance(r, ModelsAnswer)]
        good = [a for a in answers if a.status == 200]
        if not good:
            if answers:
                return answers[0]
            error = next(r for r in results if isinstance(r, BaseException))
            raise error
        entries: list[object] = []
        seen: set[str] = set()
        for answer in good:
            for entry in json.loads(answer.body).get("data", []):
                if isinstance(entry, dict) and entry.get("id") not in seen:
                    seen.add(str(entry.get("id")))
                    entries.append(entry)
        body = json.dumps({"object": "list", "data": entries}).encode()
        return ModelsAnswer(status=200, body=body, content_type="application/json", names=sorted(seen),
                            fetched_at=min(a.fetched_at for a in good))

    async def _fetch_one(self, index: int, headers: Mapping[str, str]) -> ModelsAnswer:
        key = (index, self._key(headers))
        cached = self._cache.get(key)
        if cached is not None and time.monotonic() - cached.fetched_at < self._ttl:
            return cached
        # One upstream request per key at a time: when the answer expires under load, every request
        # in flight would otherwise ask for /models at once.
        pending = self._pending.get(key)
        if pending is None:
            pending = self._pending[key] = asyncio.ensure_future(self._fetch(key, index, headers))
            pending.add_done_callback(lambda task: self._fetched(key, task))
        # Shielded: a client that goes away does not cancel the answer the others wait for.
        return await asyncio.shield(pending)

    def _fetched(self, key: tuple[int, str], task: asyncio.Future[ModelsAnswer]) -> None:
        self._pending.pop(key, None)
        if not task.cancelled():
            task.exception()  # retrieved here too, so that no waiter left means no "never retrieved" warning

    async def _fetch(self, key: tuple[int, str], index: int, headers: Mapping[str, str]) -> ModelsAnswer:
        now = time.monotonic()
        if len(self._members) > 1:
            # Asking every upstream for its models is not a request any one of them serves: none gets the
            # client's key (an upstream's own key comes from the config).
            headers = without_credentials(headers)
        response = await self._members[index].request("GET", "/models", headers=headers)
        names: list[str] | None = None
        if response.status_code == 200:
            try:
                names = [m["id"] for m in json.loads(response.content)["data"]]
                telemetry.emit(telemetry.ModelsServed(tuple(names)))
            except (ValueError, KeyError, TypeError):
                names = None
        answer = ModelsAnswer(status=response.status_code, body=response.content,
                              content_type=response.headers.get("content-type", "application/json"), names=names,
                              fetched_at=now)
        if response.status_code == 200:
            self._cache.pop(key, None)
            self._cache[key] = answer
            while len(self._cache) > _MAX_KEYS:  # one entry per Authorization seen: the oldest go first
                self._cache.pop(next(iter(self._cache)))
        return answer

    async def served(self, headers: Mapping[str, str]) -> list[tuple[Upstream, list[str] | None]]:
        """Each upstream with the names it serves: its `models` list, else its /v1/models (None when unknown)."""
        known = self._served_now(headers)
        if known is not None:
            return known

        async def names_of(index: int) -> list[str] | None:
            listed = self._listed[index]
            if listed is not None:
                return listed
            # Whether the upstream is up is the probe's to say (proxy/upstream/probe.py), not the traffic's.
            try:
                answer = await self._fetch_one(index, headers)
            except ProxyError:
                return None
            return answer.names

        names = await asyncio.gather(*(names_of(i) for i in range(len(self._members))))
        return list(zip(self._members, names, strict=True))

    def _served_now(self, headers: Mapping[str, str]) -> list[tuple[Upstream, list[str] | None]] | None:
        """`served` where every upstream's names are listed or cached and fresh: at once, without a task per
        upstream. Gathering tasks costs the request a turn of the event loop, behind every stream's chunks
        ready then (most of its wait before the upstream, at six streams on a busy core)."""
        found: list[tuple[Upstream, list[str] | None]] = []
        key = None
        now = time.monotonic()
        for index, member in enumerate(self._members):
            listed = self._listed[index]
            if listed is None:
                key = key or self._key(headers)
                cached = self._cache.get((index, key))
                if cached is None or now - cached.fetched_at >= self._ttl:
                    return None
                listed = cached.names
            found.append((member, listed))
        return found

    def upstream_name(self, requested: str) -> str:
        """The name sent upstream for a requested one (its alias applied); `resolve` says whether it is served."""
        return self.aliases.get(requested, requested)

    async def resolve(self, requested: str, headers: Mapping[str, str]) -> str:
        """The name to send upstream, with the upstream that serves it chosen for this request;
        ModelNotFound when every upstream lists its models and none lists this one."""
        name = self.upstream_name(requested)
        served = await self.served(headers)
        for upstream, names in served:
            if names is not None and name in names:
                self._choose(upstream, name)
                return name
        unknown = [upstream for upstream, names in served if names is None]
        if unknown:
            self._choose(unknown[0], name)  # the request itself will report that upstream's failure
            return name
        all_names = [n for _upstream, names in served for n in names or ()]
        listed = ", ".join(all_names) or "(none)"
        hint = f" (alias of {requested!r})" if name != requested else ""
        telemetry.emit(telemetry.ModelNotFound(name))
        log.info("request.model_not_found", outcome="model_not_found", model=name, requested=requested,
                 served=all_names)
        raise ModelNotFound(
            f"The model {name!r}{hint} is not served by the upstream. Served models: {listed}. "
            "Use one of those names, or map this name with the model_aliases setting.",
            param="model",
        )

    def _choose(self, upstream: Upstream, model: str) -> None:
        if self._router is not None:
            self._router.choose(upstream, model)
