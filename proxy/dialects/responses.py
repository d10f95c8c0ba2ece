"""POST /v1/responses (OpenAI Responses API): every `function_call` output item judged and enforced.

Tool calls come as output items of type `function_call` (`name`, `call_id`, `arguments` as a JSON string),
whole in `output` or streamed as `response.output_item.added` -> `response.function_call_arguments.delta`
... `.done` -> `response.output_item.done`, and the stream ends with `response.completed` carrying the whole
response. A rejected call goes back to the model as the `function_call` item itself plus a
`function_call_output` item with the reasons, appended to `input`.

Streaming in enforce mode: events of the first attempt's text and reasoning items pass live; the events of a
`function_call` item, a retry's text and reasoning events and the closing `response.completed` are held until
the attempt is judged; a delivered retry's items go out without the text the client already has (an item of it
all dropped; one cut in part says the rest in its deltas, `.done` events and closing item), then a message item
of the proxy's that says what was refused. The client must see one response, so its
`sequence_number` and `output_index` count on across attempts: both are given when an event is sent, so
events held and released later, or dropped with a rejected attempt, leave no gap; a retry's
`response.created` / `response.in_progress` are dropped, and the closing `response.completed` lists the
items the client actually received, with the usage of every attempt. A repaired call's events carry its
judged arguments, in one delta.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any

from proxy import strict
from proxy.dialects.base import DialectExchange
from proxy.dialects.shapes import parts_text
from proxy.dialects.structured import DialectStream, StructuredDialect, cuts
from proxy.enforce.actions import ACTION_ITEMS, UNJUDGEABLE, action_call, unjudgeable_call
from proxy.enforce.exchange import edited_bytes
from proxy.enforce.feedback_turns import blocked_message
from proxy.errors import BadRequest, BlockedTurn
from proxy.record import JudgedCall, Usage
from proxy.sessions.project_root import ClientText, client_parts
from proxy.toolcalls import ToolCall
from proxy.toolcalls.openai import structured_call
from proxy.upstream.sse import SSEEvent

__all__ = ["ResponsesDialect"]

_COMPACT = (",", ":")
_TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})
_TEXT_DELTAS = frozenset({"response.output_text.delta", "response.reasoning_text.delta"})
# Output items that carry only text, and those that carry a call the proxy judges; any other type is
# `unjudgeable` (mcp_call, code_interpreter_call ... and whatever comes next).
_TEXT_ITEMS = frozenset({"message", "reasoning"})
_CALL_ITEMS = frozenset({"function_call", *ACTION_ITEMS})
# Every event type the proxy reads; an unknown one could carry anything, and is `unjudgeable`.
_ITEM_EVENTS = frozenset({
    "response.output_item.added", "response.output_item.done",
    "response.content_part.added", "response.content_part.done",
    "response.output_text.delta", "response.output_text.done", "response.output_text.annotation.added",
    "response.refusal.delta", "response.refusal.done",
    "response.reasoning_text.delta", "response.reasoning_text.done",
    "response.reasoning_part.added", "response.reasoning_part.done",
    "response.reasoning_summary_part.added", "response.reasoning_summary_part.done",
    "response.reasoning_summary_text.delta", "response.reasoning_summary_text.done",
    "response.function_call_arguments.delta", "response.function_call_arguments.done",
    "response.custom_tool_call_input.delta", "response.custom_tool_call_input.done",
})
_CALL_DELTAS = frozenset({"response.function_call_arguments.delta", "response.function_call_arguments.done",
                          "response.custom_tool_call_input.delta", "response.custom_tool_call_input.done"})


def item_message(item: Any) -> dict[str, Any] | None:
    """One input or output item as a chat message (lineage only); reasoning and other items are skipped."""
    if not isinstance(item, dict):
        return None
    kind = item.get("type")
    if kind == "function_call":
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": item.get("call_id"), "function": {"name": item.get("name"), "arguments": item.get("arguments")}}]}
    if kind == "function_call_output":
        return {"role": "tool", "content": parts_text(item.get("output")), "tool_call_id": item.get("call_id")}
    if kind in (None, "message") and isinstance(item.get("role"), str):
        return {"role": item["role"], "content": parts_text(item.get("content"))}
    return None


def _item_call(item: Any, index: int) -> ToolCall:
    """The call an output item carries: judged when the proxy knows its type, `unjudgeable` otherwise."""
    kind = item.get("type") if isinstance(item, dict) else None
    if kind == "function_call":
        return structured_call(name=item.get("name"), arguments=item.get("arguments"), call_id=item.get("call_id"),
                               index=index)
    if kind in ACTION_ITEMS:
        return action_call(item, index)
    return unjudgeable_call(str(kind)[:80] if kind is not None else "item",
                            "an output item the proxy does not know", item)


def _usage(usage: Any) -> dict[str, Any] | None:
    if not isinstance(usage, dict):
        return None
    details = usage.get("input_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return {"prompt_tokens": usage.get("input_tokens"), "completion_tokens": usage.get("output_tokens"),
            "prompt_tokens_details": {"cached_tokens": cached}}


def _with_usage(response: dict[str, Any], usage: Usage) -> None:
    current = response.get("usage")
    summed = dict(current) if isinstance(current, dict) else {}
    summed.update(input_tokens=usage.prompt_tokens, output_tokens=usage.completion_tokens,
                  total_tokens=usage.prompt_tokens + usage.completion_tokens)
    details = summed.get("input_tokens_details")
    summed["input_tokens_details"] = {**(details if isinstance(details, dict) else {}),
                                      "cached_tokens": usage.cached_tokens}
    response["usage"] = summed


def _message_item(text: str, *, status: str = "completed") -> dict[str, Any]:
    part: dict[str, Any] = {"annotations": [], "text": text, "type": "output_text", "logprobs": None}
    return {"id": f"msg_{uuid.uuid4().hex}", "content": [part] if text else [], "role": "assistant",
            "status": status, "type": "message"}


def _item_key(obj: dict[str, Any]) -> Hashable:
    """The upstream's key for the item an event belongs to: its position, else its id."""
    position = obj.get("output_index")
    return position if isinstance(position, int) else ("item", obj.get("item_id"))


