"""What a `previous_response_id` the proxy handed out must mean to the upstream.

A server that stores responses (vLLM with VLLM_ENABLE_RESPONSES_API_STORE=1) continues a conversation from what
it holds under the id the client names. Two of the proxy's answers give the client an id under which the server
holds something else than what the client got:
- a streamed turn that was retried: the client was given the first attempt's id in `response.created`, before
  any call was judged, while the turn it got is the server's response to the last attempt;
- a blocked turn: the client got the proxy's explanation, while the server holds the refused calls, unanswered.

So the proxy remembers, per id it handed out, the server's id to continue from and the items the client got that
the server does not hold (each refused call answered with the explanation, and the explanation as the assistant's
message), and a request that names the client's id goes up naming the server's, those items before its input.
Kept in memory and bounded, as vLLM keeps its store (a proxy restarted loses them: the ids then continue from
what the server holds, as before).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Continuation", "ResponseChains"]


@dataclass(frozen=True, slots=True)
class Continuation:
    upstream_id: str  # the server's response to continue from
    items: tuple[dict[str, Any], ...] = field(default=())  # what the client got that the server does not hold


class ResponseChains:
    """Client response id -> Continuation, the oldest forgotten past `limit`."""

    def __init__(self, limit: int = 20_000) -> None:
        self.limit = limit
        self._chains: OrderedDict[str, Continuation] = OrderedDict()

    def remember(self, client_id: str | None, upstream_id: str | None, items: list[dict[str, Any]]) -> None:
        if not client_id or not upstream_id or (client_id == upstream_id and not items):
            return
        self._chains[client_id] = Continuation(upstream_id, tuple(items))
        self._chains.move_to_end(client_id)
        while len(self._chains) > self.limit:
            self._chains.popitem(last=False)

    def get(self, client_id: Any) -> Continuation | None:
        return self._chains.get(client_id) if isinstance(client_id, str) else None

    def __len__(self) -> int:
        return len(self._chains)
