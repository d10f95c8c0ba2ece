"""Comparing two models' error rates: the difference, its interval, two tests and a plain sentence.

`GET /stats/compare?models=a,b` and `allowlist-proxy stats --compare a,b`. The difference is a - b with
Newcombe's interval; Fisher's exact test treats every call as independent, the permutation test treats every
session as one unit (calls of one session are not independent: a looping model makes many errors at once).
A difference is called established only when both tests put p below 0.05.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from proxy.stats.confidence import P_FLOOR, fisher_exact, newcombe_difference, permutation_test, wilson
from proxy.stats.confidence import PermutationResult as PermutationTest
from proxy.store import figures
from proxy.store.queries import Filters, SessionErrors

__all__ = ["ALPHA", "compare_counts", "compare_models", "comparison_sentence", "comparison_table", "parse_pair"]

ALPHA = 0.05


def _percent(rate: float | None) -> str:
    return "-" if rate is None else f"{rate * 100:.1f} %"


def _p(value: float | None) -> str:
    if value is None:
        return "-"
    if value <= P_FLOOR:
        return "< 1e-300"
    if value < 0.001:
        return "< 0.001"
    return f"{value:.3f}" if value < 0.1 else f"{value:.2f}"


def comparison_sentence(result: dict[str, Any]) -> str:
    a, b = result["models"]
    ra, rb = a["error_rate"], b["error_rate"]
    if ra is None or rb is None:
        missing = a["model"] if ra is None else b["model"]
        return f"No comparison: {missing} has no tool calls in the window."
    p_calls, p_sessions = result["p_value_calls"], result["p_value_sessions"]
    mc_error = result.get("p_value_sessions_mc_error") or 0.0
    spread = f" (Monte Carlo error {mc_error:.4f})" if mc_error else ""
    over = f"p = {_p(p_calls)} over calls, {_p(p_sessions)}{spread} over sessions"
    if ra == rb:
        return f"{a['model']} and {b['model']} have the same error rate ({_percent(ra)}): {over}."
    higher, lower = (a, b) if ra > rb else (b, a)
    rates = f"{_percent(higher['error_rate'])} vs {_percent(lower['error_rate'])}"
    by_calls = result["verdict_calls"] == "below"
    if result["established"]:
        return f"{higher['model']}'s error rate is higher than {lower['model']}'s ({rates}): {over}."
    if by_calls and result["verdict_sessions"] == "undecided":
        return (f"Whether {higher['model']}'s error rate is higher than {lower['model']}'s ({rates}) is undecided: "
                f"{over}, too close to {ALPHA} for the random splits drawn; the difference is not established.")
    if by_calls:
        return (f"{higher['model']}'s error rate looks higher than {lower['model']}'s ({rates}) over calls, but "
                f"not once sessions count as units: {over}; the difference is not established.")
    return (f"The difference between {higher['model']}'s and {lower['model']}'s error rates ({rates}) is not "
            f"established: {over}.")


def compare_counts(first: tuple[str, Sequence[tuple[int, int]]], second: tuple[str, Sequence[tuple[int, int]]],
                   ) -> dict[str, Any]:
    """The comparison of two models from their sessions' (errors, calls)."""
    sides: list[dict[str, Any]] = []
    for name, sessions in (first, second):
        errors = sum(e for e, _ in sessions)
        calls = sum(n for _, n in sessions)
        sides.append({"model": name, "sessions": len(sessions), "tool_calls": calls, "errors": errors,
                      "error_rate": errors / calls if calls else None})
    a, b = sides
    both = a["tool_calls"] and b["tool_calls"]
    interval = newcombe_difference(a["errors"], a["tool_calls"], b["errors"], b["tool_calls"]) if both else None
    sessions_test = permutation_test(first[1], second[1], alpha=ALPHA) if both else None
    p_calls = (fisher_exact(a["errors"], a["tool_calls"] - a["errors"], b["errors"], b["tool_calls"] - b["errors"])
               if both else None)
    result: dict[str, Any] = {
        "models": sides,
        "difference": a["error_rate"] - b["error_rate"] if both else None,
        "difference_ci95": None if interval is None else [round(interval[0], 4), round(interval[1], 4)],
        "p_value_calls": p_calls,
        "p_value_sessions": None if sessions_test is None else sessions_test.p,
        "p_value_sessions_mc_error": None if sessions_test is None else sessions_test.mc_error,
        "test_calls": "Fisher's exact test, two-sided",
        "test_sessions": "permutation test over sessions, two-sided"
                         + ("" if sessions_test is None else f" ({_method(sessions_test)})"),
        "verdict_calls": "none" if p_calls is None else ("below" if p_calls < ALPHA else "above"),
        "verdict_sessions": _verdict(sessions_test),
    }
    # One decision, read by the sentence too: both tests settled below ALPHA.
    result["established"] = result["verdict_calls"] == "below" and result["verdict_sessions"] == "below"
    result["sentence"] = comparison_sentence(result)
    return result


