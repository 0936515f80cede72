"""An agent that replies without a tool call is idle: it gets the continue message after a
pause that grows with each such turn in a row, and after `agent.max_idle_turns` of them the
run pauses (stop reason `idle`) until a person resumes it."""

from __future__ import annotations

# The pause before the continue message, after the 2nd turn in a row without a tool call
# (the 1st gets none); it doubles with each more, up to the cap.
IDLE_FIRST_PAUSE_SECS = 2.0
IDLE_MAX_PAUSE_SECS = 60.0


def idle_pause(idle_turns: int) -> float:
    """Seconds to wait before the continue message after the `idle_turns`-th turn in a row
    without a tool call: 0, 2, 4, 8, ... at most IDLE_MAX_PAUSE_SECS."""
    if idle_turns <= 1:
        return 0.0
    return min(IDLE_FIRST_PAUSE_SECS * 2.0 ** min(idle_turns - 2, 30), IDLE_MAX_PAUSE_SECS)
