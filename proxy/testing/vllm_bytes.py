"""What each vLLM version family puts on the wire for a streamed chat completion, so that the
scripted upstream can speak it (facts read from vLLM's released serving and parser code):

- tool-call ids: `call_` + 24 hex digits in 0.19/0.23 `qwen3_coder` streams, otherwise (and in
  every whole response) `chatcmpl-tool-` + 32 hex digits;
- the first delta of a tool call carries id, type and name, with `arguments: ""` up to 0.23 and
  no `arguments` key from 0.24;
- argument deltas: 0.19/0.23 `qwen3_coder` send `{`, then each whole parameter (`"k": v`, later
  ones with `, ` before), then `}` - never a cut inside a value; 0.24+ send the JSON in pieces cut
  anywhere, each a prefix of the whole;
- every choice carries `"token_ids": null`; the first chunk `prompt_token_ids` (and from 0.23
  `prompt_text`); the finish choice `stop_reason`; the usage chunk leaves nulls out;
- 0.34 (the 0.33 family) may send `: keep-alive` comment lines while a request waits.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from proxy.toolcalls.families import FAMILIES, family_of

__all__ = ["FamilyBytes", "family_bytes"]


@dataclass(frozen=True)
class FamilyBytes:
    family: str
    tool_parser: str
    version: str
    keep_alive: bool = False

    @property
    def regex_stream(self) -> bool:
        """0.19/0.23 `qwen3_coder`: the regex parser's own streaming."""
        return self.family in ("0.19", "0.23") and self.tool_parser == "qwen3_coder"

    def stream_call_id(self) -> str:
        if self.regex_stream:
            return f"call_{os.urandom(12).hex()}"
        return f"chatcmpl-tool-{os.urandom(16).hex()}"

    def first_chunk_fields(self) -> dict[str, Any]:
        fields: dict[str, Any] = {"prompt_token_ids": None}
        if self.family != "0.19":
            fields["prompt_text"] = None
        return fields

    def tool_deltas(self, index: int, name: str, arguments: Any, cut: int) -> list[dict[str, Any]]:
        """The deltas of one tool call, as this family cuts them."""
        function: dict[str, Any] = {"name": name}
        if self.family in ("0.19", "0.23"):
            function["arguments"] = ""
        out = [{"tool_calls": [{"index": index, "id": self.stream_call_id(), "type": "function",
                                "function": function}]}]
        if self.regex_stream and isinstance(arguments, dict):
            pieces = ["{"]
            for position, (key, value) in enumerate(arguments.items()):
                separator = ", " if position else ""
                pieces.append(f"{separator}{json.dumps(key, ensure_ascii=False)}: "
                              f"{json.dumps(value, ensure_ascii=False)}")
            pieces.append("}")
        else:
            text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
            pieces = [text[i:i + cut] for i in range(0, len(text), max(1, cut))]
        out += [{"tool_calls": [{"index": index, "function": {"arguments": piece}}]} for piece in pieces]
        return out


_VERSIONS = {"0.19": "0.19.0", "0.23": "0.23.0", "0.24": "0.24.0", "0.26": "0.26.0", "0.33": "0.33.0",
             "0.34": "0.34.0"}


def family_bytes(version: str, tool_parser: str = "qwen3_coder", *, keep_alive: bool = False) -> FamilyBytes:
    """The wire shapes of the family `version` belongs to (`0.23`, `0.27.1` ...)."""
    family, _ = family_of(version)
    if family not in FAMILIES:
        raise ValueError(f"no vLLM family for {version!r}")
    full = version if version.count(".") >= 2 else _VERSIONS.get(version, f"{version}.0")
    return FamilyBytes(family=family, tool_parser=tool_parser, version=full,
                       keep_alive=keep_alive and family == "0.33")
