"""One session: ask the model, run its tools, keep the window in budget, repeat.

The loop never ends by itself: it raises `RestartSession` when the context manager says so and
`StopRun` when the run should end (max turns, task_complete, an idle agent, a stop asked for
between turns). A stop signal cancels it wherever it waits (see stopping.py). The runner
catches all three.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ouroboros import context as ctx
from ouroboros.accounting import Accounting
from ouroboros.context import Mask, Restart, WindDown
from ouroboros.errors import ContextOverflowError, EmptyStreamError, ModelError
from ouroboros.events import EventLog, write_snapshot
from ouroboros.journal import CHECKPOINT, Journal, tool_result_ref
from ouroboros.reload import RELOAD_REASON, RELOAD_WIND_DOWN_TEXT
from ouroboros.protocols import (
    Message,
    ModelClient,
    StreamResult,
    TextSink,
    TokenCounter,
    ToolCall,
    ToolResult,
)
from ouroboros.resume import interrupted_text
from ouroboros.retry import RetryPolicy, with_retries
from ouroboros.state import RunState, StopFlag
from ouroboros.tools import COMPLETE_KEY, Toolbox

MAX_OVERFLOW_RECOVERIES = 3
# The pause before the continue message, after the 2nd turn in a row without a tool call
# (the 1st gets none); it doubles with each more, up to the cap.
IDLE_FIRST_PAUSE_SECS = 2.0
IDLE_MAX_PAUSE_SECS = 60.0


class RestartSession(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class StopRun(Exception):
    """The run ends, resumable; `summary` is the agent's own, for task_complete."""

    def __init__(self, reason: str, summary: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.summary = summary


def idle_pause(idle_turns: int) -> float:
    """Seconds to wait before the continue message after the `idle_turns`-th turn in a row
    without a tool call: 0, 2, 4, 8, ... at most IDLE_MAX_PAUSE_SECS."""
    if idle_turns <= 1:
        return 0.0
    return min(IDLE_FIRST_PAUSE_SECS * 2.0 ** min(idle_turns - 2, 30), IDLE_MAX_PAUSE_SECS)


@dataclass
class Services:
    client: ModelClient
    toolbox: Toolbox
    log: EventLog
    run_dir: Path
    retry: RetryPolicy
    stop: StopFlag
    max_turns: int = 0
    continue_message: str = "Continue working towards your goals. Use your tools."
    max_idle_turns: int = 3
    on_text: TextSink | None = None
    counter: TokenCounter | None = None
    journal: Journal = field(default_factory=Journal)  # what the last snapshot holds


class Session:
    def __init__(self, state: RunState, services: Services) -> None:
        self.state = state
        self.s = services
        self.context = state.context
        self.log = services.log
        self.tools = services.toolbox.schemas()
        self.accounting = Accounting(self.context, services.client, services.counter,
                                     self.tools, self.log, self.warn_once)

    @property
    def messages(self) -> list[Message]:
        return self.state.messages

    @messages.setter
    def messages(self, value: list[Message]) -> None:
        self.state.messages = value

    async def run(self) -> None:
        await self.pick_up()
        while True:
            self.check_limits()
            self.log.turn = self.state.session_turns + 1
            reply = await self.query()
            await self.act(reply.tool_calls)
            self.manage_context()
            self.checkpoint(turn_end=True)

    async def pick_up(self) -> None:
        """At a session start: run the calls of the last reply that never started (a stop or
        a crash came first), then give the agent the instruction a resume brought
        (`--message`), or the continue message a reply without tool calls was due."""
        pending = ctx.pending_calls(self.messages)
        due = not pending and self.messages[-1]["role"] == "assistant"
        instruction = self.state.instruction
        if pending:
            await self.execute(pending)
        if instruction:
            self.messages.append({"role": "user", "content": instruction})
            self.state.instruction = ""
        elif due:
            self.messages.append(ctx.note("continue", self.s.continue_message))
        if pending or due or instruction:
            self.manage_context()
            self.checkpoint(turn_end=True)

    def check_limits(self) -> None:
        if self.s.stop.reason is not None:
            raise StopRun(self.s.stop.reason)
        if self.s.max_turns and self.state.total_turns >= self.s.max_turns:
            raise StopRun("max_turns")

    # -- one turn --

    async def query(self) -> StreamResult:
        for _ in range(MAX_OVERFLOW_RECOVERIES + 1):
            await self.accounting.measure(self.messages)
            sent_tokens = self.fit()
            sent = list(self.messages)
            wire = self.context.wire(sent)
            try:
                reply = await with_retries(
                    lambda: self.s.client.complete(wire, self.tools, self.s.on_text),
                    self.s.retry, on_retry=self.on_retry)
            except (ContextOverflowError, EmptyStreamError) as error:
                await self.accounting.refused(error, sent, sent_tokens)
                continue
            await self.record(sent, reply)
            self.checkpoint()
            return reply
        raise ModelError(f"the server kept refusing the prompt as too long after "
                         f"{MAX_OVERFLOW_RECOVERIES} attempts to shrink it to fit a "
                         f"{self.context.limit}-token window ({self.context.limit_source}); "
                         "set model.context_limit to the window the server really has")

    def fit(self) -> int:
        """Shrink the conversation before sending if it would not fit; return its size."""
        before = self.context.current_tokens(self.messages, self.tools)
        fitted = self.context.fit(self.messages, self.tools)
        self.messages = fitted.messages
        if fitted.masked:
            self.log_mask(len(fitted.masked), before, fitted.tokens, preflight=True)
        if fitted.dropped_turns:
            self.log.emit("context_drop", turns_dropped=fitted.dropped_turns,
                          tokens_after=fitted.tokens)
        if fitted.tokens > self.context.budget:
            self.warn_once("oversize", f"the newest turn alone (~{fitted.tokens} tokens) does "
                           f"not fit the {self.context.budget}-token budget; sending it anyway")
        return fitted.tokens

    async def record(self, sent: list[Message], reply: StreamResult) -> None:
        """Add the reply to the conversation: only now does the turn count (a request that
        failed for good, or was cut short by a crash, is asked again on resume)."""
        self.state.session_turns += 1
        self.state.total_turns += 1
        message = reply.to_message()
        message["content"] = ctx.without_reasoning(reply.text)
        self.messages.append(message)
        self.log.emit("assistant", text=reply.text, finish_reason=reply.finish_reason,
                      tool_calls=[asdict(call) for call in reply.tool_calls])
        await self.accounting.take_in(sent, reply)

    async def act(self, calls: list[ToolCall]) -> None:
        if calls:
            self.state.idle_turns = 0
            await self.execute(calls)
        else:
            await self.idle()

    async def execute(self, calls: list[ToolCall]) -> None:
        """Run the calls in order; a task_complete among them ends the run once all ran."""
        summary = None
        for call in calls:
            result = await self.run_tool(call)
            self.checkpoint()
            summary = result.meta.get(COMPLETE_KEY, summary)
        if summary is not None:
            raise StopRun("task_complete", summary)

    async def idle(self) -> None:
        """A reply without a tool call: the continue message, after a pause that grows with
        each such turn in a row; after `max_idle_turns` of them the run pauses instead."""
        self.state.idle_turns += 1
        turns, limit = self.state.idle_turns, self.s.max_idle_turns
        if limit and turns >= limit:
            raise StopRun("idle")
        pause = idle_pause(turns)
        if pause:
            self.log.emit("idle", idle_turns=turns, pause_secs=pause, max_idle_turns=limit)
            await asyncio.sleep(pause)
        self.messages.append(ctx.note("continue", self.s.continue_message))

    async def run_tool(self, call: ToolCall) -> ToolResult:
        self.log.emit("tool_call", id=call.id, name=call.name, arguments=call.arguments)
        started = time.monotonic()
        try:
            result = await self.s.toolbox.run(call)
        except asyncio.CancelledError:  # a stop signal: the tool was killed
            self.answer_interrupted(call, round(1000 * (time.monotonic() - started)))
            self.checkpoint()
            raise
        self.state.session_successes += int(result.ok)
        obs_id = self.context.new_observation_id()
        self.save_observation(obs_id, result.content)
        obs = ctx.describe(call.name, ctx.call_arguments(call.arguments), result, obs_id, call.id)
        content = self.context.admit(obs, result.content)
        self.append_result(call.id, obs_id, result.content, content)
        self.log.emit("tool_result", id=call.id, name=call.name, ok=result.ok,
                      bytes=len(result.content.encode()), observation=obs_id,
                      truncated=obs.truncated, summary=obs.first_line[:120],
                      duration_ms=round(1000 * (time.monotonic() - started)),
                      **self.changes())
        return result

    def append_result(self, call_id: str, obs_id: str, text: str, content: str) -> None:
        """Add a tool result; its checkpoint names the observation holding its text."""
        message = {"role": "tool", "tool_call_id": call_id, "content": content}
        self.messages.append(message)
        limit, keep = self.context.max_result_chars(), self.context.policy.tool_result_truncation
        if ctx.cap_text(text, limit, keep, obs_id)[0] == content:
            self.s.journal.refer(message, tool_result_ref(obs_id, call_id, limit, keep))

    def answer_interrupted(self, call: ToolCall, duration_ms: int = 0) -> None:
        """Give a tool call cut short (by a stop signal, or a crash) a result that says so."""
        result = ToolResult(interrupted_text(call.name), ok=False)
        obs = ctx.describe(call.name, {}, result, self.context.new_observation_id(), call.id)
        content = self.context.admit(obs, result.content)
        self.messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
        self.log.emit("tool_result", id=call.id, name=call.name, ok=False, bytes=len(content),
                      observation=obs.id, truncated=False, summary="interrupted",
                      duration_ms=duration_ms, interrupted=True)

    # -- the window --

    def manage_context(self) -> None:
        tokens = self.context.current_tokens(self.messages, self.tools)
        if self.reloading(tokens):
            return
        match self.context.evaluate(tokens, self.messages):
            case Mask(tool_call_ids=ids):
                self.messages = self.context.mask(self.messages, ids)
                after = self.context.current_tokens(self.messages, self.tools)
                reclaimed = self.log_mask(len(ids), tokens, after, preflight=False)
                self.messages.append(ctx.mask_notice(len(ids), reclaimed))
            case WindDown():
                pct = self.context.used_pct(tokens)
                self.messages.append(ctx.note("wind_down", ctx.WIND_DOWN_TEXT.format(pct=pct)))
                self.log.emit("wind_down", context_used_pct=round(100 * pct, 1))
            case Restart(reason=reason):
                raise RestartSession(reason)

    def reloading(self, tokens: int) -> bool:
        """A reload (SIGHUP, `ouroboros reload`) ends the session early: the agent is told to
        save its state, and a turn later the session restarts."""
        if self.state.reload == "wound_down":
            raise RestartSession(RELOAD_REASON)
        if self.state.reload != "requested":
            return False
        self.state.reload = "wound_down"
        self.messages.append(ctx.note("wind_down", RELOAD_WIND_DOWN_TEXT))
        self.log.emit("wind_down", context_used_pct=round(100 * self.context.used_pct(tokens), 1),
                      reason="reload")
        return True

    def log_mask(self, count: int, before: int, after: int, *, preflight: bool) -> float:
        reclaimed = 100 * (before - after) / before if before else 0.0
        self.log.emit("context_mask", observations_masked=count,
                      total_masked=self.context.total_masked, tokens_before=before,
                      tokens_after=after, reclaimed_pct=round(reclaimed, 1), preflight=preflight)
        return reclaimed

    # -- bookkeeping --

    def on_retry(self, attempt: int, delay: float, error: Exception) -> None:
        self.log.emit("retry", attempt=attempt, delay_secs=round(delay, 2), error=str(error))

    def warn_once(self, key: str, message: str) -> None:
        self.state.warn_once(self.log, key, message)

    def save_observation(self, obs_id: str, text: str) -> None:
        directory = self.s.run_dir / "observations"
        directory.mkdir(exist_ok=True)
        with (directory / f"{obs_id}.txt").open("w", encoding="utf-8", newline="") as f:
            f.write(text)
            if self.log.durability == "event":
                f.flush()
                os.fsync(f.fileno())

    def changes(self) -> dict[str, Any]:
        """What the step changed in the state, for the event that ends it to carry (see
        journal.py); nothing if nothing changed."""
        delta = self.s.journal.delta(self.state)
        return {CHECKPOINT: {"base": self.s.journal.base, **delta}} if delta else {}

    def checkpoint(self, *, turn_end: bool = False) -> None:
        """After a step: log what it changed in the state (a `checkpoint` event); at the end
        of a turn, make the log durable, and now and then write a full snapshot instead."""
        journal = self.s.journal
        if turn_end and journal.snapshot_due(self.state):
            self.snapshot()
            return
        if (delta := journal.delta(self.state)) is not None:
            self.log.emit(CHECKPOINT, base=journal.base, **delta)
        if turn_end:
            self.log.commit()

    def snapshot(self) -> None:
        """Write the whole state (at session boundaries, at the end, now and then)."""
        self.log.sync()
        write_snapshot(self.s.run_dir, self.log.seq, self.state.to_dict())
        self.s.journal.reset(self.state, self.log.seq)

