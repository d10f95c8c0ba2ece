"""Log layouts beyond one server per stream: data-parallel engines, `kubectl logs --prefix`, restarts.

Stats lines use vLLM's own format strings (v1 `loggers.py`, >= 0.9): per engine
"Engine %03d: Avg prompt throughput: %.1f tokens/s, Avg generation throughput: %.1f tokens/s,
Running: %d reqs, Waiting: %d reqs, GPU KV cache usage: %.1f%%, Prefix cache hit rate: %.1f%%".
"""

from __future__ import annotations

from pathlib import Path

from proxy.throughput import LogImport, tables_to_json

from .test_vllm_log_import import EXPECTED_27B
from .vllm_log_fixtures import QWEN_9B, QWEN_27B, render_log

_ENGINE = ("INFO {t} [loggers.py:123] Engine {e:03d}: Avg prompt throughput: {p:.1f} tokens/s, "
           "Avg generation throughput: {g:.1f} tokens/s, Running: {r} reqs, Waiting: 0 reqs, "
           "GPU KV cache usage: 3.1%, Prefix cache hit rate: 45.0%")
_DONE = 'INFO:     127.0.0.1:40000 - "POST /v1/chat/completions HTTP/1.1" 200 OK'
_CONFIG = ("INFO 12-01 10:00:00 [core.py:77] Initializing a V1 LLM engine (v0.11.0) with config: "
           "model='/models/{m}', speculative_config=None, served_model_name={m}, enable_prefix_caching=True")

# Per moment: (completions logged before it, [(engine, running, prompt tps, generation tps), ...]).
# Engines log in either order within a moment.
_DP_MOMENTS = [
    (3, [(0, 1, 100.0, 50.0), (1, 2, 0.0, 90.0)]),  # server: c=3, gen 140, prompt 100, 3 done
    (0, [(1, 1, 0.0, 45.0), (0, 2, 0.0, 95.0)]),  # c=3, gen 140, prompt 0, 0 done
    (1, [(0, 0, 0.0, 0.0), (1, 1, 0.0, 48.0)]),  # c=1, gen 48, 1 done
    (0, [(0, 0, 0.0, 0.0), (1, 0, 0.0, 0.0)]),  # idle
]
# c=3: 2 windows, gen (140+140)/2 = 140.0, prefill (100+0)/2 = 50.0, active 100.0 (1), 3 requests / 20 s = 9.0/min
# c=1: 1 window, gen 48.0, 1 request / 10 s = 6.0/min. Counted per engine instead, c=1 and c=2 would
# each get requests that the server completed at c=3.
_DP_EXPECTED = {
    "1": {"generation_tps": 48.0, "prompt_tps": 0.0, "prompt_tps_active": None,
          "requests_per_minute": 6.0, "completed_requests": 1, "n": 1, "n_active": 0},
    "3": {"generation_tps": 140.0, "prompt_tps": 50.0, "prompt_tps_active": 100.0,
          "requests_per_minute": 9.0, "completed_requests": 3, "n": 2, "n_active": 1},
}


def _dp_log(model: str) -> list[str]:
    out = [_CONFIG.format(m=model), _CONFIG.format(m=model)]  # one start-up line per engine core
    for i, (done, engines) in enumerate(_DP_MOMENTS):
        out += [_DONE] * done
        t = f"12-01 10:00:{10 * (i + 1):02d}"
        out += [_ENGINE.format(t=t, e=e, r=r, p=p, g=g) for e, r, p, g in engines]
    return out


def _import(path: Path, model: str | None = None) -> LogImport:
    importer = LogImport()
    importer.feed_file(path, model=model)
    return importer


def test_data_parallel_engines_make_one_window_per_moment(tmp_path: Path) -> None:
    (tmp_path / "dp.log").write_text("\n".join(_dp_log("Qwen3.5-27B")) + "\n")
    result = _import(tmp_path / "dp.log").result()
    out = tables_to_json(result.tables)
    assert out["Qwen3.5-27B"]["concurrency"] == _DP_EXPECTED
    assert (out["Qwen3.5-27B"]["windows"], out["Qwen3.5-27B"]["idle_windows"]) == (4, 1)
    assert (result.lines.stats, result.lines.completions, result.lines.completions_unbinned) == (8, 4, 0)


