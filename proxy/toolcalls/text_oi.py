"""Open Interpreter's markdown code blocks: the code it runs from an answer of a model it gives no tools.

For a model it does not know to call functions (any vLLM model name), Open Interpreter 0.4 asks for markdown code
blocks ("To execute code on the user's machine, write a markdown code block") and, with `auto_run`, runs the first
block of each answer in the language its fence names. It reads the block while the answer streams, chunk by chunk
(interpreter/core/llm/run_text_llm.py), and what it runs depends on where the chunks split: the chunk that opens the
block is kept whole (text before the fence included) once the language line has ended, a chunk ending in a
backtick is dropped, the block ends at the chunk that closes it, and every chunk has the language's name removed.
It then mends the code (interpreter/core/respond.py: a leading "`\\n", `functions.execute(...)`, a JSON object of
`language` and `code`, which may change the language too).

So the block is read here from the pieces of text exactly as the client gets them (`pieces`: the delivered chunks'
content, in order; a whole answer is one piece), by the same steps, into a call of Open Interpreter's own tool,
`execute {"language", "code"}`: what its tool-calling mode sends, judged by its profile (the code as a command in a
shell language, any other language refused).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from proxy.toolcalls.text_actions import NO_CONTEXT, Stated, TextActionFormat, TextActions, text_call

__all__ = ["OpenInterpreterBlocks", "oi_code"]

TOOL = "execute"
_NOT_RUN = frozenset({"text", "markdown", "plaintext"})


def _streamed_block(pieces: Sequence[str]) -> tuple[str, str] | None:
    """`run_text_llm`: the language and the code chunks of the first block, as the client assembles them."""
    inside = False
    accumulated = ""
    language: str | None = None
    code: list[str] = []
    for content in pieces:
        accumulated += content
        if accumulated.endswith("`"):
            continue  # "we might be writing ``` one token at a time"
        if "```" in accumulated and not inside:
            inside = True
            accumulated = accumulated.split("```")[1]
        if inside and "```" in accumulated:
            break
        if inside:
            if language is None and "\n" in accumulated:
                language = accumulated.split("\n")[0]
                # Without a language: python (outside its OS mode); else the name's letters only.
                language = "python" if language == "" else "".join(c for c in language if c.isalpha())
            if language:
                code.append(content.replace(language, ""))
    return (language, "".join(code)) if language else None


def _mended(language: str, code: str) -> tuple[str, str]:
    """`respond.py`'s repairs of a code message before it runs."""
    language = language.lower().strip()
    if code.startswith("`\n"):
        code = code[2:].strip()
    if code.startswith("functions.execute("):
        try:
            found = json.loads(code.replace("functions.execute(", "").rstrip(")"))
            language, code = found.get("language", language), found.get("code", code)
        except Exception:  # as the client: a repair that fails leaves the code as it was
            pass
    if code.strip().endswith("executeexecute"):
        code = code.replace("executeexecute", "")
    for prefix, spelt in (('{"language":', code), ("{language:", None)):
        if code.replace("\n", "").replace(" ", "").startswith(prefix):
            try:
                text = spelt if spelt is not None else code.replace("language: ", '"language": ').replace(
                    "code: ", '"code": ')
                found = json.loads(text)
                if set(found.keys()) == {"language", "code"}:
                    language, code = found["language"], found["code"]
            except Exception:
                pass
    return language if isinstance(language, str) else str(language), code if isinstance(code, str) else str(code)


def oi_code(pieces: Sequence[str]) -> tuple[str, str] | None:
    """The (language, code) Open Interpreter runs from an answer delivered in `pieces`; None: nothing runs."""
    block = _streamed_block(pieces)
    if block is None:
        return None
    language, code = _mended(*block)
    if language.lower().strip() in _NOT_RUN or not code.strip():
        return None  # notes, or an empty block: shown, not run
    return language.lower().strip(), code


class OpenInterpreterBlocks(TextActionFormat):
    """The first markdown code block of an answer, as Open Interpreter runs it."""

    name = "oi_blocks"

    def read(self, text: str, stated: Stated = NO_CONTEXT, pieces: Sequence[str] | None = None) -> TextActions:
        found = TextActions()
        runs = oi_code([text] if pieces is None else pieces)
        if runs is not None:
            language, code = runs
            # Blank lines and the spaces around the code change nothing a shell runs of it.
            found.calls.append(text_call(self.name, TOOL, {"language": language, "code": code.strip(" \t\n")},
                                         text, 0))
        return found
