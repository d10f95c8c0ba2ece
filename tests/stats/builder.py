"""Builds store rows whose statistics are known by construction, judged by the real strict policy.

Rows are what `proxy.store.recorder` builds: one `requests` row
per client request, one `tool_calls` row per call with its verdict, one `tool_call_reasons` row per reason.
Time advances one second per call unless a call says otherwise, so the order of building is the order in
the store; sessions built interleaved are interleaved in time too.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from proxy.policy import judge_call, load_policy_file
from proxy.store.writer import insert_rows

ROOT = Path(__file__).resolve().parents[2]
STRICT = load_policy_file(ROOT / "policies" / "strict.yaml")
START = 1_800_000_000.0

ALLOWED = 'uv run scripts/search.py "rust async"'
PIPE = "uv run scripts/search.py | head -5"


@dataclass
class Store:
    """Rows waiting to be inserted, and a clock."""

    now: float = START
    rows: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: {
        "sessions": [], "requests": [], "tool_calls": [], "tool_call_reasons": []})

    def session(self, model: str, session_id: str | None = None, *, policy: str = STRICT.name,
                route: str = "chat", mode: str = "enforce") -> Session:
        sid = session_id or f"ses_{uuid.uuid4().hex[:12]}"
        self.rows["sessions"].append({"id": sid, "source": "header", "model": model, "created_at": self.now})
        return Session(self, sid, model, policy, route, mode)

    async def save(self, engine: AsyncEngine) -> None:
        async with engine.begin() as conn:
            await insert_rows(conn, self.rows)  # as the store's writer does, rollups included
        for batch in self.rows.values():
            batch.clear()


@dataclass
class Session:
    store: Store
    id: str
    model: str
    policy: str
    route: str
    mode: str

    def request(self, *, attempts: int = 1, concurrency: int = 1, completion_tokens: int | None = None,
                duration_ms: float | None = None, ttft_ms: float | None = None,
                at: float | None = None, outcome: str = "ok") -> Request:
        rid = uuid.uuid4().hex
        self.store.rows["requests"].append({
            "id": rid, "session_id": self.id, "model": self.model, "route": self.route,
            "upstream": "http://127.0.0.1:8000/v1", "stream": True,
            "started_at": self.store.now if at is None else at, "ttfb_ms": ttft_ms, "ttft_ms": ttft_ms,
            "duration_ms": duration_ms, "status": 200, "outcome": outcome, "error": None,
            "prompt_tokens": None if completion_tokens is None else 100,
            "completion_tokens": completion_tokens, "cached_tokens": None, "concurrency": concurrency,
            "attempts": attempts, "budget_exhausted": outcome == "blocked",
            "policy_name": self.policy, "policy_hash": STRICT.hash, "mode": self.mode,
        })
        return Request(self, rid)


@dataclass
class Request:
    session: Session
    id: str

    def call(self, command: str | None = None, *, tool: str = "bash", arguments: dict[str, Any] | None = None,
             raw: str | None = None, attempt: int = 1, call_index: int = 0,
             at: float | None = None) -> dict[str, Any]:
        """One call judged by the strict policy: a bash `command`, other `arguments`, or unparseable `raw`."""
        store = self.session.store
        if command is not None:
            arguments = {"command": command}
        verdict = judge_call(STRICT.policy, tool, arguments, offered_tools=None)
        created = store.now if at is None else at
        if at is None:
            store.now += 1.0
        row = {
            "id": uuid.uuid4().hex, "request_id": self.id, "session_id": self.session.id,
            "model": self.session.model, "route": self.session.route, "attempt": attempt,
            "call_index": call_index, "created_at": created, "tool_name": tool, "source": "openai",
            "arguments_raw": raw if arguments is None else json.dumps(arguments),
            "arguments_json": None if arguments is None else json.dumps(arguments, sort_keys=True),
            "command": command, "decision": verdict.decision,
            "primary_reason": verdict.reasons[0] if verdict.reasons else None,
            "reasons": ",".join(verdict.reasons), "shape": verdict.shape,
            "policy_name": self.session.policy, "policy_hash": STRICT.hash, "mode": self.session.mode,
            "delivered": verdict.allowed,
        }
        store.rows["tool_calls"].append(row)
        for position, reason in enumerate(verdict.reasons):
            store.rows["tool_call_reasons"].append({
                "tool_call_id": row["id"], "position": position, "reason": reason,
                "model": self.session.model, "created_at": created,
            })
        return row

    def calls(self, *commands: str) -> list[dict[str, Any]]:
        return [self.call(c) for c in commands]
