"""POST /v1/completions: the raw text is scanned for tool calls written in it, judged, recorded, enforced.

A raw completion has no tool-call channel, but a client that parses Qwen3-Coder XML or Hermes JSON out of the
text itself (`<tool_call>...</tool_call>`) runs what the model wrote. So every `choices[].text` goes through
the same content scanner as chat content. The proxy did not build the prompt and cannot re-ask with the
reasons, so in enforce mode a response with a rejected or malformed call is replaced by an error that names
them (403, `permission_error`, code `tool_call_rejected`); in observe mode it passes untouched and is recorded.

Streaming, enforce mode: text passes as it comes, verbatim, except from the start of a possible call until the
scanner has decided it: then the held text (the call's own bytes included, since the client parses them) is
sent if every call in it is allowed, and an error event plus `[DONE]` end the stream if one is not. A text-acting
client (proxy/enforce/text_clients.py, recognised from the prompt) runs what the text says: each choice's text
is held until the choice finishes and its actions are judged, then released or refused the same way.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from contextlib import aclosing
from typing import Any

from starlette.responses import JSONResponse, Response

from proxy import strict
from proxy.dialects.base import Dialect, DialectExchange
from proxy.dialects.event_reader import EventReader, error_chunk
from proxy.dialects.shapes import choice_problem
from proxy.enforce.actions import judge_output, unjudgeable_call
from proxy.enforce.attempts import whole_attempt
from proxy.enforce.exchange import Exchange
from proxy.enforce.feedback_turns import blocked_message, turn_allowed
from proxy.enforce.finish import end_stream
from proxy.enforce.serve import judged_json
from proxy.errors import StoreUnavailable, error_body
from proxy.record import JudgedCall
from proxy.sessions.project_root import ClientText
from proxy.toolcalls import CompletedCall, ToolCall
from proxy.toolcalls.families import XmlRules
from proxy.toolcalls.registry import content_formats
from proxy.toolcalls.scanner import ContentScanner, scan_text
from proxy.upstream.sse import DONE, SSEEvent

__all__ = ["REJECTED_CODE", "CompletionsDialect"]

REJECTED_CODE = "tool_call_rejected"
_COMPACT = (",", ":")


def _judge(ex: Exchange, calls: list[ToolCall]) -> list[JudgedCall]:
    # Never repaired: a call here is the model's own text (Qwen3-Coder XML, Hermes JSON), and the proxy cannot
    # re-encode a repaired call into that text safely, so a rejected call goes back to the model as on any route.
    return judge_output(ex.policy, calls, None, tools=ex.toolset, session_id=ex.record.session.id, repair=False)


def _text_calls(obj: dict[str, Any], rules: XmlRules | None = None) -> list[ToolCall]:
    """The calls written in every choice's text, `<think>` included (a raw-text client does not skip it),
    and stand-ins for what the proxy cannot judge."""
    choices = obj.get("choices")
    if choices is None:
        return []
    if not isinstance(choices, list):
        return [unjudgeable_call("choices", "`choices` is not a list", choices)]
    calls: list[ToolCall] = []
    for choice in choices:
        problem = choice_problem(choice, "text")
        if problem is not None:
            return [*calls, unjudgeable_call("choice", problem, choice)]
        result = scan_text(choice.get("text") or "", content_formats(rules), {},
                           read_think=True)
        calls += result.tool_calls + result.malformed
    return calls


def _refusal_text(ex: Exchange, judged: list[JudgedCall]) -> str:
    # blocked_message's lines name each call with its reasons, then the policy's feedback.
    details = blocked_message(ex.policy, judged, 1).split("\n", 1)[1]
    return ("allowlist-proxy blocked this completion: its text holds tool calls the policy does not allow "
            "(a raw completion cannot be re-asked with the reasons).\n" + details)


def _block(ex: Exchange, judged: list[JudgedCall]) -> dict[str, Any]:
    ex.record.budget_exhausted = True  # the turn ended blocked, as a chat turn whose budget ran out
    return error_body(_refusal_text(ex, judged), "permission_error", code=REJECTED_CODE)


class CompletionsDialect(Dialect, route="completions", path="/completions", history_key="prompt", asks_usage=True,
                         reasks=False):
    """POST /v1/completions: calls written in the raw text; a raw prompt is never re-asked (`complete`)."""

    def validate(self, payload: dict[str, Any]) -> None:
        return None

    def offered(self, payload: dict[str, Any]) -> set[str]:
        return set()  # no tools are offered on this route: no call is `unknown_tool`

    def conversation(self, payload: dict[str, Any]) -> None:
        return None  # a raw prompt has no turns for lineage to follow

    def client_texts(self, payload: dict[str, Any]) -> Iterable[ClientText]:
        return ()  # a raw prompt: the proxy cannot tell the client's parts from the rest

    def read_whole(self, ex: DialectExchange, obj: dict[str, Any]) -> list[ToolCall]:
        return _text_calls(obj, ex.rules)

    def text(self, obj: dict[str, Any]) -> str:
        """Every choice's text: what a text-acting client reads its actions from (text_clients.py)."""
        choices = obj.get("choices")
        return "\n".join(c["text"] for c in choices if isinstance(c, dict) and isinstance(c.get("text"), str)) \
            if isinstance(choices, list) else ""

    def usage(self, obj: dict[str, Any] | None) -> dict[str, Any] | None:
        return obj  # chat-shaped already

    async def complete(self, ex: DialectExchange) -> Response:
        read = await whole_attempt(ex, self.path, "a completion", lambda obj: None, self.usage)
        if isinstance(read, Response):
            return read
        judged = _judge(ex, self.read_whole(ex, read.obj)) + ex.judge_text(self.text(read.obj))
        if not ex.enforce or turn_allowed(judged):
            await ex.release(1, judged)  # on record before the answer goes out (enforce mode)
            if ex.enforce:
                return judged_json(read.obj)
            return Response(read.response.content, status_code=200, headers=read.headers)
        ex.keep(1, judged, delivered=False)
        ex.record.status = 403
        return JSONResponse(_block(ex, judged), status_code=403)

    def stream(self, ex: DialectExchange) -> _Relay:
        return _Relay(ex)


