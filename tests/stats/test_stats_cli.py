"""`allowlist-proxy stats` and `allowlist-proxy recheck` on a real store file.

The subcommands run through a parser built from their own `register`, as `proxy.cli` builds it, and run
in a worker thread because they start their own event loop.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

import pytest
from sqlalchemy import func, select

from proxy.cli import db as db_cli
from proxy.cli import recheck as recheck_cli
from proxy.cli import stats as stats_cli
from proxy.store.tables import error_runs, metadata, stats_calls, tool_calls

from .builder import ALLOWED, PIPE, ROOT, START, Store
from .seed_data import SEED_TABLE, build_seed
from .test_loops import HEAD_10, TAIL_3

pytestmark = pytest.mark.each_database


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="allowlist-proxy")
    sub = p.add_subparsers(dest="command")
    stats_cli.register(sub)
    recheck_cli.register(sub)
    db_cli.register(sub)
    return p


async def cli(capsys, *argv: str) -> tuple[int, str, str]:
    args = parser().parse_args(list(argv))
    code = await asyncio.to_thread(args.func, args)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
async def seeded(engine, store: Store, db_url: str) -> str:
    build_seed(store)
    store.session("qwen3.5-9b", "ses_loop").request().calls(PIPE, HEAD_10, TAIL_3, ALLOWED)
    await store.save(engine)
    return db_url


async def test_stats_prints_the_seed_table(capsys, seeded: str):
    code, out, _ = await cli(capsys, "stats", "--db", seeded, "--model", "qwen3.5-27b")
    assert code == 0
    lines = out.splitlines()
    assert lines[:3] == [
        "Model       | Sessions | Tool calls | Errors | Err/tool",
        "------------+----------+------------+--------+---------",
        "qwen3.5-27b |       17 |        128 |     13 |    10.2%",
    ]
    assert lines[3] == "" and [c.strip() for c in lines[4].split("|")] == ["Reason", "qwen3.5-27b"]


async def test_stats_all_models_with_reasons_and_loops(capsys, engine, store: Store, db_url: str):
    build_seed(store)
    await store.save(engine)
    code, out, _ = await cli(capsys, "stats", "--db", db_url)
    assert code == 0
    tables = out.strip().split("\n\n")
    assert tables[0].splitlines() == SEED_TABLE
    assert tables[1].splitlines()[0].split(" | ")[0].strip() == "Reason"
    assert "| qwen3.5-9b" in tables[1].splitlines()[0]
    pipe = next(line for line in tables[1].splitlines() if line.startswith("pipe "))
    # Models in name order (27b, 9b, 35b); every fourth error is a pipe: 13 -> 4, 9 -> 3, 19 -> 5.
    assert [c.strip() for c in pipe.split("|")] == ["pipe", "4", "3", "5"]
    assert tables[2].splitlines()[0].startswith("Model           | Loops | Exact repeats | Longest")


async def test_stats_json_and_markdown(capsys, seeded: str):
    code, out, _ = await cli(capsys, "stats", "--db", seeded, "--json")
    assert code == 0
    stats = json.loads(out)
    by_model = {m["model"]: m for m in stats["models"]}
    assert by_model["qwen3.5-9b"]["loops"]["count"] == 1
    assert (by_model["qwen3.5-9b"]["tool_calls"], by_model["qwen3.5-9b"]["errors"]) == (165, 12)
    code, out, _ = await cli(capsys, "stats", "--db", seeded, "--markdown", "--model", "qwen3.6-35b-a3b")
    assert out.splitlines()[:3] == [
        "| Model | Sessions | Tool calls | Errors | Err/tool |",
        "|---|---:|---:|---:|---:|",
        "| qwen3.6-35b-a3b | 20 | 158 | 19 | 12.0% |",
    ]


async def test_stats_since_until(capsys, seeded: str):
    code, out, _ = await cli(capsys, "stats", "--db", seeded, "--json", "--until", str(START))
    assert json.loads(out)["models"] == []
    code, out, _ = await cli(capsys, "stats", "--db", seeded, "--json", "--since", "2020-01-01T00:00:00Z")
    assert len(json.loads(out)["models"]) == 3
    code, _, err = await cli(capsys, "stats", "--db", seeded, "--since", "last tuesday")
    assert code == 2 and "ISO 8601" in err


async def test_stats_never_creates_a_store(capsys, tmp_path: Path):
    missing = tmp_path / "nothing.db"
    code, _, err = await cli(capsys, "stats", "--db", f"sqlite:///{missing}")
    assert code == 1 and "no store" in err
    assert not missing.exists()


# --- recheck ------------------------------------------------------------------------------------------------

PERMISSIVE = """\
name: permissive-lint
bash:
  scripts:
    search: {flags: ["--max-results", "--verbose"]}
    fetch_page: {}
    summarize: {}
    lint: {}
