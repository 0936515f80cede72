"""The agent's tool calls: each run in turn and its result recorded, as one step.

A result is recorded three ways: its full text in the session's pack in `observations/` (for
`recall` and for resume, see store/observations.py), the message the model reads (capped, see
context.admit), and a `tool_result` event that carries the step's checkpoint. A call cut short
by a stop signal gets a result that says so, so no call is ever left unanswered.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from ouroboros.loop.checkpoints import Checkpoints
from ouroboros.loop.journal import tool_result_ref
from ouroboros.loop.state import RunState
from ouroboros.protocols import RunLog, ToolCall, ToolResult
from ouroboros.store import events as ev
from ouroboros.store.observations import ObservationStore
from ouroboros.tools import Toolbox
from ouroboros.window.conversation import describe, interrupted_text


class ToolCalls:
    """Runs tool calls with `toolbox` and records their results in `state`."""

    def __init__(
        self,
        state: RunState,
        toolbox: Toolbox,
        log: RunLog,
        checkpoints: Checkpoints,
        run_dir: Path,
    ) -> None:
        self.state = state
        self.context = state.context
        self.toolbox = toolbox
        self.log = log
        self.checkpoints = checkpoints
        self.observations = ObservationStore(run_dir / "observations")

    async def execute(self, calls: list[ToolCall]) -> list[tuple[ToolCall, ToolResult]]:
        """Run the calls in order, a step each (its `tool_result` carries its checkpoint);
        each call with its result."""
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
            self.checkpoints.step()
            raise
        self.state.session_successes += int(result.ok)
        obs_id = self.context.new_observation_id()
        self.save_observation(obs_id, result.content)
        obs = describe(call.name, subject, result, obs_id, call.id)
        content = self.context.admit(obs, result.content)
        self.append_result(call.id, obs_id, content, self.context.max_result_chars(result.content))
        self.log.emit(
            ev.ToolResultEvent(
                id=call.id,
                name=call.name,
                ok=result.ok,
                bytes=len(result.content.encode()),
                observation=obs_id,
                truncated=obs.truncated,
                summary=obs.first_line[:120],
                duration_ms=round(1000 * (time.monotonic() - started)),
                exit_code=result.meta.get("exit_code"),
                **self.checkpoints.changes(),
            )
        )
        return result

    def append_result(self, call_id: str, obs_id: str, content: str, limit: int) -> None:
        """Add a tool result (`content` as context.admit just cut it, to `limit` characters);
        its checkpoint names the observation holding its text, and the cut that gives
        `content` back."""
        keep = self.context.policy.tool_result_truncation
        self.state.messages.add_result(
            call_id, content, tool_result_ref(obs_id, call_id, limit, keep)
        )

    def answer_interrupted(self, call: ToolCall, duration_ms: int = 0) -> None:
        """Give a tool call cut short (by a stop signal, or a crash) a result that says so."""
        result = ToolResult(interrupted_text(call.name), ok=False)
        obs = describe(call.name, "", result, self.context.new_observation_id(), call.id)
        content = self.context.admit(obs, result.content)
        self.state.messages.add_result(call.id, content)
        self.log.emit(
            ev.ToolResultEvent(
                id=call.id,
                name=call.name,
                ok=False,
                bytes=len(content),
                observation=obs.id,
                truncated=False,
                summary="interrupted",
                duration_ms=duration_ms,
                interrupted=True,
            )
        )

    def save_observation(self, obs_id: str, text: str) -> None:
        """The full text of a result, for `recall` and for resume."""
        self.observations.save(
            obs_id, text, self.state.session, durable=self.log.durability == "event"
        )