# The events that spell out an item's text whole, beside its deltas.
_TEXT_DONE = frozenset({"response.output_text.done", "response.reasoning_text.done"})
_PART_DONE = frozenset({"response.content_part.done", "response.reasoning_part.done"})


def _retold(obj: dict[str, Any], texts: dict[Any, str]) -> dict[str, Any]:
    """An event of an item whose text was cut, saying the text left (`texts`, by content index) wherever it spells
    the text out: a `.done` text event, a part's `.done`, the item's content parts."""
    kind = obj.get("type")
    index = obj.get("content_index", 0)
    if kind in _TEXT_DONE:
        return {**obj, "text": texts.get(index, "")}
    part = obj.get("part")
    if kind in _PART_DONE and isinstance(part, dict) and "text" in part:
        return {**obj, "part": {**part, "text": texts.get(index, "")}}
    item = obj.get("item")
    content = item.get("content") if isinstance(item, dict) else None
    if isinstance(item, dict) and isinstance(content, list):
        parts = [{**p, "text": texts.get(k, "")} if isinstance(p, dict) and p.get("text") else p
                 for k, p in enumerate(content)]
        return {**obj, "item": {**item, "content": parts}}
    return obj


def _answered(output: Any, text: str) -> list[dict[str, Any]]:
    """A blocked turn as the client got it, for an upstream that holds its refused calls unanswered: each
    `function_call` answered with the explanation, then the explanation as the assistant's message."""
    calls = [i.get("call_id") for i in output if isinstance(i, dict) and i.get("type") == "function_call"] \
        if isinstance(output, list) else []
    return [*({"type": "function_call_output", "call_id": c, "output": text} for c in calls if isinstance(c, str)),
            {"type": "message", "role": "assistant", "content": text}]  # an easy input message: any server reads it


