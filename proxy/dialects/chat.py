"""POST /v1/chat/completions: forward, extract every tool call, judge it, enforce the verdict.

The non-streaming and streaming paths share the attempt loop's rules: an attempt whose calls are
all allowed goes to the client; in enforce mode an attempt with a rejected or malformed call is
held back and the model is asked again with the reasons, within the policy's retry budget.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from starlette.responses import Response

from proxy import strict
from proxy.dialects.base import Dialect, DialectExchange
from proxy.dialects.event_reader import EventReader, error_chunk
from proxy.dialects.shapes import choice_problem
from proxy.enforce.actions import unjudgeable_call
from proxy.enforce.attempts import WholeAttempt
from proxy.enforce.exchange import Exchange
from proxy.enforce.feedback_turns import blocked_message, retry_messages
from proxy.enforce.judging import apply_repairs
from proxy.enforce.relay import StreamedAttempts
from proxy.enforce.retry_text import continuation, line_break
from proxy.enforce.serve import judged_json
from proxy.errors import BadRequest, error_body
from proxy.logs import get_logger
from proxy.record import JudgedCall, Usage
from proxy.sessions.project_root import ClientText, client_parts
from proxy.toolcalls import (
    ChoiceStream,
    CompletedCall,
    ExtractionResult,
    TextDelta,
    ToolCall,
    extract_from_response,
    openai_call,
    openai_call_delta,
)
from proxy.upstream.sse import DONE, SSEEvent
from proxy.upstream.text_frame import TextFrame

__all__ = ["ChatDialect"]

log = get_logger("proxy.dialects.chat")
_TEXT_FIELDS = ("content", "reasoning", "reasoning_content")
# Fields of one chunk that a chunk the proxy writes does not copy: usage is summed, vLLM's prompt echo
# belongs to the first chunk only.
_PER_CHUNK = frozenset({"choices", "usage", "prompt_token_ids", "prompt_text", "prompt_logprobs"})
_PATH = "/chat/completions"  # upstream, after /v1


def _carries(choice: dict[str, Any]) -> bool:
    """Whether a choice of a chunk holds anything a client would show or run."""
    delta: Any = choice.get("delta")  # unvalidated JSON
    return (bool(delta) and any(v for k, v in delta.items() if k != "role")) or bool(choice.get("finish_reason"))


def _offered_tools(tools: Any) -> tuple[list[dict[str, Any]] | None, set[str]]:
    if not isinstance(tools, list):
        return None, set()
    names = set()
    for tool in tools:
        if isinstance(tool, dict):
            function = tool.get("function")
            if isinstance(function, dict) and isinstance(function.get("name"), str):
                names.add(function["name"])
    return tools, names


def _validate(payload: dict[str, Any]) -> None:
    messages = payload.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("`messages` must be a non-empty list", param="messages")
    for position, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise BadRequest(f"`messages[{position}]` must be an object with a string `role`",
                             param=f"messages[{position}]")


class ChatDialect(Dialect, route="chat", path="/chat/completions", history_key="messages", asks_usage=True):
    """POST /v1/chat/completions: calls in `tool_calls` and written in `content`, re-asked with `tool` messages."""

    def validate(self, payload: dict[str, Any]) -> None:
        _validate(payload)

    def tools(self, payload: dict[str, Any]) -> tuple[list[dict[str, Any]] | None, set[str]]:
        return _offered_tools(payload.get("tools"))

    def offered(self, payload: dict[str, Any]) -> set[str]:
        return _offered_tools(payload.get("tools"))[1]

    def schemas(self, payload: dict[str, Any]) -> list[dict[str, Any]] | None:
        return _offered_tools(payload.get("tools"))[0]

    def conversation(self, payload: dict[str, Any]) -> list[dict[str, Any]]:
        return payload["messages"]  # validated: a list of messages

    def client_texts(self, payload: dict[str, Any]) -> Iterable[ClientText]:
        return client_parts((), payload["messages"])

    # -- a whole answer

    def read_whole(self, ex: DialectExchange, obj: dict[str, Any]) -> list[ExtractionResult]:
        return extract_from_response(obj, ex.tools, rules=ex.rules)

    def judge_whole(self, ex: DialectExchange, obj: dict[str, Any], found: list[ExtractionResult]) -> list[JudgedCall]:
        calls = [c for r in found for c in (r.tool_calls + r.malformed) if ex.scan_content or c.structured]
        return ex.judge(calls + _unjudgeable_choices(obj)) + ex.judge_text(self.text(obj))

    def text(self, obj: dict[str, Any]) -> str:
        return _texts(obj)

    def usage(self, obj: dict[str, Any] | None) -> dict[str, Any] | None:
        return obj  # chat-shaped already

    def retry_text(self, obj: dict[str, Any], found: list[ExtractionResult]) -> str | None:
        return found[0].content if found else None  # the text with the calls written in it taken out

    def retry_items(self, turn: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return turn  # `retry_messages` writes chat messages

    def set_usage(self, obj: dict[str, Any], usage: Usage) -> None:
        if isinstance(obj.get("usage"), dict):
            _sum_usage(obj["usage"], usage)

    def set_blocked(self, obj: dict[str, Any], text: str) -> None:
        obj["choices"] = [{"index": 0, "message": {"role": "assistant", "content": text, "tool_calls": []},
                           "logprobs": None, "finish_reason": "stop"}]

    def add_note(self, ex: DialectExchange, obj: dict[str, Any]) -> None:
        for choice in obj.get("choices") or []:
            message = choice.get("message") if isinstance(choice, dict) else None
            if not isinstance(message, dict):
                continue
            found = message.get("content")
            content = found if isinstance(found, str) else ""
            note = ex.refusal_note(content)
            if note:
                message["content"] = content + line_break(content) + note

    def reply(self, obj: dict[str, Any]) -> list[dict[str, Any]]:
        choices = obj.get("choices") or []
        reply = choices[0].get("message") if choices and isinstance(choices[0], dict) else None
        return [reply] if isinstance(reply, dict) else []

    def delivered(self, ex: DialectExchange, read: WholeAttempt[list[ExtractionResult]], judged: list[JudgedCall],
                  attempt: int) -> Response:
        obj = read.obj
        changed = _convert_content_calls(ex, obj, read.found) or attempt > 1
        if any(item.repaired for item in judged):
            # The judged (repaired) calls are delivered, never the upstream's bytes (judging.py).
            for choice in obj.get("choices") or []:
                changed = apply_repairs(choice.get("message") or {}, judged) or changed
        if attempt > 1:
            self.set_usage(obj, ex.record.usage)
            self.add_note(ex, obj)  # only enforce mode re-asks
        ex.remember(self.reply(obj))
        if ex.enforce:  # what the client gets is the proxy's encoding of what it judged
            return judged_json(obj)
        if not changed:
            return Response(read.response.content, status_code=200, headers=read.headers)
        return Response(json.dumps(obj, ensure_ascii=False).encode(), status_code=200, media_type="application/json")

    # -- a stream

    def stream(self, ex: DialectExchange) -> _StreamRelay:
        return _StreamRelay(ex)


def _texts(obj: dict[str, Any]) -> str:
    """The content of every choice of a whole response (what a text-acting client reads its actions from)."""
    out = []
    for choice in obj.get("choices") or []:
        message = choice.get("message") if isinstance(choice, dict) else None
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            out.append(content)
    return "\n".join(out)


def _unjudgeable_choices(obj: dict[str, Any]) -> list[ToolCall]:
    """Stand-ins for what a whole response holds beyond what the extractors judge (every `tool_calls`
    entry becomes a call, a malformed one if need be; a legacy `function_call` or an unknown field does not)."""
    choices = obj.get("choices")
    if choices is None:
        return []
    if not isinstance(choices, list):
        return [unjudgeable_call("choices", "`choices` is not a list", choices)]
    for choice in choices:
        problem = choice_problem(choice, "message")
        if problem is not None:
            return [unjudgeable_call("message", problem, choice)]
    return []


def _sum_usage(usage: dict[str, Any], total: Any) -> None:
    """The usage of every attempt, written over the upstream's figures; a field it did not send stays out."""
    usage.update(prompt_tokens=total.prompt_tokens, completion_tokens=total.completion_tokens,
                 total_tokens=total.prompt_tokens + total.completion_tokens)
    if total.cached_tokens or isinstance(usage.get("prompt_tokens_details"), dict):
        usage["prompt_tokens_details"] = {**(usage.get("prompt_tokens_details") or {}),
                                          "cached_tokens": total.cached_tokens}


