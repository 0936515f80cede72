"""The window's upkeep during a session: what the context manager did to the conversation,
logged.

Before each request the conversation is fitted to the budget (masking, then dropping the
oldest turns). After each turn the context manager decides and carries it out
(ContextManager.after_turn): mask the oldest observations (and tell the agent), tell the
agent to wind down; a restart it decides is raised here (RestartSession).
A reload (SIGHUP, `ouroboros reload`) winds the session down too, and restarts it a turn
later.
"""

from __future__ import annotations

from typing import Any

from ouroboros.loop.endings import RestartSession
from ouroboros.loop.reload import RELOAD_REASON, RELOAD_WIND_DOWN_TEXT
from ouroboros.loop.state import RunState
from ouroboros.protocols import EventSink, Warn
from ouroboros.store import events as ev
from ouroboros.window.manager import Prompt
from ouroboros.window.policy import Mask, Restart, WindDown, reclaimed_pct


class Upkeep:
    """Keeps `state`'s conversation within its window."""

    def __init__(
        self, state: RunState, tools: list[dict[str, Any]], log: EventSink, warn_once: Warn
    ) -> None:
        self.state = state
        self.context = state.context
        self.tools = tools
        self.log = log
        self.warn_once = warn_once

    def request(self) -> Prompt:
        """The next request, fitted to the budget (ContextManager.request), and what fitting
        it did logged."""
        context = self.context
        prompt = context.request(self.state.messages, self.tools)
        fitted = prompt.fitted
        if fitted.masked:
            self.log_mask(len(fitted.masked), fitted.before, fitted.tokens, preflight=True)
        if fitted.dropped_turns:
            self.log.emit(
                ev.ContextDrop(turns_dropped=fitted.dropped_turns, tokens_after=fitted.tokens)
            )
        if fitted.tokens > context.budget:
            self.warn_once(
                "oversize",
                f"the newest turn alone (~{fitted.tokens} tokens) does "
                f"not fit the {context.budget}-token budget; sending it anyway",
            )
        return prompt

    def after_turn(self) -> None:
        """Log what the window did after the turn; raise RestartSession when it says so."""
        state, context = self.state, self.context
        if self.reloading(context.current_tokens(state.messages, self.tools)):
            return
        end = context.after_turn(state.messages, self.tools)
        match end.decision:
            case Mask(tool_call_ids=ids):
                self.log_mask(len(ids), end.before, end.after, preflight=False)
            case WindDown():
                self.log.emit(
                    ev.WindDown(context_used_pct=round(100 * context.used_pct(end.before), 1))
                )
            case Restart(reason=reason):
                raise RestartSession(reason, round(100 * context.used_pct(end.before), 1))

    def reloading(self, tokens: int) -> bool:
        """A reload ends the session early: the agent is told to save its state, and a turn
        later the session restarts."""
        if self.state.reload == "wound_down":
            raise RestartSession(RELOAD_REASON, round(100 * self.context.used_pct(tokens), 1))
        if self.state.reload != "requested":
            return False
        self.state.reload = "wound_down"
        self.state.messages.add_note("wind_down", RELOAD_WIND_DOWN_TEXT)
        self.log.emit(
            ev.WindDown(
                context_used_pct=round(100 * self.context.used_pct(tokens), 1), reason="reload"
            )
        )
        return True

    def log_mask(self, count: int, before: int, after: int, *, preflight: bool) -> None:
        """Log a masking round."""
        self.log.emit(
            ev.ContextMask(
                observations_masked=count,
                total_masked=self.context.total_masked,
                tokens_before=before,
                tokens_after=after,
                reclaimed_pct=round(reclaimed_pct(before, after), 1),
                preflight=preflight,
            )
        )
