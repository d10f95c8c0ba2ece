"""The seed post's tables in one document: `allowlist-proxy report`.

Rule compliance per model with both intervals, the comparison sentence of every pair of models, reason codes,
loops and recovery, blocked turns and upstream errors, feedback variants when an experiment ran, and throughput
per concurrency (from the proxy's live windows, or from vLLM logs given with `--vllm-log`). Text or Markdown; one
`build_report` call collects the figures and `render_report` lays them out, so the JSON (`--json`) holds exactly
what is shown.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import combinations
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from proxy.stats.compare import compare_models
from proxy.stats.models import loops_table, model_stats, reasons_table, render_table, turns_table
from proxy.stats.variants import variant_stats

__all__ = ["build_report", "compliance_table", "render_report", "variants_table"]

# Past this many models only the most compliant one is compared with each other: n(n-1)/2 sentences stop
# being readable.
_ALL_PAIRS_UP_TO = 5


def _percent(rate: float | None) -> str:
    return "-" if rate is None else f"{rate * 100:.1f}%"


def _range(bounds: Sequence[float] | None) -> str:
    return "-" if bounds is None else f"{bounds[0] * 100:.1f}-{bounds[1] * 100:.1f}%"


def _number(value: float | None) -> str:
    return "-" if value is None else (str(int(value)) if float(value).is_integer() else f"{value:.1f}")


def compliance_table(stats: Mapping[str, Any], *, markdown: bool = False) -> str:
    """The seed's table with the error rate's 95 % intervals over calls and over sessions."""
    rows = [[m["model"], str(m["sessions"]), str(m["tool_calls"]), str(m["errors"]), _percent(m["error_rate"]),
             _range(m.get("error_rate_ci95")), _range(m.get("error_rate_session_ci95")),
             _percent(m["recovery_rate"]), _range(m.get("recovery_rate_ci95"))] for m in stats["models"]]
    headers = ["Model", "Sessions", "Tool calls", "Errors", "Err/tool", "95% CI (calls)", "95% CI (sessions)",
               "Recovery", "95% CI"]
    return render_table(headers, rows, right=[False] + [True] * 8, markdown=markdown)


def variants_table(variants: Mapping[str, Any], *, markdown: bool = False) -> str:
    rows = [[v["model"], v["variant"], str(v["sessions"]), _percent(v["recovery_rate"]),
             _range(v["recovery_rate_ci95"]), _percent(v["loop_rate"]), _range(v["loop_rate_ci95"]),
             _number(v["median_attempts"]),
             "-" if v["median_attempts_ci95"] is None else "-".join(_number(x) for x in v["median_attempts_ci95"])]
            for v in variants["variants"]]
    headers = ["Model", "Variant", "Sessions", "Recovery", "95% CI", "Loop rate", "95% CI", "Median attempts",
               "95% CI"]
    return render_table(headers, rows, right=[False, False] + [True] * 7, markdown=markdown)


def _pairs(stats: Mapping[str, Any]) -> list[tuple[str, str]]:
    measured = [m for m in stats["models"] if m["tool_calls"]]
    ranked = sorted(measured, key=lambda m: (m["error_rate"], m["model"]))
    names = [m["model"] for m in ranked]
    if len(names) <= _ALL_PAIRS_UP_TO:
        return list(combinations(names, 2))
    return [(names[0], other) for other in names[1:]]


async def build_report(engine: AsyncEngine, *, since: float | None = None, until: float | None = None,
                       loop_min_attempts: int = 3) -> dict[str, Any]:
    stats = await model_stats(engine, since=since, until=until, loop_min_attempts=loop_min_attempts)
    comparisons = [await compare_models(engine, pair, since=since, until=until) for pair in _pairs(stats)]
    variants = await variant_stats(engine, since=since, until=until, loop_min_attempts=loop_min_attempts)
    return {"window": stats["window"], "stats": stats, "comparisons": comparisons, "variants": variants}


def render_report(report: Mapping[str, Any], *, markdown: bool = False, vllm_tables: str | None = None) -> str:
    stats = report["stats"]

    def heading(text: str) -> str:
        return f"## {text}" if markdown else f"{text}\n{'=' * len(text)}"

    if not stats["models"]:
        return "no tool calls or requests in the store for this window\n"
    parts = [heading("Rule compliance"), compliance_table(stats, markdown=markdown)]
    if report["comparisons"]:
        parts += ["\n".join(("- " if markdown else "") + c["sentence"] for c in report["comparisons"])]
    if any(m["reasons"] for m in stats["models"]):
        parts += [heading("Reasons"), reasons_table(stats, markdown=markdown)]
    parts += [heading("Retry loops"), loops_table(stats, markdown=markdown)]
    parts += [heading("Blocked turns and upstream errors"), turns_table(stats, markdown=markdown)]
    if report["variants"]["variants"]:
        parts += [heading("Feedback variants"), variants_table(report["variants"], markdown=markdown)]
    parts.append(heading("Throughput per concurrency"))
    if vllm_tables is not None:
        parts.append(vllm_tables.rstrip())
    else:
        from proxy.throughput.live import render_live_tables

        parts.append(render_live_tables({m["model"]: m["throughput"] for m in stats["models"]}).rstrip())
    return "\n\n".join(parts) + "\n"
