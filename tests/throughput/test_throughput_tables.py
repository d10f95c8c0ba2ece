"""tables.py: one definition of every cell, whatever produced the windows (log import or live)."""

from __future__ import annotations

import math
import random
from collections import defaultdict

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.throughput.tables import (
    SpecDecodeBuilder,
    TableBuilder,
    Window,
    build_table,
    concurrency_levels,
    format_value,
    render_markdown,
    render_text,
    tables_to_json,
)


def test_cells_are_means_over_windows_of_one_running_level() -> None:
    table = build_table("m", [
        Window(1, 1000.0, 80.0, 1),
        Window(1, 0.0, 90.0, 0),
        Window(1, 0.0, 0.0, 0),  # generated nothing: still one of the c=1 windows
        Window(2, 300.0, 150.0, 2),
        Window(0, 0.0, 0.0, 1),  # idle: counted, not tabled
    ])
    c1, c2 = table.cells[1], table.cells[2]
    assert (c1.n, c1.generation_tps, c1.prompt_tps) == (3, pytest.approx(170 / 3), pytest.approx(1000 / 3))
    assert (c1.n_active, c1.prompt_tps_active) == (1, 1000.0)
    assert (c1.completed_requests, c1.requests_per_minute) == (1, pytest.approx(2.0))  # 1 in 30 s
    assert (c2.n, c2.generation_tps, c2.requests_per_minute) == (1, 150.0, pytest.approx(12.0))
    assert (table.windows, table.idle_windows) == (5, 1)
    assert set(table.cells) == {1, 2}


def test_no_prefill_means_no_active_cell_and_unknown_requests_stay_unknown() -> None:
    cell = build_table("m", [Window(3, 0.0, 200.0), Window(3, 0.0, 210.0)]).cells[3]
    assert cell.n_active == 0 and cell.prompt_tps_active is None
    assert cell.completed_requests is None and cell.requests_per_minute is None


def test_requests_per_minute_uses_only_windows_that_counted_requests_and_their_own_length() -> None:
    cell = build_table("m", [
        Window(1, 0.0, 1.0, 3, seconds=20.0),
        Window(1, 0.0, 1.0, None),  # a window nobody counted requests in adds no minutes
        Window(1, 0.0, 1.0, 1, seconds=10.0),
    ]).cells[1]
    assert cell.n == 3
    assert (cell.completed_requests, cell.requests_per_minute) == (4, pytest.approx(8.0))


@pytest.mark.parametrize(("value", "places", "shown"), [
    (210.25, 1, "210.3"),  # halves round up, as by hand (Python's own formatting gives 210.2)
    ((85.2 + 85.3) / 2, 1, "85.3"),
    (0.1 + 0.2, 1, "0.3"),  # binary noise does not leak into the cell
    (1333.3333333, 1, "1333.3"),
    (200.16666, 1, "200.2"),
    (2.405, 2, "2.41"),
    (0.0, 1, "0.0"),
    (5000.0, 1, "5000.0"),
])
def test_format_value_rounds_half_up(value: float, places: int, shown: str) -> None:
    assert format_value(value, places) == shown


def test_rows_run_from_one_to_the_highest_level_of_any_model() -> None:
    a = build_table("a", [Window(1, 0, 10.0, 0), Window(4, 0, 40.0, 0)])
    b = build_table("b", [Window(2, 0, 20.0, 0)])
    assert list(concurrency_levels([a, b])) == [1, 2, 3, 4]
    assert list(concurrency_levels([])) == []


def _two_models() -> list:
    spec = SpecDecodeBuilder()
    spec.add(mean_acceptance_length=2.41, draft_acceptance_rate=61.2, accepted_tokens=10, drafted_tokens=20)
    a = build_table("Qwen3.5-27B", [
        Window(1, 100.0, 85.0, 1), Window(1, 0.0, 85.0, 0), Window(3, 0.0, 200.0, 0),
    ], spec_decode=spec.result())
    b = build_table("Qwen3.5-9B", [Window(1, 0.0, 140.25, None)])
    return [a, b]


def test_render_text_is_aligned_with_n_per_cell_and_dashes_for_gaps() -> None:
    assert render_text(_two_models()) == """\
Generation throughput (tokens/s): mean per window, idle windows included; (n) windows
Concurrency  Qwen3.5-27B  Qwen3.5-9B
1               85.0 (2)   140.3 (1)
2                      -           -
3              200.0 (1)           -

Prefill throughput (tokens/s), sustained: mean over all windows; (n) windows
Concurrency  Qwen3.5-27B  Qwen3.5-9B
1               50.0 (2)     0.0 (1)
2                      -           -
3                0.0 (1)           -

Prefill throughput (tokens/s), active: mean over windows with prefill > 0; (n) active windows
Concurrency  Qwen3.5-27B  Qwen3.5-9B
1              100.0 (1)           -
2                      -           -
3                      -           -

Completed requests per minute: 2xx completions in the windows / their minutes; (n) windows
Concurrency  Qwen3.5-27B  Qwen3.5-9B
1                3.0 (2)           -
2                      -           -
3                0.0 (1)           -

Speculative decoding: mean over logged intervals; (n) intervals
                           Qwen3.5-27B  Qwen3.5-9B
Mean acceptance length        2.41 (1)           -
Draft acceptance rate (%)     61.2 (1)           -
"""