class ResponsesDialect(StructuredDialect, route="responses", path="/responses", history_key="input",
                       output_key="output"):

    async def prepare(self, ex: DialectExchange) -> None:
        """A request continuing an id the proxy handed out goes up continuing the server's response it stands for,
        with what the client got that the server does not hold before its input (proxy/sessions/response_chains.py).
        The edit is made in the bytes: they are the one copy of the conversation kept (a retry reads them again)."""
        found = await ex.state.response_chains.find(ex.payload.get("previous_response_id"))
        if found is None:
            return
        ex.payload["previous_response_id"] = found.upstream_id
        full = ex.full_payload()
        if found.items:
            full = {**full, "input": [*found.items, *self.history(full)]}
        ex.original_body = edited_bytes(ex.original_body, full)

    def blocked_turn(self, ex: DialectExchange, obj: dict[str, Any], text: str) -> None:
        ex.answered = _answered(obj.get("output"), text)

    def chain(self, ex: DialectExchange, response_id: str | None) -> None:
        if ex.state.response_chains.remember(response_id, ex.upstream_response_id or response_id, ex.answered):
            ex.commit_before_end = True

    def validate(self, payload: dict[str, Any]) -> None:
        value = payload.get("input")
        if not (isinstance(value, str) or (isinstance(value, list) and value)):
            raise BadRequest("`input` must be a string or a non-empty list of items", param="input")

    def offered(self, payload: dict[str, Any]) -> set[str]:
        tools = payload.get("tools")
        return {t["name"] for t in tools if isinstance(t, dict) and t.get("type") == "function"
                and isinstance(t.get("name"), str)} if isinstance(tools, list) else set()

    def history(self, payload: dict[str, Any]) -> list[Any]:
        value = payload.get("input")
        if isinstance(value, str):  # a bare string is one user message; retries need the list form
            return [{"type": "message", "role": "user", "content": value}]
        return list(value) if isinstance(value, list) else []

    def conversation(self, payload: dict[str, Any]) -> list[dict[str, Any]]:
        messages = [{"role": "system", "content": payload["instructions"]}] \
            if isinstance(payload.get("instructions"), str) else []
        return messages + [m for m in map(item_message, self.history(payload)) if m is not None]

    def client_texts(self, payload: dict[str, Any]) -> Iterable[ClientText]:
        instructions = payload.get("instructions")
        return client_parts([instructions] if isinstance(instructions, str) else [], payload.get("input"))

    def calls(self, obj: dict[str, Any]) -> list[ToolCall]:
        output = obj.get("output")
        if output is None:
            return []
        if not isinstance(output, list):
            return [unjudgeable_call("output", "`output` that is not a list", output)]
        return [_item_call(item, k) for k, item in enumerate(output)
                if not (isinstance(item, dict) and item.get("type") in _TEXT_ITEMS)]

    def text(self, obj: dict[str, Any]) -> str:
        output = obj.get("output")
        if not isinstance(output, list):
            return ""
        return "".join(parts_text(i.get("content")) for i in output
                       if isinstance(i, dict) and i.get("type") == "message")

    def usage(self, obj: dict[str, Any] | None) -> dict[str, Any] | None:
        return _usage(obj)

    def set_usage(self, obj: dict[str, Any], usage: Usage) -> None:
        _with_usage(obj, usage)

    def set_blocked(self, obj: dict[str, Any], text: str) -> None:
        obj["output"] = [_message_item(text)]
        obj["status"] = "completed"
        obj["incomplete_details"] = None

    def retry_items(self, turn: list[dict[str, Any]]) -> list[dict[str, Any]]:
        assistant, results = turn[0], turn[1:]
        items: list[dict[str, Any]] = []
        if assistant.get("content"):
            items.append({"type": "message", "role": "assistant", "content": assistant["content"]})
        for call in assistant.get("tool_calls") or []:
            items.append({"type": "function_call", "call_id": call["id"], "name": call["function"]["name"],
                          "arguments": call["function"]["arguments"]})
        items += [{"type": "function_call_output", "call_id": r["tool_call_id"], "output": r["content"]}
                  if r["role"] == "tool" else {"type": "message", "role": "user", "content": r["content"]}
                  for r in results]  # a user message: what happened to the actions written in the text
        return items

    def reply(self, obj: dict[str, Any]) -> list[dict[str, Any]]:
        output = obj.get("output")
        return [m for m in map(item_message, output) if m is not None] if isinstance(output, list) else []

    def response_id(self, obj: dict[str, Any]) -> str | None:
        found = obj.get("id")
        return found if isinstance(found, str) and found else None

    def is_text_item(self, item: Any) -> bool:
        return isinstance(item, dict) and item.get("type") in _TEXT_ITEMS

    def append_note(self, items: list[Any], line: str) -> bool:
        parts = [p for i in items if isinstance(i, dict) and i.get("type") == "message"
                 and isinstance(i.get("content"), list)
                 for p in i["content"] if isinstance(p, dict) and p.get("type") == "output_text"
                 and isinstance(p.get("text"), str)]
        if parts:
            parts[-1]["text"] += line
        return bool(parts)

    def note_item(self, text: str) -> dict[str, Any]:
        return _message_item(text)

    def repaired_fields(self, call: ToolCall) -> dict[str, Any]:
        return {"arguments": call.arguments_text}

    def stream(self, ex: DialectExchange) -> DialectStream[Any]:
        return _ResponsesStream(ex)


