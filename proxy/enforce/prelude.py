"""The one request prelude of every judged route: what it reads of the route (`RouteShape`), then the body read,
the model, the policy and the session resolved, and the exchange begun (`open_exchange`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, ClassVar, Protocol

from starlette.requests import Request

from proxy import tracing
from proxy.enforce.exchange import Exchange, edited_bytes
from proxy.enforce.payload import normalize_stream, read_body, read_payload
from proxy.enforce.secrets import conversation_key, redact_request
from proxy.enforce.text_clients import TextClient, prompt_text, recognise, recognise_text
from proxy.errors import BadRequest
from proxy.record import RequestRecord
from proxy.services import Services
from proxy.sessions.project_root import ClientText, stated_root
from proxy.sessions.resolve import Pending, spaced
from proxy.sessions.rewritten import as_delivered, history_keys, renames_calls

__all__ = ["RouteShape", "open_exchange"]


class RouteShape(Protocol):
    """What the request prelude reads of a judged route: `Dialect` (proxy/dialects/base.py), the one shape of a
    judged route, has these; the rest is `open_exchange`."""

    route: ClassVar[str]  # the `route` recorded with every request and call
    asks_usage: ClassVar[bool]  # streams get `stream_options.include_usage` (the statistics count tokens)
    counted_keys: ClassVar[tuple[str, ...]]  # the request's lists of turns, each held to `max_messages`
    history_key: ClassVar[str]  # the request field retries append to
    reasks: ClassVar[bool]  # a rejected call is fed back and the model asked again

    def validate(self, payload: dict[str, Any]) -> None:
        """Raise BadRequest for a malformed conversation."""

    def conversation(self, payload: dict[str, Any]) -> list[dict[str, Any]] | None:
        """The conversation as chat messages, for the lineage."""

    def tools(self, payload: dict[str, Any]) -> tuple[list[dict[str, Any]] | None, set[str]]:
        """The offered tools' schemas (where content calls are typed by them) and names."""

    def client_texts(self, payload: dict[str, Any]) -> Iterable[ClientText]:
        """The texts the client wrote about itself in this request (proxy/sessions/project_root.py)."""


async def open_exchange(request: Request, state: Services, shape: RouteShape,
                        make: Callable[..., Exchange] | None = None, **extra: Any) -> Any:
    """The one request prelude of every judged route: the project key checked (proxy/keys/ring.py), the body read
    and checked, the model resolved, the policy and the session picked, the `stream` decided, the request counted
    in and its record begun. A request bound by a key gets its project root, tool profile and policy from the
    key, whatever its text says; its sessions are its key's alone; its credentials never go upstream."""
    # Before the body is read: a request the proxy will not serve costs it nothing more.
    key = await state.bind(request.headers)
    http = state.settings.http
    body = await read_body(request, http.max_body_bytes)
    payload = await read_payload(body, max_tools=http.max_tools, max_messages=http.max_messages,
                                 counted=shape.counted_keys)
    model = payload.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("`model` must be a non-empty string", param="model")
    shape.validate(payload)
    # What the parsed conversation is needed for is read now, before the first wait: requests that arrive
    # together all wait here (the model list, the lineage store), and each would hold its parsed conversation,
    # larger than its bytes, until it streams. After this, the bytes are the one copy kept.
    conversation = shape.conversation(payload)
    # Open Interpreter and Agno send their turns back renamed (proxy/sessions/rewritten.py): read as delivered.
    renamed = (as_delivered(conversation) if conversation is not None
               and renames_calls(conversation, payload.get("tools")) else None)
    namespace = key.id if key else None
    lineage = state.sessions.prepare(request.headers, conversation if renamed is None else renamed, payload,
                                     namespace=namespace)
    if renamed is not None and isinstance(lineage, Pending):
        lineage.digests.rewritten = True
    history = history_keys(conversation) if conversation is not None and isinstance(lineage, Pending) else None
    if history is not None and isinstance(lineage, Pending):  # DSPy: each step a new conversation of its trajectory
        continues, reaches = history
        lineage.digests.also = (reaches,)  # spaced with the reply's own keys (`SessionResolver.remember`)
        if continues is not None:
            lineage.keys.append(spaced(continues, namespace))
    text_client = _text_client(conversation, payload)
    stated = stated_root(shape.client_texts(payload)) if key is None else None
    del conversation, renamed
    refused: BadRequest | None = None
    try:
        stream, changed = normalize_stream(payload)
    except BadRequest as exc:  # answered once the model is known to be served, as ever
        refused, stream, changed = exc, False, False
    upstream_model = state.models.upstream_name(model)
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
    if changed and refused is None:
        body = edited_bytes(body, payload)  # the bytes sent: the client's, with the proxy's top-level changes
    # The turns are kept past the waits below only where the rules' one pass over the bytes found something:
    # their secrets are replaced once the policy is known (proxy/enforce/secrets.py).
    turns_key = conversation_key(shape.route)
    turns = payload.get(turns_key) if turns_key is not None else None
    # A route that re-asks reads its conversation again from the bytes when it retries; one that does not
    # (a raw prompt) keeps it.
    dropped = shape.history_key if shape.reasks else None
    payload = {key: value for key, value in payload.items() if key != dropped}
    # A key is the proxy's credential, never the upstream's: the upstream gets its configured key, if any.
    headers = state.upstream_headers(request.headers, key)
    await state.models.resolve(model, headers)
    if refused is not None:
        raise refused
    policy = state.policy_for(request.headers, key)
    if turns is not None:
        # The client's own copy and the lineage keep what it sent; upstream gets the redacted bytes (in observe
        # mode only counted).
        body, redactions = redact_request(body, turns, shape.route, policy.policy,
                                          apply=policy.policy.mode == "enforce")
        del turns
    else:
        redactions = None
    session = await state.sessions.finish(lineage)  # replicas share the lineage
    if key is None:  # a key binds the root: no stated one is read, here or in another process
        await state.sessions.load_root(session, stated)  # and the roots its client stated
    record = RequestRecord(session=session, model=upstream_model, route=shape.route, upstream=state.upstream.base_url,
                           stream=stream, concurrency=state.enter(upstream_model))
    record.policy_name, record.policy_hash, record.mode = policy.name, policy.hash, policy.policy.mode
    tracing.begin(record, request.headers, headers)  # nothing while tracing is off
    if redactions:
        record.note_redactions(redactions.counts)
    return (make or Exchange)(state=state, record=record, payload=payload, original_body=body, body_changed=False,
                              headers=headers, policy=policy, tools=tools, offered=offered,
                              client_wants_usage=client_wants_usage, history_key=dropped, client=request,
                              text_client=text_client, stated=stated, key=key, **extra)


def _text_client(conversation: list[dict[str, Any]] | None, payload: dict[str, Any]) -> TextClient | None:
    """The text-acting client a request comes from (text_clients.py), recognised by what it wrote (a raw
    completion: by its prompt)."""
    if conversation is None and "prompt" in payload:
        return recognise_text(prompt_text(payload.get("prompt")))
    return recognise(conversation or [])
