"""The agent's tool calls: each run in turn and its result recorded, as one step.

A result is recorded three ways: the message the model reads (the window registers it as an
observation, caps it and adds it: context.add_result), its full text in the session's pack
in `observations/` (for `recall`, and for a resume that replays the turn, see
store/observations.py), and a `tool_result` event; the state is written at the turn's end.
A call cut short by a stop signal gets a result that says so, and the state is written at
once (`save`), so no call is ever left unanswered.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Callable

from ouroboros.loop.state import RunState
from ouroboros.protocols import RunLog, ToolCall, ToolResult
from ouroboros.store import events as ev
from ouroboros.store.observations import OBSERVATIONS_DIR, ObservationStore
from ouroboros.tools import Toolbox
from ouroboros.window.conversation import interrupted_text


class ToolCalls:
    """Runs tool calls with `toolbox` and records their results in `state`."""

    def __init__(
        self,
        state: RunState,
        toolbox: Toolbox,
        log: RunLog,
        save: Callable[[], None],
        run_dir: Path,
    ) -> None:
        self.state = state
        self.context = state.context
        self.toolbox = toolbox
        self.log = log
        self.save = save  # writes the state after a call a stop cut short
        self.observations = ObservationStore(run_dir / OBSERVATIONS_DIR)

    async def execute(self, calls: list[ToolCall]) -> list[tuple[ToolCall, ToolResult]]:
        """Run the calls in order, a step each; each call with its result."""
        return [(call, await self.run(call)) for call in calls]

    async def run(self, call: ToolCall) -> ToolResult:
        """Run one call and record its result."""
        subject = self.toolbox.subject(call)
        self.log.emit(
            ev.ToolCallEvent(id=call.id, name=call.name, arguments=call.arguments, subject=subject)
        )
        started = time.monotonic()
        try:
            result = await self.toolbox.run(call)
        except asyncio.CancelledError:  # a stop signal: the tool was killed
            self.answer_interrupted(call, round(1000 * (time.monotonic() - started)))
            self.save()
            raise
        self.state.session_successes += int(result.ok)
        obs = self.context.add_result(self.state.messages, call, subject, result)
        self.save_observation(obs.id, result.content)
        self.log.emit(
            ev.ToolResultEvent(
                id=call.id,
                name=call.name,
                ok=result.ok,
                bytes=len(result.content.encode()),
                observation=obs.id,
                truncated=obs.truncated,
                summary=obs.first_line[:120],
                duration_ms=round(1000 * (time.monotonic() - started)),
                exit_code=result.meta.get("exit_code"),
            )
        )
        return result

    def answer_interrupted(self, call: ToolCall, duration_ms: int = 0) -> None:
        """Give a tool call cut short (by a stop signal, or a crash) a result that says so."""
        result = ToolResult(interrupted_text(call.name), ok=False)
        obs = self.context.add_result(self.state.messages, call, "", result)
        self.log.emit(
            ev.ToolResultEvent(
                id=call.id,
                name=call.name,
                ok=False,
                bytes=len(result.content),
                observation=obs.id,
                truncated=False,
                summary="interrupted",
                duration_ms=duration_ms,
                interrupted=True,
            )
        )

    def save_observation(self, obs_id: str, text: str) -> None:
        """The full text of a result, for `recall` and for a resume or a rebuild."""
        self.observations.save(
            obs_id, text, self.state.session, durable=self.log.durability == "event"
        )
