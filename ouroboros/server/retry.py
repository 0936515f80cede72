"""Retrying transient model failures with capped exponential backoff and jitter.

    result = await with_retries(lambda: client.complete(messages, tools), RetryPolicy(),
                                on_retry=lambda n, delay, error: log(n, delay, error))

Only TransientModelError is retried (the client decides what is transient: connection
errors, drops, timeouts, oversized replies, 408, 429 and 5xx but 501 and 505; see the family
tree in `ouroboros.errors`). A server's `Retry-After` is honoured: the wait is at least what it
asked, within the retry budget. Everything else propagates untouched.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass
from typing import Awaitable, Callable, TypeVar

from ouroboros.errors import TransientModelError
from ouroboros.protocols import Clock, Sleep

T = TypeVar("T")


@dataclass
class RetryPolicy:
    max_retry_secs: float = 600
    """Keep retrying for this long after the first failure, then raise the last error."""
    base_delay: float = 1.0
    """The wait before the first retry; it doubles with each retry."""
    max_delay: float = 30.0
    """No single wait is longer than this."""
    jitter: float = 0.25
    """Each wait is scaled by a random factor in [1 - jitter, 1 + jitter]."""


def backoff_delay(attempt: int, policy: RetryPolicy, rand: float) -> float:
    """Seconds to wait before retry number `attempt` (1 for the first retry), `rand` in [0, 1).

    `base_delay * 2 ** (attempt - 1)`, scaled by the jitter factor, never above `max_delay`.
    """
    exponent = min(max(attempt - 1, 0), 62)
    delay = min(policy.max_delay, policy.base_delay * 2.0**exponent)
    delay *= 1 + policy.jitter * (2 * rand - 1)
    return max(0.0, min(policy.max_delay, delay))


def retry_delay(
    attempt: int, policy: RetryPolicy, rand: float, retry_after: float | None = None
) -> float:
    """The backoff for retry number `attempt`, but never less than the server's `Retry-After`."""
    delay = backoff_delay(attempt, policy, rand)
    return delay if retry_after is None else max(delay, retry_after)


async def with_retries(
    attempt: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    *,
    on_retry: Callable[[int, float, Exception], None],
    sleep: Sleep = asyncio.sleep,
    clock: Clock = time.monotonic,
    rand: Callable[[], float] = random.random,
) -> T:
    """Await `attempt()` until it succeeds, retrying transient failures.

    `on_retry(retry_number, delay, error)` is called before each wait. A wait is the backoff,
    or the server's `Retry-After` when that is longer. Waits never reach past
    `policy.max_retry_secs` after the first failure (the last one is shortened to fit); a
    failure at or past that point raises.
    """
    first_failure: float | None = None
    failures = 0
    while True:
        try:
            return await attempt()
        except TransientModelError as error:
            now = clock()
            if first_failure is None:
                first_failure = now
            remaining = policy.max_retry_secs - (now - first_failure)
            if remaining <= 0:
                raise
            failures += 1
            delay = min(retry_delay(failures, policy, rand(), error.retry_after), remaining)
            on_retry(failures, delay, error)
            await sleep(delay)
