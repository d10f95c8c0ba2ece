"""What a `previous_response_id` the proxy handed out must mean to the upstream.

A server that stores responses (vLLM with VLLM_ENABLE_RESPONSES_API_STORE=1) continues a conversation from what
it holds under the id the client names. Two of the proxy's answers give the client an id under which the server
holds something else than what the client got:
- a streamed turn that was retried: the client was given the first attempt's id in `response.created`, before
  any call was judged, while the turn it got is the server's response to the last attempt;
- a blocked turn: the client got the proxy's explanation, while the server holds the refused calls, unanswered.

So the proxy remembers, per id it handed out, the server's id to continue from and the items the client got that
the server does not hold (each refused call answered with the explanation, and the explanation as the assistant's
message), and a request that names the client's id goes up naming the server's, those items before its input.

Kept in the store (table `response_chains`), so that the next request continues it in whichever process answers
(`serve --workers N`, replicas): where other processes share the store, the row is committed before the answer
that hands the id out ends (`Exchange.continuation_durable`), and a client names an id only once it has the
whole answer. Each process keeps the ids it wrote or read in a bounded cache, the ids it found missing (an id is
named only after its answer ended, so one missing then stays missing), and the ids it handed out as the upstream
made them (nothing to change: naming one asks no store). Without a store (tests), the cache is all there is.
"""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from proxy.logs import get_logger
from proxy.store import tables
from proxy.store.writer import StoreWriter

__all__ = ["Continuation", "ResponseChains"]

log = get_logger("proxy.sessions.response_chains")

_MAX_ID = 128


@dataclass(frozen=True, slots=True)
class Continuation:
    upstream_id: str  # the server's response to continue from
    items: tuple[dict[str, Any], ...] = field(default=())  # what the client got that the server does not hold


class ResponseChains:
    """Client response id -> Continuation: in the store, and the latest `limit` of them in this process."""

    def __init__(self, limit: int = 20_000, *, engine: AsyncEngine | None = None,
                 writer: StoreWriter | None = None, shared: bool = True) -> None:
        self.limit = limit
        self._engine = engine
        self._writer = writer
        # Other processes answer from this store (workers, replicas): an answer's end waits for its row's commit.
        # Alone, the row is kept for a restart and nothing waits for it.
        self._shared = shared
        self._chains: OrderedDict[str, Continuation | None] = OrderedDict()  # None: asked, not in the store
        self._plain: OrderedDict[str, None] = OrderedDict()  # ids this process handed out as the upstream made them

    def remember(self, client_id: str | None, upstream_id: str | None, items: list[dict[str, Any]]) -> bool:
        """Keep what `client_id` continues from; True where a row was queued for the store (the answer's end waits
        for its commit)."""
        if not client_id or not upstream_id or len(client_id) > _MAX_ID or len(upstream_id) > _MAX_ID:
            return False  # not an id the upstream makes; nobody continues from it
        if client_id == upstream_id and not items:
            self._plain[client_id] = None  # nothing to change: naming it asks no store
            while len(self._plain) > self.limit:
                self._plain.popitem(last=False)
            return False
        continuation = Continuation(upstream_id, tuple(items))
        self._keep(client_id, continuation)
        if self._writer is None:
            return False
        self._writer.put(tables.response_chains, {"client_id": client_id, "upstream_id": upstream_id,
                                                  "items": json.dumps(items, ensure_ascii=False),
                                                  "created_at": time.time()})
        return self._shared

    def get(self, client_id: Any) -> Continuation | None:
        """From this process's cache only."""
        return self._chains.get(client_id) if isinstance(client_id, str) else None

    async def find(self, client_id: Any) -> Continuation | None:
        """From the cache, else from the store."""
        if not isinstance(client_id, str) or not client_id or len(client_id) > _MAX_ID:
            return None
        if client_id in self._chains:
            self._chains.move_to_end(client_id)
            return self._chains[client_id]
        if self._engine is None or client_id in self._plain:
            return None
        chains = tables.response_chains
        try:
            async with self._engine.connect() as conn:
                row = (await conn.execute(select(chains.c.upstream_id, chains.c["items"])
                                          .where(chains.c.client_id == client_id))).first()
        except SQLAlchemyError as exc:
            log.warning("sessions.response_chain_lookup_failed", error=str(exc)[:300])
            return None  # not kept as missing: asked again next time
        found = None
        if row is not None:
            try:
                items = json.loads(row[1])
            except ValueError:
                items = []
            found = Continuation(row[0], tuple(i for i in items if isinstance(i, dict)))
        self._keep(client_id, found)
        return found

    def _keep(self, client_id: str, continuation: Continuation | None) -> None:
        self._chains[client_id] = continuation
        self._chains.move_to_end(client_id)
        while len(self._chains) > self.limit:
            self._chains.popitem(last=False)

    def __len__(self) -> int:
        return sum(1 for value in self._chains.values() if value is not None)
