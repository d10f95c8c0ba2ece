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

import json
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from proxy import strict
from proxy.dialects.shapes import choice_problem
from proxy.enforce.actions import judge_output, unjudgeable_call
from proxy.enforce.attempts import upstream_events, whole_attempt
from proxy.enforce.exchange import Exchange
from proxy.enforce.feedback_turns import blocked_message, turn_allowed
from proxy.enforce.finish import end_stream
from proxy.enforce.prelude import RouteShape, open_exchange
from proxy.enforce.serve import judged_json, serve
from proxy.errors import ProxyError, StoreUnavailable, UpstreamUnjudgeable, error_body
from proxy.record import JudgedCall
from proxy.services import Services
from proxy.toolcalls import CompletedCall, ToolCall
from proxy.toolcalls.families import XmlRules
from proxy.toolcalls.registry import content_formats
from proxy.toolcalls.scanner import ContentScanner, scan_text
from proxy.upstream.sse import DONE, SSEEvent

__all__ = ["REJECTED_CODE", "completions"]

REJECTED_CODE = "tool_call_rejected"
_COMPACT = (",", ":")


# No tools are offered on this route: no call is `unknown_tool`. A raw prompt has no turns for lineage to follow.
COMPLETIONS = RouteShape(name="completions", validate=lambda payload: None, conversation=lambda payload: None,
                         tools=lambda payload: (None, set()))


async def completions(request: Request, state: Services) -> Response:
    return await serve(await open_exchange(request, state, COMPLETIONS), path="/completions",
                       relay=lambda ex, response: _Relay(ex).run(response), whole=_complete)


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


def _texts(obj: dict[str, Any]) -> str:
    """Every choice's text: what a text-acting client reads its actions from (text_clients.py)."""
    choices = obj.get("choices")
    return "\n".join(c["text"] for c in choices if isinstance(c, dict) and isinstance(c.get("text"), str)) \
        if isinstance(choices, list) else ""


def _refusal_text(ex: Exchange, judged: list[JudgedCall]) -> str:
    # blocked_message's lines name each call with its reasons, then the policy's feedback.
    details = blocked_message(ex.policy, judged, 1).split("\n", 1)[1]
    return ("allowlist-proxy blocked this completion: its text holds tool calls the policy does not allow "
            "(a raw completion cannot be re-asked with the reasons).\n" + details)


def _block(ex: Exchange, judged: list[JudgedCall]) -> dict[str, Any]:
    ex.record.budget_exhausted = True  # the turn ended blocked, as a chat turn whose budget ran out
    return error_body(_refusal_text(ex, judged), "permission_error", code=REJECTED_CODE)


async def _complete(ex: Exchange) -> Response:
    read = await whole_attempt(ex, "/completions", "a completion", lambda obj: None)
    if isinstance(read, Response):
        return read
    judged = _judge(ex, _text_calls(read.obj, ex.rules)) + ex.judge_text(_texts(read.obj))
    if not ex.enforce or turn_allowed(judged):
        await ex.release(1, judged)  # on record before the answer goes out (enforce mode)
        if ex.enforce:
            return judged_json(read.obj)
        return Response(read.response.content, status_code=200, headers=read.headers)
    ex.keep(1, judged, delivered=False)
    ex.record.status = 403
    return JSONResponse(_block(ex, judged), status_code=403)


# ---------------------------------------------------------------- streaming


class _Choice:
    """One choice's text: scanned for calls; in enforce mode, the text not yet known to be free of them."""

    def __init__(self, rules: XmlRules | None = None) -> None:
        self.scanner = ContentScanner(content_formats(rules), {}, read_think=True)
        self.pending = ""
        self.finished = False
        self.said: list[str] = []  # a text-acting client's whole text, judged once the choice finishes


