"""Which session a request belongs to.

In order: the `x-session-id` header (OpenCode sends `ses_...`), a configured header, else lineage:
a request continues the session whose earlier conversation its messages begin with.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["FEEDBACK_MARKER", "SessionResolver", "SessionRef", "conversation_digests"]

# Set on the proxy's own feedback turns; never part of the lineage a client can continue.
FEEDBACK_MARKER = "allowlist_proxy_feedback"


@dataclass(frozen=True, slots=True)
class SessionRef:
    id: str
    source: str  # header | custom_header | lineage | new
    is_new: bool


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content.strip()
    if isinstance(content, list):
        parts = [p.get("text", "") if isinstance(p, dict) else str(p) for p in content]
        return "".join(parts).strip()
    return json.dumps(content, sort_keys=True)


def _arguments(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return raw.strip()
    return raw


def _canonical(message: Mapping[str, Any]) -> bytes:
    # Clients resend earlier turns with small differences (content null vs "", reasoning dropped,
    # arguments re-serialized), so only what identifies the turn is hashed.
    calls = [
        [c.get("function", {}).get("name"), _arguments(c.get("function", {}).get("arguments"))]
        for c in message.get("tool_calls") or [] if isinstance(c, dict)
    ]
    key = [message.get("role"), _text(message.get("content")), calls, message.get("tool_call_id")]
    return json.dumps(key, sort_keys=True, ensure_ascii=False, default=str).encode()


def conversation_digests(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    """digests[k] identifies the first k+1 messages, feedback turns skipped."""
    digests: list[str] = []
    running = hashlib.sha256()
    for message in messages:
        if not isinstance(message, Mapping) or message.get(FEEDBACK_MARKER):
            continue
        running.update(hashlib.sha256(_canonical(message)).digest())
        digests.append(running.copy().hexdigest()[:32])
    return digests


class SessionResolver:
    def __init__(self, custom_header: str | None = None, *, max_entries: int = 200_000) -> None:
        self._custom_header = custom_header.lower() if custom_header else None
        self._lineage: OrderedDict[str, str] = OrderedDict()
        self._max_entries = max_entries

    def resolve(self, headers: Mapping[str, str], messages: Sequence[Mapping[str, Any]] | None) -> SessionRef:
        header = headers.get("x-session-id")
        if header:
            return SessionRef(header[:128], "header", False)
        if self._custom_header and (custom := headers.get(self._custom_header)):
            return SessionRef(custom[:128], "custom_header", False)
        for digest in reversed(conversation_digests(messages or [])):
            found = self._lineage.get(digest)
            if found is not None:
                self._lineage.move_to_end(digest)
                return SessionRef(found, "lineage", False)
        return SessionRef("lin_" + uuid.uuid4().hex, "lineage", True)

    def remember(self, session_id: str, messages: Sequence[Mapping[str, Any]],
                 reply: Mapping[str, Any] | None = None) -> None:
        """Record the conversation the client now holds, so its next request continues this session."""
        conversation = list(messages) + ([reply] if reply else [])
        digests = conversation_digests(conversation)
        if not digests:
            return
        for digest in digests[-2:]:
            self._lineage[digest] = session_id
            self._lineage.move_to_end(digest)
        while len(self._lineage) > self._max_entries:
            self._lineage.popitem(last=False)
