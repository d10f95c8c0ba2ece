"""The proxy reads raw XML in content as the upstream's own vLLM would: the version from
`GET /version` (at start, and again after the upstream failed) or the `vllm_version` setting,
and the `tool_parser` setting. Real servers: a scripted vLLM of each family, the real proxy."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest

from proxy.config import Settings
from proxy.testing.scripted_upstream import Reply, ScriptedUpstream
from proxy.toolcalls.families import FAMILIES, family_of, rules_for
from proxy.upstream.vllm_version import version_url
from tests.conftest import RunningProxy, chat, sse_json, wait_until

from .toolcall_cases import OPENCODE_TOOLS

CODE = "def f():\n    return 1\n"
# A write whose content ends in a newline: 0.24 strips it (and would strip indentation), others keep it.
XML = f"<tool_call>\n<function=write>\n<parameter=filePath>\nnotes.txt\n</parameter>\n<parameter=content>\n{CODE}\n" \
      "</parameter>\n</function>\n</tool_call>"




def written(proxy: RunningProxy, *, stream: bool) -> dict[str, Any]:
    """The arguments of the write call the client receives for XML left in content."""
    with proxy.client() as client:
        response = client.post("/v1/chat/completions", json=chat(tools=OPENCODE_TOOLS, stream=stream))
    assert response.status_code == 200, response.text
    if not stream:
        [call] = response.json()["choices"][0]["message"]["tool_calls"]
        return json.loads(call["function"]["arguments"])
    parts = [tc["function"].get("arguments") or "" for chunk in sse_json(response.content) for choice in
             chunk["choices"] for tc in choice["delta"].get("tool_calls") or []]
    return json.loads("".join(parts))


@pytest.mark.parametrize(("family", "content"), [("0.19", CODE), ("0.24", CODE.strip()), ("0.34", CODE)])
def test_xml_in_content_is_read_as_the_detected_vllm_reads_it(
    family: str, content: str, family_upstream: Callable[..., ScriptedUpstream],
    start_proxy: Callable[..., RunningProxy],
) -> None:
    upstream = family_upstream(family)
    proxy = start_proxy(upstream.url)
    assert proxy.services.vllm.version == upstream.version
    assert proxy.services.vllm.rules == FAMILIES[family_of(family)[0]]["qwen3_coder"]
    for stream in (False, True):
        upstream.script(Reply(content=XML))
        assert written(proxy, stream=stream) == {"filePath": "notes.txt", "content": content}


def test_a_pinned_version_and_parser_win_over_get_version(
    family_upstream: Callable[..., ScriptedUpstream], start_proxy: Callable[..., RunningProxy]
) -> None:
    upstream = family_upstream("0.34")
    proxy = start_proxy(upstream.url, vllm_version="0.24.0", tool_parser="qwen3_xml")
    assert proxy.services.vllm.rules == rules_for("0.24", "qwen3_xml")
    with proxy.client() as client:
        health = client.get("/health").json()["vllm"]
    assert health == {"setting": "0.24.0", "version": "0.24.0", "source": "pinned", "family": "0.24",
                      "tool_parser": "qwen3_xml", "notes": []}
    upstream.script(Reply(content=XML))
    assert written(proxy, stream=False)["content"] == CODE.strip()


def test_the_version_is_read_again_after_the_upstream_failed(
    family_upstream: Callable[..., ScriptedUpstream], start_proxy: Callable[..., RunningProxy]
) -> None:
    upstream = family_upstream("0.19")
    proxy = start_proxy(upstream.url)
    assert proxy.services.vllm.rules.family == "0.19"
    upstream.version = "0.24.1"  # restarted as a newer vLLM behind the same address
    upstream.script(Reply(content="partial answer", drop_after=1))
    with proxy.client() as client:  # the connection breaks mid-stream: the upstream failed
        client.post("/v1/chat/completions", json=chat(stream=True))
    upstream.script(Reply(content="hello"))
    with proxy.client() as client:
        assert client.post("/v1/chat/completions", json=chat()).status_code == 200
    assert wait_until(lambda: proxy.services.vllm.version == "0.24.1")
    assert proxy.services.vllm.rules.family == "0.24"


def test_an_upstream_without_get_version_keeps_the_default_rules(
    family_upstream: Callable[..., ScriptedUpstream], start_proxy: Callable[..., RunningProxy],
    capsys: pytest.CaptureFixture[str],
) -> None:
    upstream = family_upstream()
    upstream.version = None  # type: ignore[assignment]  # answers {"version": null}: not vLLM
    proxy = start_proxy(upstream.url)
    assert proxy.services.vllm.version is None
    assert proxy.services.vllm.rules.family == "0.19"
    [note] = proxy.services.vllm.describe()["notes"]
    assert note.endswith("gave no vLLM version: reading XML as vLLM 0.19 qwen3_coder")


def test_a_newer_vllm_is_read_as_the_newest_family_and_said_once() -> None:
    assert family_of("0.40.2") == ("0.33", "vLLM 0.40.2 is newer than the rules known here: reading XML as vLLM 0.33")
    assert family_of("0.34.0") == ("0.33", None)


@pytest.mark.parametrize(("version", "family"), [
    ("0.19.0", "0.19"), ("0.19.1", "0.19"), ("0.22.1", "0.19"), ("0.23.0", "0.23"), ("v0.24.0", "0.24"),
    ("0.25.1", "0.24"), ("0.26.0", "0.26"), ("0.27.0rc2.dev14+g1a2b3c", "0.26"), ("0.32.0", "0.26"),
    ("0.33.0", "0.33"), ("0.34", "0.33"), ("0.10.0", "0.19"),
])
def test_versions_belong_to_the_family_whose_rules_they_run(version: str, family: str) -> None:
    assert family_of(version)[0] == family


def test_settings_refuse_what_is_not_a_version_or_a_parser() -> None:
    assert Settings.of(vllm_version="0.23").upstream.vllm_version == "0.23"
    assert Settings().upstream.vllm_version == "auto" and Settings().upstream.tool_parser == "qwen3_coder"
    with pytest.raises(ValueError, match="vllm_version"):
        Settings(vllm_version="latest")
    with pytest.raises(ValueError):
        Settings(tool_parser="hermes")
    with pytest.raises(ValueError, match="tool parser"):
        rules_for("0.23", "hermes")


def test_get_version_is_read_at_the_server_root() -> None:
    assert version_url("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/version"
    assert version_url("http://h/v1/") == "http://h/version"
    assert version_url("http://h/api") == "http://h/api/version"


def test_a_newer_upstream_is_read_as_the_newest_family_and_the_log_says_so_once(
    family_upstream: Callable[..., ScriptedUpstream],
) -> None:
    from proxy.upstream.client import Upstream
    from proxy.upstream.vllm_version import UpstreamVllm

    upstream = family_upstream("0.34")
    upstream.version = "0.41.0"

    async def detect_twice() -> UpstreamVllm:
        client = Upstream(Settings(upstream=upstream.url))
        try:
            vllm = UpstreamVllm(vllm_version="auto", tool_parser="qwen3_xml", upstream=client)
            await vllm.detect()
            await vllm.detect()
            return vllm
        finally:
            await client.aclose()

    vllm = asyncio.run(detect_twice())
    assert vllm.rules == rules_for("0.34", "qwen3_xml") and vllm.version == "0.41.0"
    assert vllm.describe()["notes"] == ["vLLM 0.41.0 is newer than the rules known here: reading XML as vLLM 0.33"]