class _Relay:
    def __init__(self, ex: Exchange) -> None:
        self.ex = ex
        self.choices: dict[int, _Choice] = {}
        self.judged: list[JudgedCall] = []
        self.released = 0  # how many of `judged` are on record as delivered
        self.rejected = False
        self.upstream_error = False
        self.usage: Any = None
        self.ended = False  # [DONE] seen
        self.done = False

    async def run(self, response: Any) -> AsyncIterator[bytes]:
        ex, record = self.ex, self.ex.record
        try:
            try:
                async with aclosing(upstream_events(ex, response)) as events:
                    async for event in events:
                        out = self._event(event)
                        if out:
                            await self._release()
                            yield out
                        if self.rejected or self.upstream_error:
                            break
            except ProxyError as exc:
                self.upstream_error = True
                record.fail("upstream_error", exc.message)
                yield strict.encode_event(error_body(exc.message, exc.error_type, code=exc.code))
                yield DONE
            if not self.rejected and not self.upstream_error:
                # The stream ended without finishing a choice: decide what it still held.
                out = self._finish_all()
                if out:
                    await self._release()
                    yield out
            self.done = True
        except StoreUnavailable as exc:  # nothing goes out unrecorded: an error event instead
            yield strict.encode_event(error_body(exc.message, exc.error_type, code=exc.code))
            yield DONE
            self.done = True
        finally:
            await end_stream(ex, done=self.done, upstream=response, then=self._keep_rest)

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

    def _event(self, event: SSEEvent) -> bytes | None:
        enforce = self.ex.enforce
        if event.invalid is not None:
            return self._unjudgeable(event, event.invalid, parse=True)
        if event.data is None:
            return event.raw if not enforce else (b": keep-alive\n\n" if event.comment else None)
        if self.ended:
            return self._unjudgeable(event, "data after [DONE]", parse=False)
        if event.is_done:
            self.ended = True
            out = self._finish_all()
            if self.rejected:
                return out
            return (out or b"") + (event.raw if not enforce else DONE)
        try:
            obj = strict.loads(event.data) if enforce else json.loads(event.data)
        except ValueError as exc:
            return self._unjudgeable(event, f"an event that does not parse: {exc}", parse=True)
        if not isinstance(obj, dict):
            return self._unjudgeable(event, f"an event that is a JSON {type(obj).__name__}", parse=True)
        if "error" in obj and not obj.get("choices"):
            self.upstream_error = True
            self.ex.record.fail("upstream_error", json.dumps(obj.get("error"))[:1000])
            return event.raw if not enforce else strict.encode_event({"error": obj.get("error")})
        if obj.get("usage"):
            self.usage = obj["usage"]  # cumulative when continuous: the last one counts
        choices = obj.get("choices")
        if not choices:
            if choices is not None and not isinstance(choices, list):
                return self._unjudgeable(event, "`choices` that is not a list", parse=False)
            if obj.get("usage") and not self.ex.client_wants_usage:
                return None  # the usage chunk the proxy asked for
            return event.raw if not enforce else strict.encode_event(obj)
        if not isinstance(choices, list):
            return self._unjudgeable(event, "`choices` that is not a list", parse=False)
        for choice in choices:
            problem = choice_problem(choice, "text")
            known = self.choices.get(choice.get("index", 0)) if problem is None else None
            if known is not None and known.finished and (choice.get("text") or choice.get("finish_reason")):
                problem = "text after the choice's finish_reason"
            if problem is not None:
                return self._unjudgeable(event, problem, parse=False)
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

    def _unjudgeable(self, event: SSEEvent, detail: str, *, parse: bool) -> bytes | None:
        """Output the proxy cannot judge. Enforce mode: an event that does not parse refuses the stream as an
        upstream error; one of an unknown shape or after the end is a call that cannot be allowed, which
        refuses the completion as a rejected call does. Observe mode: relayed and recorded."""
        if self.ex.enforce and parse:
            raise UpstreamUnjudgeable(f"unjudgeable: the upstream sent {detail}")
        self._decide([unjudgeable_call("completion", detail, event.raw.decode("utf-8", "replace"))])
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
