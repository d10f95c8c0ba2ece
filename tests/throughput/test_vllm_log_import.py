"""Whole logs -> tables: generated from known windows, they must import to exactly the hand-computed cells."""

from __future__ import annotations

import gzip
import io
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.throughput import LogImport, Window, build_table, tables_to_json

from .vllm_log_fixtures import FORMATS, QWEN_9B, QWEN_27B, SeedWindow, render_log

# The seed's Qwen3.5-27B column, worked out by hand in vllm_log_fixtures.
EXPECTED_27B = {
    "1": {"generation_tps": 85.0, "prompt_tps": 500.0, "prompt_tps_active": 1333.333,
          "requests_per_minute": 1.5, "completed_requests": 2, "n": 8, "n_active": 3},
    "2": {"generation_tps": 150.0, "prompt_tps": 100.0, "prompt_tps_active": 600.0,
          "requests_per_minute": 3.0, "completed_requests": 3, "n": 6, "n_active": 1},
    "3": {"generation_tps": 200.167, "prompt_tps": 10.0, "prompt_tps_active": 15.0,
          "requests_per_minute": 4.0, "completed_requests": 2, "n": 3, "n_active": 2},
    "4": {"generation_tps": 210.25, "prompt_tps": 0.0, "prompt_tps_active": None,
          "requests_per_minute": 0.0, "completed_requests": 0, "n": 2, "n_active": 0},
    "6": {"generation_tps": 240.0, "prompt_tps": 5000.0, "prompt_tps_active": 5000.0,
          "requests_per_minute": 6.0, "completed_requests": 1, "n": 1, "n_active": 1},
}
EXPECTED_SPEC_27B = {"n": 2, "mean_acceptance_length": 2.5, "draft_acceptance_rate": 65.6,
                     "accepted_tokens": 250, "drafted_tokens": 400}


def _import(*files: tuple[Path, str | None], window_seconds: float = 10.0) -> LogImport:
    importer = LogImport(window_seconds=window_seconds)
    for path, model in files:
        importer.feed_file(path, model=model)
    return importer


@pytest.mark.parametrize("fmt", FORMATS)
def test_seed_column_imports_cell_for_cell_from_every_format(
    fmt: str, write_log: Callable[..., Path]
) -> None:
    path = write_log("vllm.log", QWEN_27B, fmt)
    result = _import((path, "Qwen3.5-27B")).result()
    out = tables_to_json(result.tables)
    assert list(out) == ["Qwen3.5-27B"]
    assert out["Qwen3.5-27B"]["concurrency"] == EXPECTED_27B
    assert out["Qwen3.5-27B"]["spec_decode"] == EXPECTED_SPEC_27B
    assert (out["Qwen3.5-27B"]["windows"], out["Qwen3.5-27B"]["idle_windows"]) == (len(QWEN_27B), 3)
    lines = result.lines
    assert (lines.stats, lines.spec_decode, lines.completions) == (len(QWEN_27B), 2, 9)
    assert (lines.malformed_stats, lines.malformed_spec_decode, lines.completions_unbinned) == (0, 0, 0)
    assert lines.completions_failed == sum(1 for i in range(len(QWEN_27B)) if i % 4 == 1)


def test_several_files_become_one_column_each(write_log: Callable[..., Path]) -> None:
    a = write_log("Qwen3.5-27B.log", QWEN_27B, "v1_engine")
    b = write_log("Qwen3.5-9B.log", QWEN_9B, "v0")
    out = tables_to_json(_import((a, None), (b, None)).result().tables)
    assert list(out) == ["Qwen3.5-27B", "Qwen3.5-9B"]  # from the file names, in the order given
    assert out["Qwen3.5-9B"]["concurrency"]["1"] == {
        "generation_tps": 140.25, "prompt_tps": 50.0, "prompt_tps_active": 100.0,
        "requests_per_minute": 6.0, "completed_requests": 2, "n": 2, "n_active": 1,
    }
    assert set(out["Qwen3.5-9B"]["concurrency"]) == {"1", "2"}


def test_model_named_in_the_log_wins_over_the_file_name_and_model_argument_over_both(
    write_log: Callable[..., Path],
) -> None:
    path = write_log("server.log", QWEN_9B, "apiserver", model="Qwen3.5-9B-AWQ")
    assert [t.model for t in _import((path, None)).result().tables] == ["Qwen3.5-9B-AWQ"]
    assert [t.model for t in _import((path, "9b")).result().tables] == ["9b"]