def _convert_content_calls(ex: Exchange, obj: dict[str, Any], results: list[Any]) -> bool:
    """Calls the model wrote into `content` become proper `tool_calls`; returns whether obj changed."""
    if not ex.scan_content or not (ex.state.settings.upstream.convert_content_tool_calls or ex.enforce):
        return False
    changed = False
    for choice, result in zip(obj.get("choices") or [], results, strict=False):
        found = [c for c in result.tool_calls if not c.structured]
        if not found:
            continue
        message = choice.setdefault("message", {})
        existing = message.get("tool_calls") or []
        existing += [openai_call(call) for call in found]
        message["tool_calls"] = existing
        message["content"] = result.content or None
        choice["finish_reason"] = "tool_calls"
        changed = True
    return changed


# ---------------------------------------------------------------- streaming


@dataclass
class _Choice:
    """One choice of one attempt while it streams."""

    stream: ChoiceStream
    content: list[str] = field(default_factory=list)  # joined once at the end: += would copy per chunk
    thinking: dict[str, list[str]] = field(default_factory=dict)  # the thinking's field -> its text, likewise
    pending: list[ToolCall] = field(default_factory=list)
    emitted_tools: int = 0
    finish_reason: str | None = None
    finish_fields: dict[str, Any] | None = None  # the finishing choice's fields (stop_reason, token_ids ...)
    finish_top: dict[str, Any] | None = None  # and its chunk's
    converted: bool = False
    # `token_ids` of this choice's chunks whose parts the client has not got yet (held call fragments): they go
    # out, in order, with the choice's next released chunk, so the ids a client gets concatenate to the stream's.
    held_ids: list[Any] = field(default_factory=list)
    returns_ids: bool = False  # the upstream's choices carry `token_ids` lists: the proxy's chunks do too


