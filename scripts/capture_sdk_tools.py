"""Print the tool catalogues the Python agent SDKs ship, as the JSON schemas they send to a model.

Run with the interpreter of a venv holding the pinned SDKs (scripts/install-catalogue-sdks.sh):
    ~/.cache/allowlist-proxy-catalogues/venv/bin/python scripts/capture_sdk_tools.py OUT_DIR
Writes one tests/policy/client_tools/<sdk>.json per SDK; each names the package and version it came from.
"""

from __future__ import annotations

import json
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any


def _function(name: str, parameters: Any, description: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": name, "parameters": parameters}
    if description:
        spec["description"] = description[:300]
    return {"type": "function", "function": spec}


def smolagents_tools() -> list[dict[str, Any]]:
    from smolagents import default_tools
    from smolagents.models import get_tool_json_schema

    out = []
    for cls in default_tools.TOOL_MAPPING.values():
        try:
            tool = cls()
        except Exception:  # a tool whose optional dependency is missing still has its class-level schema
            tool = cls.__new__(cls)
        schema = get_tool_json_schema(tool)
        out.append({"type": "function", "function": {k: v for k, v in schema["function"].items()
                                                      if k != "description"} | {
            "description": schema["function"].get("description", "")[:300]}})
    return out


def pydantic_ai_tools() -> list[dict[str, Any]]:
    from pydantic_ai import Agent
    from pydantic_ai.common_tools.web_fetch import WebFetchLocalTool
    from pydantic_ai.tools import Tool

    def read_file(path: str, encoding: str | None = None) -> str:
        """Read a text file."""
        return ""

    def run_command(command: str, cwd: str | None = None, timeout: float | None = None) -> str:
        """Run a shell command."""
        return ""

    fetch = WebFetchLocalTool(max_content_length=None, allow_local_urls=False, timeout=30)
    tools = [Tool(fetch.__call__, name="web_fetch"), Tool(read_file), Tool(run_command)]
    agent = Agent("test", tools=tools)
    out = []
    for tool in tools:
        definition = tool.tool_def
        out.append(_function(definition.name, definition.parameters_json_schema, definition.description))
    del agent
    return out


def openai_agents_tools() -> list[dict[str, Any]]:
    from agents import FunctionTool, function_tool
    from agents.tool import ApplyPatchTool, ComputerTool, LocalShellTool, ShellTool  # noqa: F401

    @function_tool
    def read_file(path: str) -> str:
        """Read a file."""
        return ""

    out: list[dict[str, Any]] = []
    for tool in (read_file,):
        assert isinstance(tool, FunctionTool)
        out.append(_function(tool.name, tool.params_json_schema, tool.description))
    # The hosted action tools, as the Responses API offers them (proxy/policy/tools/offered.py names their items).
    out += [{"type": "shell"}, {"type": "apply_patch"}, {"type": "local_shell"},
            {"type": "computer_use_preview", "display_width": 1024, "display_height": 768, "environment": "linux"}]
    return out


def langchain_tools() -> list[dict[str, Any]]:
    from langchain_community.agent_toolkits import FileManagementToolkit
    from langchain_community.tools import ShellTool
    from langchain_community.tools.requests.tool import RequestsGetTool
    from langchain_community.utilities.requests import TextRequestsWrapper
    from langchain_core.utils.function_calling import convert_to_openai_tool

    tools: list[Any] = [ShellTool(), *FileManagementToolkit(root_dir=".").get_tools(),
                        RequestsGetTool(requests_wrapper=TextRequestsWrapper(), allow_dangerous_requests=True)]
    out = []
    for tool in tools:
        converted = convert_to_openai_tool(tool)
        converted["function"]["description"] = converted["function"].get("description", "")[:300]
        out.append(converted)
    return out


def mini_swe_agent_tools() -> list[dict[str, Any]]:
    from minisweagent.models.utils.actions_toolcall import BASH_TOOL  # type: ignore[import-not-found]

    return [BASH_TOOL]


SDKS = {
    "smolagents": ("smolagents", smolagents_tools),
    "pydantic-ai": ("pydantic-ai-slim", pydantic_ai_tools),
    "openai-agents": ("openai-agents", openai_agents_tools),
    "langchain": ("langchain-community", langchain_tools),
    "mini-swe-agent": ("mini-swe-agent", mini_swe_agent_tools),
}


def main() -> None:
    out_dir = Path(sys.argv[1])
    for name, (package, capture) in SDKS.items():
        try:
            tools = capture()
        except Exception as exc:
            print(f"{name}: not captured ({type(exc).__name__}: {exc})", file=sys.stderr)
            continue
        record = {"client": f"{package}@{version(package)}", "route": "chat", "user_agent": None,
                  "session_header": None,
                  "note": f"Read from the installed {package}@{version(package)} by scripts/capture_sdk_tools.py.",
                  "tools": tools}
        (out_dir / f"{name}.json").write_text(json.dumps(record, indent=1, default=str) + "\n")
        print(f"{name}: {len(tools)} tools", file=sys.stderr)


if __name__ == "__main__":
    main()
