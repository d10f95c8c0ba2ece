"""`allowlist-proxy report` on a real store: compliance with intervals, comparison sentences, reasons, loops,
variants and throughput (live windows, or vLLM logs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proxy.cli import report as report_cli
from tests.throughput.vllm_log_fixtures import QWEN_27B, render_log

from .test_stats_cli import cli, parser, seeded  # noqa: F401 (fixture)

pytestmark = pytest.mark.each_database


def _parser_with_report():
    p = parser()
    sub = next(a for a in p._actions if a.dest == "command")
    report_cli.register(sub)
    return p


async def _report(capsys, *argv: str) -> tuple[int, str, str]:
    import asyncio

    args = _parser_with_report().parse_args(["report", *argv])
    code = await asyncio.to_thread(args.func, args)
    out, err = capsys.readouterr()
    return code, out, err


async def test_report_text(capsys, seeded: str) -> None:  # noqa: F811
    code, out, _ = await _report(capsys, "--db", seeded)
    assert code == 0
    for title in ("Rule compliance", "Reasons", "Retry loops", "Throughput per concurrency"):
        assert f"{title}\n{'=' * len(title)}" in out
    assert "95% CI (calls)" in out and "95% CI (sessions)" in out
    # three models: three comparison sentences (the fixture's looping session makes 9b 12/165)
    assert out.count(" over calls, ") == 3
    assert "qwen3.6-35b-a3b's and qwen3.5-9b's error rates (12.0 % vs 7.3 %) is not established" in out
    assert "No live throughput windows recorded yet." in out


async def test_report_markdown_json_and_vllm_log(capsys, seeded: str, tmp_path: Path) -> None:  # noqa: F811
    log = tmp_path / "vllm.log"
    log.write_text(render_log(QWEN_27B, "v1_engine", model="Qwen3.5-27B"))
    code, out, _ = await _report(capsys, "--db", seeded, "--markdown", "--vllm-log", str(log))
    assert code == 0
    assert "## Rule compliance" in out and "| Model | Sessions |" in out and "- The difference between" in out
    assert "Qwen3.5-27B" in out and "No live throughput" not in out
    code, out, _ = await _report(capsys, "--db", seeded, "--json")
    body = json.loads(out)
    assert code == 0 and set(body) == {"window", "stats", "comparisons", "variants"}
    assert len(body["comparisons"]) == 3 and all("sentence" in c for c in body["comparisons"])
    code, _, err = await _report(capsys, "--db", seeded, "--since", "yesterday-ish")
    assert code == 2 and "expected epoch seconds" in err
