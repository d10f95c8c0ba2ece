"""POST /v1/completions: the raw text is scanned for tool calls written in it, judged, recorded, enforced.

A raw completion has no tool-call channel, but a client that parses Qwen3-Coder XML or Hermes JSON out of the
text itself (`<tool_call>...</tool_call>`) runs what the model wrote. So every `choices[].text` goes through
the same content scanner as chat content. The proxy did not build the prompt and cannot re-ask with the
reasons, so in enforce mode a response with a rejected or malformed call is replaced by an error that names
them (403, `permission_error`, code `tool_call_rejected`); in observe mode it passes untouched and is recorded.

Streaming, enforce mode: text passes as it comes, verbatim, except from the start of a possible call until the
scanner has decided it: then the held text (the call's own bytes included, since the client parses them) is
sent if every call in it is allowed, and an error event plus `[DONE]` end the stream if one is not.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from proxy.body import read_body, read_json_object
from proxy.enforce import blocked_message, turn_allowed
from proxy.errors import BadRequest, ProxyError, error_body
from proxy.exchange import (
    Exchange,
    finish_exchange,
    open_stream_attempt,
    pick_policy,
    request_attempt,
    upstream_events,
)
from proxy.judging import JudgedCall, judge_calls
from proxy.record import RequestRecord
from proxy.sse import DONE, SSEEvent, encode_json
from proxy.state import ProxyState
from proxy.toolcalls import CompletedCall, ToolCall, extract_from_response
from proxy.toolcalls.families import XmlRules
from proxy.toolcalls.registry import CONTENT_FORMATS, content_formats
from proxy.toolcalls.scanner import ContentScanner
from proxy.upstream import response_headers

__all__ = ["REJECTED_CODE", "completions"]

REJECTED_CODE = "tool_call_rejected"
_COMPACT = (",", ":")


async def completions(request: Request, state: ProxyState) -> Response:
    body = await read_body(request, state.settings.max_body_bytes)
    payload = read_json_object(body)
    model = payload.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("`model` must be a non-empty string", param="model")
    headers = state.upstream.headers(request.headers)
    upstream_model = await state.models.resolve(model, headers)
    policy = pick_policy(request, state)
    session = await state.sessions.aresolve(request.headers, None)  # a raw prompt has no turns to follow
    stream = payload.get("stream") is True
    changed = upstream_model != model
    if changed:
        payload["model"] = upstream_model
    options = payload.get("stream_options")
    client_wants_usage = isinstance(options, dict) and options.get("include_usage") is True
    if stream and not client_wants_usage:
        # Usage is what the statistics count; the client that did not ask never sees it.
        payload["stream_options"] = {**(options if isinstance(options, dict) else {}), "include_usage": True}
        changed = True
    record = RequestRecord(session=session, model=upstream_model, route="completions",
                           upstream=state.upstream.base_url, stream=stream, concurrency=state.enter(upstream_model))
    record.policy_name, record.policy_hash, record.mode = policy.name, policy.hash, policy.policy.mode
    # No tools are offered on this route: `offered` stays None when judging, so no call is `unknown_tool`.
    ex = Exchange(state=state, record=record, payload=payload, original_body=body, body_changed=changed,
                  headers=headers, policy=policy, tools=None, offered=set(), client_wants_usage=client_wants_usage,
                  client=request)
    if stream:
        return await _stream(ex)
    try:
        return await _complete(ex)
    finally:
        finish_exchange(ex)


def _judge(ex: Exchange, calls: list[ToolCall]) -> list[JudgedCall]:
    return judge_calls(ex.policy, calls, None)


def _refusal_text(ex: Exchange, judged: list[JudgedCall]) -> str:
    # blocked_message's lines name each call with its reasons, then the policy's feedback.
    details = blocked_message(ex.policy, judged, 1).split("\n", 1)[1]
    return ("allowlist-proxy blocked this completion: its text holds tool calls the policy does not allow "
            "(a raw completion cannot be re-asked with the reasons).\n" + details)


def _block(ex: Exchange, judged: list[JudgedCall]) -> dict[str, Any]:
    ex.record.budget_exhausted = True  # the turn ended blocked, as a chat turn whose budget ran out
    return error_body(_refusal_text(ex, judged), "permission_error", code=REJECTED_CODE)


async def _complete(ex: Exchange) -> Response:
    record = ex.record
    response = await request_attempt(ex, "/completions")
    if isinstance(response, Response):
        return response
    headers = response_headers(response.headers)
    try:
        obj = json.loads(response.content)
        results = extract_from_response(obj, None, rules=ex.rules)
    except (ValueError, TypeError, AttributeError) as exc:
        record.fail("upstream_error", f"upstream answered 200 with a body that is not a completion: {exc}")
        return Response(response.content, status_code=200, headers=headers)
    record.usage.add(obj.get("usage"))
    record.mark_first_token()
    judged = _judge(ex, [c for r in results for c in r.tool_calls + r.malformed])
    if not ex.enforce or turn_allowed(judged):
        ex.keep(1, judged, delivered=True)
        return Response(response.content, status_code=200, headers=headers)
    ex.keep(1, judged, delivered=False)
    record.status = 403
    return JSONResponse(_block(ex, judged), status_code=403)


# ---------------------------------------------------------------- streaming


async def _stream(ex: Exchange) -> Response:
    response = await open_stream_attempt(ex, "/completions")
    if isinstance(response, Response):
        return response
    return StreamingResponse(_Relay(ex).run(response), media_type="text/event-stream",
                             headers={"cache-control": "no-cache", "x-accel-buffering": "no"})


class _Choice:
    """One choice's text: scanned for calls; in enforce mode, the text not yet known to be free of them."""

    def __init__(self, rules: XmlRules | None = None) -> None:
        self.scanner = ContentScanner(content_formats(rules) if rules else CONTENT_FORMATS, {})
        self.pending = ""
        self.finished = False


