"""The one request prelude of every judged route: what sets a route apart (`RouteShape`), then the body read,
the model, the policy and the session resolved, and the exchange begun (`open_exchange`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from proxy.enforce.exchange import Exchange
from proxy.enforce.payload import normalize_stream, read_body, read_payload
from proxy.errors import BadRequest
from proxy.record import RequestRecord
from proxy.services import Services

__all__ = ["RouteShape", "open_exchange"]


@dataclass(kw_only=True, frozen=True)
class RouteShape:
    """What sets one judged route's requests apart before the first attempt; the rest is `open_exchange`."""

    name: str  # the `route` recorded with every request and call
    validate: Callable[[dict[str, Any]], None]  # raise BadRequest for a malformed conversation
    conversation: Callable[[dict[str, Any]], list[dict[str, Any]] | None]  # chat messages for the lineage
    tools: Callable[[dict[str, Any]], tuple[list[dict[str, Any]] | None, set[str]]]  # tool schemas, offered names
    asks_usage: bool = True  # streams get `stream_options.include_usage` (the statistics count tokens)


async def open_exchange(request: Request, state: Services, shape: RouteShape,
                        make: Callable[..., Exchange] | None = None, **extra: Any) -> Any:
    """The one request prelude of every judged route: the body read and checked, the model resolved, the
    policy and the session picked, the `stream` decided, the request counted in and its record begun."""
    body = await read_body(request, state.settings.max_body_bytes)
    payload = await read_payload(body, max_tools=state.settings.max_tools, max_messages=state.settings.max_messages)
    model = payload.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("`model` must be a non-empty string", param="model")
    shape.validate(payload)
    headers = state.upstream.headers(request.headers)
    upstream_model = await state.models.resolve(model, headers)
    policy = state.policy_for(request.headers)
    conversation = shape.conversation(payload)
    session = await state.sessions.aresolve(request.headers, conversation, payload)  # replicas share the lineage
    stream, changed = normalize_stream(payload)
    if upstream_model != model:
        payload["model"] = upstream_model
        changed = True
    options = payload.get("stream_options")
    client_wants_usage = isinstance(options, dict) and options.get("include_usage") is True
    if shape.asks_usage and stream and not client_wants_usage:
        # Usage is what the statistics count; the client that did not ask never sees it.
        payload["stream_options"] = {**(options if isinstance(options, dict) else {}), "include_usage": True}
        changed = True
    tools, offered = shape.tools(payload)
    record = RequestRecord(session=session, model=upstream_model, route=shape.name, upstream=state.upstream.base_url,
                           stream=stream, concurrency=state.enter(upstream_model))
    record.policy_name, record.policy_hash, record.mode = policy.name, policy.hash, policy.policy.mode
    return (make or Exchange)(state=state, record=record, payload=payload, original_body=body, body_changed=changed,
                              headers=headers, policy=policy, tools=tools, offered=offered,
                              client_wants_usage=client_wants_usage, conversation=conversation, client=request,
                              **extra)
