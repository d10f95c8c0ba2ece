"""`allowlist-proxy extract` agrees with the library's streamed and whole paths on every case."""

from __future__ import annotations

import argparse
import io
import json
import random
import sys
from pathlib import Path
from typing import Any

import pytest

from proxy.cli.extract import register, render
from proxy.toolcalls import ChoiceStream, extract_from_message, extract_from_text

from .helpers import run_stream
from .toolcall_cases import CASES, LS, Case, chunk, random_cuts, response, sse, text


def cli(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: list[str], stdin: str
) -> tuple[int, list[Any], str]:
    parser = argparse.ArgumentParser(prog="allowlist-proxy")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["extract", *argv])
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    code = args.func(args)
    out, err = capsys.readouterr()
    return code, [json.loads(line) for line in out.split("\n") if line], err  # not splitlines: U+2028


def tools_args(case: Case, tmp_path: Path) -> list[str]:
    if case.tools is None:
        return []
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(case.tools))
    return ["--tools", str(path)]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_cli_agrees_with_the_streamed_path(
    case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    flags = tools_args(case, tmp_path)
    whole = render(extract_from_message(case.message, case.tools))
    rng = random.Random(str(case))
    recording = sse(case.message, lambda t: random_cuts(rng, t))
    code, [streamed], _ = cli(monkeypatch, capsys, ["--sse", *flags], recording)
    assert code == 0
    rng = random.Random(str(case))
    library = render(run_stream(ChoiceStream(case.tools), case.message, lambda t: random_cuts(rng, t)))
    assert streamed == library == whole

    code, [from_response], _ = cli(monkeypatch, capsys, ["--response", *flags], json.dumps(response(case.message)))
    assert code == 0 and from_response == whole

    if set(case.message) <= {"role", "content"}:
        code, [raw], _ = cli(monkeypatch, capsys, flags, case.message["content"])
        assert code == 0 and raw == whole == render(extract_from_text(case.message["content"], case.tools))


def test_output_shape(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    code, [out], _ = cli(monkeypatch, capsys, [], "Hi\n" + LS + "<tool_call>\n<function=\n</tool_call>")
    assert code == 0
    assert out == {
        "content": "Hi\n",
        "tool_calls": [{"name": "bash", "arguments": {"command": "ls -la"}}],
        "malformed": [{"raw": "<function=\n", "error": "function name is not closed by '>'"}],
    }


def test_tools_file_may_be_a_request_body(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    body = tmp_path / "request.json"
    body.write_text(
        json.dumps(
            {
                "model": "m",
                "tools": [
                    {
                        "type": "function",
                        "function": {
                            "name": "read",
                            "parameters": {"type": "object", "properties": {"limit": {"type": "number"}}},
                        },
                    }
                ],
            }
        )
    )
    stdin = "<tool_call>\n<function=read>\n<parameter=limit>\n5\n</parameter>\n</function>\n</tool_call>"
    _, [out], _ = cli(monkeypatch, capsys, ["--tools", str(body)], stdin)
    assert out["tool_calls"] == [{"name": "read", "arguments": {"limit": 5}}]


def test_sse_with_two_choices_crlf_and_an_error_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = [
        chunk({"role": "assistant", "content": ""}, index=1),
        chunk({"content": "B\u2028" + LS[:20]}, index=1),
        chunk({"content": "A"}, index=0),
        chunk({"content": LS[20:]}, index=1),
        chunk({}, "stop", index=0),
        {"error": {"message": "boom", "type": "internal", "param": None, "code": 500}},
    ]
    recording = ": keep-alive\r\n" + "".join(f"data:{json.dumps(x, ensure_ascii=False)}\r\n\r\n" for x in lines)
    code, outs, err = cli(monkeypatch, capsys, ["--sse"], recording + "data: not json\r\ndata: [DONE]\r\n")
    assert code == 0
    assert outs == [
        {"content": "A", "tool_calls": [], "malformed": []},
        {
            "content": "B\u2028",
            "tool_calls": [{"name": "bash", "arguments": {"command": "ls -la"}}],
            "malformed": [],
        },
    ]
    assert "boom" in err and "not JSON" in err


def test_response_with_two_choices_and_legacy_text(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    body = {"choices": [{"index": 0, "message": text("x")}, {"index": 1, "text": LS}]}
    _, outs, _ = cli(monkeypatch, capsys, ["--response"], json.dumps(body))
    assert [o["content"] for o in outs] == ["x", ""]
    assert outs[1]["tool_calls"] == [{"name": "bash", "arguments": {"command": "ls -la"}}]


def test_empty_and_error_responses_print_one_empty_result(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    error = {"error": {"message": "m", "type": "t", "param": None, "code": 400}}
    for argv, stdin in ((["--response"], json.dumps(error)), (["--sse"], ""), ([], "")):
        code, outs, _ = cli(monkeypatch, capsys, argv, stdin)
        assert (code, outs) == (0, [{"content": "", "tool_calls": [], "malformed": []}])


def test_bad_input_exits_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    code, outs, err = cli(monkeypatch, capsys, ["--response"], "{not json")
    assert (code, outs) == (2, []) and "extract" in err
    code, outs, err = cli(monkeypatch, capsys, ["--tools", str(tmp_path / "missing.json")], "x")
    assert (code, outs) == (2, []) and "missing.json" in err


def test_jsonl_reads_every_kind_of_line_in_one_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    case = next(c for c in CASES if c.id == "opencode-bash-typed" and c.fmt == "qwen3_coder")
    whole = render(extract_from_message(case.message, case.tools))
    rng = random.Random(7)
    lines = [
        {"text": case.message["content"], "tools": case.tools},
        {"response": response(case.message), "tools": case.tools},
        {"sse": sse(case.message, lambda t: random_cuts(rng, t)), "tools": case.tools},
        {"nothing": 1},
        "not json",
    ]
    stdin = "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n"
    code, out, _ = cli(monkeypatch, capsys, ["--jsonl"], stdin)
    assert code == 0
    assert out[:3] == [whole, whole, whole]
    assert "error" in out[3] and out[4]["error"].startswith("line 5:")


def test_vllm_version_and_tool_parser_pick_the_rules(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    text_in = "<tool_call>\n<function=bash>\n<parameter=command>\n  ls  \n</parameter>\n</function>\n</tool_call>"
    _, [old], _ = cli(monkeypatch, capsys, [], text_in)
    _, [new], _ = cli(monkeypatch, capsys, ["--vllm-version", "0.24.0", "--tool-parser", "qwen3_xml"], text_in)
    assert old["tool_calls"][0]["arguments"] == {"command": "  ls  "}
    assert new["tool_calls"][0]["arguments"] == {"command": "ls"}
    line = json.dumps({"text": text_in, "vllm_version": "0.24"})
    _, [per_line], _ = cli(monkeypatch, capsys, ["--jsonl"], line)
    assert per_line == new
    code, _, err = cli(monkeypatch, capsys, ["--vllm-version", "newest"], text_in)
    assert code == 2 and "unknown vLLM version" in err


def test_jsonl_agrees_with_vllm_on_its_own_test_inputs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The recorded vLLM answers, checked through the CLI in one process per version."""
    data = Path(__file__).parent / "data" / "vllm_qwen3_xml.jsonl"
    cases = [json.loads(line) for line in data.read_text(encoding="utf-8").splitlines()]
    for target in ("0.23/qwen3_coder", "0.27/qwen3_xml"):
        version, parser = target.split("/")
        stdin = "\n".join(json.dumps({"text": c["text"], "tools": c["tools"]}) for c in cases)
        code, out, _ = cli(monkeypatch, capsys, ["--jsonl", "--vllm-version", version, "--tool-parser", parser], stdin)
        assert code == 0 and len(out) == len(cases)
        agree = sum(
            [(t["name"], t["arguments"]) for t in result["tool_calls"]]
            == [(c["name"], c["arguments"]) for c in case["expected"][target]["calls"]]
            for case, result in zip(cases, out, strict=True)
        )
        assert agree >= len(cases) - 4  # the rest are the documented departures (malformed, not dropped)