class _Relay:
    def __init__(self, ex: Exchange) -> None:
        self.ex = ex
        self.choices: dict[int, _Choice] = {}
        self.judged: list[JudgedCall] = []
        self.rejected = False
        self.upstream_error = False
        self.usage: Any = None
        self.done = False

    async def run(self, response: Any) -> AsyncIterator[bytes]:
        ex, record = self.ex, self.ex.record
        try:
            try:
                async with aclosing(upstream_events(ex, response)) as events:
                    async for event in events:
                        out = self._event(event)
                        if out:
                            yield out
                        if self.rejected or self.upstream_error:
                            break
            except ProxyError as exc:
                self.upstream_error = True
                record.fail("upstream_error", exc.message)
                yield encode_json(error_body(exc.message, exc.error_type, code=exc.code))
                yield DONE
            if not self.rejected and not self.upstream_error:
                # The stream ended without finishing a choice: decide what it still held.
                out = self._finish_all()
                if out:
                    yield out
            self.done = True
        finally:
            if not self.done and record.outcome == "ok":
                record.fail("client_disconnected", "the client went away before the stream ended", 499)
            with anyio.CancelScope(shield=True):
                await response.aclose()
                if self.usage is not None:
                    record.usage.add(self.usage)
                delivered = not (ex.enforce and self.rejected)
                # In enforce mode the calls sent before a rejected one did reach the client.
                for attempt_calls, sent in self._split(delivered):
                    if attempt_calls:
                        ex.keep(1, attempt_calls, delivered=sent)
                finish_exchange(ex)

    def _split(self, delivered: bool) -> list[tuple[list[JudgedCall], bool]]:
        if delivered:
            return [(self.judged, True)]
        first_bad = next(i for i, j in enumerate(self.judged) if not j.allowed)
        return [(self.judged[:first_bad], True), (self.judged[first_bad:], False)]

    def _event(self, event: SSEEvent) -> bytes | None:
        if event.data is None or event.is_done:
            if event.is_done:
                out = self._finish_all()
                return (out or b"") + event.raw if not self.rejected else out
            return event.raw
        try:
            obj = json.loads(event.data)
        except ValueError:
            return event.raw
        if not isinstance(obj, dict):
            return event.raw
        if "error" in obj and not obj.get("choices"):
            self.upstream_error = True
            self.ex.record.fail("upstream_error", json.dumps(obj.get("error"))[:1000])
            return event.raw
        if obj.get("usage"):
            self.usage = obj["usage"]  # cumulative when continuous: the last one counts
        choices = obj.get("choices")
        if not choices:
            if obj.get("usage") and not self.ex.client_wants_usage:
                return None  # the usage chunk the proxy asked for
            return event.raw
        texts: dict[int, str] = {}
        for choice in choices:
            if not isinstance(choice, dict):
                continue
            index = choice.get("index", 0)
            text = choice.get("text") if isinstance(choice.get("text"), str) else ""
            if text:
                self.ex.record.mark_first_token()
            texts[index] = self._text(index, text, finished=bool(choice.get("finish_reason")))
            if self.rejected:
                return self._refuse()
        if not self.ex.enforce:
            return event.raw
        if all(texts.get(c.get("index", 0)) == c.get("text") for c in choices if isinstance(c, dict)):
            return event.raw
        rebuilt = [{**c, "text": texts.get(c.get("index", 0), "")} for c in choices if isinstance(c, dict)]
        rebuilt = [c for c in rebuilt if c["text"] or c.get("finish_reason")]
        if not rebuilt:
            return None
        return b"data: " + json.dumps({**obj, "choices": rebuilt}, ensure_ascii=False,
                                      separators=_COMPACT).encode() + b"\n\n"

    def _text(self, index: int, text: str, *, finished: bool) -> str:
        """Scan one piece of a choice's text; return what the client may get now (enforce mode)."""
        choice = self.choices.get(index)
        if choice is None:
            choice = self.choices[index] = _Choice(self.ex.rules)
        if choice.finished:
            return text
        if self.ex.enforce:  # observe mode sends the upstream's bytes; nothing is held back
            choice.pending += text
        events = choice.scanner.feed_text(text) if text else []
        if finished:
            events += choice.scanner.finish()
            choice.finished = True
        self._decide([e.call for e in events if isinstance(e, CompletedCall)])
        if self.rejected:
            return ""
        # Nothing held, no call open: everything so far is decided, the calls in it allowed.
        if choice.finished or choice.scanner.plain:
            out, choice.pending = choice.pending, ""
            return out
        return ""

    def _decide(self, calls: list[ToolCall]) -> None:
        judged = _judge(self.ex, calls)
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
        return b"".join(b"data: " + json.dumps({"object": "text_completion", "model": self.ex.record.model,
                                                "choices": [{"index": k, "text": v, "logprobs": None,
                                                             "finish_reason": None}]},
                                               ensure_ascii=False, separators=_COMPACT).encode() + b"\n\n"
                        for k, v in texts.items())

    def _refuse(self) -> bytes:
        self.ex.record.budget_exhausted = True
        body = _block(self.ex, self.judged)
        return encode_json(body) + DONE
