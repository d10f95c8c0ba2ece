"""The shared case table: every registered format's cases, read whole and streamed.

A case is an assistant message plus what must come out of it. The stream tests turn the same
message into vLLM-shaped deltas cut at every offset and at random, and require the same result.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any


def tool(name: str, **properties: Any) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": name, "parameters": {"type": "object", "properties": properties}},
    }


S = {"type": "string"}
N = {"type": "number"}

# OpenCode 1.18's tools, as its requests declare them (the parts that matter for typing).
OPENCODE_TOOLS = [
    tool("bash", command=S, timeout=N, workdir=S, description=S),
    tool("read", filePath=S, offset=N, limit=N),
    tool("edit", filePath=S, oldString=S, newString=S, replaceAll={"type": "boolean"}),
    tool("write", content=S, filePath=S),
    tool("glob", pattern=S, path=S),
    tool("grep", pattern=S, path=S, include=S),
    tool("webfetch", url=S, format={"type": "string", "enum": ["text", "markdown", "html"]}, timeout=N),
    tool(
        "todowrite",
        todos={"type": "array", "items": {"type": "object"}},
    ),
]

TYPED_TOOLS = [
    tool(
        "typed",
        count={"type": "integer"},
        ratio=N,
        flag={"type": "boolean"},
        opts={"type": "object"},
        items={"type": "array"},
        maybe={"type": ["integer", "null"]},
        either={"anyOf": [{"type": "integer"}, {"type": "string"}]},
        one={"oneOf": [{"type": "boolean"}, {"type": "object"}]},
        text=S,
    )
]


@dataclass(frozen=True)
class Case:
    id: str
    fmt: str  # the registered format this case exercises
    message: dict[str, Any]
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    malformed: list[str] = field(default_factory=list)  # error substrings, in order
    content: str | None = None  # expected content; None: not checked
    tools: list[dict[str, Any]] | None = None
    vllm_differs: str = ""  # why vLLM's own parser reads this case differently (oracle test skips)
    alone: bool = True  # the format by itself reads it as the combined scanner does

    def __str__(self) -> str:
        return f"{self.fmt}-{self.id}"


def xml(name: str, *params: tuple[str, str], wrap: bool = True) -> str:
    """A well-formed Qwen3-Coder call as the model writes it."""
    body = f"<function={name}>\n"
    body += "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params)
    body += "</function>"
    return f"<tool_call>\n{body}\n</tool_call>" if wrap else body


def hermes(name: str, arguments: Any, **extra: Any) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments, **extra}) + "\n</tool_call>"


def text(content: str, **fields: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": content, **fields}


def structured(*calls: tuple[str, Any], content: str | None = None, **fields: Any) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": content,
        "tool_calls": [
            {"id": f"chatcmpl-tool-{i:032x}", "type": "function", "function": {"name": n, "arguments": a}}
            for i, (n, a) in enumerate(calls)
        ],
        **fields,
    }


LS = xml("bash", ("command", "ls -la"))
SPECIAL = "echo '<b>' && cat a > b & x < y; echo </parameters> </paramete </function2> <tool>"
LOOK_ALIKES = "a < b, <b>bold</b> <tool> <tool_cal <functions> <think > </tool_call> </function> end <tool_"
MULTILINE = "def main():\n    if True:\n\n        return 1\n  \n"

QWEN3_CODER = [
    Case("single", "qwen3_coder", text(LS), [("bash", {"command": "ls -la"})], content=""),
    Case(
        "content-before",
        "qwen3_coder",
        text("I'll list the files.\n\n" + LS),
        [("bash", {"command": "ls -la"})],
        content="I'll list the files.\n\n",
    ),
    Case(
        "two-calls",
        "qwen3_coder",
        text(LS + "\n" + xml("read", ("filePath", "README.md"))),
        [("bash", {"command": "ls -la"}), ("read", {"filePath": "README.md"})],
        content="",
    ),
    Case(
        "three-calls-text-around",
        "qwen3_coder",
        text("Plan:" + LS + "\n\n" + xml("glob", ("pattern", "*.py")) + "\n" + LS + "\nDone."),
        [("bash", {"command": "ls -la"}), ("glob", {"pattern": "*.py"}), ("bash", {"command": "ls -la"})],
        content="Plan:\nDone.",
        vllm_differs="vLLM drops text after the first call",
    ),
    Case(
        "two-functions-one-block",
        "qwen3_coder",
        text("<tool_call>\n" + xml("a", ("x", "1"), wrap=False) + "\n" + xml("b", wrap=False) + "\n</tool_call>"),
        [("a", {"x": "1"}), ("b", {})],
    ),
    Case(
        "multiline-indented",
        "qwen3_coder",
        text(xml("write", ("filePath", "src/main.py"), ("content", MULTILINE))),
        [("write", {"filePath": "src/main.py", "content": MULTILINE})],
        tools=OPENCODE_TOOLS,
    ),
    Case(
        "only-one-newline-dropped",
        "qwen3_coder",
        text(
            "<tool_call>\n<function=write>\n<parameter=content>\n\n\n  x  \n\n\n</parameter>\n</function>\n</tool_call>"
        ),
        [("write", {"content": "\n\n  x  \n\n"})],
    ),
    Case(
        "special-characters",
        "qwen3_coder",
        text(
            xml(
                "bash",
                ("command", SPECIAL),
                ("description", 'JSON {"a": [1, 2], "b": "</tool_cal>"} & <parameter-x> &amp;'),
            )
        ),
        [
            (
                "bash",
                {
                    "command": SPECIAL,
                    "description": 'JSON {"a": [1, 2], "b": "</tool_cal>"} & <parameter-x> &amp;',
                },
            )
        ],
        tools=OPENCODE_TOOLS,
    ),
    Case(
        "json-value-in-string-parameter",
        "qwen3_coder",
        text(xml("write", ("filePath", "a.json"), ("content", '{"k": [1, {"n": null}]}'))),
        [("write", {"filePath": "a.json", "content": '{"k": [1, {"n": null}]}'})],
        tools=OPENCODE_TOOLS,
    ),
    Case(
        "opencode-bash-typed",
        "qwen3_coder",
        text(xml("bash", ("command", "uv run scripts/search.py x"), ("timeout", "120000"), ("workdir", "src"))),
        [("bash", {"command": "uv run scripts/search.py x", "timeout": 120000, "workdir": "src"})],
        tools=OPENCODE_TOOLS,
    ),
    Case(
        "opencode-read-typed",
        "qwen3_coder",
        text(xml("read", ("filePath", "src/app.py"), ("offset", "10"), ("limit", "2.5"))),
        [("read", {"filePath": "src/app.py", "offset": 10, "limit": 2.5})],
        tools=OPENCODE_TOOLS,
    ),
    Case(
        "opencode-edit-todowrite-typed",
        "qwen3_coder",
        text(
            xml("edit", ("filePath", "a.py"), ("oldString", "1"), ("newString", "2"), ("replaceAll", "True"))
            + xml("todowrite", ("todos", '[{"content": "x", "status": "pending"}]'))
            + xml("webfetch", ("url", "https://e.x"), ("format", "markdown"), ("timeout", "30"))
        ),
        [
            ("edit", {"filePath": "a.py", "oldString": "1", "newString": "2", "replaceAll": True}),
            ("todowrite", {"todos": [{"content": "x", "status": "pending"}]}),
            ("webfetch", {"url": "https://e.x", "format": "markdown", "timeout": 30}),
        ],
        tools=OPENCODE_TOOLS,
    ),
    Case(
        "typed-values",
        "qwen3_coder",
        text(
            xml(
                "typed",
                ("count", "42"),
                ("ratio", "1.0"),
                ("flag", "false"),
                ("opts", '{"a": {"b": [true, null]}}'),
                ("items", '[1, "x"]'),
                ("maybe", "7"),
                ("either", "x"),
                ("one", "true"),
                ("text", "007"),
                ("unknown", "12"),
            )
        ),
        [
            (
                "typed",
                {
                    "count": 42,
                    "ratio": 1,
                    "flag": False,
                    "opts": {"a": {"b": [True, None]}},
                    "items": [1, "x"],
                    "maybe": 7,
                    "either": "x",
                    "one": "true",  # 0.19: `oneOf` has no `type`, so the value stays a string
                    "text": "007",
                    "unknown": "12",
                },
            )
        ],
        tools=TYPED_TOOLS,
    ),
    Case(
        "typed-nullable-and-fallbacks",
        "qwen3_coder",
        text(
            xml(
                "typed",
                ("maybe", "null"),
                ("count", "many"),
                ("flag", "yes"),
                ("opts", "{'a': (1, 2)}"),
                ("items", "not a list"),
                ("either", "12"),
                ("one", "{}"),
                ("text", "NULL"),
            )
        ),
        [
            (
                "typed",
                {
                    "maybe": None,
                    "count": "many",
                    "flag": False,
                    "opts": {"a": [1, 2]},
                    "items": "not a list",
                    "either": 12,  # 0.19 reads an `anyOf` as an object: json.loads("12")
                    "one": "{}",  # `oneOf` has no `type`: a string
                    "text": None,
                },
            )
        ],
        tools=TYPED_TOOLS,
    ),
    Case(
        "number-overflows",
        "qwen3_coder",
        text(xml("typed", ("ratio", "inf")) + "\n" + xml("typed", ("count", "3"))),
        [("typed", {"count": 3})],
        malformed=["vLLM fails on the number 'inf'"],
        tools=TYPED_TOOLS,
        vllm_differs="vLLM fails the whole response on float('inf'); only that call is malformed here",
    ),
    Case(
        "missing-close-parameter",
        "qwen3_coder",
        text(
            "<tool_call>\n<function=bash>\n<parameter=command>\nls src\n<parameter=workdir>\nsrc\n"
            "</parameter>\n<parameter=description>\nlist\n</function>\n</tool_call>"
        ),
        [("bash", {"command": "ls src", "workdir": "src", "description": "list"})],
        tools=OPENCODE_TOOLS,
    ),
    Case(
        "unclosed-tool-call",
        "qwen3_coder",
        text("Running it.\n<tool_call>\n<function=bash>\n<parameter=command>\npwd\n</parameter>\n</function>\n"),
        [("bash", {"command": "pwd"})],
        content="Running it.\n",
    ),
    Case(
        "unclosed-mid-value",
        "qwen3_coder",
        text("<tool_call>\n<function=write>\n<parameter=content>\nline 1\n\n\n"),
        [("write", {"content": "line 1"})],  # vLLM's `$` stops before the last newline, twice
    ),
    Case(
        "bare-function",
        "qwen3_coder",
        text("Sure.\n" + xml("bash", ("command", "git status"), wrap=False) + "\nDone."),
        [("bash", {"command": "git status"})],
        content="Sure.\n\nDone.",
        vllm_differs="vLLM drops text after the first call",
    ),
    Case(
        "bare-function-unclosed",
        "qwen3_coder",
        text("<function=read>\n<parameter=filePath>\nx.py\n</parameter>\n"),
        [("read", {"filePath": "x.py"})],
        content="",
    ),
    Case(
        "bare-function-after-block",
        "qwen3_coder",
        text(LS + "\n" + xml("read", ("filePath", "a"), wrap=False)),
        [("bash", {"command": "ls -la"}), ("read", {"filePath": "a"})],
        vllm_differs="vLLM ignores a bare <function= once any <tool_call> is present",
    ),
    Case(
        "missing-gt-after-name",
        "qwen3_coder",
        text("<tool_call>\n<function=bash\n<parameter=command>\nls\n</parameter>\n</function>\n</tool_call>"),
        malformed=["bad function name"],
        content="",
        vllm_differs="vLLM reads the name 'bash\\n<parameter=command'",
    ),
    Case(
        "no-gt-at-all",
        "qwen3_coder",
        text("Calling.<tool_call>\n<function=bash\n</tool_call>After."),
        malformed=["not closed by '>'"],
        content="Calling.After.",
        vllm_differs="vLLM fails the whole response",
    ),
    Case(
        "parameter-without-gt",
        "qwen3_coder",
        text("<tool_call>\n<function=bash>\n<parameter=command\nls\n</parameter>\n</function>\n</tool_call>"),
        malformed=["not closed by '>'"],
        vllm_differs="vLLM fails the whole response",
    ),
    Case(
        "empty-function-name",
        "qwen3_coder",
        text("<tool_call>\n<function=>\n</function>\n</tool_call>"),
        malformed=["bad function name"],
        vllm_differs="vLLM accepts an empty name",
    ),
    Case(
        "garbage-block",
        "qwen3_coder",
        text("<tool_call>\nI should run ls here\n</tool_call>\nok"),
        malformed=["no <function=...>"],
        content="\nok",
        vllm_differs="vLLM leaves it in content",
    ),
    Case(
        "malformed-between-good",
        "qwen3_coder",
        text(LS + "<tool_call>\n<function=\n</tool_call>" + xml("glob", ("pattern", "*"))),
        [("bash", {"command": "ls -la"}), ("glob", {"pattern": "*"})],
        malformed=["not closed by '>'"],
        vllm_differs="vLLM fails the whole response",
    ),
    Case(
        "empty-parameter",
        "qwen3_coder",
        text(
            "<tool_call>\n<function=bash>\n<parameter=command>\n</parameter>\n<parameter=workdir></parameter>\n"
            "<parameter=timeout>\n\n</parameter>\n</function>\n</tool_call>"
        ),
        [("bash", {"command": "", "workdir": "", "timeout": ""})],
        tools=OPENCODE_TOOLS,
    ),
    Case(
        "no-parameters",
        "qwen3_coder",
        text("<tool_call>\n<function=list_files>\n</function>\n</tool_call>"),
        [("list_files", {})],
    ),
    Case(
        "repeated-parameter-last-wins",
        "qwen3_coder",
        text(xml("bash", ("command", "first"), ("workdir", "w"), ("command", "second"))),
        [("bash", {"command": "second", "workdir": "w"})],
    ),
    Case(
        "non-ascii",
        "qwen3_coder",
        text("Voilà — ça marche ✓\n" + xml("bash", ("command", "echo 'héllo wörld ✓ 日本語 🚀'"))),
        [("bash", {"command": "echo 'héllo wörld ✓ 日本語 🚀'"})],
        content="Voilà — ça marche ✓\n",
    ),
    Case(
        "think-holds-a-call",
        "qwen3_coder",
        text("<think>\nI could " + LS + " but no.\n</think>\n\nNo tool needed."),
        content="<think>\nI could " + LS + " but no.\n</think>\n\nNo tool needed.",
        vllm_differs="vLLM's tool parser does not know <think> (its reasoning parser moves it out)",
    ),
    Case(
        "think-then-call",
        "qwen3_coder",
        text("<think>plan: <function=x></think>\n" + LS),
        [("bash", {"command": "ls -la"})],
        content="<think>plan: <function=x></think>\n",
        vllm_differs="vLLM has no notion of <think> in content",
    ),
    Case(
        "reasoning-field-holds-a-call",
        "qwen3_coder",
        text("Answer.", reasoning="Maybe " + LS, reasoning_content="or " + LS),
        content="Answer.",
    ),
    Case(
        "tag-look-alikes-are-text",
        "qwen3_coder",
        text(LOOK_ALIKES),
        content=LOOK_ALIKES,
    ),
    Case(
        "unclosed-value-keeps-vllm-quirk",
        "qwen3_coder",
        text("<tool_call>\n<function=write>\n<parameter=content>\nx\n\n</function>\n</tool_call>"),
        [("write", {"content": "x"})],
    ),
]

HERMES = [
    Case("single", "hermes", text(hermes("bash", {"command": "ls"})), [("bash", {"command": "ls"})], content=""),
    Case(
        "content-before",
        "hermes",
        text("Let me check.\n" + hermes("read", {"filePath": "a.py", "offset": 3})),
        [("read", {"filePath": "a.py", "offset": 3})],
        content="Let me check.\n",
    ),
    Case(
        "two-and-three-calls",
        "hermes",
        text(hermes("a", {}) + "\n" + hermes("b", {"x": 1}) + "\n" + hermes("c", {"y": [1]})),
        [("a", {}), ("b", {"x": 1}), ("c", {"y": [1]})],
        content="",
    ),
    Case(
        "arguments-as-json-string",
        "hermes",
        text(hermes("bash", json.dumps({"command": "echo hi", "timeout": 5}))),
        [("bash", {"command": "echo hi", "timeout": 5})],
    ),
    Case(
        "parameters-key",
        "hermes",
        text('<tool_call>{"name": "glob", "parameters": {"pattern": "*.md"}}</tool_call>'),
        [("glob", {"pattern": "*.md"})],
    ),
    Case(
        "special-characters",
        "hermes",
        text(hermes("bash", {"command": "a < b > c & d </parameter> <function=x> <think>", "n": "\n  x"})),
        [("bash", {"command": "a < b > c & d </parameter> <function=x> <think>", "n": "\n  x"})],
    ),
    Case(
        "non-ascii",
        "hermes",
        text('<tool_call>{"name": "bash", "arguments": {"command": "echo 日本語 ✓"}}</tool_call>'),
        [("bash", {"command": "echo 日本語 ✓"})],
    ),
    Case(
        "unclosed",
        "hermes",
        text('Go <tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n'),
        [("bash", {"command": "ls"})],
        content="Go ",
    ),
    Case(
        "bad-json",
        "hermes",
        text('<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}\n</tool_call>'),
        malformed=["not valid JSON"],
    ),
    Case(
        "arguments-not-object",
        "hermes",
        text(hermes("bash", [1, 2]) + hermes("bash", "[1]") + hermes("bash", None)),
        malformed=["not a JSON object", "not a JSON object", "not a JSON object"],
    ),
    Case(
        "bad-arguments-string",
        "hermes",
        text(hermes("bash", "{command: ls}")),
        malformed=["arguments string is not valid JSON"],
    ),
    Case("no-name", "hermes", text('<tool_call>{"arguments": {}}</tool_call>'), malformed=["no function name"]),
    Case(
        "nan-is-not-json",
        "hermes",
        text(
            '<tool_call>{"name": "x", "arguments": {"n": NaN}}</tool_call><tool_call>{"name": "y", '
            '"arguments": {"n": 1e999}}</tool_call>'
        ),
        malformed=["not valid JSON", "not valid JSON"],
    ),
    Case(
        "closer-inside-string-cuts",
        "hermes",
        text(hermes("bash", {"command": "echo </tool_call> x"})),
        malformed=["not valid JSON"],
        content=' x"}}\n</tool_call>',
    ),
    Case(
        "mixed-with-xml",
        "hermes",
        text(hermes("bash", {"command": "ls"}) + "\n" + LS),
        [("bash", {"command": "ls"}), ("bash", {"command": "ls -la"})],
        alone=False,  # the XML block needs the qwen3_coder format too
    ),
    Case(
        "in-think-and-reasoning",
        "hermes",
        text("<think>" + hermes("bash", {"command": "rm -rf /"}) + "</think>ok", reasoning=hermes("x", {})),
        content="<think>" + hermes("bash", {"command": "rm -rf /"}) + "</think>ok",
    ),
]

OPENAI = [
    Case(
        "single",
        "openai",
        structured(("bash", '{"command": "ls -la"}')),
        [("bash", {"command": "ls -la"})],
        content="",
    ),
    Case(
        "two-parallel",
        "openai",
        structured(("bash", '{"command": "ls"}'), ("read", '{"filePath": "a.py", "limit": 20}')),
        [("bash", {"command": "ls"}), ("read", {"filePath": "a.py", "limit": 20})],
    ),
    Case(
        "three-with-content-and-reasoning",
        "openai",
        structured(
            ("a", "{}"),
            ("b", '{"x": "<tool_call>"}'),
            ("c", '{"y": [1, {"z": null}]}'),
            content="Doing three things.",
            reasoning="I will " + LS,
        ),
        [("a", {}), ("b", {"x": "<tool_call>"}), ("c", {"y": [1, {"z": None}]})],
        content="Doing three things.",
    ),
    Case(
        "non-ascii-and-escapes",
        "openai",
        structured(("bash", json.dumps({"command": "echo 'ü ✓ 日本' \"q\" \\n"}, ensure_ascii=False))),
        [("bash", {"command": "echo 'ü ✓ 日本' \"q\" \\n"})],
    ),
    Case(
        "not-json",
        "openai",
        structured(("bash", '{"command": "ls"'), ("bash", "ls -la"), ("bash", "")),
        malformed=["not valid JSON", "not valid JSON", "not valid JSON"],
    ),
    Case(
        "not-an-object",
        "openai",
        structured(("bash", '["ls"]'), ("bash", '"ls"'), ("bash", "null")),
        malformed=["not a JSON object", "not a JSON object", "not a JSON object"],
    ),
    Case(
        "no-name-and-nan",
        "openai",
        structured(("", "{}"), ("bash", '{"n": NaN}'), ("ok", '{"k": 1}')),
        [("ok", {"k": 1})],
        malformed=["no function name", "not valid JSON"],
    ),
]

CASES: list[Case] = QWEN3_CODER + HERMES + OPENAI


# -- turning a message into vLLM-shaped stream deltas ---------------------------------------------


def split_at(value: str, cuts: list[int]) -> list[str]:
    points = sorted({c for c in cuts if 0 < c < len(value)})
    return [value[a:b] for a, b in zip([0, *points], [*points, len(value)], strict=True)] if value else []


def random_cuts(rng: random.Random, value: str) -> list[int]:
    """Token-like pieces: mostly 1-6 characters, now and then a longer run."""
    cuts, pos = [], 0
    while pos < len(value):
        pos += rng.choice((1, 1, 2, 3, 4, 5, 6, 12, 40))
        cuts.append(pos)
    return cuts


def deltas(message: dict[str, Any], cut: Any) -> list[dict[str, Any]]:
    """The deltas vLLM would stream for `message`; `cut(text) -> cut points` splits each text."""
    out: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
    for key in ("reasoning", "reasoning_content"):
        for piece in split_at(message.get(key) or "", cut(message.get(key) or "")):
            out.append({key: piece})
    content = message.get("content") or ""
    out += [{"content": piece} for piece in split_at(content, cut(content))]
    for index, entry in enumerate(message.get("tool_calls") or []):
        function = entry["function"]
        out.append(
            {
                "tool_calls": [
                    {
                        "index": index,
                        "id": entry["id"],
                        "type": "function",
                        "function": {"name": function["name"], "arguments": ""},
                    }
                ]
            }
        )
        arguments = function["arguments"]
        for piece in split_at(arguments, cut(arguments)):
            out.append({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    return out


def chunk(delta: dict[str, Any], finish_reason: str | None = None, index: int = 0) -> dict[str, Any]:
    return {
        "id": "chatcmpl-0123",
        "object": "chat.completion.chunk",
        "created": 1766000000,
        "model": "Qwen/Qwen3-Coder-30B-A3B-Instruct",
        "choices": [{"index": index, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
    }


def sse(message: dict[str, Any], cut: Any) -> str:
    """A recorded SSE stream of `message`, as vLLM writes it (usage chunk and [DONE] included)."""
    lines = [json.dumps(chunk(d), ensure_ascii=False) for d in deltas(message, cut)]
    finish = "tool_calls" if message.get("tool_calls") else "stop"
    lines.append(json.dumps(chunk({}, finish)))
    lines.append(
        json.dumps(
            {
                "id": "chatcmpl-0123",
                "object": "chat.completion.chunk",
                "choices": [],
                "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12},
            }
        )
    )
    return "".join(f"data: {line}\n\n" for line in lines) + "data: [DONE]\n\n"


def response(message: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "chatcmpl-0123",
        "object": "chat.completion",
        "created": 1766000000,
        "model": "Qwen/Qwen3-Coder-30B-A3B-Instruct",
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12},
    }
