"""The one place rows are built for the store, and the release point of enforce mode.

Everything the proxy remembers of a request reaches the writer through here: its calls with their verdicts
(`queue_calls`, `release_calls`), its own row at the end (`queue_request`) and its conversation's lineage
(`queue_lineage`). Judging stays a pure function; this module only turns its results into rows.

Audit before release: `release_calls` queues the calls' rows together with a journal entry that carries the
request's row as known so far, and in enforce mode waits until the writer has committed them. A request's
final row replaces its journal entry in one transaction; a proxy that dies in between leaves the entry, and
the next start turns it into a request row (`proxy.store.journal`), so no call row is ever without its request.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from sqlalchemy import Table

from proxy import telemetry
from proxy.errors import StoreUnavailable
from proxy.logs import get_logger
from proxy.policy.judge import call_command
from proxy.record import JudgedCall, RequestRecord
from proxy.store import tables
from proxy.store.safe_text import cut
from proxy.store.writer import StoreFailure, StoreWriter

if TYPE_CHECKING:
    from proxy.policy import LoadedPolicy
    from proxy.policy.tools.profiles import ToolSet
    from proxy.toolcalls import ToolCall

__all__ = ["ARGUMENT_CHARS", "journal_row", "queue_calls", "queue_lineage", "queue_request", "release_calls",
           "request_row"]

log = get_logger("proxy.store.recorder")

# What a row keeps of one call's arguments (and of its command): a 10 MB command is evidence enough in 64 KiB.
ARGUMENT_CHARS = 65_536

Rows = list[tuple[Table, dict[str, Any]]]


def request_row(record: RequestRecord) -> dict[str, Any]:
    usage = record.usage
    return {
        "id": record.id, "session_id": record.session.id, "model": record.model, "route": record.route,
        "upstream": record.upstream, "stream": record.stream, "started_at": record.started_at,
        "ttfb_ms": record.ttfb_ms, "ttft_ms": record.ttft_ms, "duration_ms": record.duration_ms,
        "status": record.status, "outcome": record.outcome, "error": record.error,
        "prompt_tokens": usage.prompt_tokens if usage.seen else None,
        "completion_tokens": usage.completion_tokens if usage.seen else None,
        "cached_tokens": usage.cached_tokens if usage.seen else None,
        "concurrency": record.concurrency, "attempts": record.attempts,
        "budget_exhausted": record.budget_exhausted, "policy_name": record.policy_name,
        "policy_hash": record.policy_hash, "mode": record.mode, "profiles": record.profiles,
        "project_root": record.project_root, "ungoverned_text": record.ungoverned_text or None,
    }


def _session_rows(record: RequestRecord) -> Rows:
    if record.session.is_new or record.session.source != "lineage":
        return [(tables.sessions, {"id": record.session.id, "source": record.session.source,
                                   "model": record.model, "created_at": record.started_at,
                                   "project_root": record.project_root})]
    return []


def journal_row(record: RequestRecord, owner: str) -> dict[str, Any]:
    return {"id": record.id, "owner": owner, "created_at": time.time(),
            "row": json.dumps(request_row(record), ensure_ascii=False)}


def queue_request(writer: StoreWriter, record: RequestRecord) -> None:
    """The request's final row (and its session's, the first time), once; replaces its journal entry.
    `Services.finish` calls it as a request ends."""
    if record.saved:
        return
    record.saved = True
    record.settle_outcome()
    if record.duration_ms is None:
        record.duration_ms = record.elapsed_ms()
    # A request whose calls were released queued its session's row with its journal entry already.
    sessions = [] if record.journaled else _session_rows(record)
    writer.put_many([*sessions, (tables.requests, request_row(record)), *_redaction_rows(record)])


def _redaction_rows(record: RequestRecord) -> Rows:
    """What the request's redaction replaced, per tool call and rule; a row already there (an earlier request of
    the conversation carried the same result) is kept as it is."""
    return [(tables.secret_redactions, {"session_id": record.session.id, "call_id": cut(call, 256), "type": kind,
                                        "request_id": record.id, "model": record.model, "count": count,
                                        "created_at": record.started_at})
            for (call, kind), count in sorted(record.redactions.items())]


def queue_lineage(writer: StoreWriter, session_id: str, digests: Iterable[str]) -> None:
    now = time.time()
    writer.put_many([(tables.session_lineage, {"digest": d, "session_id": session_id, "created_at": now})
                     for d in digests])


def _arguments_json(text: str, arguments: dict[str, Any] | None) -> str | None:
    """The parsed arguments, only where the raw text does not already say exactly them (stored once)."""
    if arguments is None:
        return None
    if len(text) <= ARGUMENT_CHARS:
        try:
            if json.loads(text) == arguments:
                return None
        except ValueError:
            pass
    return cut(json.dumps(arguments, ensure_ascii=False, sort_keys=True), ARGUMENT_CHARS)


def _shown(command: str | None) -> str | None:
    return cut(command, ARGUMENT_CHARS) if command is not None else None


def call_rows(record: RequestRecord, policy: LoadedPolicy, attempt: int, judged: list[JudgedCall],
              *, delivered: bool, tools: ToolSet | None = None) -> Rows:
    """The rows of one attempt's judged calls: each call, and one row per reason code."""
    now = time.time()
    enforce = policy.policy.mode == "enforce"
    rows: Rows = []

    def command(call: ToolCall) -> str | None:
        return call_command(policy.policy, call.name, call.arguments, tools=tools)

    for position, item in enumerate(judged):
        call, verdict = item.call, item.verdict
        call_id = uuid.uuid4().hex
        written_text = item.original_arguments if item.repaired and item.original_arguments is not None \
            else call.arguments_text
        written = item.original_object if item.repaired else call.arguments
        row: dict[str, Any] = {
            "id": call_id, "request_id": record.id, "session_id": record.session.id, "model": record.model,
            "route": record.route, "attempt": attempt, "call_index": position, "created_at": now + position * 1e-6,
            "tool_name": cut(call.name, 256), "source": call.source,
            # What the model wrote; for a repaired call also the command delivered instead.
            "arguments_raw": cut(written_text, ARGUMENT_CHARS),
            "arguments_json": _arguments_json(written_text, written),
            "command": _shown(item.original_command if item.repaired else command(call)),
            "repaired_command": _shown(command(call)) if item.repaired else None,
            "feedback_variant": item.variant, "decision": verdict.decision,
            "primary_reason": verdict.reasons[0] if verdict.reasons else None,
            "reasons": ",".join(verdict.reasons), "shape": verdict.shape,
            "policy_name": policy.name, "policy_hash": policy.hash, "mode": policy.policy.mode,
            "delivered": delivered and item.allowed if enforce else delivered,
        }
        rows.append((tables.tool_calls, row))
        if verdict.decision != "allow":
            _log_rejected(record, attempt, row)
        rows.extend((tables.tool_call_reasons, {"tool_call_id": call_id, "position": index, "reason": reason,
                                                "model": record.model, "created_at": row["created_at"]})
                    for index, reason in enumerate(verdict.reasons))
    return rows