other_tools: allow
"""
# The shipped strict policy with tools outside bash and the path rules refused.
STRICTER = (ROOT / "policies" / "strict.yaml").read_text().replace(
    "name: strict-uv-scripts", "name: no-other-tools").replace("other_tools: allow", "other_tools: reject")


@pytest.fixture
async def recheck_store(engine, store: Store, db_url: str) -> dict[str, list[str]]:
    """Stored under the strict policy: 5 calls the permissive policy allows (lint script, --verbose flag),
    4 it still rejects, 1 malformed, 6 allowed bash calls and 2 todowrite calls (a tool no section governs)."""
    ids: dict[str, list[str]] = {"now_allowed": [], "todo": []}
    a, b = store.session("a"), store.session("b")
    ra, rb = a.request(), b.request()
    for command in ("uv run scripts/lint.py", "uv run scripts/lint.py src", "uv run scripts/search.py --verbose q"):
        ids["now_allowed"].append(ra.call(command)["id"])
    for command in ("uv run scripts/lint.py | head", "uv run scripts/search.py --debug q", PIPE):
        ra.call(command)
    ra.calls(ALLOWED, ALLOWED, ALLOWED)
    ids["todo"].append(ra.call(tool="todowrite", arguments={"todos": []})["id"])
    for command in ("uv run scripts/lint.py tests/", "uv run scripts/lint.py"):
        ids["now_allowed"].append(rb.call(command)["id"])
    rb.call("uv run scripts/lint.py --fix")  # a flag lint does not declare: still rejected
    rb.call(raw='{"command": "uv run scr')
    rb.calls(ALLOWED, ALLOWED, ALLOWED)
    ids["todo"].append(rb.call(tool="todowrite", arguments={"todos": []})["id"])
    await store.save(engine)
    return ids


async def stored_verdicts(engine) -> dict[str, int]:
    async with engine.connect() as conn:
        rows = await conn.execute(select(tool_calls.c.decision, func.count()).group_by(tool_calls.c.decision))
        return {decision: n for decision, n in rows}


def policy_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    return str(path)


async def test_recheck_under_the_same_policy_changes_nothing(capsys, recheck_store, db_url: str):
    code, out, _ = await cli(capsys, "recheck", "--db", db_url, "--json",
                             "--policy", str(ROOT / "policies" / "strict.yaml"))
    assert code == 0
    result = json.loads(out)
    assert result["changed_total"] == 0 and result["changes"] == []
    assert [(m["model"], m["tool_calls"], m["errors"], m["new_errors"]) for m in result["models"]] == [
        ("a", 10, 6, 6), ("b", 8, 4, 4)]


async def test_recheck_permissive_lowers_errors_by_exactly_the_calls_it_allows(
        capsys, tmp_path: Path, engine, recheck_store, db_url: str):
    before = await stored_verdicts(engine)
    code, out, _ = await cli(capsys, "recheck", "--db", db_url, "--json",
                             "--policy", policy_file(tmp_path, PERMISSIVE))
    assert code == 0
    result = json.loads(out)
    assert result["policy"] == "permissive-lint"
    assert [(m["model"], m["errors"], m["new_errors"]) for m in result["models"]] == [("a", 6, 3), ("b", 4, 2)]
    assert sum(m["errors"] - m["new_errors"] for m in result["models"]) == len(recheck_store["now_allowed"])
    assert result["changed_total"] == 5
    assert sorted(c["id"] for c in result["changes"]) == sorted(recheck_store["now_allowed"])
    assert {(c["old"], c["new"]) for c in result["changes"]} == {("reject", "allow")}
    assert result["models"][0]["error_rate"] == pytest.approx(0.6)
    assert result["models"][0]["new_error_rate"] == pytest.approx(0.3)
    # Read-only: the store holds what it held.
    assert before == await stored_verdicts(engine)
    assert sum(before.values()) == 18 and before["allow"] == 8


async def test_recheck_stricter_policy_raises_errors(capsys, tmp_path: Path, recheck_store, db_url: str):
    code, out, _ = await cli(capsys, "recheck", "--db", db_url, "--json",
                             "--policy", policy_file(tmp_path, STRICTER))
    assert code == 0
    result = json.loads(out)
    assert [(m["model"], m["errors"], m["new_errors"]) for m in result["models"]] == [("a", 6, 7), ("b", 4, 5)]
    assert sorted(c["id"] for c in result["changes"]) == sorted(recheck_store["todo"])
    assert {(c["old"], c["new"]) for c in result["changes"]} == {("allow", "reject")}


async def test_recheck_text_output_lists_the_changes(capsys, tmp_path: Path, recheck_store, db_url: str):
    code, out, _ = await cli(capsys, "recheck", "--db", db_url, "--policy", policy_file(tmp_path, PERMISSIVE),
                             "--limit", "2")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("recheck under policy permissive-lint")
    assert lines[2].split(" | ")[0].strip() == "Model"
    assert [c.strip() for c in lines[4].split("|")] == ["a", "10", "6", "60.0%", "3", "30.0%", "-3"]
    assert "5 calls change verdict (first 2):" in lines
    changes = lines[lines.index("5 calls change verdict (first 2):") + 1:]
    assert len(changes) == 2
    assert "reject -> allow (unknown_script)" in changes[0] and changes[0].endswith("uv run scripts/lint.py")


async def test_recheck_since_and_bad_policy(capsys, tmp_path: Path, recheck_store, db_url: str):
    code, out, _ = await cli(capsys, "recheck", "--db", db_url, "--json", "--since", str(START + 10),
                             "--policy", policy_file(tmp_path, PERMISSIVE))
    # Calls 0-9 were session a's (times START..START+9); only session b's 8 remain.
    assert [(m["model"], m["tool_calls"]) for m in json.loads(out)["models"]] == [("b", 8)]
    code, _, err = await cli(capsys, "recheck", "--db", db_url, "--policy", policy_file(tmp_path, "name: [x"))
    assert code == 2 and "policy.yaml" in err


async def test_rebuild_rollups_counts_rows_written_behind_the_writer(capsys, engine, store: Store, db_url: str):
    build_seed(store)
    async with engine.begin() as conn:  # straight into the tables: no rollups made
        for name in ("sessions", "requests", "tool_calls", "tool_call_reasons"):
            await conn.execute(metadata.tables[name].insert(), store.rows[name])
        assert (await conn.execute(select(func.count()).select_from(stats_calls))).scalar_one() == 0
    code, out, _ = await cli(capsys, "db", "rebuild-rollups", "--db", db_url)
    assert code == 0 and "rollups rebuilt" in out
    code, out, _ = await cli(capsys, "stats", "--db", db_url)
    assert out.splitlines()[:5] == SEED_TABLE
    # Twice changes nothing: the rebuild replaces, never adds.
    await cli(capsys, "db", "rebuild-rollups", "--db", db_url)
    code, out, _ = await cli(capsys, "stats", "--db", db_url)
    assert out.splitlines()[:5] == SEED_TABLE
    async with engine.connect() as conn:
        assert (await conn.execute(select(func.count()).select_from(error_runs))).scalar_one() > 0


async def test_stats_on_a_store_behind_the_schema_says_to_upgrade(capsys, empty_db_url: str):
    from proxy.store.db import create_engine, migrate

    engine = create_engine(empty_db_url)
    await migrate(engine, "0004")
    await engine.dispose()
    code, out, err = await cli(capsys, "stats", "--db", empty_db_url)
    assert code == 1 and out == ""
    assert "schema revision 0004" in err and "allowlist-proxy db upgrade" in err
