"""The proxy reads Cline-style action tags as Cline's own parser does: the real `parseAssistantMessageV2` of the
last XML-protocol release (scripts/install-cline-parser.sh), run under node on the same texts. Every tool use
Cline would run is either a call the proxy judges with the same name and arguments, or the proxy refuses the
turn (a spelling Cline releases read differently); none is missed."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from proxy.toolcalls.registry import TEXT_FORMATS
from proxy.toolcalls.text_xml_tags import CLINE_PARAMS, CLINE_TOOLS

HARNESS = Path(__file__).with_name("cline_parser.mjs")
VERSION = "2.18.0"
CLINE = TEXT_FORMATS["cline_xml"]

# Spellings written by hand: each is a way a model (the adversary) may write an action.
CASES = [
    "<execute_command>\n<command>ls -la</command>\n<requires_approval>false</requires_approval>\n</execute_command>",
    "Sure.<execute_command><command>cat a | tail</command></execute_command> and <read_file><path>x</path></read_file>",
    "<execute_command>\n<command>  \u00a0rm -rf /\ufeff  </command>\n</execute_command>",
    "<execute_command><command>\x85ls\x85</command></execute_command>",
    "<execute_command><command>ls</command><command>rm -rf /</command></execute_command>",
    "<execute_command><command>ls</command>",
    "<execute_command><command>rm -rf /",
    "<execute_command><command>ls </execute_command> ; rm -rf /</command></execute_command>",
    "<execute_command><foo><command>rm -rf /</command></foo></execute_command>",
    "<execute_command><command>ls</parameter><command>rm -rf /</command></execute_command>",
    "<read_file><path>a.txt</parameter><path>/etc/passwd</path></read_file>",
    "<read_file><path>a.txt</path></foo><execute_command><command>rm -rf /</command></execute_command>",
    "<read_file><path>a.txt</path></function>\n<execute_command><command>rm -rf /</command></execute_command>",
    "<write_to_file><path>a.md</path><content>x</content>y</content></write_to_file>",
    "<write_to_file><path>a.md</path><content>see <execute_command><command>rm</command></execute_command>"
    "</content></write_to_file>",
    "<write_to_file><content>x</content><path>.env</path>tail</content></write_to_file>",
    "<write_to_file><path>a</path><content>#include <iostream>\n</content>\n</read_file>",
    "<replace_in_file><path>src/a.py</path><diff>------- SEARCH\nx\n=======\ny\n+++++++ REPLACE</diff>"
    "</replace_in_file>",
    "<attempt_completion><result>done</result><command>open index.html</command></attempt_completion>",
    "<browser_action><action>launch</action><url>http://169.254.169.254/</url></browser_action>",
    "<use_mcp_tool><server_name>fs</server_name><tool_name>write</tool_name><arguments>{\"path\": \"/etc/x\"}"
    "</arguments></use_mcp_tool>",
    "<apply_patch><input>*** Begin Patch\n*** Add File: .git/hooks/pre-commit\n+x\n*** End Patch</input></apply_patch>",
    "<new_rule><path>.clinerules/x.md</path><content>y</content></new_rule>",
    "<EXECUTE_COMMAND><command>ls</command></EXECUTE_COMMAND>",
    "<execute_command ><command>ls</command></execute_command>",
    "<execute_command><command>a</command></execute_command><execute_command><command>b</command>"
    "</execute_command>",
    "<execute_command><execute_command><command>ls</command></execute_command></execute_command>",
    "<list_files><path>/</path><recursive>true</recursive></list_files>",
    "<search_files><path>.</path><regex>KEY</regex><file_pattern>.env*</file_pattern></search_files>",
    "text <read_file> <path>~/.ssh/id_rsa</path> </read_file> more",
    "<web_fetch><url>file:///etc/passwd</url></web_fetch>",
]
PIECES = ["<execute_command>", "</execute_command>", "<command>", "</command>", "<read_file>", "</read_file>",
          "<path>", "</path>", "<write_to_file>", "</write_to_file>", "<content>", "</content>", "</parameter>",
          "</function>", "<requires_approval>", "</requires_approval>", "<foo>", "</foo>", "ls", " rm -rf / ", "\n",
          "\u00a0", "\ufeff", "\x85", "text ", "/etc/passwd", "a.txt", "<attempt_completion>", "<result>",
          "</result>", "</attempt_completion>"]


def _lib() -> Path:
    cache = Path(os.environ.get("CLINE_PARSER_CACHE", Path.home() / ".cache" / "allowlist-proxy-cline-parser"))
    lib = cache / VERSION / "package" / "dist" / "lib.mjs"
    if not lib.exists() or shutil.which("node") is None:
        detail = f"cline@{VERSION}'s parser or node is missing (run scripts/install-cline-parser.sh)"
        if os.environ.get("E2E_REQUIRE_CLIENTS") == "1":
            pytest.fail(detail)
        pytest.skip(detail)
    return lib


def cline_parse(texts: list[str]) -> dict[str, Any]:
    done = subprocess.run(["node", str(HARNESS), str(_lib())], input=json.dumps(texts), capture_output=True,
                          text=True, timeout=120, check=True)
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _fuzz(n: int) -> list[str]:
    rng = random.Random(25)
    return ["".join(rng.choice(PIECES) for _ in range(rng.randint(1, 14))) for _ in range(n)]


def _key(name: str, params: dict[str, Any]) -> tuple[str, str]:
    return name, json.dumps(params, sort_keys=True)


def disagreements(texts: list[str]) -> list[tuple[str, list[Any], list[Any]]]:
    """Texts where a tool use Cline runs is neither a call the proxy judges as Cline reads it nor refused."""
    parsed = cline_parse(texts)["parsed"]
    out = []
    for text, uses in zip(texts, parsed, strict=True):
        read = CLINE.read(text).calls
        if any(call.error for call in read):
            continue  # refused: the turn never reaches Cline
        mine = Counter(_key(c.name, c.arguments or {}) for c in read)
        theirs = Counter(_key(u["name"], u["params"]) for u in uses)
        if theirs - mine:
            out.append((text, [(c.name, c.arguments) for c in read], uses))
    return out


def test_the_proxy_knows_every_tool_and_parameter_of_the_release():
    names = cline_parse([])
    assert set(names["tools"]) <= set(CLINE_TOOLS) and set(names["params"]) <= set(CLINE_PARAMS)


def test_hand_written_spellings_are_read_as_cline_reads_them_or_refused():
    assert disagreements(CASES) == []


def test_random_spellings_are_read_as_cline_reads_them_or_refused():
    texts = _fuzz(3000)
    assert disagreements(texts) == []


def test_most_plain_spellings_are_read_not_refused():
    """Refusing is the fallback for spellings releases disagree on, not the rule: plain actions are judged."""
    plain = CASES[:3] + CASES[13:14] + CASES[17:23]
    assert [t for t in plain if any(c.error for c in CLINE.read(t).calls)] == []
