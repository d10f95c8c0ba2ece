"""Patch text judged as the clients' own parsers read it (issue 24, "patch text read as its clients read it").

Codex: its CLI binary (the pinned `@openai/codex` of scripts/install-agent-clis.sh) applies a patch itself
when run as `codex --codex-run-as-apply-patch PATCH`, the path its `apply_patch` tool takes. Every variant
below is applied by that real parser in a scratch project; whenever it changed a file outside the project,
the proxy must have refused the same text as Codex's `apply_patch` call. The real parser, not a guess,
decides which header spellings count.

OpenCode: its parser is compiled into the Bun binary and cannot be called alone, so its grammar is data
read from its source (OpenCode 1.18, `src/patch`): the text is cut on `\\n` only; a heredoc wrapper
(`<<'EOF'` or `cat <<EOF`) is taken off; the Begin/End markers are found by trimmed equality; a header is
a line that *starts* (column 0) with `*** Add File:`, `*** Delete File:`, `*** Update File:` or, on the
line after an Update, `*** Move to:`; the path is the rest after JavaScript `trim()` (every Unicode space,
line terminator and U+FEFF), so `*** Add File:../x` and `*** Add File:\\u00a0../x` name `../x`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from proxy.policy import Policy, judge_call, load_policy_file
from proxy.policy.tools.profiles import ToolSet

from .conftest import ROOT

_CLIENTS = Path(os.environ.get("ALLOWLIST_PROXY_E2E_CLIENTS", Path.home() / ".cache" / "allowlist-proxy-e2e-clients"))
_VENDOR = _CLIENTS / "node_modules" / "@openai" / "codex-linux-x64" / "vendor"
CODEX = next(iter(sorted(_VENDOR.glob("*/bin/codex"))), None) if _VENDOR.is_dir() else None

# Every space a reader might trim: ASCII, the C0 separators Python counts, Unicode Zs and line separators,
# and two format characters neither Rust nor JavaScript calls space (a parser reading them would be new).
SPACES = {
    "none": "", "space": " ", "tab": "\t", "vt": "\v", "ff": "\f", "cr": "\r", "nel": "\u0085",
    "nbsp": "\u00a0", "ogham": "\u1680", "enquad": "\u2000", "emsp": "\u2003", "thin": "\u2009",
    "hair": "\u200a", "ls": "\u2028", "ps": "\u2029", "nnbsp": "\u202f", "mmsp": "\u205f", "ideo": "\u3000",
    "bom": "\ufeff", "space-bom": " \ufeff", "zwsp": "\u200b", "two": "  ", "mixed": " \t\u3000",
}
# The file a variant aims at: outside the project (`../`), so a write there is one the proxy must refuse.
OUT = "../out.txt"


def _patch(*lines: str, begin: str = "*** Begin Patch", end: str = "*** End Patch") -> str:
    return "\n".join((begin, *lines, end)) + "\n"


def _header_forms() -> Iterator[tuple[str, str]]:
    """(id, patch text): each file header kind with each space before the marker and after its colon."""
    for name, space in SPACES.items():
        yield f"add-before-{name}", _patch(f"{space}*** Add File: {OUT}", "+x")
        yield f"add-after-{name}", _patch(f"*** Add File:{space}{OUT}", "+x")
        yield f"add-path-trailing-{name}", _patch(f"*** Add File: {OUT}{space}", "+x")
        yield f"update-before-{name}", _patch(f"{space}*** Update File: {OUT}", "@@", "-a", "+b")
        yield f"update-after-{name}", _patch(f"*** Update File:{space}{OUT}", "@@", "-a", "+b")
        yield f"delete-before-{name}", _patch(f"{space}*** Delete File: {OUT}")
        yield f"delete-after-{name}", _patch(f"*** Delete File:{space}{OUT}")
        yield f"move-before-{name}", _patch("*** Update File: in.txt", f"{space}*** Move to: {OUT}", "@@", "-a", "+b")
        yield f"move-after-{name}", _patch("*** Update File: in.txt", f"*** Move to:{space}{OUT}", "@@", "-a", "+b")
        yield f"begin-{name}", _patch(f"*** Add File: {OUT}", "+x", begin=f"{space}*** Begin Patch{space}",
                                      end=f"{space}*** End Patch{space}")


def _other_forms() -> Iterator[tuple[str, str]]:
    add = _patch(f"*** Add File: {OUT}", "+x")
    yield "heredoc", f"<<'EOF'\n{add}EOF\n"
    yield "heredoc-plain", f"<<EOF\n{add}EOF\n"
    yield "heredoc-cat", f"cat <<'EOF'\n{add}EOF\n"
    yield "heredoc-apply", f"apply_patch <<'EOF'\n{add}EOF\n"
    yield "crlf", add.replace("\n", "\r\n")
    yield "cr-only", add.replace("\n", "\r")
    yield "second-header-in-add", _patch("*** Add File: a.txt", "+x", f" *** Add File: {OUT}", "+y")
    yield "header-after-update-hunk", _patch("*** Update File: in.txt", "@@", "-a", "+b", f"\t*** Add File: {OUT}",
                                             "+y")
    yield "text-before-begin", f"here is the patch\n{add}"
    yield "blank-lines", "\n\n" + add.replace("\n", "\n\n")
    yield "lower-case", _patch(f"*** add file: {OUT}", "+x")
    yield "no-space-after-stars", _patch(f"***Add File: {OUT}", "+x")
    yield "four-stars", _patch(f"**** Add File: {OUT}", "+x")
    yield "line-separator-split", _patch(f"*** Add File: a.txt\u2028*** Add File: {OUT}", "+x")
    yield "vt-split", _patch(f"*** Add File: a.txt\v*** Add File: {OUT}", "+x")
    yield "absolute", _patch("*** Add File: /tmp/allowlist-proxy-patch-probe/out.txt", "+x")


FORMS = dict([*_header_forms(), *_other_forms()])


def _snapshot(top: Path) -> dict[str, bytes]:
    return {str(path.relative_to(top)): path.read_bytes() for path in sorted(top.rglob("*")) if path.is_file()}


def _codex_changes(text: str) -> set[str]:
    """What the real Codex parser, applying `text` in a scratch project `proj/` (beside `out.txt`, with
    `proj/in.txt` and `proj/scripts/search.py`), created, changed or deleted, relative to the scratch dir."""
    assert CODEX is not None
    with tempfile.TemporaryDirectory() as scratch:
        top = Path(scratch)
        project = top / "proj"
        (project / "scripts").mkdir(parents=True)
        for path in (project / "in.txt", top / "out.txt", project / "scripts" / "search.py"):
            path.write_text("a\n")
        before = _snapshot(top)
        subprocess.run([str(CODEX), "--codex-run-as-apply-patch", text], cwd=project, capture_output=True,
                       timeout=30, check=False)
        after = _snapshot(top)
        absolute = Path("/tmp/allowlist-proxy-patch-probe")
        changed = {"/absolute"} if absolute.exists() else set()
        shutil.rmtree(absolute, ignore_errors=True)
        return changed | {path for path in before.keys() | after.keys() if before.get(path) != after.get(path)}


def _codex_writes_outside(text: str) -> bool:
    return any(not path.startswith("proj/") for path in _codex_changes(text))


_JS_SPACE = "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a" \
            "\u2028\u2029\u202f\u205f\u3000\ufeff"
_HEREDOC = re.compile(r"^(?:cat\s+)?<<['\"]?(\w+)['\"]?\s*\n([\s\S]*?)\n\1\s*$")
_OPENCODE_HEADERS = ("*** Add File:", "*** Delete File:", "*** Update File:")


def opencode_paths(text: str) -> list[str]:
    """The files OpenCode 1.18's patch parser would touch, by the grammar in the module docstring."""
    body = text.strip(_JS_SPACE)
    wrapped = _HEREDOC.match(body)
    lines = (wrapped.group(2) if wrapped else body).split("\n")
    trimmed = [line.strip(_JS_SPACE) for line in lines]
    if "*** Begin Patch" not in trimmed or "*** End Patch" not in trimmed:
        return []
    start, stop = trimmed.index("*** Begin Patch"), trimmed.index("*** End Patch")
    paths: list[str] = []
    for index in range(start + 1, stop):
        line = lines[index]
        for header in _OPENCODE_HEADERS:
            if line.startswith(header) and line[len(header):].strip(_JS_SPACE):
                paths.append(line[len(header):].strip(_JS_SPACE))
                following = lines[index + 1] if index + 1 < len(lines) else ""
                if header == "*** Update File:" and following.startswith("*** Move to:"):
                    paths.append(following[len("*** Move to:"):].strip(_JS_SPACE))
    return paths