def _method(test: PermutationTest) -> str:
    if test.method == "monte carlo":
        return f"Monte Carlo, {test.draws} random splits"
    return "exact" if test.method == "exact" else "cluster-robust normal approximation"


def _verdict(test: PermutationTest | None) -> str:
    if test is None:
        return "none"
    if not test.settled:
        return "undecided"
    return "below" if test.p < ALPHA else "above"


async def compare_models(engine: AsyncEngine, models: tuple[str, str], *, since: float | None = None,
                         until: float | None = None, policy: str | None = None,
                         route: str | None = None) -> dict[str, Any]:
    """DESIGN.md's `GET /stats/compare` object for two models over the window."""
    f = Filters(since=since, until=until, policy=policy, route=route)
    found: dict[str, list[SessionErrors]] = {}
    async with engine.connect() as conn:
        for name in models:
            found.update(await figures.session_error_counts(conn, Filters(**{**_fields(f), "model": name})))
    # The permutation test is CPU work: in a thread, off the event loop that relays streams (see models.py).
    result = await asyncio.to_thread(
        compare_counts, (models[0], found.get(models[0], [])), (models[1], found.get(models[1], [])))
    result["window"] = {"since": since, "until": until}
    return result


def _fields(f: Filters) -> dict[str, Any]:
    return {"since": f.since, "until": f.until, "policy": f.policy, "route": f.route}


def comparison_table(result: dict[str, Any], *, markdown: bool = False) -> str:
    """Model | Sessions | Tool calls | Errors | Err/tool | 95 % CI, then the difference row."""
    from proxy.stats.models import render_table

    rows = []
    for side in result["models"]:
        ci = wilson(side["errors"], side["tool_calls"])
        rows.append([side["model"], str(side["sessions"]), str(side["tool_calls"]), str(side["errors"]),
                     _percent(side["error_rate"]), _range(ci)])
    d, ci = result["difference"], result["difference_ci95"]
    rows.append(["difference (a - b)", "", "", "", "-" if d is None else f"{d * 100:+.1f} pp",
                 "-" if ci is None else f"{ci[0] * 100:+.1f} .. {ci[1] * 100:+.1f} pp"])
    return render_table(["Model", "Sessions", "Tool calls", "Errors", "Err/tool", "95 % CI"], rows,
                        right=[False, True, True, True, True, True], markdown=markdown)


def _range(bounds: tuple[float, float] | list[float] | None) -> str:
    return "-" if bounds is None else f"{bounds[0] * 100:.1f} - {bounds[1] * 100:.1f} %"


def parse_pair(text: str) -> tuple[str, str]:
    """`a,b` -> ("a", "b"); ValueError unless exactly two different, non-empty names."""
    names = [n.strip() for n in text.split(",")]
    if len(names) != 2 or not all(names) or names[0] == names[1]:
        raise ValueError(f"expected two different model names as A,B (got {text!r})")
    return names[0], names[1]
