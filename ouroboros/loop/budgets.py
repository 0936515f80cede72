"""The run's budgets: `agent.max_tokens` (prompt plus completion tokens as the server counts
them, summed over the run) and `agent.max_wall_secs` (seconds a harness has run it, across
resumes). What was used is kept in the run's state (`tokens_used`, `wall_secs`), so a resume
goes on counting; reaching either pauses the run before its next turn (run_end reason
`budget`, exit 3), and raising the key, then `ouroboros resume`, continues it.

    meter = BudgetMeter(state, lambda: config.agent, stop)
    log.subscribe(meter.on_event)   # counts tokens, keeps the clock, asks the stop
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from ouroboros.config import AgentConfig
from ouroboros.protocols import Clock, StopFlag
from ouroboros.store import events as ev
from ouroboros.store.events import EventBase

if TYPE_CHECKING:  # the read-only commands ask budget_reached without the run's machinery
    from ouroboros.loop.state import RunState

BUDGET = "budget"  # the run_end reason
TOKENS_KEY, WALL_KEY = "agent.max_tokens", "agent.max_wall_secs"


def tokens_counted(usage: ev.TokenUsage) -> int:
    """A reply's tokens as the server counted them: the prompt it reported (else the count
    the run used) and the completion."""
    prompt = usage.reported if usage.reported is not None else usage.prompt_tokens
    return prompt + usage.completion_tokens


def budget_reached(
    tokens_used: int, wall_secs: float, max_tokens: int, max_wall_secs: float
) -> str | None:
    """The budget key reached, or None: tokens first (what costs money), then time."""
    if max_tokens and tokens_used >= max_tokens:
        return TOKENS_KEY
    if max_wall_secs and wall_secs >= max_wall_secs:
        return WALL_KEY
    return None


def budget_words(
    key: str, tokens_used: int, wall_secs: float, max_tokens: int, max_wall_secs: float
) -> str:
    """ "agent.max_tokens = 100000 (used 100,412 tokens)"."""
    if key == TOKENS_KEY:
        return f"{key} = {max_tokens} (used {tokens_used:,} tokens)"
    return f"{key} = {max_wall_secs:g} (ran {wall_secs:,.0f} s)"


class BudgetMeter:
    """Counts the run's tokens and time into its state at each event, and asks the stop flag
    for a `budget` end once one is reached (the session stops before its next turn)."""

    def __init__(
        self,
        state: RunState,
        limits: Callable[[], AgentConfig],
        stop: StopFlag,
        clock: Clock = time.monotonic,
    ) -> None:
        self.state = state
        self.limits = limits
        self.stop = stop
        self.clock = clock
        self.started = clock()
        self.base = state.wall_secs
        self.reached: str | None = None

    def on_event(self, event: EventBase) -> None:
        if isinstance(event, ev.TokenUsage):
            self.state.tokens_used += tokens_counted(event)
        self.check()

    def check(self) -> str | None:
        """Bring the run's time up to now; the budget reached, if any (and ask the stop)."""
        self.state.wall_secs = round(self.base + self.clock() - self.started, 3)
        agent = self.limits()
        reached = budget_reached(
            self.state.tokens_used, self.state.wall_secs, agent.max_tokens, agent.max_wall_secs
        )
        if reached is not None and self.stop.reason is None:
            self.reached = reached
            self.stop.request(BUDGET)
        return reached

    def words(self) -> str:
        """What was reached, for the end's line ("" when nothing was)."""
        if self.reached is None:
            return ""
        agent = self.limits()
        return budget_words(
            self.reached,
            self.state.tokens_used,
            self.state.wall_secs,
            agent.max_tokens,
            agent.max_wall_secs,
        )


def spent_in(events: list[EventBase]) -> tuple[int, float]:
    """What a run's whole log says it spent, for a state rebuilt from it: the tokens of its
    `token_usage` records, and the seconds from each start or resume to the last record
    before the next one (the time it was stopped does not count)."""
    tokens, wall = 0, 0.0
    began: datetime | None = None
    last: datetime | None = None
    for event in events:
        if isinstance(event, ev.TokenUsage):
            tokens += tokens_counted(event)
        at = parsed_ts(event.ts)
        if at is None:
            continue
        if isinstance(event, (ev.RunStart, ev.RunResumed)):
            if began is not None and last is not None:
                wall += max(0.0, (last - began).total_seconds())
            began = at
        last = at
    if began is not None and last is not None:
        wall += max(0.0, (last - began).total_seconds())
    return tokens, round(wall, 3)


def parsed_ts(ts: str) -> datetime | None:
    """A record's `ts` (ISO 8601 UTC, "2026-01-01T00:00:00.000Z"), or None."""
    try:
        return datetime.fromisoformat(ts.replace("Z", "+00:00"))
    except ValueError:
        return None
