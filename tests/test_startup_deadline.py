"""One deadline for the start-up questions: past it, the run goes on with what it knows."""

from __future__ import annotations

import asyncio

from ouroboros.loop.deadline import Deadline


def test_work_past_the_deadline_gives_the_fallback_and_is_named() -> None:
    now = [100.0]
    startup = Deadline.after(20, clock=lambda: now[0])

    async def ask() -> tuple[str, str]:
        first = await startup.within(asyncio.sleep(0, "answered"), lambda: "guess", "first")
        now[0] = 121.0  # the clock passed the deadline while the next question hangs
        second = await startup.within(asyncio.Event().wait(), lambda: "guess", "the window")
        return first, second

    assert asyncio.run(ask()) == ("answered", "guess")
    assert startup.missed == ["the window"]
    assert startup.remaining() == 0.0