# ---------------------------------------------------------------- streaming


class _Choice:
    """One choice's text: scanned for calls; in enforce mode, the text not yet known to be free of them."""

    def __init__(self, rules: XmlRules | None = None) -> None:
        self.scanner = ContentScanner(content_formats(rules), {}, read_think=True)
        self.pending = ""
        self.finished = False
        self.said: list[str] = []  # a text-acting client's whole text, judged once the choice finishes


class _Relay(EventReader):
    ends_with_done = True
    event_name = "completion"

    def __init__(self, ex: Exchange) -> None:
        self.ex = ex
        self.choices: dict[int, _Choice] = {}
        self.judged: list[JudgedCall] = []
        self.released = 0  # how many of `judged` are on record as delivered
        self.rejected = False
        self.upstream_error = False
        self.broke_off = False  # the upstream broke off: the error goes out with nothing released
        self.usage: Any = None
        self.done_seen = False  # [DONE] seen
        self.done = False

    async def run(self, response: Any) -> AsyncIterator[bytes]:
        try:
            async with aclosing(self.relay_attempt(response)) as pieces:
                async for out in pieces:
                    if not self.broke_off:
                        await self._release()
                    yield out
                    if self.rejected:
                        break
            self.done = True
        except StoreUnavailable as exc:  # nothing goes out unrecorded: an error event instead
            yield strict.encode_event(error_body(exc.message, exc.error_type, code=exc.code))
            yield DONE
            self.done = True
        finally:
            await end_stream(self.ex, done=self.done, upstream=response, then=self._keep_rest)

    def attempt_end(self) -> list[bytes]:
        if self.rejected or self.upstream_error:
            return []
        out = self._finish_all()  # the stream ended without finishing a choice: decide what it still held
        return [out] if out else []

    def error(self, message: str, type_: str, code: Any) -> bytes:
        self.broke_off = True
        return strict.encode_event(error_body(message, type_, code=code)) + DONE

    def fail(self, detail: str, status: int | None = None) -> None:
        self.ex.record.fail("upstream_error", detail, status)

    def unjudged_output(self, call: ToolCall) -> None:
        self._decide([call])

    def _keep_rest(self) -> None:
        if self.usage is not None:
            self.ex.record.usage.add(self.usage)
        # Calls never released never reached the client in enforce mode (observe relays everything).
        rest = self.judged[self.released:]
        if rest:
            self.ex.keep(1, rest, delivered=not self.ex.enforce)

    async def _release(self) -> None:
        """Audit before release: the calls judged so far are on record before text that carries them goes out."""
        if self.rejected or len(self.judged) == self.released:
            return
        new, self.released = self.judged[self.released:], len(self.judged)
        await self.ex.release(1, new)

    def done_event(self, event: SSEEvent) -> bytes | None:
        if self.done_seen:
            return self._unjudgeable(event, "data after [DONE]")
        self.done_seen = True
        out = self._finish_all()
        if self.rejected:
            return out
        return (out or b"") + (event.raw if not self.ex.enforce else DONE)

    def object_event(self, event: SSEEvent, obj: dict[str, Any]) -> bytes | None:
        enforce = self.ex.enforce
        if "error" in obj and not obj.get("choices"):
            return error_chunk(self, event, obj)
        if obj.get("usage"):
            self.usage = obj["usage"]  # cumulative when continuous: the last one counts
        choices = obj.get("choices")
        if not choices:
            if choices is not None and not isinstance(choices, list):
                return self._unjudgeable(event, "`choices` that is not a list")
            if obj.get("usage") and not self.ex.client_wants_usage:
                return None  # the usage chunk the proxy asked for
            return event.raw if not enforce else strict.encode_event(obj)
        if not isinstance(choices, list):
            return self._unjudgeable(event, "`choices` that is not a list")
        for choice in choices:
            problem = choice_problem(choice, "text")
            known = self.choices.get(choice.get("index", 0)) if problem is None else None
            if known is not None and known.finished and (choice.get("text") or choice.get("finish_reason")):
                problem = "text after the choice's finish_reason"
            if problem is not None:
                return self._unjudgeable(event, problem)
        texts: dict[int, str] = {}
        for choice in choices:
            index = choice.get("index", 0)
            text = choice.get("text") if isinstance(choice.get("text"), str) else ""
            if text:
                self.ex.record.mark_first_token()
            texts[index] = self._text(index, text, finished=bool(choice.get("finish_reason")))
            if self.rejected:
                return self._refuse()
        if not enforce:
            return event.raw
        if all(texts.get(c.get("index", 0)) == (c.get("text") or "") for c in choices):
            encoded = strict.dumps(obj)
            return event.raw if event.plain and encoded == event.data else b"data: " + encoded.encode() + b"\n\n"
        rebuilt = [{**c, "text": texts.get(c.get("index", 0), "")} for c in choices]
        rebuilt = [c for c in rebuilt if c["text"] or c.get("finish_reason")]
        if not rebuilt:
            return None
        return strict.encode_event({**obj, "choices": rebuilt})

    def _unjudgeable(self, event: SSEEvent, detail: str) -> bytes | None:
        """Output of an unknown shape or after the end: a call that cannot be allowed, which refuses the
        completion in enforce mode as a rejected call does; relayed and recorded in observe mode."""
        self._decide([unjudgeable_call(self.event_name, detail, event.raw.decode("utf-8", "replace"))])
        if self.rejected:
            return self._refuse()
        return event.raw if not self.ex.enforce else None

    def _text(self, index: int, text: str, *, finished: bool) -> str:
        """Scan one piece of a choice's text; return what the client may get now (enforce mode)."""
        choice = self.choices.get(index)
        if choice is None:
            choice = self.choices[index] = _Choice(self.ex.rules)
        if choice.finished:
            return text
        if self.ex.enforce:  # observe mode sends the upstream's bytes; nothing is held back
            choice.pending += text
        acts = self.ex.acts_on_text
        if acts:
            choice.said.append(text)
        events = choice.scanner.feed_text(text) if text else []
        if finished:
            events += choice.scanner.finish()
            choice.finished = True
        self._decide([e.call for e in events if isinstance(e, CompletedCall)])
        if finished and acts:
            self._settle(self.ex.judge_text("".join(choice.said)))
        if self.rejected:
            return ""
        if acts and not choice.finished:
            return ""  # a text-acting client's actions are its text: held until the choice is judged whole
        # Nothing held, no call open: everything so far is decided, the calls in it allowed.
        if choice.finished or choice.scanner.plain:
            out, choice.pending = choice.pending, ""
            return out
        return ""

    def _decide(self, calls: list[ToolCall]) -> None:
        self._settle(_judge(self.ex, calls))

    def _settle(self, judged: list[JudgedCall]) -> None:
        self.judged += judged
        if self.ex.enforce and not turn_allowed(judged):
            self.rejected = True

    def _finish_all(self) -> bytes | None:
        texts: dict[int, str] = {}
        for index, choice in sorted(self.choices.items()):
            if not choice.finished:
                texts[index] = self._text(index, "", finished=True)
        if self.rejected:
            return self._refuse()
        texts = {k: v for k, v in texts.items() if v}
        if not texts or not self.ex.enforce:
            return None
        return b"".join(strict.encode_event({"object": "text_completion", "model": self.ex.record.model,
                                             "choices": [{"index": k, "text": v, "logprobs": None,
                                                          "finish_reason": None}]})
                        for k, v in texts.items())

    def _refuse(self) -> bytes:
        self.ex.record.budget_exhausted = True
        body = _block(self.ex, self.judged)
        return strict.encode_event(body) + DONE
