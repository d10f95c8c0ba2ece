"""Every start-up or configuration mistake ends `serve` with one or two lines that name the setting, exit 2,
and no traceback; a config file and the environment configure the same settings as the flags."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from proxy.banner import changed_settings
from proxy.cli import main
from proxy.config import FLAT, ConfigError, Settings
from tests.conftest import ROOT, STRICT_POLICY


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(__import__("os").environ):
        if name.startswith("ALLOWLIST_PROXY_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def serve_error(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    code = main(["serve", "--policy", str(STRICT_POLICY), *args])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err and 1 <= len(err.strip().splitlines()) <= 2, err
    return err


@pytest.mark.parametrize(("args", "setting", "hint"), [
    (["--port", "abc"], "port", "valid integer"),
    (["--log-level", "verbose"], "log_level", "debug, info, warning, error"),
    (["--model-aliases", "{bad"], "model_aliases", "JSON object"),
    (["--db", "store.db"], "db", "sqlite:///store.db"),
    (["--db", "mysql://u:p@host/db"], "db", "not supported"),
    (["--db", "sqlite:///missing/dir/x.db"], "db", "does not exist"),
    (["--db", "postgresql://u:p@127.0.0.1:1/x"], "db", "running"),
    (["--policy", "nowhere.yaml"], "policy", "does not exist"),
    (["--config", "nowhere.yaml"], "config", "does not exist"),
])
def test_a_bad_setting_is_one_line_naming_it(capsys, tmp_path, args, setting, hint):
    err = serve_error(capsys, "--db", f"sqlite:///{tmp_path / 'x.db'}", *args)
    assert f"setting {setting}:" in err and hint in err


def test_a_policy_typo_names_the_file_line_and_key(capsys, tmp_path):
    typo = tmp_path / "typo.yaml"
    typo.write_text(STRICT_POLICY.read_text().replace("mode: enforce", "mode: enforse", 1))
    err = serve_error(capsys, "--db", f"sqlite:///{tmp_path / 'x.db'}", "--policy", str(typo))
    assert "setting policy:" in err and "typo.yaml:" in err and "enforse" in err


def test_a_busy_port_says_so(capsys, tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        err = serve_error(capsys, "--db", f"sqlite:///{tmp_path / 'x.db'}", "--port", str(busy.getsockname()[1]))
    assert "setting port:" in err and "already in use" in err


def test_debug_level_keeps_the_traceback(capsys):
    with pytest.raises(ValueError):
        main(["serve", "--log-level", "debug", "--port", "abc"])


def test_an_unknown_key_in_the_config_file_is_named(capsys, tmp_path):
    (tmp_path / "allowlist-proxy.yaml").write_text("prot: 9000\n")
    err = serve_error(capsys)
    assert "setting prot:" in err and "allowlist-proxy.yaml" in err


def test_config_file_then_environment_then_flags(monkeypatch, tmp_path):
    (tmp_path / "allowlist-proxy.yaml").write_text(
        "port: 9001\nlog_level: warning\nupstreams:\n"
        "  - {url: 'http://a:8000/v1/', models: [qwen3.5-27b]}\n  - {url: 'http://b:8000/v1', api_key: k}\n")
    settings = Settings()
    assert settings.http.port == 9001 and settings.telemetry.log_level == "warning"
    assert [(u.url, u.models, u.api_key) for u in settings.upstream.routes()] == [
        ("http://a:8000/v1", ["qwen3.5-27b"], None), ("http://b:8000/v1", "auto", "k")]
    monkeypatch.setenv("ALLOWLIST_PROXY_PORT", "9002")
    assert Settings().http.port == 9002
    assert Settings.of(port=9003).http.port == 9003


def test_every_setting_is_a_serve_flag(capsys):
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    text = capsys.readouterr().out
    for name in (*FLAT, "config"):
        assert f"--{name.replace('_', '-')}" in text, name
    assert "examples:" in text


def test_a_closed_pipe_ends_quietly(tmp_path):
    batch = tmp_path / "calls.jsonl"
    batch.write_text('{"cmd": "uv run scripts/search.py x"}\n' * 20000)  # far more than a pipe buffers
    pipeline = subprocess.run(f"{sys.executable} -m proxy check --policy {STRICT_POLICY} --jsonl < {batch} | head -1",
                              shell=True, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert '"decision": "allow"' in pipeline.stdout
    assert "Traceback" not in pipeline.stderr and "Exception" not in pipeline.stderr, pipeline.stderr


def test_extract_feeds_check(tmp_path):
    output = "<tool_call>\n<function=bash>\n<parameter=command>\nuv run scripts/search.py x | head\n" \
             "</parameter>\n</function>\n</tool_call>"
    pipeline = subprocess.run(f"{sys.executable} -m proxy extract --calls | "
                              f"{sys.executable} -m proxy check --policy {STRICT_POLICY} --jsonl",
                              shell=True, cwd=ROOT, input=output, capture_output=True, text=True, timeout=120)
    (line,) = pipeline.stdout.splitlines()
    call = {"tool": "bash", "arguments": {"command": "uv run scripts/search.py x | head"}}
    assert json.loads(line) == {"input": call, "decision": "reject", "reasons": ["pipe"], "shape": "pipe"}


@pytest.mark.parametrize("command", ["serve", "check", "extract", "stats", "report", "recheck", "db", "import-vllm-log",
                                     "demo"])
def test_every_command_help_has_examples(capsys, command):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    assert "examples:\n  allowlist-proxy" in capsys.readouterr().out


def test_the_live_throughput_tables_come_as_markdown_too():
    from proxy.throughput.live import render_live_tables

    cell = {"generation_tps": 5.0, "prompt_tps": 1.0, "prompt_tps_active": 2.0, "requests_per_minute": 1.0,
            "completed_requests": 1, "n": 2, "n_active": 1}
    latency = {"requests": 3, "ttft_ms_p50": 1.0, "ttft_ms_p99": 2.0, "tpot_ms_p50": 1.0, "tpot_ms_p99": 2.0}
    result = {"m": {"windows": 2, "idle_windows": 0, "window_seconds": [10.0], "spec_decode": None,
                    "concurrency": {"1": cell}, "latency": {"1": latency}}}
    text = render_live_tables(result, markdown=True)
    assert text.count("|---|---:|") == 6 and "| 1 | 1.0 / 2.0 (3) |" in text


def test_a_bad_environment_variable_is_named(capsys, monkeypatch):
    monkeypatch.setenv("ALLOWLIST_PROXY_MODEL_ALIASES", "{bad")
    err = serve_error(capsys)
    assert "model_aliases" in err and "ALLOWLIST_PROXY_" in err


def test_the_banner_warns_about_what_will_fail():
    from proxy.banner import config_warnings

    assert config_warnings(Settings(upstream="http://127.0.0.1:8000/v1")) == []
    no_v1, = config_warnings(Settings(upstream="http://127.0.0.1:8000"))
    assert "does not end in /v1" in no_v1 and "http://127.0.0.1:8000/v1" in no_v1
    no_scheme, = config_warnings(Settings(upstream="gpu-box:8000/v1"))
    assert "no http:// or https:// scheme" in no_scheme and "http://gpu-box:8000/v1" in no_scheme
    (open_port,) = config_warnings(Settings(host="0.0.0.0"))
    assert "admin_token" in open_port
    assert config_warnings(Settings(host="0.0.0.0", admin_token="t")) == []
    assert config_warnings(Settings(host="::1")) == []


@pytest.mark.parametrize("command", [["report"], ["completion"], ["db", "upgrade"], ["db", "current"],
                                     ["db", "history"], ["db", "rebuild-rollups"], ["db", "prune"],
                                     ["db", "export"]])
def test_every_subcommand_help_has_examples_too(capsys, command):
    with pytest.raises(SystemExit):
        main([*command, "--help"])
    assert "examples:\n  " in capsys.readouterr().out


def test_switches_and_choices_show_in_the_usage(capsys):
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    text = capsys.readouterr().out
    assert "--policy-header | --no-policy-header" in text
    assert "--on-store-failure {refuse,continue}" in text and "--log-level {debug,info,warning,error}" in text
    with pytest.raises(SystemExit):
        main(["serve", "--policy-header", "yes"])  # a switch takes no value


def test_a_switch_sets_the_setting(monkeypatch):
    from proxy.cli.serve import settings_from

    parser = __import__("proxy.cli", fromlist=["build_parser"]).build_parser()
    assert settings_from(parser.parse_args(["serve", "--no-policy-header"])).policy.header is False
    assert settings_from(parser.parse_args(["serve", "--policy-header"])).policy.header is True


def test_a_mistyped_setting_in_the_config_file_gets_a_suggestion(capsys, tmp_path):
    (tmp_path / "allowlist-proxy.yaml").write_text("retention_dayz: 30\n")
    err = serve_error(capsys)
    assert "did you mean 'retention_days'?" in err


def test_a_yaml_error_in_the_config_file_is_one_line_with_file_and_line(capsys, tmp_path):
    (tmp_path / "allowlist-proxy.yaml").write_text("port: 9000\nupstream: [http://a\nlog_level: info\n")
    err = serve_error(capsys)
    assert len(err.strip().splitlines()) == 1 and "allowlist-proxy.yaml:3:" in err, err


def test_stats_for_an_unknown_model_says_so(capsys, tmp_path):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    assert main(["db", "upgrade", "--db", url]) == 0
    capsys.readouterr()
    assert main(["stats", "--db", url, "--model", "qwen3.5-72b"]) == 2
    assert "no model 'qwen3.5-72b' in the store" in capsys.readouterr().err


def test_completion_knows_the_subcommands_and_their_options(tmp_path):
    import shutil
    import subprocess

    from proxy.cli.completion import script

    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("bash not installed")
    (tmp_path / "complete.sh").write_text(script("bash"))
    probe = ('source complete.sh; COMP_WORDS=(allowlist-proxy db pr); COMP_CWORD=2; _allowlist_proxy; '
             'echo "${COMPREPLY[@]}"; COMP_WORDS=(allowlist-proxy db export --fo); COMP_CWORD=3; '
             '_allowlist_proxy; echo "${COMPREPLY[@]}"; COMP_WORDS=(allowlist-proxy serve --no-pol); '
             'COMP_CWORD=2; _allowlist_proxy; echo "${COMPREPLY[@]}"')
    out = subprocess.run([bash, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=30).stdout
    assert out.splitlines() == ["prune", "--format", "--no-policy-header"]


@pytest.mark.parametrize("command", [["serve"], ["check"], ["extract"], ["stats"], ["report"], ["recheck"],
                                     ["db", "prune"], ["import-vllm-log"], ["demo"], ["completion"]])
def test_help_is_wrapped_to_the_terminal(capsys, monkeypatch, command):
    monkeypatch.setenv("COLUMNS", "100")
    with pytest.raises(SystemExit):
        main([*command, "--help"])
    text = capsys.readouterr().out
    assert max(len(line) for line in text.splitlines()) <= 100, text
    for internal in ("seed", "lineage", "rollups)", "_pool", "journal"):
        assert internal not in text, internal


def test_settings_are_grouped_and_the_flat_names_still_work(monkeypatch, tmp_path):
    """Six groups in the code (`settings.store.release_timeout_seconds`), the flat names operators know in the
    environment, the config file and the flags; a group may also be written whole in the config file."""
    monkeypatch.setenv("ALLOWLIST_PROXY_STORE_RELEASE_TIMEOUT_SECONDS", "7")
    monkeypatch.setenv("ALLOWLIST_PROXY_MAX_BODY_BYTES", "1234")
    (tmp_path / "allowlist-proxy.yaml").write_text("store:\n  batch_size: 200\n  on_store_failure: continue\n"
                                                   "upstream: http://gpu:8000/v1\nlog_format: console\n")
    monkeypatch.chdir(tmp_path)
    settings = Settings()
    assert settings.store.release_timeout_seconds == 7 and settings.http.max_body_bytes == 1234
    assert settings.store.batch_size == 200 and settings.store.on_failure == "continue"
    assert settings.upstream.url == "http://gpu:8000/v1" and settings.telemetry.log_format == "console"
    assert Settings.of(store_batch_size=9).store.batch_size == 9  # a flag, by its flat name
    (tmp_path / "allowlist-proxy.yaml").write_text("store:\n  batch_sise: 200\n")
    with pytest.raises(ConfigError, match="did you mean 'batch_size'"):
        Settings()


def test_help_and_banner_group_the_settings(capsys):
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    text = capsys.readouterr().out
    order = [text.index(f"{group} settings:") for group in ("upstream", "store", "http", "policy", "stats",
                                                            "telemetry")]
    assert order == sorted(order)
    section = text[text.index("store settings:"):text.index("http settings:")]
    assert "--store-release-timeout-seconds" in section and "--max-body-bytes" not in section
    changed = changed_settings(Settings.of(admin_token="s3cret", retention_days=30, max_connections=10))
    assert changed == {"store": {"retention_days": "30.0"}, "http": {"admin_token": "***", "max_connections": "10"}}
