"""The attempt loop of a streamed exchange, once for every route that re-asks the model (chat, Responses,
Messages): relay an attempt, judge its calls, then deliver them (audit before release), re-ask with the
reasons within the retry budget, or end with the explaining answer.

A route says how its events are relayed, held and encoded (`StreamedAttempts`' hooks); the order of the steps,
what ends the loop and how the stream ends are here. A route holds a retry's text until the attempt is judged,
either as encoded pieces (`hold_pieces`, which this loop keeps and releases with the delivered turn) or as
events of its own, released with a delivered turn as what the client does not have yet, then the line that says
what was refused (invariant 12, proxy/enforce/retry_text.py); a blocked turn ends with the explanation alone.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from typing import Any

from proxy.enforce.attempts import RetryFailed, open_retry_stream
from proxy.enforce.exchange import Exchange, Outcome
from proxy.enforce.feedback_turns import blocked_message
from proxy.enforce.finish import end_stream
from proxy.errors import BlockedTurn, StoreUnavailable
from proxy.record import JudgedCall

__all__ = ["StreamedAttempts"]


class StreamedAttempts(ABC):
    """One streamed exchange's attempts, as a route relays them; `run` is the generator the client reads."""

    ex: Exchange
    path: str  # the upstream path a retry posts to
    attempt: int  # the current attempt, from 1
    upstream_error: bool  # the attempt ended in an error the client has been (or is about to be) sent
    done: bool  # the stream reached its end (not cut short by the client leaving)

    @abstractmethod
    def relay_attempt(self, response: Any) -> AsyncIterator[bytes]:
        """The events of one attempt (an open upstream stream) as the client gets them now."""

    def hold_pieces(self) -> bool:
        """Whether this attempt's pieces wait for the verdict (sent with a delivered turn, dropped otherwise)."""
        return False

    @abstractmethod
    def judge_attempt(self) -> list[JudgedCall]:
        """The attempt that just ended, its calls judged."""

    @abstractmethod
    def deliver(self, judged: list[JudgedCall]) -> list[bytes]:
        """The attempt is delivered (its calls on record): what the client gets still (enforce mode's held calls)."""

    @abstractmethod
    def block(self, judged: list[JudgedCall]) -> list[bytes]:
        """The budget is spent: the explaining answer and the end of the response."""

    def refuse(self, judged: list[JudgedCall]) -> list[bytes]:
        """The budget is spent on a request that demands a tool call: an error event whose message explains the
        block, which the client's SDK raises (a text answer would read as a broken turn)."""
        text = blocked_message(self.ex.policy, judged, self.attempt)
        return [self.error(text, BlockedTurn.error_type, BlockedTurn.code)]

    @abstractmethod
    def retry_turn(self, judged: list[JudgedCall]) -> list[dict[str, Any]]:
        """The held turn and the reasons, as the conversation items a retry appends."""

    @abstractmethod
    def begin_attempt(self) -> None:
        """The next attempt starts (`attempt` counts on): what was of the last one is forgotten."""

    @abstractmethod
    def error(self, message: str, type_: str, code: Any) -> bytes:
        """An error event in the route's shape (the attempt ends in an upstream error)."""

    @abstractmethod
    def fail(self, detail: str, status: int | None = None) -> None:
        """The record says the request ended in an upstream error."""

    def tail(self) -> list[bytes]:
        """What ends the stream after the loop, however it ended."""
        return []

    @abstractmethod
    def remember(self) -> None:
        """The client got a whole turn: let its next request continue this session."""

    async def run(self, response: Any) -> AsyncIterator[bytes]:
        ex = self.ex
        current = response
        try:
            while True:
                held: list[bytes] = []
                hold = self.hold_pieces()
                async for piece in self.relay_attempt(current):
                    if hold:
                        held.append(piece)
                    else:
                        yield piece
                await current.aclose()
                current = None
                if self.upstream_error:
                    for piece in held[-1:]:  # the error that ended the attempt, without its narration
                        yield piece
                    break
                judged = self.judge_attempt()
                try:
                    outcome = await ex.settle(self.attempt, judged)
                except StoreUnavailable as exc:  # nothing goes out unrecorded: an error event instead
                    yield self.error(exc.message, exc.error_type, exc.code)
                    break
                if outcome is Outcome.DELIVER:
                    for piece in held:
                        yield piece
                    for piece in self.deliver(judged):
                        yield piece
                    break
                if outcome is Outcome.BLOCKED:
                    for piece in self.refuse(judged) if ex.demands_call else self.block(judged):
                        yield piece
                    break
                ex.extra_messages += self.retry_turn(judged)
                self.begin_attempt()
                ex.record.attempts = self.attempt
                opened = await open_retry_stream(ex, self.path)
                if isinstance(opened, RetryFailed):
                    yield self.error(opened.message, opened.error_type, opened.code)
                    self.fail(opened.detail, opened.status)
                    break
                current = opened
            if not self.upstream_error:
                # Before the stream's end: the client's next request may reach another process, which must find
                # what it continues from (`Exchange.continuation_durable`).
                self.remember()
                self._remembered = True
                await ex.continuation_durable()
            for piece in self.tail():
                yield piece
            self.done = True
        finally:
            await end_stream(ex, done=self.done, upstream=current, then=self._remember_whole_turn)

    _remembered = False

    def _remember_whole_turn(self) -> None:
        if self.done and not self.upstream_error and not self._remembered:
            self.remember()
