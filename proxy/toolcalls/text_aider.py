"""aider's edit formats: the files an answer writes, and the shell commands it suggests.

aider offers no tools. The model edits files by writing them into its answer in the edit format aider asked for, and
aider writes them to disk (and runs the ```bash commands its user agrees to):
- `diff` and `diff-fenced`: SEARCH/REPLACE blocks, the file's path on one of the three lines before
  `<<<<<<< SEARCH` (`AiderEditBlocks`); ```bash (sh, shell, ...) blocks are suggested commands, one per line;
- `whole`: a file's path, then the whole new file in a fenced block (`AiderWholeFiles`);
- `udiff`: ```diff blocks of unified diffs, the path in their `+++` line (`AiderUnifiedDiffs`).

Read as aider 0.86 reads them (aider/coders/editblock_coder.py `find_original_update_blocks`, `find_filename`,
`strip_filename`; wholefile_coder.py `get_edits`; udiff_coder.py `find_diffs`, `process_fenced_block`), with the
fence and the files in the chat that its own request states (`aider_stated`): aider matches a path to a chat file
(by basename, or difflib at 0.8), and a SEARCH/REPLACE edit that does not apply to its file is tried on every other
file in the chat, so such an edit is judged as a write of those files too. An edit is a call of `aider_edit`
(`{"path", "fallback_paths"}`, both judged as written paths), a suggested command one of `aider_shell` (`{"command"}`).
Where aider refuses an answer (a block without a path, a SEARCH without its divider) it applies none of it; the
blocks read up to there are judged all the same.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import PurePosixPath
from typing import Any

from proxy.toolcalls.text_actions import NO_CONTEXT, Stated, TextActionFormat, TextActions, text_call

__all__ = ["AIDER_FENCES", "AiderEditBlocks", "AiderUnifiedDiffs", "AiderWholeFiles", "aider_stated", "message_text"]

# aider's fences, the first that no file in the chat starts a line with (base_coder.py `fences`).
AIDER_FENCES = {"```": "```", "````": "````", "<source>": "</source>", "<code>": "</code>", "<pre>": "</pre>",
                "<codeblock>": "</codeblock>", "<sourcecode>": "</sourcecode>"}
_FILES_PREFIX = "I have *added these files to the chat* so you can go ahead and edit them."
# Where its prompts name the fence: the SEARCH/REPLACE rules (`diff`: rule 2, `diff-fenced`: rule 1), the file
# listing rules (`whole`).
_FENCE_STATED = re.compile(r"The opening fence and code language, eg: (\S+?)python$|^- Second line: opening (\S+)$",
                           re.MULTILINE)

_HEAD = re.compile(r"^<{5,9} SEARCH>?\s*$")
_DIVIDER = re.compile(r"^={5,9}\s*$")
_UPDATED = re.compile(r"^>{5,9} REPLACE\s*$")
_SHELL_STARTS = ("```bash", "```sh", "```shell", "```cmd", "```batch", "```powershell", "```ps1", "```zsh", "```fish",
                 "```ksh", "```csh", "```tcsh")
_TRIPLE = "```"
EDIT, SHELL = "aider_edit", "aider_shell"


def message_text(content: Any) -> str:
    """A message's text: a string, or the `text` of each part of a list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def aider_stated(client_text: str, messages: Sequence[Any]) -> Stated:
    """The fence aider's system prompt names and the files its "added these files to the chat" message lists (a
    user message aider writes: each file's path on the line before a line that is the fence, which no line of a
    file's content starts with)."""
    found = _FENCE_STATED.search(client_text)
    opening = next((g for g in found.groups() if g), "```") if found else "```"
    fence = (opening, AIDER_FENCES.get(opening, opening))
    files: list[str] = []
    for message in messages:
        if not isinstance(message, Mapping) or message.get("role") != "user":
            continue
        text = message_text(message.get("content"))
        if not text.startswith(_FILES_PREFIX):
            continue
        inside = False
        lines = text.splitlines()
        for i, line in enumerate(lines):
            if inside:
                # A file's content ends in the closing fence, on a line of its own or after its last line.
                inside = not line.endswith(fence[1])
            elif line == fence[0] and i > 0 and lines[i - 1]:
                files.append(lines[i - 1])
                inside = True
    return Stated(fence=fence, files=tuple(dict.fromkeys(files)))


