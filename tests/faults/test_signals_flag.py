"""The stop flag: a signal cancels the work being waited on, and says so."""

from __future__ import annotations

import asyncio

import pytest

from ouroboros.protocols import Interrupted, StopFlag


def test_a_signal_cancels_the_wait_and_a_second_marks_it_now():
    flag, heard = StopFlag(), []
    flag.listeners.append(heard.append)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.call_later(0.01, flag.signal, "SIGINT")
        with pytest.raises(Interrupted) as stopped:
            await flag.cancellable(asyncio.sleep(30))
        assert stopped.value.reason == "interrupted"
        flag.signal("SIGTERM")
        with pytest.raises(Interrupted) as again:  # a signal before the work starts
            await flag.cancellable(asyncio.sleep(30))
        assert again.value.reason == "interrupted_now"

    asyncio.run(asyncio.wait_for(main(), 5))
    assert heard == ["SIGINT"] and flag.signals == 2


def test_work_that_ends_passes_its_result_and_errors_on():
    flag = StopFlag()

    async def fails() -> None:
        raise ValueError("boom")

    async def main() -> int:
        with pytest.raises(ValueError):
            await flag.cancellable(fails())
        return await flag.cancellable(asyncio.sleep(0, 7))

    assert asyncio.run(main()) == 7
    flag.request("max_turns")  # asked for between turns: nothing to cancel
    assert flag.reason == "max_turns" and flag.signals == 0
