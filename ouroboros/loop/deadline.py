"""One deadline for everything a run asks the server before its first turn (is it there, has
it the model, how big is the window): a server that answers a byte every few seconds cannot
hold the start for minutes. Past it, the run goes on with what is known.

    startup = Deadline.after(STARTUP_SECS)
    window = await startup.within(ask_window(), lambda: guess, "the window")  # noted in missed
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")

STARTUP_SECS = 20.0  # the start-up probes and discovery together
STARTUP_ENV = "OUROBOROS_STARTUP_SECS"  # a shorter (or longer) deadline, for tests


def startup_secs(env: Mapping[str, str]) -> float:
    """The start-up deadline: STARTUP_SECS, or a positive number of seconds in STARTUP_ENV."""
    try:
        secs = float(env.get(STARTUP_ENV, ""))
    except ValueError:
        return STARTUP_SECS
    return secs if 0 < secs < float("inf") else STARTUP_SECS


@dataclass
class Deadline:
    ends: float
    clock: Callable[[], float] = time.monotonic
    missed: list[str] = field(default_factory=list)  # what was given up on, to report
    secs: float = 0.0  # how long it was set for

    @classmethod
    def after(cls, secs: float, clock: Callable[[], float] = time.monotonic) -> Deadline:
        return cls(clock() + secs, clock, secs=secs)

    def remaining(self) -> float:
        return max(0.0, self.ends - self.clock())

    async def within(self, work: Awaitable[T], fallback: Callable[[], T], what: str) -> T:
        """`work`'s result, or `fallback()` when the deadline passes first (noted in
        `missed` as `what`)."""
        try:
            return await asyncio.wait_for(work, self.remaining())
        except TimeoutError:
            self.missed.append(what)
            return fallback()
