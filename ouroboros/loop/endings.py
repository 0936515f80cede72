"""How a session ends: never by returning, always by one of these, which the runner catches.

    RestartSession  the window is full, or a reload asked: the next session begins with what
                    carries over (restart.py)
    StopRun         the run ends, resumable: max_turns, task_complete, an idle agent, a stop
                    asked for between turns, max_restarts, a declined restart

A stop signal ends any wait at once instead (protocols.Interrupted); a model that fails for
good raises errors.ModelError.
"""

from __future__ import annotations


class RestartSession(Exception):
    """End this session and begin the next; `reason` is logged with the restart, and the
    share of the budget the conversation took when it was decided (`context_used_pct`)."""

    def __init__(self, reason: str, context_used_pct: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.context_used_pct = context_used_pct


class StopRun(Exception):
    """The run ends, resumable; `summary` is the agent's own, for task_complete."""

    def __init__(self, reason: str, summary: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.summary = summary