def test_an_engine_that_skips_a_moment_does_not_merge_two_moments(tmp_path: Path) -> None:
    # vLLM logs an idle engine's interval at debug level: engine 001 is missing at 10:00:20, then logs first.
    lines = [
        _ENGINE.format(t="12-01 10:00:10", e=0, r=1, p=0.0, g=50.0),
        _ENGINE.format(t="12-01 10:00:10", e=1, r=1, p=0.0, g=50.0),
        _DONE,
        _ENGINE.format(t="12-01 10:00:20", e=0, r=1, p=0.0, g=50.0),
        _ENGINE.format(t="12-01 10:00:30", e=1, r=2, p=0.0, g=90.0),
        _ENGINE.format(t="12-01 10:00:30", e=0, r=1, p=0.0, g=50.0),
    ]
    (tmp_path / "dp.log").write_text("\n".join(lines) + "\n")
    cells = _import(tmp_path / "dp.log").result().tables[0].cells
    assert {c: (cell.n, cell.generation_tps, cell.completed_requests) for c, cell in cells.items()} == {
        1: (1, 50.0, 1), 2: (1, 100.0, 0), 3: (1, 140.0, 0)}


def test_an_aggregated_line_stands_for_its_moment(tmp_path: Path) -> None:
    lines = _dp_log("m")
    aggregated = ("INFO 12-01 10:00:10 [loggers.py:200] 2 Engines Aggregated: Avg prompt throughput: 100.0 "
                  "tokens/s, Avg generation throughput: 140.0 tokens/s, Running: 3 reqs, Waiting: 0 reqs")
    (tmp_path / "agg.log").write_text("\n".join([*lines[:6], aggregated, *lines[6:]]) + "\n")
    cells = _import(tmp_path / "agg.log").result().tables[0].cells
    assert (cells[3].n, cells[3].completed_requests) == (2, 3)


def _kubectl(prefix: str, text: str) -> list[str]:
    return [f"[pod/{prefix}/vllm] {line}" for line in text.splitlines()]


def test_kubectl_prefixed_pods_are_servers_of_their_own_models(tmp_path: Path) -> None:
    big = _kubectl("vllm-27b-5c9d8-abcde", render_log(QWEN_27B, "v1_engine", model="Qwen3.5-27B"))
    small = _kubectl("vllm-9b-7f6b4-fghij", render_log(QWEN_9B, "docker_timestamps", model="Qwen3.5-9B"))
    mixed: list[str] = []
    for i in range(max(len(big), len(small))):
        mixed += small[i:i + 1] + big[i:i + 1]
    (tmp_path / "pods.log").write_text("\n".join(mixed) + "\n")
    out = tables_to_json(_import(tmp_path / "pods.log").result().tables)
    assert sorted(out) == ["Qwen3.5-27B", "Qwen3.5-9B"]
    assert out["Qwen3.5-27B"]["concurrency"] == EXPECTED_27B
    small_cells = out["Qwen3.5-9B"]["concurrency"]
    assert (small_cells["1"]["completed_requests"], small_cells["1"]["generation_tps"]) == (2, 140.25)


def test_a_pod_without_a_start_up_line_is_named_by_its_prefix(tmp_path: Path) -> None:
    lines = _kubectl("vllm-a-1", render_log(QWEN_9B, "v1_engine")) + _kubectl(
        "vllm-b-2", render_log(QWEN_9B, "v1_engine"))
    (tmp_path / "pods.log").write_text("\n".join(lines) + "\n")
    assert sorted(tables_to_json(_import(tmp_path / "pods.log").result().tables)) == [
        "vllm-a-1/vllm", "vllm-b-2/vllm"]


def test_a_restart_closes_the_previous_run(tmp_path: Path) -> None:
    # A request the 27B run logged after its last stats line must not count for the 9B run.
    text = (render_log(QWEN_27B, "v1_engine", model="Qwen3.5-27B") + _DONE + "\n"
            + render_log(QWEN_9B, "v1_engine", model="Qwen3.5-9B"))
    (tmp_path / "restart.log").write_text(text)
    result = _import(tmp_path / "restart.log").result()
    out = tables_to_json(result.tables)
    assert out["Qwen3.5-27B"]["concurrency"] == EXPECTED_27B
    assert out["Qwen3.5-9B"]["concurrency"]["1"]["completed_requests"] == 2
    assert result.lines.completions_unbinned == 1


def test_a_data_parallel_restart_with_another_model(tmp_path: Path) -> None:
    text = "\n".join([*_dp_log("Qwen3.5-27B"), _DONE, *_dp_log("Qwen3.5-9B")]) + "\n"
    (tmp_path / "restart.log").write_text(text)
    result = _import(tmp_path / "restart.log").result()
    out = tables_to_json(result.tables)
    assert out["Qwen3.5-27B"]["concurrency"] == _DP_EXPECTED
    assert out["Qwen3.5-9B"]["concurrency"] == _DP_EXPECTED
    assert result.lines.completions_unbinned == 1
