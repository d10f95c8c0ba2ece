"""`allowlist-proxy extract`: the tool calls in a model's output, as the proxy sees them.

Reads stdin: a model's raw output text (default), a chat completion JSON (`--response`), or a
recorded SSE stream of `data: {...}` lines (`--sse`). The SSE mode replays the stream through
`ChoiceStream`, the proxy's own streaming path, so this command shows what the proxy would judge.
Prints one JSON object per choice: {"content", "tool_calls": [{"name", "arguments"}],
"malformed": [{"raw", "error"}]}; with `--calls`, one line per tool call, {"tool", "arguments"}, which
is what `allowlist-proxy check --jsonl` reads.

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

from proxy.toolcalls import (
    ChoiceStream,
    CompletedCall,
    ExtractionResult,
    TextDelta,
    extract_from_response,
    extract_from_text,
)

__all__ = ["extract_sse", "register", "render", "run"]

_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "extract",
        help="print the tool calls found in model output, a response, or a recorded stream",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--tools",
        metavar="FILE",
        help="JSON file with the request's OpenAI `tools` array (or a request body holding one); "
        "types XML parameter values",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--response", action="store_true", help="stdin is a chat completion JSON")
    mode.add_argument("--sse", action="store_true", help="stdin is a recorded SSE stream (data: lines)")
    parser.add_argument("--calls", action="store_true",
                        help="print one {tool, arguments} line per call, the input of `check --jsonl`")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        tools = _load_tools(args.tools)
        data = sys.stdin.read()
        if args.sse:
            results = extract_sse(data, tools)
        elif args.response:
            results = extract_from_response(json.loads(data), tools)
        else:
            results = [extract_from_text(data, tools)]
    except (OSError, ValueError) as exc:  # unreadable file, invalid JSON
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


def render(result: ExtractionResult) -> dict[str, Any]:
    return {
        "content": result.content,
        "tool_calls": [{"name": c.name, "arguments": c.arguments} for c in result.tool_calls],
        "malformed": [{"raw": c.raw, "error": c.error} for c in result.malformed],
    }


def extract_sse(text: str, tools: list[dict[str, Any]] | None = None) -> list[ExtractionResult]:
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
                streams[index] = ChoiceStream(tools)
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