@dataclass
class _HeldCall:
    """The events of one call item of the current attempt, kept until the attempt is judged."""

    item: dict[str, Any]
    events: list[tuple[dict[str, Any], bytes]] = field(default_factory=list)
    parts: list[str] = field(default_factory=list)
    arguments: str | None = None  # from response.function_call_arguments.done / custom_tool_call_input.done
    done: dict[str, Any] | None = None  # the item of response.output_item.done

    def call(self, index: int) -> ToolCall:
        item = self.done or self.item
        disagree = self._disagreement()
        if disagree is not None:
            return unjudgeable_call(str(item.get("type"))[:80], disagree, item)
        if item.get("type") in ACTION_ITEMS:
            if self.done is None and item.get("type") == "custom_tool_call":
                text = self.arguments if self.arguments is not None else "".join(self.parts)
                item = {**item, "input": text if text else item.get("input")}
            return action_call(item, index)
        arguments = item.get("arguments") if self.done is not None else self.arguments
        if not isinstance(arguments, str):
            arguments = "".join(self.parts)
        return structured_call(name=item.get("name"), arguments=arguments, call_id=item.get("call_id"), index=index)

    def repaired(self, arguments: str) -> list[dict[str, Any]]:
        """The held events again, carrying a repaired call's judged arguments: the whole text in the first
        delta (the others dropped), in the `.done` event and in any item that spelt the arguments out."""
        out: list[dict[str, Any]] = []
        delta_sent = False
        for obj, _ in self.events:
            kind = obj.get("type")
            if kind == "response.function_call_arguments.delta":
                if delta_sent:
                    continue
                obj, delta_sent = {**obj, "delta": arguments}, True
            elif kind == "response.function_call_arguments.done":
                obj = {**obj, "arguments": arguments}
            elif isinstance(obj.get("item"), dict) and obj["item"].get("arguments"):
                obj = {**obj, "item": {**obj["item"], "arguments": arguments}}
            out.append(obj)
        return out

    def _disagreement(self) -> str | None:
        """A call a client may read in several places (the deltas, the `.done` event, the done item, the added
        item) must read the same in each, or the proxy cannot know which one a client runs."""
        kind = (self.done or self.item).get("type")
        key = "input" if kind == "custom_tool_call" else "arguments" if kind == "function_call" else \
            ACTION_ITEMS.get(str(kind)) or "action"
        spellings = [json.dumps(v, sort_keys=True) for v in (
            "".join(self.parts) if self.parts else None, self.arguments,
            self.done.get(key) if self.done is not None else None,
            self.item.get(key) or None) if v is not None]
        if len(set(spellings)) > 1:
            return "a call whose streamed, closing and item forms disagree"
        if self.done is not None and self.done.get("name") != self.item.get("name"):
            return "a call whose name changed while it streamed"
        return None


