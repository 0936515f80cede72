"""Waiting for the model server at start: after a reboot the harness may come up before a
slow Ollama does. Nothing listening is tried again with backoff for `model.wait_for_server_secs`
(0: not at all), then the run exits 1 as before. Anything else the server answers (a model it
lacks, a web page) is not waited out: it fails at once.

    await stop.cancellable(wait_for_server(probe, 300, notices))   # a stop signal ends it

Only connection failures (ServerUnreachableError) are waited out; the wait itself is a sleep
a stop signal cancels at once (the caller runs it under the StopFlag).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime

from ouroboros.errors import ServerUnreachableError
from ouroboros.protocols import Clock, Sleep
from ouroboros.server.retry import RetryPolicy, backoff_delay

WAITING = "waiting for the model server"
"""How the heartbeat's `doing`, the warning and `status --json` begin while the run waits."""
WAIT_BACKOFF = RetryPolicy(base_delay=0.5, max_delay=10.0, jitter=0.0)
WAIT_CONDITION = "server_wait"  # the warning's condition, cleared when the server answers


def waiting_words(url: str, since: datetime) -> str:
    """ "waiting for the model server at URL since HH:MM:SS"."""
    return f"{WAITING} at {url} since {since.strftime('%H:%M:%S')}"


def next_wait(attempt: int, remaining: float) -> float:
    """Seconds to wait before probe number `attempt + 1` (attempt 1: after the first failure),
    never past the time that remains."""
    return max(0.0, min(backoff_delay(attempt, WAIT_BACKOFF, 0.5), remaining))


def gave_up(error: ServerUnreachableError, secs: float) -> ServerUnreachableError:
    """The error after a wait that ran out: the server's words, and how long was waited."""
    if secs <= 0:
        return error
    return ServerUnreachableError(
        f"{error.message} (waited {secs:g} s for it: model.wait_for_server_secs)"
    )


@dataclass
class WaitNotices:
    """Who hears about the wait: `began(words)` once when the first probe fails, `ended()` once
    when a later one succeeds. Both default to nothing."""

    began: Callable[[str], None] = lambda words: None
    ended: Callable[[], None] = lambda: None


async def wait_for_server(
    probe: Callable[[], Awaitable[None]],
    secs: float,
    url: str,
    notices: WaitNotices | None = None,
    *,
    clock: Clock = time.monotonic,
    sleep: Sleep = asyncio.sleep,
    now: Callable[[], datetime] = datetime.now,
) -> bool:
    """Await `probe()` until it returns, trying again while it raises ServerUnreachableError
    for up to `secs` seconds; True when it had to wait. Past `secs`, the last error is raised
    (its message saying how long was waited); any other error at once."""
    notices = notices or WaitNotices()
    ends = clock() + secs
    attempt = 0
    while True:
        try:
            await probe()
        except ServerUnreachableError as error:
            remaining = ends - clock()
            if remaining <= 0:
                if attempt:
                    raise gave_up(error, secs) from None
                raise
            attempt += 1
            if attempt == 1:
                notices.began(waiting_words(url, now()))
            await sleep(next_wait(attempt, remaining))
            continue
        if attempt:
            notices.ended()
        return attempt > 0