def _edit(fmt: str, path: str, fallback: Sequence[str], raw: str, found: TextActions) -> None:
    found.calls.append(text_call(fmt, EDIT, {"path": path, "fallback_paths": [f for f in fallback if f != path]}, raw,
                                 len(found.calls)))


# -- diff, diff-fenced ----------------------------------------------------------------------------------------


def _strip_filename(filename: str, fence: tuple[str, str]) -> str | None:
    filename = filename.strip()
    if filename == "...":
        return None
    for start in (fence[0], _TRIPLE):
        if filename.startswith(start):
            candidate = filename[len(start):]
            return candidate if candidate and ("." in candidate or "/" in candidate) else None
    filename = filename.rstrip(":").lstrip("#").strip().strip("`").strip("*")
    return filename


def _find_filename(lines: list[str], fence: tuple[str, str], valid: Sequence[str] | None) -> str | None:
    valid = list(valid or [])
    filenames: list[str] = []
    for line in list(reversed(lines))[:3]:
        filename = _strip_filename(line, fence)
        if filename:
            filenames.append(filename)
        if not line.startswith(fence[0]) and not line.startswith(_TRIPLE):
            break
    if not filenames:
        return None
    for name in filenames:
        if name in valid:
            return name
    for name in filenames:
        for chat_file in valid:
            if name == PurePosixPath(chat_file).name:
                return chat_file
    for name in filenames:
        close = difflib.get_close_matches(name, valid, n=1, cutoff=0.8)
        if len(close) == 1:
            return close[0]
    for name in filenames:
        if "." in name:
            return name
    return filenames[0]


def _edit_blocks(content: str, fence: tuple[str, str], valid: Sequence[str]) -> Iterator[tuple[str | None, str, str]]:
    """`find_original_update_blocks`: (path, search, replace) per block, (None, command lines, "") per shell block;
    raises ValueError where aider refuses the answer."""
    lines = content.splitlines(keepends=True)
    i, current = 0, None
    while i < len(lines):
        line = lines[i]
        next_is_block = ((i + 1 < len(lines) and _HEAD.match(lines[i + 1].strip()))
                         or (i + 2 < len(lines) and _HEAD.match(lines[i + 2].strip())))
        if any(line.strip().startswith(start) for start in _SHELL_STARTS) and not next_is_block:
            shell: list[str] = []
            i += 1
            while i < len(lines) and not lines[i].strip().startswith(_TRIPLE):
                shell.append(lines[i])
                i += 1
            if i < len(lines) and lines[i].strip().startswith(_TRIPLE):
                i += 1
            yield None, "".join(shell), ""
            continue
        if _HEAD.match(line.strip()):
            new_file = i + 1 < len(lines) and _DIVIDER.match(lines[i + 1].strip())
            filename = _find_filename(lines[max(0, i - 3):i], fence, None if new_file else valid) or current
            if not filename:
                raise ValueError("a SEARCH/REPLACE block without its file's path")
            current = filename
            original: list[str] = []
            i += 1
            while i < len(lines) and not _DIVIDER.match(lines[i].strip()):
                original.append(lines[i])
                i += 1
            if i >= len(lines):
                raise ValueError("a SEARCH without its =======")
            updated: list[str] = []
            i += 1
            while i < len(lines) and not (_UPDATED.match(lines[i].strip()) or _DIVIDER.match(lines[i].strip())):
                updated.append(lines[i])
                i += 1
            if i >= len(lines):
                raise ValueError("a REPLACE without its >>>>>>> REPLACE")
            yield filename, "".join(original), "".join(updated)
        i += 1


class AiderEditBlocks(TextActionFormat):
    """`diff` / `diff-fenced`: SEARCH/REPLACE blocks and ```bash suggestions."""

    def __init__(self, name: str) -> None:
        self.name = name

    def read(self, text: str, stated: Stated = NO_CONTEXT, pieces: Sequence[str] | None = None) -> TextActions:
        found = TextActions()
        try:
            for path, original, updated in _edit_blocks(text, stated.fence, stated.files):
                if path is None:
                    # aider asks once for the block, then runs each line that is not empty or a comment, stripped.
                    for command in original.strip().splitlines():
                        command = command.strip()
                        if command and not command.startswith("#"):
                            found.calls.append(text_call(self.name, SHELL, {"command": command}, original,
                                                         len(found.calls)))
                    continue
                # An edit that does not apply to its file is tried on every other file in the chat.
                fallback = stated.files if original.strip() else ()
                _edit(self.name, path, fallback, f"{path}\n{original}=======\n{updated}", found)
        except ValueError:
            pass  # aider applies nothing of such an answer; what was read is judged all the same
        return found


