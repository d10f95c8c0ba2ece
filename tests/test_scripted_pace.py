"""The scripted upstream's pacing: `Reply.steady` keeps each chunk on its own schedule, as a GPU does, so a chunk
the busy machine sent late does not push back the ones after it (what the benchmarks' end delays rely on)."""

from __future__ import annotations

import time

from proxy.testing.reply import Reply, pace


async def test_a_steady_chunk_already_due_goes_at_once_and_a_later_one_on_its_schedule():
    reply = Reply(chunk_delay=0.05, steady=True)
    started = time.monotonic() - 0.12  # the first chunk went 120 ms ago: the second and third are due
    before = time.monotonic()
    await pace(reply, 2, started)
    assert time.monotonic() - before < 0.04
    await pace(reply, 4, started)  # due 200 ms after the first
    assert time.monotonic() - started >= 0.2


async def test_unsteady_chunks_wait_their_delay_after_each_other():
    reply = Reply(chunk_delay=0.03)
    before = time.monotonic()
    await pace(reply, 5, before - 10)
    assert time.monotonic() - before >= 0.03