def test_gzipped_logs_and_file_names_with_dots(tmp_path: Path) -> None:
    (tmp_path / "Qwen3.5-9B").write_text(render_log(QWEN_9B, "v1_engine"))
    with gzip.open(tmp_path / "Qwen3.5-27B.log.gz", "wt") as f:
        f.write(render_log(QWEN_27B, "v1_engine"))
    result = _import((tmp_path / "Qwen3.5-9B", None), (tmp_path / "Qwen3.5-27B.log.gz", None)).result()
    out = tables_to_json(result.tables)
    assert list(out) == ["Qwen3.5-9B", "Qwen3.5-27B"]
    assert out["Qwen3.5-27B"]["concurrency"] == EXPECTED_27B


def test_two_files_of_one_model_merge_into_one_column(write_log: Callable[..., Path]) -> None:
    a = write_log("day1.log", QWEN_9B, "v1_engine")
    b = write_log("day2.log", QWEN_9B, "docker_timestamps")
    tables = _import((a, "Qwen3.5-9B"), (b, "Qwen3.5-9B")).result().tables
    assert len(tables) == 1
    assert tables[0].cells[1].n == 4 and tables[0].cells[1].completed_requests == 4


def test_compose_logs_of_two_services_interleaved_stay_apart(tmp_path: Path) -> None:
    big = render_log(QWEN_27B, "compose", model="Qwen3.5-27B").splitlines()
    small = [line.replace("vllm-qwen-1", "vllm-small-1") for line in
             render_log(QWEN_9B, "compose", model="Qwen3.5-9B").splitlines()]
    mixed: list[str] = []
    for i in range(max(len(big), len(small))):
        mixed += big[i:i + 1] + small[i:i + 1]
    path = tmp_path / "compose.log"
    path.write_text("\n".join(mixed) + "\n")
    out = tables_to_json(_import((path, None)).result().tables)
    assert list(out) == ["Qwen3.5-27B", "Qwen3.5-9B"]
    assert out["Qwen3.5-27B"]["concurrency"] == EXPECTED_27B


def test_a_restart_with_another_model_starts_a_new_column(tmp_path: Path) -> None:
    text = (render_log(QWEN_27B, "v1_engine", model="Qwen3.5-27B")
            + render_log(QWEN_9B, "v1_engine", model="Qwen3.5-9B"))
    (tmp_path / "restarts.log").write_text(text)
    out = tables_to_json(_import((tmp_path / "restarts.log", None)).result().tables)
    assert list(out) == ["Qwen3.5-27B", "Qwen3.5-9B"]
    assert out["Qwen3.5-27B"]["concurrency"] == EXPECTED_27B


def test_garbage_is_counted_and_never_changes_a_cell(tmp_path: Path) -> None:
    text = render_log(QWEN_27B, "v1_engine")
    junk = [
        b"\x00\xff\xfe binary junk \x80\x81",
        b"INFO 12-01 10:00:05 [loggers.py:123] Engine 000: Avg prompt throughput: 12",  # cut off mid-line
        b"INFO 12-01 10:00:05 [loggers.py:123] Engine 000: Avg prompt throughput: x tokens/s, "
        b"Avg generation throughput: 1.0 tokens/s, Running: 3 reqs",
        b"INFO 12-01 10:00:05 [metrics.py:91] SpecDecoding metrics: Mean acceptance length: ?",
        b"Traceback (most recent call last):",
        b"    " + b"x" * 100_000,
        b"",
    ]
    lines = text.rstrip("\n").encode().split(b"\n")
    mixed = [*lines[:5], *junk, *lines[5:30], *junk, *lines[30:]]
    path = tmp_path / "Qwen3.5-27B.log"
    path.write_bytes(b"\n".join(mixed))
    result = _import((path, None)).result()
    assert tables_to_json(result.tables)["Qwen3.5-27B"]["concurrency"] == EXPECTED_27B
    assert (result.lines.malformed_stats, result.lines.malformed_spec_decode) == (4, 2)
    assert result.lines.total == len(mixed)


def test_no_access_log_means_unknown_requests_not_zero(tmp_path: Path) -> None:
    text = render_log(QWEN_9B, "v1_engine")
    path = tmp_path / "quiet.log"
    path.write_text("\n".join(line for line in text.splitlines() if "HTTP/" not in line))
    table = _import((path, None)).result().tables[0]
    assert table.cells[1].requests_per_minute is None and table.cells[1].generation_tps == 140.25