# -- whole ------------------------------------------------------------------------------------------------------


class AiderWholeFiles(TextActionFormat):
    """`whole`: a path, then the file's whole content in a fenced block."""

    name = "aider_whole"

    def read(self, text: str, stated: Stated = NO_CONTEXT, pieces: Sequence[str] | None = None) -> TextActions:
        found = TextActions()
        fence, chat_files = stated.fence, list(stated.files)
        lines = text.splitlines(keepends=True)
        edits: list[tuple[str, str, list[str]]] = []
        saw: str | None = None
        name: str | None = None
        source: str | None = None
        body: list[str] = []
        for i, line in enumerate(lines):
            if line.startswith(fence[0]) or line.startswith(fence[1]):
                if name is not None:
                    edits.append((name, source or "", body))
                    saw, name, source, body = None, None, None, []
                    continue
                if i > 0:
                    source = "block"
                    name = lines[i - 1].strip().strip("*").rstrip(":").strip("`").lstrip("#").strip()
                    if len(name) > 250:
                        name = ""
                    if name and name not in chat_files and PurePosixPath(name).name in chat_files:
                        name = PurePosixPath(name).name
                if not name:
                    if saw:
                        name, source = saw, "saw"
                    elif len(chat_files) == 1:
                        name, source = chat_files[0], "chat"
                    else:
                        break  # aider refuses the answer: no file named
            elif name is not None:
                body.append(line)
            else:
                for word in line.strip().split():
                    word = word.rstrip(".:,;!")
                    for chat_file in chat_files:
                        if word == f"`{chat_file}`":
                            saw = chat_file
        if name:
            edits.append((name, source or "", body))
        for path, _, content in edits:
            _edit(self.name, path, (), f"{path}\n{''.join(content)}", found)
        return found


# -- udiff ------------------------------------------------------------------------------------------------------


def _fenced_diff(lines: list[str], start: int) -> tuple[int, list[str | None]]:
    """`process_fenced_block`: where the block ends, and the path of each hunk it holds (None: none named yet)."""
    end = start
    for end in range(start, len(lines)):
        if lines[end].startswith(_TRIPLE):
            break
    block = [*lines[start:end], "@@ @@"]
    paths: list[str | None] = []
    name: str | None = None
    if block[0].startswith("--- ") and len(block) > 1 and block[1].startswith("+++ "):
        a_name, b_name = block[0][4:].strip(), block[1][4:].strip()
        name = b_name[2:] if (a_name.startswith("a/") or a_name == "/dev/null") and b_name.startswith("b/") else b_name
        block = block[2:]
    keeper = False
    hunk: list[str] = []
    for line in block:
        hunk.append(line)
        if len(line) < 2:
            continue
        if line.startswith("+++ ") and len(hunk) > 1 and hunk[-2].startswith("--- "):
            paths.append(name)
            hunk, keeper = [], False
            name = line[4:].strip()
            continue
        op = line[0]
        if op in "-+":
            keeper = True
            continue
        if op != "@":
            continue
        if not keeper:
            hunk = []
            continue
        paths.append(name)
        hunk = []
        keeper = False
    return end, paths


class AiderUnifiedDiffs(TextActionFormat):
    """`udiff`: ```diff blocks, each hunk written to the file of the `+++` line before it."""

    name = "aider_udiff"

    def read(self, text: str, stated: Stated = NO_CONTEXT, pieces: Sequence[str] | None = None) -> TextActions:
        found = TextActions()
        lines = (text if text.endswith("\n") else text + "\n").splitlines(keepends=True)
        paths: list[str | None] = []
        i = 0
        while i < len(lines):
            if lines[i].startswith("```diff"):
                # aider reads on from the block's closing line, which may itself open another block
                i, more = _fenced_diff(lines, i + 1)
                paths += more
                continue
            i += 1
        written: list[str] = []  # a hunk without a path of its own goes to the one before it
        last: str | None = None
        for path in paths:
            last = path or last
            if last is not None and last not in written:
                written.append(last)
        for path in written:
            _edit(self.name, path, (), path, found)
        return found
