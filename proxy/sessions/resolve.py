"""Which session a request belongs to.

In order: the first of the session headers present (by default those the clients send out of the box:
OpenCode's `x-session-id`, Claude Code's `x-claude-code-session-id`, Codex's `session-id`), else lineage:
a request continues a session only when its messages extend a conversation that includes a reply the
proxy delivered in that session. Two conversations that merely begin alike (the same system prompt and
first question, as every run of a scripted agent does) are two sessions.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from proxy.logs import get_logger
from proxy.store import tables
from proxy.store.recorder import queue_lineage
from proxy.store.writer import StoreWriter

__all__ = ["DEFAULT_SESSION_HEADERS", "SessionRef", "SessionResolver", "conversation_digests"]

DEFAULT_SESSION_HEADERS = ("x-session-id", "x-claude-code-session-id", "session-id")

log = get_logger("proxy.sessions.resolve")

# How many of a conversation's latest prefixes are looked up in the shared store: the turn a
# request continues is one of its last few messages.
_SHARED_LOOKBACK = 64

@dataclass(frozen=True, slots=True)
class SessionRef:
    id: str
    source: str  # header | lineage
    is_new: bool


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content.strip()
    if isinstance(content, list):
        parts = [str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in content]
        return "".join(parts).strip()
    return json.dumps(content, sort_keys=True)


def _arguments(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except (ValueError, RecursionError):
            return raw.strip()
    return raw


def _canonical(message: Mapping[str, Any]) -> bytes:
    # Clients resend earlier turns with small differences (content null vs "", reasoning dropped,
    # arguments re-serialized), so only what identifies the turn is hashed.
    # Histories are the client's: any field may have any shape, and none may break the digest.
    raw_calls = message.get("tool_calls")
    calls = []
    for call in raw_calls if isinstance(raw_calls, list) else []:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            calls.append([function.get("name"), _arguments(function.get("arguments"))])
    try:
        key = [message.get("role"), _text(message.get("content")), calls, message.get("tool_call_id")]
        return json.dumps(key, sort_keys=True, ensure_ascii=False, default=str).encode()
    except (RecursionError, TypeError, ValueError):  # nested past what json walks: identified by its role only
        return json.dumps([str(message.get("role")), "unreadable"]).encode()


# Instructions are not part of the conversation a session is: clients rewrite them between turns (a date, a
# plan mode) and their subagents fork the conversation under instructions of their own (Qwen Code's
# memory extraction sends the whole conversation, with the reply the proxy delivered, under another
# system prompt after every turn).
_INSTRUCTION_ROLES = frozenset({"system", "developer"})


def conversation_digests(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    """digests[k] identifies the first k+1 turns, instructions (system, developer) skipped."""
    digests: list[str] = []
    running = hashlib.sha256()
    for message in messages:
        if not isinstance(message, Mapping) or message.get("role") in _INSTRUCTION_ROLES:
            continue
        running.update(hashlib.sha256(_canonical(message)).digest())
        digests.append(running.copy().hexdigest()[:32])
    return digests


class SessionResolver:
    """Resolves sessions from headers, else from lineage kept in memory and, when given a store, in the
    database too, so that replicas sharing one database continue each other's sessions."""

    def __init__(self, headers: str | Sequence[str] | None = None, *, max_entries: int = 200_000,
                 engine: AsyncEngine | None = None, writer: StoreWriter | None = None) -> None:
        if headers is None:
            headers = DEFAULT_SESSION_HEADERS
        elif isinstance(headers, str):  # one extra header, after the defaults (the setting's older form)
            headers = (*DEFAULT_SESSION_HEADERS, headers)
        self._headers = tuple(dict.fromkeys(h.lower() for h in headers if h))
        self._lineage: OrderedDict[str, str] = OrderedDict()
        self._max_entries = max_entries
        self._engine = engine
        self._writer = writer

    def _from_headers(self, headers: Mapping[str, str]) -> SessionRef | None:
        for name in self._headers:
            value = headers.get(name)
            if value:
                return SessionRef(value[:128], "header", False)
        return None

    def _local(self, digests: list[str]) -> str | None:
        for digest in reversed(digests):
            found = self._lineage.get(digest)
            if found is not None:
                self._lineage.move_to_end(digest)
                return found
        return None

    def resolve(self, headers: Mapping[str, str], messages: Sequence[Mapping[str, Any]] | None) -> SessionRef:
        """From headers and this process's memory only."""
        if (ref := self._from_headers(headers)) is not None:
            return ref
        found = self._local(conversation_digests(messages or []))
        if found is not None:
            return SessionRef(found, "lineage", False)
        return SessionRef("lin_" + uuid.uuid4().hex, "lineage", True)

    async def aresolve(self, headers: Mapping[str, str],
                       messages: Sequence[Mapping[str, Any]] | None) -> SessionRef:
        """Like resolve, then the shared store: another replica may have served the earlier turns."""
        if (ref := self._from_headers(headers)) is not None:
            return ref
        digests = conversation_digests(messages or [])
        found = self._local(digests)
        if found is None and self._engine is not None and digests:
            found = await self._shared(digests[-_SHARED_LOOKBACK:])
        if found is not None:
            return SessionRef(found, "lineage", False)
        return SessionRef("lin_" + uuid.uuid4().hex, "lineage", True)

    async def _shared(self, digests: list[str]) -> str | None:
        assert self._engine is not None
        query = select(tables.session_lineage.c.digest, tables.session_lineage.c.session_id).where(
            tables.session_lineage.c.digest.in_(digests))
        try:
            async with self._engine.connect() as conn:
                rows = {digest: session for digest, session in (await conn.execute(query))}
        except SQLAlchemyError as exc:
            log.warning("sessions.lineage_lookup_failed", error=str(exc))
            return None
        for digest in reversed(digests):
            if digest in rows:
                self._lineage[digest] = rows[digest]
                return rows[digest]
        return None

    def remember(self, session: SessionRef, messages: Sequence[Mapping[str, Any]],
                 reply: Mapping[str, Any] | None = None) -> None:
        """Record the conversation the client now holds, so its next request continues this session.

        Only the conversation that ends with the reply the proxy delivered is recorded: a later request
        continues the session only by extending it. The request's own messages are not, so a second
        conversation that starts with the same messages is a session of its own.
        Not for a session a header named: that client names its sessions itself, and hashing a 60k-token
        conversation costs most of a millisecond per request.
        """
        if session.source != "lineage" or not reply:
            return
        session_id = session.id
        if not isinstance(reply, Mapping):
            return
        digests = conversation_digests([*messages, reply])[-1:]
        for digest in digests:
            self._lineage[digest] = session_id
            self._lineage.move_to_end(digest)
        if self._writer is not None:
            queue_lineage(self._writer, session_id, digests)
        while len(self._lineage) > self._max_entries:
            self._lineage.popitem(last=False)