def test_render_markdown_tables() -> None:
    md = render_markdown(_two_models())
    assert md.startswith("""\
**Generation throughput (tokens/s): mean per window, idle windows included; (n) windows**

| Concurrency | Qwen3.5-27B | Qwen3.5-9B |
|---|---:|---:|
| 1 | 85.0 (2) | 140.3 (1) |
| 2 | - | - |
| 3 | 200.0 (1) | - |
""")
    assert "| Draft acceptance rate (%) | 61.2 (1) | - |" in md
    assert md.count("|---|") == 5


def test_render_without_windows_says_so() -> None:
    assert render_text([]) == render_markdown([]) == "No vLLM stats windows found.\n"


def test_json_carries_every_cell_with_counts_and_three_decimals() -> None:
    out = tables_to_json(_two_models())
    assert list(out) == ["Qwen3.5-27B", "Qwen3.5-9B"]
    assert out["Qwen3.5-27B"]["concurrency"]["1"] == {
        "generation_tps": 85.0, "prompt_tps": 50.0, "prompt_tps_active": 100.0,
        "requests_per_minute": 3.0, "completed_requests": 1, "n": 2, "n_active": 1,
    }
    assert out["Qwen3.5-9B"]["concurrency"]["1"]["requests_per_minute"] is None
    assert out["Qwen3.5-9B"]["spec_decode"] is None
    assert out["Qwen3.5-27B"]["spec_decode"] == {
        "n": 1, "mean_acceptance_length": 2.41, "draft_acceptance_rate": 61.2,
        "accepted_tokens": 10, "drafted_tokens": 20,
    }


def test_spec_decode_skips_nan_and_keeps_counts_only_when_given() -> None:
    spec = SpecDecodeBuilder()
    spec.add(mean_acceptance_length=2.0, draft_acceptance_rate=math.nan)
    spec.add(mean_acceptance_length=3.0, draft_acceptance_rate=50.0)
    result = spec.result()
    assert result is not None
    assert (result.n, result.mean_acceptance_length, result.draft_acceptance_rate) == (2, 2.5, 50.0)
    assert result.accepted_tokens is None and result.drafted_tokens is None
    assert SpecDecodeBuilder().result() is None


windows_strategy = st.lists(
    st.builds(
        Window,
        running=st.integers(0, 8),
        prompt_tps=st.sampled_from([0.0, 0.0, 12.5, 800.0, 4096.3]),
        generation_tps=st.floats(0, 5000, allow_nan=False),
        completed_requests=st.one_of(st.none(), st.integers(0, 5)),
    ),
    max_size=60,
)


@given(windows_strategy)
def test_builder_agrees_with_the_definition(windows: list[Window]) -> None:
    table = build_table("m", windows)
    by_level: dict[int, list[Window]] = defaultdict(list)
    for w in windows:
        if w.running > 0:
            by_level[w.running].append(w)
    assert set(table.cells) == set(by_level)
    assert table.idle_windows == sum(w.running == 0 for w in windows)
    for c, ws in by_level.items():
        cell = table.cells[c]
        assert cell.n == len(ws)
        assert cell.generation_tps == pytest.approx(sum(w.generation_tps for w in ws) / len(ws))
        active = [w.prompt_tps for w in ws if w.prompt_tps > 0]
        assert cell.n_active == len(active)
        assert cell.prompt_tps_active == (pytest.approx(sum(active) / len(active)) if active else None)
        counted = [w for w in ws if w.completed_requests is not None]
        if counted:
            done = sum(w.completed_requests or 0 for w in counted)
            assert cell.requests_per_minute == pytest.approx(done / (len(counted) * 10 / 60))
        else:
            assert cell.requests_per_minute is None


@given(windows_strategy, st.randoms(use_true_random=False))
def test_window_order_does_not_matter(windows: list[Window], rnd: random.Random) -> None:
    shuffled = list(windows)
    rnd.shuffle(shuffled)
    a, b = build_table("m", windows), build_table("m", shuffled)
    assert set(a.cells) == set(b.cells)
    for c in a.cells:
        assert a.cells[c].generation_tps == pytest.approx(b.cells[c].generation_tps)
        assert a.cells[c].n == b.cells[c].n


def test_builder_adds_incrementally_as_live_windows_arrive() -> None:
    builder = TableBuilder("live")
    builder.add(Window(2, 0.0, 100.0, 1))
    assert builder.table().cells[2].generation_tps == 100.0
    builder.add(Window(2, 0.0, 50.0, 0))
    assert builder.table().cells[2].generation_tps == 75.0