class _ResponsesStream(DialectStream[_HeldCall]):
    answer_kind = "message"

    def __init__(self, ex: DialectExchange) -> None:
        super().__init__(ex)
        self.sequence = 0  # the next sequence_number the client sees
        self.created: dict[str, Any] | None = None  # the response of the first response.created
        self.items: dict[int, dict[str, Any]] = {}  # client output_index -> the item as the client has it
        self.held_ids: dict[str, _HeldCall] = {}
        self.refused: set[Hashable] = set()  # positions of this attempt's items the proxy cannot judge
        self.finished: set[Hashable] = set()  # positions whose output_item.done came
        self.completed: tuple[dict[str, Any], bytes] | None = None
        self.completed_fits = False  # the closing response lists exactly the items streamed, all judged
        self.attempt_items: set[Hashable] = set()  # positions of this attempt's items
        self.item_kinds: dict[Any, str] = {}  # this attempt's output_index -> its item's type
        self.spelt: dict[Hashable, dict[Any, str]] = {}  # message text per item and content index, from deltas

    def begin_attempt(self) -> None:
        super().begin_attempt()
        self.spelt = {}
        self.held_ids = {}
        self.refused = set()
        self.finished = set()
        self.attempt_items = set()
        self.item_kinds = {}
        self.completed = None
        self.completed_fits = False

    # -- upstream events

    def ended(self) -> str | None:
        return "the response ended" if self.completed is not None else None

    def typed_event(self, event: SSEEvent, obj: dict[str, Any], kind: Any) -> bytes | None:
        observe = not self.enforce
        if kind in _TERMINAL:
            response = obj.get("response")
            self.attempt_usage = _usage(response.get("usage")) if isinstance(response, dict) else None
            self.completed = (obj, event.raw)
            self._check_completed(response)
            return event.raw if observe else None
        if kind in ("response.created", "response.in_progress"):
            response = obj.get("response")
            if isinstance(response, dict) and response.get("output"):
                return self.drop(event, f"`{kind}` whose response already holds output", obj)
            if kind == "response.created" and isinstance(response, dict) and isinstance(response.get("id"), str):
                self.ex.upstream_response_id = response["id"]  # the attempt the client's id continues from upstream
            if self.attempt > 1:
                return None  # the client's response began with the first attempt
            if self.created is None and isinstance(response, dict):
                self.created = response
            return event.raw if observe else self._send(obj)
        if kind not in _ITEM_EVENTS:
            return self.drop(event, f"an event of a type the proxy does not know (`{str(kind)[:60]}`)", obj)
        if kind in _TEXT_DELTAS:
            self.ex.record.mark_first_token()
            if kind == "response.output_text.delta" and isinstance(obj.get("delta"), str):
                self.attempt_text += obj["delta"]
        position = obj.get("output_index")
        if not (isinstance(position, int) and not isinstance(position, bool)) and position is not None:
            return self.drop(event, "an output_index that is not a whole number", obj)
        item = obj.get("item") if isinstance(obj.get("item"), dict) else None
        if "item" in obj and item is None:
            return self.drop(event, "an item that is not an object", obj)
        key: Hashable = position if position is not None else ("item", obj.get("item_id"))
        if key in self.refused:
            return self.drop(event, "an event of an item the proxy cannot judge", obj)
        if item is not None:
            self.attempt_items.add(key)
            item_kind = item.get("type")
            if isinstance(position, int) and isinstance(item_kind, str):
                self.item_kinds[position] = item_kind
            if item_kind not in _TEXT_ITEMS and item_kind not in _CALL_ITEMS:
                self.refused.add(key)
                return self.drop(event, f"an output item of a type the proxy does not know (`{str(item_kind)[:60]}`)",
                                  item, name=str(item_kind)[:80])
            if kind == "response.output_item.done":
                if key in self.finished:
                    return self.drop(event, "a second response.output_item.done for one item", item)
                self.finished.add(key)
            known = self.held.get(key)
            if known is not None and item_kind != known.item.get("type"):
                return self.drop(event, "an item whose type changed while it streamed", item)
        if self.ex.acts_on_text:
            self._check_spelling(kind, obj, key, item)
        if observe and item is not None and isinstance(position, int):
            self.items[position] = item  # observe mode: one attempt, positions as vLLM gave them
        held = self._held_for(kind, obj, key, item)
        if held is not None:
            self.ex.record.mark_first_token()
            held.events.append((obj, event.raw))
            delta = obj.get("delta")
            if kind in ("response.function_call_arguments.delta", "response.custom_tool_call_input.delta"):
                if not isinstance(delta, str):
                    return self.drop(event, "a call delta that is not a string", obj)
                held.parts.append(delta)
            elif kind == "response.function_call_arguments.done" and isinstance(obj.get("arguments"), str):
                held.arguments = obj["arguments"]
            elif kind == "response.custom_tool_call_input.done" and isinstance(obj.get("input"), str):
                held.arguments = obj["input"]
            elif kind == "response.output_item.done" and item is not None:
                held.done = item
            return event.raw if observe else None
        if kind in _CALL_DELTAS:
            return self.drop(event, "a call event of an item that is not a call", obj)
        return event.raw if observe else self.narrate(obj)

    def _check_spelling(self, kind: str, obj: dict[str, Any], key: Hashable, item: dict[str, Any] | None) -> None:
        """A text-acting client runs what it reads in a message's text, wherever it reads it (the deltas, a
        `.done` event, the done item): every spelling must be the text judged (the deltas), or the output is
        `unjudgeable`."""
        parts = self.spelt.setdefault(key, {})
        index = obj.get("content_index", 0)
        part: dict[str, Any] = obj["part"] if isinstance(obj.get("part"), dict) else {}
        if kind == "response.output_text.delta":
            if isinstance(obj.get("delta"), str):
                parts[index] = parts.get(index, "") + obj["delta"]
            return
        if kind == "response.output_text.done":
            said, heard = obj.get("text"), parts.get(index, "")
        elif kind in ("response.content_part.added", "response.content_part.done"):
            said = part.get("text")
            heard = parts.get(index, "") if kind.endswith(".done") else ""
        elif kind in ("response.output_item.added", "response.output_item.done") and item is not None \
                and item.get("type") == "message":
            said = parts_text(item.get("content"))
            heard = "".join(parts[k] for k in sorted(parts, key=str)) if kind.endswith(".done") else ""
        else:
            return
        if said is not None and said != heard:
            self.unjudgeable("message", f"`{kind}` whose text is not the text streamed", obj)

    def _check_completed(self, response: Any) -> None:
        """The closing response must hold no call the client was not streamed (and so the proxy did not judge).
        vLLM gives the closing output items ids of their own, so calls are matched by name and arguments."""
        output = response.get("output") if isinstance(response, dict) else None
        if not isinstance(output, list):
            return
        if self.ex.acts_on_text and "".join(parts_text(i.get("content")) for i in output if isinstance(i, dict)
                                            and i.get("type") == "message") != self.attempt_text:
            self.unjudgeable("message", "response.completed holds a text that is not the text streamed", response)
        self.completed_fits = not self.unjudged and len(output) == len(self.attempt_items)
        streamed = Counter((c.name, c.arguments_text) for c in self.calls() if c.source != UNJUDGEABLE)
        for position, item in enumerate(output):
            if isinstance(item, dict) and item.get("type") in _TEXT_ITEMS:
                continue
            call = _item_call(item, position)
            if call.source != UNJUDGEABLE and streamed[(call.name, call.arguments_text)] > 0:
                streamed[(call.name, call.arguments_text)] -= 1
                continue
            self.completed_fits = False
            self.unjudgeable(call.name, "response.completed holds a call item that never streamed", item)

    def _held_for(self, kind: str, obj: dict[str, Any], key: Hashable, item: dict[str, Any] | None) -> _HeldCall | None:
        """The call an event belongs to, found by output_index, else by item id. An event of a call that was
        never announced is held all the same, as a call of its own: a stream vLLM would not send must not get
        a call past the judge."""
        item_id = obj.get("item_id") or (item.get("id") if item is not None else None)
        found = self.held.get(key) or (self.held_ids.get(item_id) if isinstance(item_id, str) else None)
        is_call = (item is not None and item.get("type") in _CALL_ITEMS) or kind in _CALL_DELTAS
        if found is None and is_call:
            if item is None:
                item = {"type": "custom_tool_call" if "custom_tool_call" in kind else "function_call",
                        "id": item_id, "name": obj.get("name")}
            found = self.held[key] = _HeldCall(item)
            if isinstance(item_id, str):
                self.held_ids[item_id] = found
        return found

    def text_kind(self, obj: dict[str, Any]) -> str | None:
        item = obj.get("item")
        if isinstance(item, dict) and isinstance(item.get("type"), str):
            return str(item["type"])
        return self.item_kinds.get(obj.get("output_index"))

    def event_text(self, obj: dict[str, Any]) -> str:
        delta = obj.get("delta")
        return delta if obj.get("type") in _TEXT_DELTAS and isinstance(delta, str) else ""

    def trim(self, events: list[tuple[str | None, dict[str, Any]]], skip: dict[str, int]) -> list[dict[str, Any]]:
        taken_out = cuts(((_item_key(obj), kind, self.event_text(obj)) for kind, obj in events), skip)
        cut_items = {key for key, cut in taken_out.items() if cut[0]}
        left: dict[Hashable, dict[Any, str]] = {}  # the text left per item and content index
        kept: list[dict[str, Any]] = []
        for _, obj in events:
            key = _item_key(obj)
            cut = taken_out.get(key)
            if cut is None:  # an item the client has all the text of: dropped whole
                continue
            text = self.event_text(obj)
            if text:
                taken = min(cut[0], len(text))
                cut[0] -= taken
                texts = left.setdefault(key, {})
                index = obj.get("content_index", 0)
                texts[index] = texts.get(index, "") + text[taken:]
                if taken == len(text):
                    continue
                if taken:
                    obj = {**obj, "delta": text[taken:]}
            kept.append(obj)
        # Every other place a client reads a cut item's text from says the text that is left.
        return [_retold(obj, left.get(_item_key(obj), {})) if _item_key(obj) in cut_items else obj for obj in kept]

    def with_note(self, events: list[dict[str, Any]], line: str) -> list[dict[str, Any]] | None:
        messages = [_item_key(obj) for obj in events if obj.get("type") == "response.output_item.added"
                    and isinstance(obj.get("item"), dict) and obj["item"].get("type") == "message"]
        deltas = [k for k, obj in enumerate(events) if messages and _item_key(obj) == messages[-1]
                  and obj.get("type") == "response.output_text.delta"]
        if not deltas:
            return None
        key, last = messages[-1], events[deltas[-1]]
        texts: dict[Any, str] = {}
        for k in deltas:
            index = events[k].get("content_index", 0)
            texts[index] = texts.get(index, "") + events[k]["delta"]
        # The line goes into the part the last delta wrote to, and so into every place that spells that part.
        texts[last.get("content_index", 0)] += line
        out = [*events[:deltas[-1] + 1], {**last, "delta": line}, *events[deltas[-1] + 1:]]
        return [_retold(obj, texts) if _item_key(obj) == key else obj for obj in out]

    def note_events(self, text: str) -> list[bytes]:
        return self._message_events(text, ("note", self.attempt))

    def client_text(self) -> str:
        return "".join(parts_text(item.get("content")) for _, item in sorted(self.items.items())
                       if item.get("type") == "message")

    def encode(self, obj: dict[str, Any]) -> bytes:
        return self._send(obj)

    def _send(self, obj: dict[str, Any], *, placed: bool = False) -> bytes:
        """An event as the client sees it (enforce mode): numbered on from the events before it, at the client's
        position for its item, in the proxy's own encoding.

        `placed`: the event's output_index is already the client's (a synthesized event)."""
        obj = {**obj, "sequence_number": self.sequence}
        self.sequence += 1
        position = obj.get("output_index")
        if isinstance(position, int):
            mine = position if placed else self.positions.client(position)
            obj["output_index"] = mine
            if isinstance(obj.get("item"), dict):
                self.items[mine] = obj["item"]
        return strict.encode_event(obj, str(obj.get("type") or "message"))

    # -- the end of an attempt

    def release(self, judged: list[JudgedCall]) -> list[bytes]:
        out = self.released_text()
        for held, item in zip(self.held.values(), judged, strict=False):  # calls() lists the held calls first
            if item.repaired:
                events = held.repaired(item.call.arguments_text)
                self.completed_fits = False  # vLLM's closing event lists the call as the model wrote it
            else:
                events = [obj for obj, _ in held.events]
            out += [self._send(obj) for obj in events]
        out.append(self._completion())
        return out

    def blocked(self, text: str) -> list[bytes]:
        # The calls as the server stores them: vLLM's closing response re-parses them with ids of its own.
        stored = self.completed[0].get("response") if self.completed is not None else None
        output = stored.get("output") if isinstance(stored, dict) else None
        self.ex.answered = _answered(output if isinstance(output, list) else
                                     [held.done or held.item for held in self.held.values()], text)
        out = self._message_events(text, ("blocked", self.attempt))
        out.append(self._completion(status="completed"))
        return out

    def _message_events(self, text: str, position: Hashable) -> list[bytes]:
        """A message item of the proxy's own saying `text`, at a position of its own after everything sent so far
        (`position`: its key)."""
        item = _message_item(text, status="in_progress")
        part = {"annotations": [], "text": "", "type": "output_text", "logprobs": []}
        done_part = {**part, "text": text, "logprobs": None}
        common = {"item_id": item["id"], "output_index": position}
        events = [
            {"item": item, "output_index": position, "type": "response.output_item.added"},
            {"content_index": 0, **common, "part": part, "type": "response.content_part.added"},
            {"content_index": 0, "delta": text, **common, "logprobs": [], "type": "response.output_text.delta"},
            {"content_index": 0, **common, "logprobs": [], "text": text, "type": "response.output_text.done"},
            {"content_index": 0, **common, "part": done_part, "type": "response.content_part.done"},
            {"item": {**item, "content": [done_part], "status": "completed"}, "output_index": position,
             "type": "response.output_item.done"},
        ]
        return [self._send(self._placed(e), placed=True) for e in events]

    def _placed(self, obj: dict[str, Any]) -> dict[str, Any]:
        """A synthesized event: its position key becomes a client position, its number the next one."""
        position = self.positions.client(obj.pop("output_index"))
        return {**obj, "output_index": position, "sequence_number": self.sequence}

    def _completion(self, status: str | None = None) -> bytes:
        if self.completed is not None and self.attempt == 1 and self.completed_fits and status is None:
            # Nothing changed: vLLM's closing event as it was (its items carry ids of their own), renumbered.
            return self._send(self.completed[0])
        base: dict[str, Any] = self.completed[0] if self.completed is not None else {"type": "response.completed"}
        response = dict(base.get("response") or self.created or {})
        if self.created is not None:
            response["id"] = self.created.get("id", response.get("id"))  # the id the client was given
        response["output"] = [self.items[k] for k in sorted(self.items)]
        response["status"] = status or response.get("status") or "completed"
        if response["status"] == "in_progress":
            response["status"] = "incomplete"  # the stream ended without vLLM closing the response
        if self.attempt > 1 or self.completed is None or not isinstance(response.get("usage"), dict):
            _with_usage(response, self.ex.record.usage)  # the client pays for every attempt
        kind = base.get("type") if self.completed is not None and status is None else "response.completed"
        # The closing event is the proxy's: the items it lists are the ones the client was sent.
        return self._send({**base, "response": response, "type": kind})

    def refuse(self, judged: list[JudgedCall]) -> list[bytes]:
        # The error event, then the response closed as `response.failed` with the same error: clients that read
        # only the terminal event (Codex) raise its message too.
        text = blocked_message(self.ex.policy, judged, self.attempt)
        response = dict(self.created or {})
        response["output"] = [self.items[k] for k in sorted(self.items)]
        response.update(status="failed", error={"code": BlockedTurn.code, "message": text})
        _with_usage(response, self.ex.record.usage)
        return [self.error(text, BlockedTurn.error_type, BlockedTurn.code),
                self._send({"response": response, "type": "response.failed"})]

    def error(self, message: str, type_: str, code: Any) -> bytes:
        return self._send({"code": code if code is not None else type_, "message": message, "param": None,
                           "type": "error"})

    def reply(self) -> list[dict[str, Any]]:
        return [m for m in (item_message(self.items[k]) for k in sorted(self.items)) if m is not None]

    def response_id(self) -> str | None:
        found = self.created.get("id") if self.created is not None else None  # the id the client was given
        return found if isinstance(found, str) and found else None
