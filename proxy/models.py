"""The upstream's served model names: cached briefly, aliases applied, unknown names refused early.

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

from proxy.errors import ModelNotFound, ProxyError
from proxy.upstream import Upstream

__all__ = ["ModelCatalog", "ModelsAnswer"]


@dataclass(slots=True)
class ModelsAnswer:
    status: int
    body: bytes
    content_type: str
    names: list[str] | None
    fetched_at: float


_MAX_KEYS = 1024


class ModelCatalog:
    def __init__(self, upstream: Upstream, *, ttl: float, aliases: Mapping[str, str]) -> None:
        self._upstream = upstream
        self._ttl = ttl
        self.aliases = dict(aliases)
        self._cache: dict[str, ModelsAnswer] = {}
        self._pending: dict[str, asyncio.Future[ModelsAnswer]] = {}

    @staticmethod
    def _key(headers: Mapping[str, str]) -> str:
        # Different keys may see different models; the key itself is never kept.
        auth = headers.get("authorization", "")
        return hashlib.sha256(auth.encode()).hexdigest()[:16]

    async def fetch(self, headers: Mapping[str, str]) -> ModelsAnswer:
        key = self._key(headers)
        cached = self._cache.get(key)
        if cached is not None and time.monotonic() - cached.fetched_at < self._ttl:
            return cached
        # One upstream request per key at a time: when the answer expires under load, every request
        # in flight would otherwise ask for /models at once.
        pending = self._pending.get(key)
        if pending is None:
            pending = self._pending[key] = asyncio.ensure_future(self._fetch(key, headers))
            pending.add_done_callback(lambda task: self._fetched(key, task))
        # Shielded: a client that goes away does not cancel the answer the others wait for.
        return await asyncio.shield(pending)

    def _fetched(self, key: str, task: asyncio.Future[ModelsAnswer]) -> None:
        self._pending.pop(key, None)
        if not task.cancelled():
            task.exception()  # retrieved here too, so that no waiter left means no "never retrieved" warning

    async def _fetch(self, key: str, headers: Mapping[str, str]) -> ModelsAnswer:
        now = time.monotonic()
        response = await self._upstream.request("GET", "/models", headers=headers)
        names: list[str] | None = None
        if response.status_code == 200:
            try:
                names = [m["id"] for m in json.loads(response.content)["data"]]
            except (ValueError, KeyError, TypeError):
                names = None
        answer = ModelsAnswer(response.status_code, response.content,
                              response.headers.get("content-type", "application/json"), names, now)
        if response.status_code == 200:
            self._cache.pop(key, None)
            self._cache[key] = answer
            while len(self._cache) > _MAX_KEYS:  # one entry per Authorization seen: the oldest go first
                self._cache.pop(next(iter(self._cache)))
        return answer

    async def resolve(self, requested: str, headers: Mapping[str, str]) -> str:
        """The name to send upstream; ModelNotFound when the upstream lists its models and this is not one."""
        name = self.aliases.get(requested, requested)
        try:
            answer = await self.fetch(headers)
        except ProxyError:
            return name  # the chat request itself will report the upstream failure
        if answer.names is None or name in answer.names:
            return name
        served = ", ".join(answer.names) or "(none)"
        hint = f" (alias of {requested!r})" if name != requested else ""
        raise ModelNotFound(
            f"The model {name!r}{hint} is not served by the upstream. Served models: {served}. "
            "Use one of those names, or map this name with the model_aliases setting.",
            param="model",
        )