def _escapes(path: str) -> bool:
    depth = 0
    for part in re.split(r"[/\\]+", path):
        depth += -1 if part == ".." else (0 if part in ("", ".") else 1)
        if depth < 0:
            return True
    return path.startswith("/")


@pytest.fixture(scope="module")
def policy() -> Policy:
    return load_policy_file(ROOT / "policies" / "strict.yaml").policy


# Each client's apply_patch argument and user agent, so the request picks that client's profile.
_CLIENT_PATCH = {"codex": ("input", "codex_exec/0.171.0"), "opencode": ("patchText", "opencode/1.18")}


def _verdict(policy: Policy, client: str, text: str) -> Any:
    argument, user_agent = _CLIENT_PATCH[client]
    tool = {"type": "function", "function": {"name": "apply_patch", "parameters": {
        "type": "object", "properties": {argument: {"type": "string"}}, "required": [argument]}}}
    tools = ToolSet.for_request(policy, {"model": "m", "tools": [tool]}, {"user-agent": user_agent})
    return judge_call(policy, "apply_patch", {argument: text}, offered_tools={"apply_patch"}, tools=tools)




@pytest.mark.skipif(CODEX is None, reason="the Codex CLI is not installed (scripts/install-agent-clis.sh)")
@pytest.mark.parametrize("form", sorted(FORMS))
def test_what_the_codex_parser_writes_outside_is_refused(policy: Policy, form: str,
                                                         request: pytest.FixtureRequest) -> None:
    text = FORMS[form]
    if not _codex_writes_outside(text):
        return
    verdict = _verdict(policy, "codex", text)
    assert verdict.decision == "reject", (form, verdict)
    assert {"path_escape", "absolute_path", "bad_arguments"} & set(verdict.reasons), verdict


