"""The pure parts: time parsing, medians from histograms, and the table renderers."""

from __future__ import annotations

import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.stats.models import loops_table, median_from_histogram, parse_time, reasons_table, render_table, seed_table


def test_parse_time():
    assert parse_time(None) is None and parse_time("") is None
    assert parse_time("1800000000.5") == 1800000000.5
    assert parse_time(12) == 12.0
    assert parse_time("2027-01-15T08:00:00Z") == parse_time("2027-01-15T08:00:00+00:00") == 1800000000.0
    assert parse_time("2027-01-15T08:00:00") == 1800000000.0  # naive means UTC
    assert parse_time("2027-01-15T09:00:00+01:00") == 1800000000.0
    assert parse_time("24h", now=1000000.0) == 1000000.0 - 86400
    assert parse_time("90m", now=10000.0) == 10000.0 - 5400
    with pytest.raises(ValueError, match="ISO 8601"):
        parse_time("yesterday")


@given(st.lists(st.integers(1, 6), min_size=1, max_size=50))
def test_median_from_histogram_is_the_median(values):
    histogram: dict[int, int] = {}
    for v in values:
        histogram[v] = histogram.get(v, 0) + 1
    assert median_from_histogram(histogram) == statistics.median(values)


def test_median_of_nothing():
    assert median_from_histogram({}) is None


STATS = {"window": {"since": None, "until": None}, "models": [
    {"model": "big-model", "sessions": 3, "tool_calls": 40, "errors": 2, "error_rate": 0.05,
     "reasons": {"pipe": 2, "chain": 1}, "loops": {"count": 1, "max_attempts": 4, "mean_attempts": 4.0,
                                                    "exact_repeats": 0},
     "recovery_rate": 0.5, "median_attempts": 1.5},
    {"model": "m", "sessions": 0, "tool_calls": 0, "errors": 0, "error_rate": None, "reasons": {},
     "loops": {"count": 0, "max_attempts": 0, "mean_attempts": None, "exact_repeats": 0},
     "recovery_rate": None, "median_attempts": None},
]}


def test_seed_table_text_and_markdown():
    assert seed_table(STATS).splitlines() == [
        "Model     | Sessions | Tool calls | Errors | Err/tool",
        "----------+----------+------------+--------+---------",
        "big-model |        3 |         40 |      2 |     5.0%",
        "m         |        0 |          0 |      0 |        -",
    ]
    assert seed_table(STATS, markdown=True).splitlines() == [
        "| Model | Sessions | Tool calls | Errors | Err/tool |",
        "|---|---:|---:|---:|---:|",
        "| big-model | 3 | 40 | 2 | 5.0% |",
        "| m | 0 | 0 | 0 | - |",
    ]


def test_reasons_table_sorted_by_total():
    assert reasons_table(STATS).splitlines() == [
        "Reason | big-model | m",
        "-------+-----------+--",
        "pipe   |         2 | 0",
        "chain  |         1 | 0",
    ]


def test_loops_table():
    assert loops_table(STATS).splitlines()[2:] == [
        "big-model |     1 |             0 |       4 |           4 |    50.0% |             1.5",
        "m         |     0 |             0 |       - |           - |        - |               -",
    ]


def test_render_table_without_rows():
    assert render_table(["A", "Bee"], [], right=[False, True]).splitlines() == ["A | Bee", "--+----"]
