"""`allowlist-proxy extract`: the tool calls in a model's output, as the proxy sees them.

Reads stdin: a model's raw output text (default), a chat completion JSON (`--response`), or a
recorded SSE stream of `data: {...}` lines (`--sse`). The SSE mode replays the stream through
`ChoiceStream`, the proxy's own streaming path, so this command shows what the proxy would judge.
Prints one JSON object per choice: {"content", "tool_calls": [{"name", "arguments"}],
"malformed": [{"raw", "error"}]}; with `--calls`, one line per tool call, {"tool", "arguments"}, which
is what `allowlist-proxy check --jsonl` reads.

XML in content is read as a vLLM version family reads it: `--vllm-version V` (0.19, 0.23, 0.24,
0.26, 0.33, or any release such as 0.27.1; default 0.19) and `--tool-parser P` (qwen3_coder or
qwen3_xml). `--jsonl` reads one JSON object per line - `{"text": ..., "tools": [...]}` (raw output),
`{"response": {...}}` (a whole response) or `{"sse": "..."}` (a recorded stream), each optionally
with its own `"tools"`, `"vllm_version"` and `"tool_parser"` - and prints one line per input line:
the result object (a list of them for a response or stream with several choices), or
`{"error": ...}` for a line it cannot read, so thousands of cases are checked in one process.

examples:
  allowlist-proxy extract < model-output.txt
  allowlist-proxy extract --sse < recorded-stream.txt
  allowlist-proxy extract --calls < model-output.txt | allowlist-proxy check --jsonl
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any

from proxy.cli.command import add_command
from proxy.toolcalls import (
    ChoiceStream,
    CompletedCall,
    ExtractionResult,
    TextDelta,
    extract_from_response,
    extract_from_text,
)
from proxy.toolcalls.families import DEFAULT_RULES, PARSERS, XmlRules, rules_for

__all__ = ["extract_sse", "register", "render", "run", "run_jsonl"]

_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def register(subparsers: Any) -> None:
    parser = add_command(
        subparsers, "extract", help="print the tool calls found in model output, a response, or a recorded stream",
        description=__doc__,
    )
    parser.add_argument(
        "--tools",
        metavar="FILE",
        help="JSON file with the request's OpenAI `tools` array (or a request body holding one); "
        "types XML parameter values",
    )
    parser.add_argument("--vllm-version", metavar="V", default=DEFAULT_RULES.family,
                        help="read XML as this vLLM version does (e.g. 0.19, 0.23, 0.24, 0.27.1, 0.34); "
                        f"default {DEFAULT_RULES.family}")
    parser.add_argument("--tool-parser", metavar="P", choices=PARSERS, default=DEFAULT_RULES.parser,
                        help="the upstream's --tool-call-parser: qwen3_coder (default) or qwen3_xml")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--response", action="store_true", help="stdin is a chat completion JSON")
    mode.add_argument("--sse", action="store_true", help="stdin is a recorded SSE stream (data: lines)")
    mode.add_argument("--jsonl", action="store_true",
                      help='stdin holds one JSON object per line: {"text"|"response"|"sse": ..., "tools"?}')
    parser.add_argument("--calls", action="store_true",
                        help="print one {tool, arguments} line per call, the input of `check --jsonl`")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        tools = _load_tools(args.tools)
        rules = rules_for(args.vllm_version, args.tool_parser)
        if args.jsonl:
            return run_jsonl(sys.stdin, tools, rules)
        data = sys.stdin.read()
        if args.sse:
            results = extract_sse(data, tools, rules=rules)
        elif args.response:
            results = extract_from_response(json.loads(data), tools, rules=rules)
        else:
            results = [extract_from_text(data, tools, rules=rules)]
    except (OSError, ValueError) as exc:  # unreadable file, invalid JSON, unknown version
        print(f"allowlist-proxy extract: {exc}", file=sys.stderr)
        return 2
    if getattr(args, "calls", False):
        for result in results:
            for call in result.tool_calls:
                print(json.dumps({"tool": call.name, "arguments": call.arguments}, ensure_ascii=False))
        return 0
    for result in results or [ExtractionResult(content="")]:
        print(json.dumps(render(result), ensure_ascii=False))
    return 0


def run_jsonl(lines: Any, tools: list[dict[str, Any]] | None, rules: XmlRules) -> int:
    """One result line per input line; a line that cannot be read answers `{"error": ...}`."""
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            out: Any = _one_jsonl(json.loads(line), tools, rules)
        except (ValueError, TypeError) as exc:
            out = {"error": f"line {number}: {exc}"}
        print(json.dumps(out, ensure_ascii=False), flush=False)
    sys.stdout.flush()
    return 0


def _one_jsonl(item: Any, tools: list[dict[str, Any]] | None, rules: XmlRules) -> Any:
    if not isinstance(item, dict):
        raise ValueError("expected a JSON object")
    if "tools" in item:
        tools = item["tools"] if isinstance(item["tools"], list) else None
    if "vllm_version" in item or "tool_parser" in item:
        rules = rules_for(str(item.get("vllm_version", rules.family)), str(item.get("tool_parser", rules.parser)))
    if isinstance(item.get("text"), str):
        return render(extract_from_text(item["text"], tools, rules=rules))
    if isinstance(item.get("response"), dict):
        results = extract_from_response(item["response"], tools, rules=rules)
    elif isinstance(item.get("sse"), str):
        results = extract_sse(item["sse"], tools, rules=rules)
    else:
        raise ValueError('expected one of "text" (a string), "response" (an object), "sse" (a string)')
    rendered = [render(r) for r in results] or [render(ExtractionResult(content=""))]
    return rendered[0] if len(rendered) == 1 else rendered


def render(result: ExtractionResult) -> dict[str, Any]:
    return {
        "content": result.content,
        "tool_calls": [{"name": c.name, "arguments": c.arguments} for c in result.tool_calls],
        "malformed": [{"raw": c.raw, "error": c.error} for c in result.malformed],
    }


def extract_sse(
    text: str, tools: list[dict[str, Any]] | None = None, *, rules: XmlRules | None = None
) -> list[ExtractionResult]:
    """Replay a recorded chat completion stream through `ChoiceStream`, one result per choice."""
    streams: dict[int, ChoiceStream] = {}
    results: dict[int, ExtractionResult] = {}
    texts: dict[int, list[str]] = {}
    finished: set[int] = set()

    def take(index: int, events: list[TextDelta | CompletedCall]) -> None:
        for event in events:
            if isinstance(event, CompletedCall):
                results[index].add(event.call)
            elif event.field == "content":
                texts[index].append(event.text)

    for payload in _sse_payloads(text):
        if payload == "[DONE]":
            break
        try:
            chunk = json.loads(payload)
        except ValueError:
            print(
                f"allowlist-proxy extract: skipped a data line that is not JSON: {payload[:80]!r}",
                file=sys.stderr,
            )
            continue
        if not isinstance(chunk, dict):
            continue
        if "error" in chunk:
            print(
                f"allowlist-proxy extract: the stream carries an error: {json.dumps(chunk['error'])}",
                file=sys.stderr,
            )
        choices = chunk.get("choices")
        for choice in choices if isinstance(choices, list) else []:
            if not isinstance(choice, dict):
                continue
            index = choice.get("index", 0)
            index = index if isinstance(index, int) else 0
            if index not in streams:
                streams[index] = ChoiceStream(tools, rules=rules)
                results[index] = ExtractionResult(content="")
                texts[index] = []
            delta = choice.get("delta")
            if not isinstance(delta, dict) and isinstance(choice.get("text"), str):
                delta = {"content": choice["text"]}  # a legacy /v1/completions stream
            take(index, streams[index].feed(delta if isinstance(delta, dict) else {}))
            if choice.get("finish_reason"):
                take(index, streams[index].finish())
                finished.add(index)
    for index, stream in streams.items():
        if index not in finished:
            take(index, stream.finish())
    for index, result in results.items():
        result.content = "".join(texts[index])
    return [results[index] for index in sorted(results)]


def _sse_payloads(text: str) -> list[str]:
    """The payload of each `data:` line.

    vLLM writes every event as one `data:` line, and recordings often lose the blank lines
    between events, so each line is read on its own. Lines end only at CR/LF: JSON may carry a
    raw U+2028, which `str.splitlines` would cut.
    """
    payloads: list[str] = []
    for line in _LINE_BREAK.split(text):
        if line.startswith("data:"):
            data = line[5:]
            payloads.append(data[1:] if data.startswith(" ") else data)
    return payloads


def _load_tools(path: str | None) -> list[dict[str, Any]] | None:
    if not path:
        return None
    with open(path, encoding="utf-8") as handle:
        tools = json.load(handle)
    if isinstance(tools, dict):  # a whole request body
        tools = tools.get("tools")
    return tools if isinstance(tools, list) else None