@pytest.mark.skipif(CODEX is None, reason="the Codex CLI is not installed (scripts/install-agent-clis.sh)")
@pytest.mark.parametrize("form", sorted(form for form in FORMS if OUT in FORMS[form]))
def test_what_the_codex_parser_writes_into_the_scripts_dir_is_refused(policy: Policy, form: str,
                                                                      request: pytest.FixtureRequest) -> None:
    """The same spellings aimed inside the project at a file an allowed command runs."""
    text = FORMS[form].replace(OUT, "scripts/search.py")
    if not any(path.startswith("proj/scripts/") for path in _codex_changes(text)):
        return
    verdict = _verdict(policy, "codex", text)
    assert verdict.decision == "reject", (form, verdict)
    assert {"protected_path", "bad_arguments", "path_escape"} & set(verdict.reasons), verdict


@pytest.mark.skipif(CODEX is None, reason="the Codex CLI is not installed (scripts/install-agent-clis.sh)")
def test_the_codex_parser_is_live() -> None:
    """The probe is meaningful: the plain form and indented headers do escape through the real parser."""
    assert _codex_writes_outside(FORMS["add-before-none"])
    assert _codex_writes_outside(FORMS["add-before-ideo"])
    assert not _codex_writes_outside(FORMS["lower-case"])
    assert _codex_changes(FORMS["add-before-tab"].replace(OUT, "scripts/search.py")) == {"proj/scripts/search.py"}


@pytest.mark.parametrize("form", sorted(form for form in FORMS if any(map(_escapes, opencode_paths(FORMS[form])))))
def test_what_the_opencode_parser_reads_outside_is_refused(policy: Policy, form: str,
                                                           request: pytest.FixtureRequest) -> None:
    verdict = _verdict(policy, "opencode", FORMS[form])
    assert verdict.decision == "reject", (form, verdict)