def test_completions_after_the_last_window_are_counted_apart(tmp_path: Path) -> None:
    text = render_log(QWEN_9B, "v1_engine")
    tail = 'INFO:     127.0.0.1:1 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
    (tmp_path / "m.log").write_text(text + tail * 2)
    result = _import((tmp_path / "m.log", None)).result()
    assert result.lines.completions_unbinned == 2
    assert result.tables[0].cells[1].completed_requests == 2


STATS = ("{stamp}INFO {vllm} [loggers.py:123] Engine 000: Avg prompt throughput: 0.0 tokens/s, "
         "Avg generation throughput: 50.0 tokens/s, Running: {c} reqs, Waiting: 0 reqs")
DONE = '{stamp}INFO:     127.0.0.1:1 - "POST /v1/chat/completions HTTP/1.1" 200 OK'


def test_access_lines_bin_by_their_timestamp_when_output_is_out_of_order(tmp_path: Path) -> None:
    lines = [
        STATS.format(stamp="2025-12-01T10:00:10.000Z ", vllm="12-01 10:00:10", c=1),
        DONE.format(stamp="2025-12-01T10:00:25.000Z "),  # reached the file early: belongs to the third window
        DONE.format(stamp="2025-12-01T10:00:15.000Z "),
        STATS.format(stamp="2025-12-01T10:00:20.000Z ", vllm="12-01 10:00:20", c=2),
        STATS.format(stamp="2025-12-01T10:00:30.000Z ", vllm="12-01 10:00:30", c=3),
    ]
    (tmp_path / "m.log").write_text("\n".join(lines))
    cells = _import((tmp_path / "m.log", None)).result().tables[0].cells
    assert [cells[c].completed_requests for c in (1, 2, 3)] == [0, 1, 1]


def test_year_rollover_of_vllm_stamps(tmp_path: Path) -> None:
    # Stamps without a year: 01-01 must count as after 12-31, or the request would wait for a later window.
    lines = [
        STATS.format(stamp="", vllm="12-31 23:59:50", c=1),
        DONE.format(stamp="INFO 12-31 23:59:58 [launcher.py:1] "),
        STATS.format(stamp="", vllm="01-01 00:00:00", c=2),
        STATS.format(stamp="", vllm="01-01 00:00:10", c=3),
    ]
    (tmp_path / "m.log").write_text("\n".join(lines))
    cells = _import((tmp_path / "m.log", None)).result().tables[0].cells
    assert [cells[c].completed_requests for c in (1, 2, 3)] == [0, 1, 0]


def test_window_seconds_sets_the_minutes_of_a_window(write_log: Callable[..., Path]) -> None:
    path = write_log("m.log", QWEN_27B, "v1_engine")
    cells = _import((path, None), window_seconds=5.0).result().tables[0].cells
    assert cells[1].requests_per_minute == pytest.approx(3.0)  # 2 requests in 8 windows of 5 s
    with pytest.raises(ValueError, match="window_seconds"):
        LogImport(window_seconds=0)


def test_stdin_and_progress(write_log: Callable[..., Path], monkeypatch: pytest.MonkeyPatch) -> None:
    text = render_log(QWEN_9B, "v1_engine").encode()
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(text)))
    seen: list[tuple[int, int | None]] = []
    importer = LogImport()
    importer.feed_file("-", progress=lambda done, total: seen.append((done, total)))
    assert importer.result().tables[0].model == "stdin"
    assert seen[-1] == (len(text), None)

    path = write_log("m.log", QWEN_9B, "v1_engine")
    seen.clear()
    LogImport().feed_file(path, progress=lambda done, total: seen.append((done, total)))
    assert seen[-1] == (path.stat().st_size, path.stat().st_size)


level = st.integers(0, 6)
tps = st.integers(0, 50_000).map(lambda tenths: tenths / 10)  # vLLM prints one decimal


@settings(max_examples=40, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(level, tps, tps, st.integers(0, 3)), min_size=1, max_size=40),
       st.sampled_from(FORMATS))
def test_any_windows_round_trip_through_a_log(rows: list[tuple[int, float, float, int]], fmt: str) -> None:
    seed = [SeedWindow(c, p, g, k) for c, p, g, k in rows]
    importer = LogImport()
    importer.feed(render_log(seed, fmt, noise=False).splitlines(), origin="m.log")
    got = importer.result().tables[0]
    # noise=False leaves no access line at all when no request completed: then requests are unknown.
    logged = any(k for *_, k in rows)
    want = build_table("m", [Window(c, p, g, k if logged else None) for c, p, g, k in rows])
    assert got.cells == want.cells
    assert (got.windows, got.idle_windows) == (want.windows, want.idle_windows)