# What a log line shows of a rejected command: enough to recognise it, never a whole heredoc.
LOGGED_COMMAND_CHARS = 200


def _log_rejected(record: RequestRecord, attempt: int, row: dict[str, Any]) -> None:
    """One `call.rejected` line per refused call, at `warning`: the level an operator filters on to see
    what was blocked (tool, command cut short, reasons, attempt, session), whether the model recovered or not."""
    command = row["command"] if row["command"] is not None else row["arguments_raw"]
    log.warning("call.rejected", tool=row["tool_name"], command=cut(command, LOGGED_COMMAND_CHARS),
                reasons=row["reasons"].split(",") if row["reasons"] else [], decision=row["decision"],
                attempt=attempt, session=record.session.id, model=record.model, request_id=record.id,
                delivered=row["delivered"], mode=row["mode"])


def _with_journal(writer: StoreWriter, record: RequestRecord, rows: Rows) -> Rows:
    """A request's first calls carry its journal entry, so that its calls never exist without it."""
    if not rows or record.journaled:
        return rows
    record.journaled = True
    return [*_session_rows(record), (tables.request_journal, journal_row(record, writer.owner)), *rows]


def queue_calls(writer: StoreWriter, record: RequestRecord, policy: LoadedPolicy, attempt: int,
                judged: list[JudgedCall], *, delivered: bool, tools: ToolSet | None = None) -> None:
    """Queue an attempt's calls without waiting (calls held back, observe mode, after the fact)."""
    rows = call_rows(record, policy, attempt, judged, delivered=delivered, tools=tools)
    writer.put_many(_with_journal(writer, record, rows))


async def release_calls(writer: StoreWriter, record: RequestRecord, policy: LoadedPolicy, attempt: int,
                        judged: list[JudgedCall], *, on_store_failure: str, timeout: float,
                        tools: ToolSet | None = None) -> None:
    """Record calls about to be delivered. In enforce mode returns only once their rows (and the request's
    journal entry) are committed; when they cannot be, `refuse` marks them undelivered and raises
    StoreUnavailable (nothing goes out unrecorded), `continue` counts and logs the call released unrecorded."""
    rows = call_rows(record, policy, attempt, judged, delivered=True, tools=tools)
    enforce = policy.policy.mode == "enforce"
    if enforce and on_store_failure == "refuse" and not writer.accepting:
        _refuse(writer, record, attempt, rows, writer.health() or "the store is not accepting")
    known_down = not writer.accepting
    writer.put_many(_with_journal(writer, record, rows))
    if not enforce or not judged:
        return
    if known_down:  # continue mode, store known down: waiting would only delay the answer
        _released_unrecorded(record, len(judged), writer.health() or "the store is not accepting")
        return
    started = time.perf_counter()
    try:
        await writer.commit(timeout)
    except StoreFailure as exc:
        if on_store_failure == "refuse":
            _refuse(writer, record, attempt, rows, str(exc), queued=True)
        _released_unrecorded(record, len(judged), str(exc))
    finally:
        telemetry.emit(telemetry.ReleaseWaited(time.perf_counter() - started))


def _released_unrecorded(record: RequestRecord, calls: int, reason: str) -> None:
    telemetry.emit(telemetry.ReleasedUnrecorded(record.model, calls))
    log.error("store.released_unrecorded", request_id=record.id, calls=calls, reason=reason)


def _refuse(writer: StoreWriter, record: RequestRecord, attempt: int, rows: Rows, reason: str, *,
            queued: bool = False) -> None:
    # The rows still in the queue say what the client got: nothing. Written when the store is back.
    for table, row in rows:
        if table is tables.tool_calls:
            row["delivered"] = False
    if not queued:
        writer.put_many(_with_journal(writer, record, rows))
    message = f"the proxy cannot record this answer, so it is not delivered: {reason}"
    record.fail("store_unavailable", message, 503)
    telemetry.emit(telemetry.StoreRefused(record.model))
    log.error("store.release_refused", request_id=record.id, attempt=attempt, reason=reason)
    raise StoreUnavailable(message)
