"""Stopping a run at once on SIGINT (Ctrl+C) or SIGTERM.

The first signal sets the stop flag and cancels the work the run is waiting on, whatever it
is: a model reply and its retries (backoff, connect, stream), a tool call (its process group
is killed and its result recorded as interrupted), an idle pause, a restart. The runner then
records the stop and exits 128 + the signal's number (130 for SIGINT, 143 for SIGTERM), as a
shell reports a process the signal ended, so a supervisor restarts it; the run is resumable. A
second signal cancels the clean-up the first one started. Work is cancelled only where it
awaits, and every step that records something does so without awaiting in between, so a stop
never leaves half a turn behind: an unanswered model request is asked again on resume, a
started tool call has its result.

    flag = StopFlag()
    with stop_signals(flag):                    # SIGINT and SIGTERM now go to the flag
        result = await flag.cancellable(work())  # raises Interrupted if a signal ended it
"""

from __future__ import annotations

import asyncio
import signal
from contextlib import contextmanager
from typing import Iterator

from ouroboros.protocols import StopFlag

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def stop_signals(flag: StopFlag) -> Iterator[None]:
    """While the block runs (in the running event loop), SIGINT and SIGTERM go to `flag`;
    then the handlers that were there before are put back."""
    loop = asyncio.get_running_loop()
    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, flag.signal, sig.name)
    try:
        yield
    finally:
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)
            handler = previous[sig]
            if handler is not None:
                signal.signal(sig, handler)


def ignore_late_signals() -> None:
    """For the `ouroboros` process: a stop signal outside a run (after its end was recorded,
    while the process exits) is ignored, so the exit code is always the one logged. A run
    takes the signals over while it runs (`stop_signals`) and gives them back after."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
