"""The one request prelude of every judged route: what it reads of the route (`RouteShape`), then the body read,
the model, the policy and the session resolved, and the exchange begun (`open_exchange`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Protocol

from starlette.requests import Request

from proxy.enforce.exchange import Exchange
from proxy.enforce.payload import normalize_stream, read_body, read_payload
from proxy.errors import BadRequest
from proxy.record import RequestRecord
from proxy.services import Services

__all__ = ["RouteShape", "open_exchange"]


class RouteShape(Protocol):
    """What the request prelude reads of a judged route: `Dialect` (proxy/dialects/base.py), the one shape of a
    judged route, has these; the rest is `open_exchange`."""

    route: ClassVar[str]  # the `route` recorded with every request and call
    asks_usage: ClassVar[bool]  # streams get `stream_options.include_usage` (the statistics count tokens)
    counted_keys: ClassVar[tuple[str, ...]]  # the request's lists of turns, each held to `max_messages`

    def validate(self, payload: dict[str, Any]) -> None:
        """Raise BadRequest for a malformed conversation."""

    def conversation(self, payload: dict[str, Any]) -> list[dict[str, Any]] | None:
        """The conversation as chat messages, for the lineage."""

    def tools(self, payload: dict[str, Any]) -> tuple[list[dict[str, Any]] | None, set[str]]:
        """The offered tools' schemas (where content calls are typed by them) and names."""


async def open_exchange(request: Request, state: Services, shape: RouteShape,
                        make: Callable[..., Exchange] | None = None, **extra: Any) -> Any:
    """The one request prelude of every judged route: the body read and checked, the model resolved, the
    policy and the session picked, the `stream` decided, the request counted in and its record begun."""
    body = await read_body(request, state.settings.max_body_bytes)
    payload = await read_payload(body, max_tools=state.settings.max_tools, max_messages=state.settings.max_messages,
                                 counted=shape.counted_keys)
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
    record = RequestRecord(session=session, model=upstream_model, route=shape.route, upstream=state.upstream.base_url,
                           stream=stream, concurrency=state.enter(upstream_model))
    record.policy_name, record.policy_hash, record.mode = policy.name, policy.hash, policy.policy.mode
    return (make or Exchange)(state=state, record=record, payload=payload, original_body=body, body_changed=changed,
                              headers=headers, policy=policy, tools=tools, offered=offered,
                              client_wants_usage=client_wants_usage, conversation=conversation, client=request,
                              **extra)
