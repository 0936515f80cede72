import asyncio

import pytest

from ouroboros.errors import (
    ContextOverflowError,
    EmptyStreamError,
    PermanentModelError,
    ServerUnreachableError,
    TransientModelError,
)
from ouroboros.server.retry import RetryPolicy, backoff_delay, with_retries

POLICY = RetryPolicy(max_retry_secs=100, base_delay=1.0, max_delay=30.0, jitter=0.25)


# ---- backoff_delay --------------------------------------------------------------------------


def test_backoff_doubles_from_the_base_delay():
    no_jitter = RetryPolicy(base_delay=1.0, max_delay=1000, jitter=0.0)
    assert [backoff_delay(n, no_jitter, 0.9) for n in range(1, 6)] == [1, 2, 4, 8, 16]


def test_backoff_is_capped_at_max_delay():
    assert backoff_delay(6, POLICY, 0.5) == 30.0
    assert backoff_delay(1000, POLICY, 0.5) == 30.0  # no overflow for absurd attempt numbers


def test_jitter_spreads_the_delay_both_ways_but_never_past_the_cap():
    assert backoff_delay(3, POLICY, 0.0) == pytest.approx(3.0)  # 4 * 0.75
    assert backoff_delay(3, POLICY, 0.5) == pytest.approx(4.0)
    assert backoff_delay(3, POLICY, 1.0) == pytest.approx(5.0)  # 4 * 1.25
    assert backoff_delay(5, POLICY, 1.0) == pytest.approx(20.0)
    assert backoff_delay(6, POLICY, 0.99) == 30.0  # 30 * 1.2475 capped


# ---- with_retries -------------------------------------------------------------------------


class FakeTime:
    """A clock that only moves when the code under test sleeps."""

    def __init__(self):
        self.now = 1000.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def failing(*outcomes):
    """An attempt that raises or returns each outcome in turn."""
    calls = []

    async def attempt():
        outcome = outcomes[len(calls)]
        calls.append(outcome)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    attempt.calls = calls
    return attempt


def retry(attempt, policy=POLICY, time=None):
    time = time or FakeTime()
    retries = []
    result = asyncio.run(
        with_retries(
            attempt,
            policy,
            on_retry=lambda n, delay, error: retries.append((n, delay, error)),
            sleep=time.sleep,
            clock=time.clock,
            rand=lambda: 0.5,
        )
    )
    return result, retries, time


def test_transient_failures_are_retried_with_growing_delays():
    first, second = TransientModelError("503"), ServerUnreachableError("refused")
    result, retries, time = retry(failing(first, second, "ok"))
    assert result == "ok"
    assert retries == [(1, 1.0, first), (2, 2.0, second)]
    assert time.sleeps == [1.0, 2.0]


def test_retries_until_the_budget_is_spent_then_raises_the_last_error():
    errors = [TransientModelError(f"fail {n}") for n in range(20)]
    attempt = failing(*errors)
    time = FakeTime()
    with pytest.raises(TransientModelError, match="^fail 6$"):
        retry(attempt, RetryPolicy(max_retry_secs=60, base_delay=1, max_delay=30, jitter=0), time)
    # waits of 1, 2, 4, 8 and 16 (31 s); the next (30 s) is cut to the 29 s left; then it gives up
    assert time.sleeps == [1, 2, 4, 8, 16, 29]
    assert len(attempt.calls) == 7


def test_a_budget_shorter_than_the_first_delay_still_retries_once():
    attempt = failing(TransientModelError("a"), TransientModelError("b"), "never")
    time = FakeTime()
    with pytest.raises(TransientModelError, match="^b$"):
        retry(attempt, RetryPolicy(max_retry_secs=0.5, base_delay=1), time)
    assert time.sleeps == [0.5]


def test_the_budget_counts_from_the_first_failure_not_the_first_attempt():
    time = FakeTime()

    async def slow_then_failing():
        time.now += 500  # a long successful-looking wait before the failure
        raise TransientModelError("late failure")

    calls = []

    async def attempt():
        calls.append(1)
        if len(calls) == 1:
            return await slow_then_failing()
        return "ok"

    policy = RetryPolicy(max_retry_secs=10, base_delay=1, jitter=0)
    result, retries, _ = retry(attempt, policy, time)
    assert result == "ok"
    assert len(retries) == 1


def test_zero_budget_means_no_retries():
    with pytest.raises(TransientModelError):
        retry(failing(TransientModelError("once"), "never"), RetryPolicy(max_retry_secs=0))


@pytest.mark.parametrize(
    "error",
    [
        EmptyStreamError("empty 200"),
        ContextOverflowError("too long"),
        PermanentModelError("bad request"),
        ValueError("a bug"),
    ],
)
def test_other_errors_and_empty_streams_propagate_at_once(error):
    attempt = failing(error, "never")
    with pytest.raises(type(error)):
        retry(attempt)
    assert len(attempt.calls) == 1


# ---- Retry-After ----------------------------------------------------------------------------


def test_a_servers_retry_after_longer_than_the_backoff_is_waited_out():
    rate_limited = TransientModelError("429", retry_after=7.0)
    result, retries, time = retry(failing(rate_limited, "ok"))
    assert result == "ok"
    assert time.sleeps == [7.0]  # not the 1 s backoff
    assert retries == [(1, 7.0, rate_limited)]


def test_a_retry_after_shorter_than_the_backoff_does_not_hurry_it():
    errors = [
        TransientModelError("503"),
        TransientModelError("503"),
        TransientModelError("503", retry_after=0.5),
    ]
    _, _, time = retry(failing(*errors, "ok"))
    assert time.sleeps == [1.0, 2.0, 4.0]


def test_a_retry_after_past_the_budget_waits_only_to_the_end_of_it():
    attempt = failing(TransientModelError("429", retry_after=3600), "ok")
    _, _, time = retry(attempt, RetryPolicy(max_retry_secs=20))
    assert time.sleeps == [20]
