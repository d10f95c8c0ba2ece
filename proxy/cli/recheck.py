"""`allowlist-proxy recheck --policy FILE`: what if every stored call had been judged by another policy?

Prints per model the old and the new error rate and the calls whose verdict changes: the operator's
what-if before editing the live policy. Read-only on the store; rows are streamed in batches, so the
size of the store bounds the time, not the memory. Offered tools are not stored, so `unknown_tool` is
not judged again.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from proxy.cli.command import add_command
from proxy.cli.store_options import add_db, add_window
from proxy.config import Settings

__all__ = ["ModelRecheck", "RecheckResult", "recheck", "register", "run"]

_BATCH = 2000


def register(subparsers: Any) -> None:
    parser = add_command(
        subparsers, "recheck", help="judge every stored call again under another policy and compare error rates",
        description=__doc__, examples=["allowlist-proxy recheck --policy policies/observe.yaml",
                                       "allowlist-proxy recheck --policy my-policy.yaml --since 24h --markdown"],
    )
    parser.add_argument("--policy", required=True, metavar="FILE", help="the policy file to judge with")
    add_window(parser)
    parser.add_argument("--model", help="only this model")
    add_db(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    parser.add_argument("--limit", type=int, default=100, metavar="N",
                        help="list at most N changed calls (all are counted; default 100)")
    parser.set_defaults(func=run)


@dataclass
class ModelRecheck:
    model: str
    tool_calls: int = 0
    errors: int = 0
    new_errors: int = 0

    @property
    def error_rate(self) -> float:
        return self.errors / self.tool_calls if self.tool_calls else 0.0

    @property
    def new_error_rate(self) -> float:
        return self.new_errors / self.tool_calls if self.tool_calls else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "error_rate": self.error_rate, "new_error_rate": self.new_error_rate}


@dataclass
class RecheckResult:
    policy: str
    models: dict[str, ModelRecheck] = field(default_factory=dict)
    changed_total: int = 0
    changes: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "models": [self.models[m].as_dict() for m in sorted(self.models)],
            "changed_total": self.changed_total,
            "changes": self.changes,
        }


async def _stored_calls(engine: Any, since: float | None, until: float | None,
                        model: str | None) -> AsyncIterator[list[Any]]:
    from sqlalchemy import case, func, select

    from proxy.store.tables import requests as r
    from proxy.store.tables import tool_calls as t

    # A call's arguments are stored once: arguments_json only where the raw text does not say them exactly.
    arguments = case((t.c.decision == "malformed", t.c.arguments_json),
                     else_=func.coalesce(t.c.arguments_json, t.c.arguments_raw)).label("arguments_json")
    # The roots the call was judged under (pinned, named or learned): judged again under them.
    stmt = select(t.c.id, t.c.session_id, t.c.model, t.c.created_at, t.c.tool_name, arguments,
                  t.c.command, t.c.decision, t.c.reasons, r.c.project_root).outerjoin(r, r.c.id == t.c.request_id)
    if since is not None:
        stmt = stmt.where(t.c.created_at >= since)
    if until is not None:
        stmt = stmt.where(t.c.created_at < until)
    if model is not None:
        stmt = stmt.where(t.c.model == model)
    stmt = stmt.order_by(t.c.created_at, t.c.id)
    async with engine.connect() as conn:
        result = await conn.stream(stmt.execution_options(yield_per=_BATCH))
        async for rows in result.partitions(_BATCH):
            yield rows


def _judge(loaded: Any, tool: str, arguments_json: str | None, project_root: str | None = None) -> Any:
    from proxy.enforce.judging import judge_offline

    roots = tuple(root for root in (project_root or "").split(",") if root)
    # as the proxy judges it, under the roots it judged the call under; unknown_tool aside
    return judge_offline(loaded, tool, arguments_json, roots=roots).verdict


async def recheck(engine: Any, loaded: Any, *, since: float | None = None, until: float | None = None,
                  model: str | None = None, limit: int = 100) -> RecheckResult:
    """Judge each stored call with `loaded.policy`; count old and new errors per model, list the changes."""
    from proxy.policy.verdict import is_error

    result = RecheckResult(policy=loaded.name)
    async for rows in _stored_calls(engine, since, until, model):
        for row in rows:
            verdict = _judge(loaded, row.tool_name, row.arguments_json, row.project_root)
            stats = result.models.setdefault(row.model, ModelRecheck(row.model))
            stats.tool_calls += 1
            stats.errors += is_error(row.decision)
            stats.new_errors += verdict.is_error
            if verdict.decision == row.decision:
                continue
            result.changed_total += 1
            if len(result.changes) < limit:
                result.changes.append({
                    "id": row.id, "session_id": row.session_id, "model": row.model,
                    "created_at": row.created_at, "tool_name": row.tool_name, "command": row.command,
                    "old": row.decision, "old_reasons": [r for r in (row.reasons or "").split(",") if r],
                    "new": verdict.decision, "new_reasons": list(verdict.reasons),
                })
    return result


def render(result: RecheckResult, path: str, *, markdown: bool = False) -> str:
    from proxy.stats.models import render_table

    def pct(rate: float) -> str:
        return f"{rate * 100:.1f}%"

    rows = [[m.model, str(m.tool_calls), str(m.errors), pct(m.error_rate), str(m.new_errors),
             pct(m.new_error_rate), f"{m.new_errors - m.errors:+d}"]
            for m in (result.models[k] for k in sorted(result.models))]
    lines = [f"recheck under policy {result.policy} ({path})", ""]
    lines.append(render_table(
        ["Model", "Tool calls", "Errors", "Err/tool", "New errors", "New err/tool", "Change"], rows,
        right=[False] + [True] * 6, markdown=markdown))
    lines.append("")
    shown = f" (first {len(result.changes)})" if len(result.changes) < result.changed_total else ""
    lines.append(f"{result.changed_total} calls change verdict{shown}:")
    for c in result.changes:
        when = datetime.fromtimestamp(c["created_at"], UTC).strftime("%Y-%m-%d %H:%M:%S")
        what = c["command"] if c["command"] is not None else c["tool_name"]
        reasons = ",".join(c["old_reasons"] if c["new"] == "allow" else c["new_reasons"])
        lines.append(f"  {when}  {c['model']}  {c['session_id']}  {c['old']} -> {c['new']}"
                     f"{f' ({reasons})' if reasons else ''}  {what}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from proxy.cli.stats import read_store
    from proxy.policy import PolicyError, load_policy_file
    from proxy.stats.models import parse_time

    try:
        loaded = load_policy_file(args.policy)
    except PolicyError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        since, until = parse_time(args.since), parse_time(args.until)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    url = args.db or Settings().store.url

    result, code = read_store(url, lambda engine: recheck(engine, loaded, since=since, until=until,
                                                            model=args.model, limit=args.limit))
    if code:
        return code
    print(json.dumps(result.as_dict(), indent=2) if args.json else render(result, args.policy,
                                                                        markdown=getattr(args, "markdown", False)))
    return 0
