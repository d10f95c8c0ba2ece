"""The keys a running proxy knows: which project key a request presents, and what it binds (`KeyRing.bind`).

A key is looked up in the store by its hash and kept in this process for `key_cache_seconds` (default 5 s), the
unknown ones too; after that the next request that presents it reads the store again. So a key made by
`allowlist-proxy keys create` works at once everywhere, and a revoked one is refused by every worker and every
replica sharing the store within `key_cache_seconds` of `keys revoke`, without any of them being told. Between
reads a keyed request costs a SHA-256 of the key and a dictionary lookup.

`last_used_at` is not written per request: each process notes the time a key was last presented and writes
the keys used since its previous write once a minute (and when it stops), in one transaction off the request
path.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Mapping

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from proxy.errors import StoreUnavailable, Unauthorized
from proxy.keys.store import ProjectKey, find_key, mark_used
from proxy.keys.tokens import PREFIX, is_key, key_hash, presented
from proxy.logs import get_logger
from proxy.tasks import cancel_and_wait, every

__all__ = ["KeyRing"]

log = get_logger("proxy.keys.ring")

_KEPT = 10_000  # keys (known or not) kept in memory; the oldest go first
_HOW = ("bind the project with a key: `allowlist-proxy run CLIENT`, or `allowlist-proxy keys create --root DIR` "
        "and give the key as the client's API key")


class KeyRing:
    def __init__(self, engine: AsyncEngine, *, require: bool = False, cache_seconds: float = 5.0,
                 touch_seconds: float = 60.0) -> None:
        self._engine = engine
        self.require = require
        self._ttl = max(0.0, cache_seconds)
        self._touch_seconds = touch_seconds
        # hash -> (the key's row or None for no such key, when it was read: monotonic seconds)
        self._cache: OrderedDict[str, tuple[ProjectKey | None, float]] = OrderedDict()
        self._reading: dict[str, asyncio.Future[ProjectKey | None]] = {}  # one store read per key at a time
        self._used: dict[str, float] = {}  # key id -> when last presented (Unix seconds), not yet written
        self._task: asyncio.Task[None] | None = None

    # -- one request ------------------------------------------------------------------------------------

    async def bind(self, headers: Mapping[str, str]) -> ProjectKey | None:
        """The key the request presents (`Authorization: Bearer`, or `x-api-key` as Anthropic's clients send it),
        or None for a request that presents none, which `require_keys` refuses. A credential shaped like
        a project key that is not a known, unrevoked one is refused whatever the settings: a client that presents
        a key expects to be bound, and is never served unbound instead. Errors never quote the key."""
        offered = presented(headers)
        keys = [c for c in offered if c.startswith(PREFIX)]
        if not keys:
            if self.require:
                raise Unauthorized(f"this proxy serves only requests with a project key: {_HOW}")
            return None
        if len(set(keys)) > 1:
            raise Unauthorized("the request presents two different project keys; give one")
        key = keys[0]
        hashed = key_hash(key)
        held = self._cache.get(hashed)
        if held is not None and time.monotonic() - held[1] < self._ttl:
            found = held[0]  # the steady state: a hash and a lookup (only a well-formed key is ever kept as known)
        elif not is_key(key):  # a typo or a made-up string costs no store read
            raise Unauthorized(f"the project key presented is malformed (mistyped or cut short): {_HOW}")
        else:
            found = await self._lookup(hashed)
        if found is None:
            raise Unauthorized(f"the project key presented is not known to this proxy's store: {_HOW}")
        if found.revoked:
            raise Unauthorized(f"the project key presented ({found.label or found.id}) was revoked: {_HOW}")
        self._used[found.id] = time.time()
        return found

    async def _lookup(self, hashed: str) -> ProjectKey | None:
        held = self._cache.get(hashed)
        now = time.monotonic()
        if held is not None and now - held[1] < self._ttl:
            return held[0]
        reading = self._reading.get(hashed)
        if reading is None:  # the first of the requests that find it stale reads it; the others wait for that
            reading = self._reading[hashed] = asyncio.get_running_loop().create_future()
            try:
                found = await self._read(hashed)
            except asyncio.CancelledError:
                reading.cancel()  # its waiters read the store themselves
                raise
            except Exception as exc:
                reading.set_exception(exc)
                reading.exception()  # retrieved here: a read nobody else waited for warns of nothing
                raise
            else:
                reading.set_result(found)
            finally:
                del self._reading[hashed]
            self._keep(hashed, found)
            return found
        try:
            return await asyncio.shield(reading)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if reading.cancelled() and (task is None or not task.cancelling()):
                return await self._lookup(hashed)
            raise

    async def _read(self, hashed: str) -> ProjectKey | None:
        try:
            async with self._engine.connect() as conn:
                return await find_key(conn, hashed)
        except SQLAlchemyError as exc:  # fail closed: a key that cannot be checked binds nothing
            log.error("keys.lookup_failed", error=type(exc).__name__)
            raise StoreUnavailable("the proxy cannot check project keys now: its store does not answer") from None

    def _keep(self, hashed: str, found: ProjectKey | None) -> None:
        self._cache[hashed] = (found, time.monotonic())
        self._cache.move_to_end(hashed)
        while len(self._cache) > _KEPT:
            self._cache.popitem(last=False)

    # -- last used ------------------------------------------------------------------------------------

    async def start(self) -> None:
        self._task = asyncio.create_task(every(self._touch_seconds, self.write_used), name="keys-last-used")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)
        await self.write_used()

    async def write_used(self) -> None:
        """Writes when each key presented since the last write was last presented; kept for the next try on
        failure."""
        if not self._used:
            return
        used, self._used = self._used, {}
        try:
            async with self._engine.begin() as conn:
                await mark_used(conn, used)
        except SQLAlchemyError as exc:
            log.warning("keys.last_used_not_written", error=type(exc).__name__, keys=len(used))
            for key_id, at in used.items():
                self._used[key_id] = max(at, self._used.get(key_id, 0.0))
