"""`allowlist-proxy import-vllm-log`: registered on a parser of our own, run as the CLI runs it."""

from __future__ import annotations

import argparse
import io
import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from proxy.cli.import_vllm_log import register, run

from .vllm_log_fixtures import QWEN_9B, QWEN_27B, render_log


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="allowlist-proxy")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["import-vllm-log", *argv])
    assert args.func is run
    return args.func(args)


@pytest.fixture
def seed_logs(write_log: Callable[..., Path]) -> list[str]:
    return [
        str(write_log("Qwen3.5-27B.log", QWEN_27B, "docker_timestamps")),
        str(write_log("Qwen3.5-9B.log", QWEN_9B, "v0")),
    ]


# The seed's tables for the two generated logs, cell for cell (worked out in vllm_log_fixtures).
SEED_TEXT = """\
Generation throughput (tokens/s): mean per window, idle windows included; (n) windows
Concurrency  Qwen3.5-27B  Qwen3.5-9B
1               85.0 (8)   140.3 (2)
2              150.0 (6)   260.0 (1)
3              200.2 (3)           -
4              210.3 (2)           -
5                      -           -
6              240.0 (1)           -

Prefill throughput (tokens/s), sustained: mean over all windows; (n) windows
Concurrency  Qwen3.5-27B  Qwen3.5-9B
1              500.0 (8)    50.0 (2)
2              100.0 (6)     0.0 (1)
3               10.0 (3)           -
4                0.0 (2)           -
5                      -           -
6             5000.0 (1)           -

Prefill throughput (tokens/s), active: mean over windows with prefill > 0; (n) active windows
Concurrency  Qwen3.5-27B  Qwen3.5-9B
1             1333.3 (3)   100.0 (1)
2              600.0 (1)           -
3               15.0 (2)           -
4                      -           -
5                      -           -
6             5000.0 (1)           -

Completed requests per minute: 2xx completions in the windows / their minutes; (n) windows
Concurrency  Qwen3.5-27B  Qwen3.5-9B
1                1.5 (8)     6.0 (2)
2                3.0 (6)     0.0 (1)
3                4.0 (3)           -
4                0.0 (2)           -
5                      -           -
6                6.0 (1)           -

Speculative decoding: mean over logged intervals; (n) intervals
                           Qwen3.5-27B  Qwen3.5-9B
Mean acceptance length        2.50 (2)           -
Draft acceptance rate (%)     65.6 (2)           -
"""


def test_text_reproduces_the_seed_tables(seed_logs: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert _cli(seed_logs) == 0
    out, err = capsys.readouterr()
    assert out == SEED_TEXT
    assert "26 stats, 11 completed requests (7 failed, 0 after the last window), 2 spec-decode" in err
    assert "warning" not in err and "\r" not in err  # no progress line when stderr is no terminal


def test_markdown(seed_logs: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert _cli([*seed_logs, "--markdown"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("""\
**Generation throughput (tokens/s): mean per window, idle windows included; (n) windows**

| Concurrency | Qwen3.5-27B | Qwen3.5-9B |
|---|---:|---:|
| 1 | 85.0 (8) | 140.3 (2) |
| 2 | 150.0 (6) | 260.0 (1) |
| 3 | 200.2 (3) | - |
| 4 | 210.3 (2) | - |
| 5 | - | - |
| 6 | 240.0 (1) | - |
""")
    assert "| 1 | 1333.3 (3) | 100.0 (1) |" in out
    assert "| Mean acceptance length | 2.50 (2) | - |" in out


def test_json(seed_logs: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert _cli([*seed_logs, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["window_seconds"] == 10.0 and doc["files"] == seed_logs
    assert list(doc["models"]) == ["Qwen3.5-27B", "Qwen3.5-9B"]
    assert doc["models"]["Qwen3.5-27B"]["concurrency"]["1"] == {
        "generation_tps": 85.0, "prompt_tps": 500.0, "prompt_tps_active": 1333.333,
        "requests_per_minute": 1.5, "completed_requests": 2, "n": 8, "n_active": 3,
    }
    assert doc["models"]["Qwen3.5-27B"]["spec_decode"]["mean_acceptance_length"] == 2.5
    assert doc["lines"]["malformed_stats"] == 0 and doc["lines"]["stats"] == 26


def test_model_names_once_for_all_or_once_per_file(
    seed_logs: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert _cli([*seed_logs, "--json", "--model", "a", "--model", "b"]) == 0
    assert list(json.loads(capsys.readouterr().out)["models"]) == ["a", "b"]
    assert _cli([*seed_logs, "--json", "--model", "same"]) == 0
    assert list(json.loads(capsys.readouterr().out)["models"]) == ["same"]
    assert _cli([seed_logs[0], "--model", "a", "--model", "b"]) == 2
    assert "--model given 2 times for 1 files" in capsys.readouterr().err


def test_window_seconds(seed_logs: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert _cli([seed_logs[0], "--json", "--window-seconds", "20"]) == 0
    assert json.loads(capsys.readouterr().out)["models"]["Qwen3.5-27B"]["concurrency"]["1"][
        "requests_per_minute"] == 0.75
    with pytest.raises(SystemExit) as exc:
        _cli([seed_logs[0], "--window-seconds", "0"])
    assert exc.value.code == 2


def test_missing_file_is_a_clear_error(seed_logs: list[str], tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert _cli([seed_logs[0], str(tmp_path / "nope.log")]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"import-vllm-log: error: {tmp_path / 'nope.log'}: no such file\n"
    assert _cli([str(tmp_path)]) == 2
    assert "is not a file" in capsys.readouterr().err


def test_garbage_is_reported_not_fatal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "junk.log"
    path.write_bytes(b"\xff\xfe\x00 nothing here\nINFO Avg prompt throughput: ?? tokens/s\n" * 3)
    assert _cli([str(path)]) == 0
    out, err = capsys.readouterr()
    assert out == "No vLLM stats windows found.\n"
    assert "warning: 3 lines looked like vLLM stats lines and 0 like spec-decode lines" in err
    assert "no vLLM stats lines" in err


def test_stdin(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    text = render_log(QWEN_9B, "compose", model="Qwen3.5-9B")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    assert _cli(["-", "--json"]) == 0
    assert list(json.loads(capsys.readouterr().out)["models"]) == ["Qwen3.5-9B"]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_only_on_a_terminal(seed_logs: list[str], monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert _cli([seed_logs[0], "--json"]) == 0
    shown = terminal.getvalue()
    assert shown.startswith(f"\rimport-vllm-log: {seed_logs[0]} ")
    assert "\r\x1b[K" in shown  # the line is wiped before anything else is printed
    json.loads(capsys.readouterr().out)  # stdout stays clean JSON