def _tool_count(known: int, delta: dict[str, Any]) -> int:
    """How many structured calls a choice has shown so far, from the indexes its deltas carry."""
    for fragment in delta.get("tool_calls") or []:
        index = fragment.get("index") if isinstance(fragment, dict) else None
        if isinstance(index, int) and index >= known:
            known = index + 1
    return known


class _StreamRelay(EventReader, StreamedAttempts):
    path = _PATH
    ends_with_done = True

    def __init__(self, ex: Exchange) -> None:
        self.ex = ex
        self.template: dict[str, Any] | None = None
        self.usage_chunk: dict[str, Any] | None = None
        self.choices: dict[int, _Choice] = {}
        self.frames: dict[str, TextFrame] = {}  # per text field: content, and the thinking's field
        self.attempt = 1
        self.attempt_usage: Any = None
        self.upstream_error = False
        # The text the client holds of this turn, per choice and text field, once the first attempt is over: what
        # a delivered retry's text is compared with (proxy/enforce/retry_text.py), and what the lineage records.
        self.sent: dict[tuple[int, str], str] = {}
        self.reply_calls: list[dict[str, Any]] = []
        # A retry's chunks, held until its verdict as the chunk and its choices, each with the ids of the
        # silent chunks before it and its own (`_held_retry`); sent, trimmed of what the client has, only with a
        # delivered turn (`_released_retry`).
        self.retry_chunks: list[tuple[dict[str, Any], list[tuple[dict[str, Any], list[Any], Any]]]] = []
        self.late_calls: list[ToolCall] = []  # the attempt's output the proxy could not judge
        self.done_seen = False  # [DONE] came in this attempt
        self.done = False

    # -- the attempt loop's steps (proxy/enforce/relay.py)

    def hold_pieces(self) -> bool:
        # The first attempt streams live; a retry's text waits for its verdict and goes out only with a delivered
        # turn, as what of it the client does not have yet (`_released_retry`).
        # A text-acting client's actions are in the text: every attempt's text waits for its verdict.
        return (self.attempt > 1 or self.ex.acts_on_text) and self.ex.enforce

    def deliver(self, judged: list[JudgedCall]) -> list[bytes]:
        if self.attempt == 1:
            self.sent = self._attempt_text()  # streamed live, or (a text-acting client) released with the turn
        if not self.ex.enforce:
            return []
        return (self._released_retry() if self.attempt > 1 else []) + self._release()

    def block(self, judged: list[JudgedCall]) -> list[bytes]:
        if self.attempt == 1:
            self.sent = self._first_sent()
        return [self._blocked(judged)]

    def retry_turn(self, judged: list[JudgedCall]) -> list[dict[str, Any]]:
        return retry_messages(self.ex.policy, self._content(), judged)

    def begin_attempt(self) -> None:
        if self.attempt == 1:
            self.sent = self._first_sent()
        self.attempt += 1
        self.retry_chunks = []
        self.choices = {}
        self.late_calls = []
        self.done_seen = False
        self.attempt_usage = None

    def fail(self, detail: str, status: int | None = None) -> None:
        self.ex.record.fail("upstream_error", detail, status)

    def remember(self) -> None:
        # The request's conversation as hashed when its session was resolved (sessions/resolve.py), then the reply.
        if self.ex.state.sessions.remember(self.ex.record.session, None, self._reply()):
            self.ex.commit_before_end = True

    # -- one upstream attempt

    def attempt_end(self) -> list[bytes]:
        ex = self.ex
        out: list[bytes] = []
        cut_short = False
        for index, choice in self.choices.items():
            if choice.finish_reason is None:
                # The stream ended without finishing this choice: what it completed is judged either way.
                events = choice.stream.finish()
                choice.pending.extend(e.call for e in events if isinstance(e, CompletedCall))
                cut_short = True
                if not ex.enforce:  # observe mode relays (and records) what came
                    rebuilt = self._rebuild(None, [(index, choice, {"index": index}, events)])
                    if rebuilt:
                        out.append(rebuilt)
        if cut_short and ex.enforce:
            # An upstream error, not a turn: its calls are recorded as not delivered and none is released.
            ex.settle_truncated(self.attempt, self.judge_attempt())
            out.append(self.error("the upstream stream ended without a finish_reason", "upstream_error", None))
        return out

    def event(self, event: SSEEvent) -> bytes | None:
        if self.frames and event.plain and not self.done_seen and self.attempt == 1:
            released = self._framed(event)
            if released is not None:
                return released
        return EventReader.event(self, event)

    def unjudged_output(self, call: ToolCall) -> None:
        self.late_calls.append(call)

    def done_event(self, event: SSEEvent) -> bytes | None:
        if self.done_seen:
            return self.drop(event, "data after [DONE]", event.data, name="chunk")
        self.done_seen = True
        # Enforce mode: one [DONE] at the very end, after the held calls. Observe mode: where it came.
        return None if self.ex.enforce else event.raw

    def object_event(self, event: SSEEvent, obj: dict[str, Any]) -> bytes | None:
        enforce = self.ex.enforce
        if "error" in obj and not obj.get("choices"):
            return error_chunk(self, event, obj)
        usage = obj.get("usage")
        if usage:
            self.attempt_usage = usage  # cumulative when continuous: the last one counts
        choices = obj.get("choices")
        if self.template is None:
            self.template = {k: v for k, v in obj.items() if k not in _PER_CHUNK}
        if not choices:
            if choices is not None and not isinstance(choices, list):
                return self.drop(event, "`choices` that is not a list", obj, name="chunk")
            if usage:
                self.usage_chunk = obj
                if not enforce:  # where it came, when the client asked for it
                    return event.raw if self.ex.client_wants_usage else None
                return None
            return event.raw if not enforce else strict.encode_event(obj)
        if not isinstance(choices, list):
            return self.drop(event, "`choices` that is not a list", obj, name="chunk")
        for raw_choice in choices:
            problem = choice_problem(raw_choice, "delta")
            if problem is None:
                known = self.choices.get(raw_choice.get("index", 0))
                if known is not None and known.finish_reason is not None and _carries(raw_choice):
                    problem = "a delta after the choice's finish_reason"
            if problem is not None:
                return self.drop(event, problem, raw_choice, name="chunk")
        learnt = TextFrame.learn(event.data or "", obj)  # an object event has data
        if learnt is not None and (not enforce or (event.plain and strict.dumps(obj) == event.data)):
            # Raw bytes go out only when they are the canonical encoding of the judged chunk.
            self.frames[learnt.field] = learnt
        return self._chunk(event, obj, bool(usage), choices)

    def quick(self, chunk: bytes) -> bytes | None:
        # `_framed` for a chunk whose text needs no decoding beyond UTF-8, read from the bytes: a stream's chunks
        # wake the proxy one by one, and each wake-up pays for every object and function it touches.
        if not self.frames or self.done_seen or self.attempt != 1:
            return None
        for frame in self.frames.values():
            text = frame.plain_text(chunk)
            if text is not None:
                return self._release_text(frame, text, chunk)
        return None

    def _release_text(self, frame: TextFrame, text: str, raw: bytes) -> bytes | None:
        """A plain text chunk of `frame`'s field, `raw` as it came: released as it is, or None (read in full)."""
        choice = self.choices.get(frame.index)
        if choice is None or choice.finish_reason is not None or choice.held_ids:
            return None
        if frame.field == "content":
            if not choice.stream.releases_as_is(text):
                return None
            choice.content.append(text)
        else:  # thinking is never scanned for calls (ChoiceStream.feed releases it as it stands)
            choice.thinking.setdefault(frame.field, []).append(text)
        record = self.ex.record
        if record.ttft_ms is None:
            record.mark_first_token()
        return raw

    def _framed(self, event: SSEEvent) -> bytes | None:
        """The bulk of a stream: a chunk whose one choice carries only `delta.content` (or only the thinking's
        field), in the canonical encoding (the frame was learnt from a canonical chunk; `text` checks the
        string), released as it came: what `_chunk` would do for it, the branches that cannot apply left out.
        None when the chunk is not such a one."""
        for frame in self.frames.values():
            text = frame.text(event.data)  # type: ignore[arg-type]  # plain: data is a str
            if text is not None:
                return self._release_text(frame, text, event.raw) if text else None
        return None

    def _chunk(self, event: SSEEvent, obj: dict[str, Any], has_usage: bool, choices: list[Any]) -> bytes | None:
        ex = self.ex
        items = []
        passthrough = self.attempt == 1 and (ex.client_wants_usage or not has_usage)
        for raw_choice in choices:
            index = raw_choice.get("index", 0)
            choice = self.choices.get(index)
            if choice is None:
                stream = ChoiceStream(ex.tools, scan_content=ex.scan_content, rules=ex.rules)
                choice = self.choices[index] = _Choice(stream)
            delta = raw_choice.get("delta") or {}
            if isinstance(raw_choice.get("token_ids"), list):
                choice.returns_ids = True
            events = choice.stream.feed(delta)
            finish = raw_choice.get("finish_reason")
            if finish:
                events = events + choice.stream.finish()
                choice.finish_reason = finish
            released: dict[str, str] = {}
            completed = []
            for e in events:
                if isinstance(e, TextDelta):
                    released[e.field] = released.get(e.field, "") + e.text
                elif isinstance(e, CompletedCall):
                    completed.append(e.call)
            for name, text in released.items():
                if name == "content":
                    choice.content.append(text)
                elif text:
                    choice.thinking.setdefault(name, []).append(text)
            choice.pending.extend(completed)
            same_text = all(released.get(f, "") == (delta.get(f) or "") for f in _TEXT_FIELDS)
            content_calls = any(not c.structured for c in completed)
            if not same_text or (ex.enforce and (delta.get("tool_calls") or finish)):
                passthrough = False
            if content_calls and (ex.enforce or ex.state.settings.upstream.convert_content_tool_calls):
                passthrough = False
            if choice.held_ids:
                passthrough = False  # the held ids go out first, with this chunk (`_rebuild`)
            if any(delta.get(f) for f in _TEXT_FIELDS) or delta.get("tool_calls"):
                ex.record.mark_first_token()
            if finish and ex.enforce:
                # The finish goes out after the judgement, with the fields the upstream put beside it.
                choice.finish_fields = {k: v for k, v in raw_choice.items() if k not in ("index", "delta")}
                choice.finish_top = {k: v for k, v in obj.items() if k not in _PER_CHUNK}
            items.append((index, choice, raw_choice, events))
        if passthrough:
            if not ex.enforce:
                for _, choice, raw_choice, _ in items:
                    choice.emitted_tools = _tool_count(choice.emitted_tools, raw_choice.get("delta") or {})
                return event.raw
            text = strict.dumps(obj)
            return event.raw if event.plain and text == event.data else b"data: " + text.encode() + b"\n\n"
        return self._rebuild(obj, items)

    def _rebuild(self, obj: dict[str, Any] | None,
                 items: list[tuple[int, _Choice, dict[str, Any], list[Any]]]) -> bytes | None:
        """The chunk again with what may be released now: text, and in observe mode the tool deltas.
        Every other field stays where the upstream put it, once; a finish is held in enforce mode."""
        ex = self.ex
        retry = self.attempt > 1 and ex.enforce  # its chunks wait for the verdict (`_held_retry`)
        rebuilt: list[dict[str, Any]] = []
        held: list[tuple[dict[str, Any], list[Any], Any]] = []
        for index, choice, raw_choice, events in items:
            delta = raw_choice.get("delta") or {}
            new_delta = {k: v for k, v in delta.items() if k not in _TEXT_FIELDS and k != "tool_calls"}
            if self.attempt > 1:
                new_delta.pop("role", None)
            for e in events:
                if isinstance(e, TextDelta):
                    new_delta[e.field] = new_delta.get(e.field, "") + e.text
            tool_deltas: list[dict[str, Any]] = []
            if not ex.enforce:
                tool_deltas.extend(delta.get("tool_calls") or [])
                choice.emitted_tools = _tool_count(choice.emitted_tools, delta)
                if ex.state.settings.upstream.convert_content_tool_calls:
                    for e in events:
                        if isinstance(e, CompletedCall) and not e.call.structured:
                            tool_deltas.append(openai_call_delta(e.call, choice.emitted_tools))
                            choice.emitted_tools += 1
                            choice.converted = True
            if tool_deltas:
                new_delta["tool_calls"] = tool_deltas
            finish = raw_choice.get("finish_reason")
            emit_finish = finish if not ex.enforce else None
            if emit_finish and choice.converted:
                emit_finish = "tool_calls"
            ids = raw_choice.get("token_ids")
            if not new_delta and not emit_finish:
                # Nothing of the chunk goes out now: its ids wait for the choice's next released chunk.
                if isinstance(ids, list) and not (ex.enforce and finish):
                    choice.held_ids.extend(ids)
                continue
            out_choice = {**raw_choice, "index": index, "delta": new_delta, "finish_reason": emit_finish}
            if ex.enforce and finish:
                out_choice.pop("stop_reason", None)  # it goes out with the held finish
                if choice.finish_fields is not None:
                    choice.finish_fields.pop("token_ids", None)  # goes out with this chunk's text
            if retry:
                held.append((out_choice, choice.held_ids, ids))
                choice.held_ids = []
                continue
            if choice.held_ids:
                out_choice["token_ids"] = [*choice.held_ids, *(ids if isinstance(ids, list) else [])]
                choice.held_ids = []
            rebuilt.append(out_choice)
        if held:
            assert obj is not None  # enforce mode rebuilds only upstream chunks
            top = {k: v for k, v in obj.items() if k not in _PER_CHUNK}  # a retry's prompt echo is not the client's
            self._stream_id(top)
            self.retry_chunks.append((top, held))
        if not rebuilt:
            return None
        if obj is None:
            return self._encode(rebuilt)
        chunk = {k: v for k, v in obj.items() if k != "usage" or (ex.client_wants_usage and self.attempt == 1)}
        chunk["choices"] = rebuilt
        self._stream_id(chunk)
        return b"data: " + strict.dumps(chunk).encode() + b"\n\n"

    def _stream_id(self, chunk: dict[str, Any]) -> None:
        """One id per stream in enforce mode: a retry's chunks carry the first attempt's, which the client saw
        first (observe mode relays ids as they came)."""
        if self.ex.enforce and self.template is not None and "id" in self.template and "id" in chunk:
            chunk["id"] = self.template["id"]

    # -- decisions at the end of an attempt

    def judge_attempt(self) -> list[JudgedCall]:
        calls = [c for _, ch in sorted(self.choices.items()) for c in ch.pending]
        # A text-acting client reads the text as it comes, chunk by chunk (Open Interpreter: text_oi.py).
        pieces = [part for ch in self.choices.values() for part in ch.content]
        return self.ex.judge(calls + self.late_calls) + self.ex.judge_text(self._content(), pieces)

    def _content(self) -> str:
        return "".join(part for ch in self.choices.values() for part in ch.content)

    def _attempt_text(self) -> dict[tuple[int, str], str]:
        """The current attempt's text per choice and text field."""
        out: dict[tuple[int, str], str] = {}
        for index, choice in self.choices.items():
            for name, parts in (("content", choice.content), *choice.thinking.items()):
                text = "".join(parts)
                if text:
                    out[index, name] = text
        return out

    def _first_sent(self) -> dict[tuple[int, str], str]:
        """What the client holds of the first attempt once it is over: its text went out live, unless it was
        held for its verdict (a text-acting client's) and refused."""
        return {} if self.hold_pieces() else self._attempt_text()

    def _released_retry(self) -> list[bytes]:
        """A delivered retry's held chunks, each text field cut to what the client does not have yet
        (proxy/enforce/retry_text.py), then the line that says what was refused before it. The ids of a chunk
        whose text the client already has are dropped (those it holds came with the first attempt's); a chunk
        only partly new keeps its ids whole (tokens do not split at characters); the proxy's own text (a
        paragraph break, the line) carries no ids, as the blocked turn's explanation does."""
        pieces: dict[tuple[int, str], list[str]] = {}
        for _, choices in self.retry_chunks:
            for out_choice, _, _ in choices:
                for name in _TEXT_FIELDS:
                    text = out_choice["delta"].get(name)
                    if isinstance(text, str) and text:
                        pieces.setdefault((out_choice["index"], name), []).append(text)
        said = {key: "".join(parts) for key, parts in pieces.items()}
        plan = {key: continuation(self.sent.get(key, ""), text) for key, text in said.items()}
        for key, text in said.items():  # what the client holds once these go out
            self.sent[key] = self.sent.get(key, "") + plan[key].separator + text[plan[key].skip:]
        skip = {key: found.skip for key, found in plan.items()}
        out: list[bytes] = []
        pending: dict[int, list[Any]] = {}
        for top, choices in self.retry_chunks:
            kept: list[dict[str, Any]] = []
            for out_choice, before, own in choices:
                index = out_choice["index"]
                delta = dict(out_choice["delta"])
                for name in _TEXT_FIELDS:
                    text = delta.get(name)
                    if not isinstance(text, str) or not text:
                        continue
                    key = (index, name)
                    cut, skip[key] = min(skip[key], len(text)), max(0, skip[key] - len(text))
                    if cut == len(text):
                        del delta[name]
                        continue
                    separator = plan[key].separator
                    if separator:
                        out.append(self._proxy_text(index, name, separator))
                        plan[key] = plan[key]._replace(separator="")
                    delta[name] = text[cut:]
                ids = [*pending.pop(index, []), *before]
                if not delta:
                    pending[index] = ids  # the ids of the silent chunks before it wait on
                    continue
                if ids or isinstance(own, list):
                    out_choice = {**out_choice, "token_ids": [*ids, *(own if isinstance(own, list) else [])]}
                kept.append({**out_choice, "delta": delta})
            if kept:
                out.append(strict.encode_event({**top, "choices": kept}))
        self.retry_chunks = []
        for index, choice in self.choices.items():
            choice.held_ids = [*pending.pop(index, []), *choice.held_ids]
        for index in sorted(self.choices):
            held = self.sent.get((index, "content"), "")
            note = self.ex.refusal_note(held)
            if note:
                out.append(self._proxy_text(index, "content", line_break(held) + note))
                self.sent[index, "content"] = held + line_break(held) + note
        return out

    def _proxy_text(self, index: int, name: str, text: str) -> bytes:
        """Text the proxy writes into a choice's field: no model output, so no ids (where the stream has them)."""
        ids: dict[str, Any] = {"token_ids": []} if any(c.returns_ids for c in self.choices.values()) else {}
        return self._encode([{"index": index, "delta": {name: text}, "logprobs": None, "finish_reason": None, **ids}])

    def _release(self) -> list[bytes]:
        """Enforce mode, all allowed: each call as one whole delta, then the finish chunks."""
        out: list[bytes] = []
        for index, choice in sorted(self.choices.items()):
            for position, call in enumerate(choice.pending):
                delta = openai_call_delta(call, position)
                self.reply_calls.append({k: v for k, v in delta.items() if k != "index"})
                call_choice: dict[str, Any] = {"index": index, "delta": {"tool_calls": [delta]}, "logprobs": None,
                                               "finish_reason": None}
                if choice.returns_ids:  # the fragments' ids, with the first whole call
                    call_choice["token_ids"], choice.held_ids = choice.held_ids, []
                out.append(self._encode([call_choice]))
            finish = "tool_calls" if choice.pending else (choice.finish_reason or "stop")
            fields = {"logprobs": None, **(choice.finish_fields or {}), "finish_reason": finish}
            if choice.held_ids or (choice.returns_ids and not isinstance(fields.get("token_ids"), list)):
                own = fields.get("token_ids")
                fields["token_ids"] = [*choice.held_ids, *(own if isinstance(own, list) else [])]
                choice.held_ids = []
            out.append(self._encode([{"index": index, "delta": {}, **fields}], choice.finish_top))
        self.ex.record.mark_first_token()
        return out

    def _blocked(self, judged: list[JudgedCall]) -> bytes:
        text = blocked_message(self.ex.policy, judged, self.attempt)
        self.sent[0, "content"] = self.sent.get((0, "content"), "") + text
        # The proxy's explanation is no model output: no ids, but the field is there for clients that read it.
        ids: dict[str, Any] = {"token_ids": []} if any(c.returns_ids for c in self.choices.values()) else {}
        return (self._encode([{"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": None,
                               **ids}])
                + self._encode([{"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop", **ids}]))

    def tail(self) -> list[bytes]:
        if not self.ex.enforce:
            # Observe mode relayed the upstream's usage and [DONE] where they came; after an error event the
            # relay stopped reading, so the end is the proxy's.
            return [DONE] if self.upstream_error else []
        out: list[bytes] = []
        if self.ex.client_wants_usage and self.usage_chunk is not None and not self.upstream_error:
            if self.attempt == 1:
                out.append(strict.encode_event(self.usage_chunk))
            else:
                chunk = dict(self.usage_chunk)
                usage = dict(chunk.get("usage") or {})
                _sum_usage(usage, self.ex.record.usage)
                chunk["usage"] = usage
                if self.template:
                    chunk["id"] = self.template.get("id", chunk.get("id"))
                out.append(strict.encode_event(chunk))
        out.append(DONE)
        return out

    def _reply(self) -> dict[str, Any]:
        """The turn as the client holds it: the text it received (the first attempt's, live; what a delivered
        retry added, and the refusal line; the blocked turn's explanation) and the calls delivered."""
        content = "".join(text for (_, name), text in sorted(self.sent.items()) if name == "content")
        return {"role": "assistant", "content": content, "tool_calls": self.reply_calls}

    def _encode(self, choices: list[dict[str, Any]], top: dict[str, Any] | None = None) -> bytes:
        """A chunk the proxy writes: the stream's own fields (not those only one chunk carries), these choices."""
        chunk = dict(top or self.template or {"object": "chat.completion.chunk", "model": self.ex.record.model})
        chunk["choices"] = choices
        self._stream_id(chunk)
        return strict.encode_event(chunk)

    def error(self, message: str, type_: str, code: Any) -> bytes:
        self.upstream_error = True
        return strict.encode_event(error_body(message, type_, code=code))
