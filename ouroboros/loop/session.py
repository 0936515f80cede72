"""One session: ask the model, run its tools, keep the window in budget, repeat.

    await Session(state, services).run()  # never returns

The loop never ends by itself: it raises `RestartSession` when the window says so and
`StopRun` when the run should end (endings.py), an idle or stuck agent included (guards.py);
a stop signal cancels it wherever it waits (stopping.py). A person's messages (`ouroboros
tell`, inbox.py) are taken at each turn boundary. The rest of a turn is in tool_calls.py
(tool calls) and upkeep.py (the window); the state is written whole at every turn's end
(state.py), and a resume replays the turn in progress from the log (rebuild.replay_tail).
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from ouroboros.config import Config
from ouroboros.errors import ContextOverflowError, ModelError
from ouroboros.loop.endings import StopRun
from ouroboros.loop.evidence import Evidence, WindowAsker, choose_tools
from ouroboros.loop.guards import (
    StuckGuard,
    idle_pause,
    loop_note,
    redo_detail,
    redo_note,
    redoing,
    step_of,
)
from ouroboros.loop.inbox import waiting
from ouroboros.loop.live_config import LiveConfig
from ouroboros.loop.state import RunState, save_state
from ouroboros.loop.tool_calls import ToolCalls
from ouroboros.loop.upkeep import Upkeep
from ouroboros.protocols import (
    ModelClient,
    RunLog,
    StopFlag,
    StreamResult,
    TextSink,
    TokenCounter,
    ToolCall,
    ToolResult,
)
from ouroboros.server.retry import RetryPolicy, with_retries
from ouroboros.store import events as ev
from ouroboros.store.state_file import StateWriter
from ouroboros.tools import COMPLETE_KEY, Toolbox
from ouroboros.window.conversation import (
    Conversation,
    cut_short,
    interrupted_note,
    pending_calls,
    without_reasoning,
)

MAX_OVERFLOW_RECOVERIES = 3


@dataclass
class Services:
    """What sessions work with: built by the runner; the config in `live`, replaced whole at
    a restart, is read from there (and the tools rebuilt from it: live_config.py)."""

    client: ModelClient
    toolbox: Toolbox
    log: RunLog
    run_dir: Path
    stop: StopFlag
    live: LiveConfig
    backoff: RetryPolicy = field(default_factory=RetryPolicy)  # the waits between retries
    stuck: StuckGuard = field(init=False)  # its thresholds read from `live`
    state_dir: Path | None = None  # where `ouroboros tell` leaves messages (inbox.py)
    on_text: TextSink | None = None
    counter: TokenCounter | None = None
    asker: WindowAsker | None = None  # the server's own word on its window, where it gives one
    state_file: StateWriter = field(init=False)  # writes the run's state.json

    def __post_init__(self) -> None:
        self.stuck = StuckGuard(lambda: self.config.agent)
        self.state_file = StateWriter(self.run_dir)

    @property
    def config(self) -> Config:
        """The run's config as it is now."""
        return self.live.config

    @property
    def retry(self) -> RetryPolicy:
        """The retries of a model request: the backoff's waits, for `model.max_retry_secs`."""
        return replace(self.backoff, max_retry_secs=self.config.model.max_retry_secs)


class Session:
    """One session of `state`'s run, from its start (or resume) to a restart or a stop."""

    def __init__(self, state: RunState, services: Services) -> None:
        self.state = state
        self.services = services
        self.context = state.context
        self.log = services.log
        self.tools = choose_tools(self.context, self.messages[0], services.toolbox, self.warn_once)
        self.tool_calls = ToolCalls(state, services.toolbox, self.log, self.save, services.run_dir)
        self.upkeep = Upkeep(state, self.tools, self.log, self.warn_once)
        self.evidence = Evidence(
            self.context,
            services.client,
            services.counter,
            self.tools,
            self.log,
            self.warn_once,
            services.asker,
            lambda keys, text: state.clear_warnings(self.log, keys, text),
        )

    @property
    def messages(self) -> Conversation:
        return self.state.messages

    async def run(self) -> None:
        """Turn after turn, until a restart or a stop is raised."""
        await self.pick_up()
        while True:
            self.check_limits()
            self.log.turn = self.state.session_turns + 1
            self.take_messages()
            reply = await self.query()
            outcomes = await self.act(reply)
            self.watch(reply.text, outcomes)
            self.watch_redoing()
            self.upkeep.after_turn()
            self.end_turn()

    async def pick_up(self) -> None:
        """At a session start: run the calls of the last reply that never started (a stop or
        a crash came first), then give the agent the instruction a resume brought
        (`--message`), or the continue message a reply without tool calls was due, and last
        a note naming the calls a stop cut short."""
        await self.evidence.retest(self.messages)
        pending = pending_calls(self.messages)
        due = not pending and self.messages[-1]["role"] == "assistant"
        instruction = self.state.instruction
        if pending:
            await self.execute(pending)
        cut = cut_short(self.messages)
        if instruction:
            self.messages.append({"role": "user", "content": self.screened(instruction)})
            self.state.instruction = ""
        elif due:
            self.messages.add_note("continue", self.services.config.agent.continue_message)
        if cut:  # last: what the agent reads before its next move
            subject = self.services.toolbox.subject
            self.messages.add_note(
                "interrupted", interrupted_note([(c.name, subject(c)) for c in cut])
            )
        if pending or due or instruction or cut:
            self.upkeep.after_turn()
            self.end_turn()

    def save(self) -> None:
        """After a step the log cannot replay (a person's message, a call a stop cut short):
        the state written whole (state.py)."""
        save_state(self.state, self.log, self.services.state_file)

    def end_turn(self) -> None:
        """At a turn's end: the log made durable, then the state written whole and durably."""
        self.log.commit()
        save_state(self.state, self.log, self.services.state_file, durable=True, turn_end=True)

    def check_limits(self) -> None:
        """Between turns: a stop asked for, or the run's last turn taken, ends the run."""
        if self.services.stop.reason is not None:
            raise StopRun(self.services.stop.reason)
        max_turns = self.services.config.agent.max_turns
        if max_turns and self.state.total_turns >= max_turns:
            raise StopRun("max_turns")

    async def query(self) -> StreamResult:
        """The model's reply to the conversation, fitted to the window first. A refusal as too
        long shrinks the window believed and asks again, up to MAX_OVERFLOW_RECOVERIES."""
        for _ in range(MAX_OVERFLOW_RECOVERIES + 1):
            await self.evidence.measure(self.messages)
            prompt = self.upkeep.request()
            try:
                reply = await with_retries(
                    lambda: self.services.client.complete(
                        prompt.wire, self.tools, self.services.on_text
                    ),
                    self.services.retry,
                    on_retry=self.on_retry,
                )
            except ContextOverflowError as error:  # an empty stream too
                await self.evidence.refused(error, self.messages, prompt.tokens)
                await self.evidence.ask_allocated(again=True)
                continue
            await self.record(prompt.sent, reply)
            return reply
        raise ModelError(
            f"the server kept refusing the prompt as too long after "
            f"{MAX_OVERFLOW_RECOVERIES} attempts to shrink it to fit a "
            f"{self.context.limit}-token window ({self.context.limit_source}); "
            "set model.context_limit to the window the server really has"
        )

    async def record(self, sent: int, reply: StreamResult) -> None:
        """Add the reply to the conversation (of which the first `sent` messages were sent):
        only now does the turn count (a request that failed for good, or was cut short by a
        crash, is asked again on resume)."""
        self.state.session_turns += 1
        self.state.total_turns += 1
        message = reply.to_message()
        message["content"] = without_reasoning(reply.text)
        self.messages.append(message)
        self.log.emit(
            ev.Assistant(
                text=reply.text,
                finish_reason=reply.finish_reason,
                tool_calls=[asdict(call) for call in reply.tool_calls],
            )
        )
        await self.evidence.ask_allocated()  # the model is loaded now: /api/ps knows
        await self.evidence.take_in(self.messages, sent, reply)

    async def act(self, reply: StreamResult) -> list[tuple[ToolCall, ToolResult]]:
        """Run the reply's tool calls; a reply without any is an idle turn."""
        if not reply.tool_calls:
            await self.idle(reply.text)
            return []
        self.state.idle_turns = 0
        return await self.execute(reply.tool_calls)

    async def execute(self, calls: list[ToolCall]) -> list[tuple[ToolCall, ToolResult]]:
        """Run the calls in order; a task_complete among them ends the run once all ran."""
        outcomes = await self.tool_calls.execute(calls)
        summaries = [
            result.meta[COMPLETE_KEY] for _, result in outcomes if COMPLETE_KEY in result.meta
        ]
        if summaries:
            raise StopRun("task_complete", summaries[-1])
        return outcomes

    def take_messages(self) -> None:
        """A person's messages (`ouroboros tell`), given at the turn boundary, in order."""
        if self.services.state_dir is None:
            return
        for letter in waiting(self.services.state_dir):
            self.messages.append({"role": "user", "content": self.screened(letter.text)})
            self.log.emit(ev.UserMessage(text=letter.text, queued_at=letter.sent))
            self.save()
            letter.path.unlink(missing_ok=True)

    def screened(self, text: str) -> str:
        """A person's message as the model may see it: with the run's secrets redacted, as
        every tool result is (a key pasted into `ouroboros tell` never reaches the model)."""
        redact = self.services.toolbox.redact
        return redact(text) if redact is not None else text

    def watch(self, text: str, outcomes: list[tuple[ToolCall, ToolResult]]) -> None:
        """The stuck-loop guard (guards.py): a loop found is named to the agent; found
        again, it pauses the run."""
        alarm = self.services.stuck.observe(step_of(text, outcomes))
        if alarm is None:
            return
        loop = alarm.loop
        self.log.emit(
            ev.Stuck(kind=loop.kind, detail=loop.detail, action="pause" if alarm.pause else "note")
        )
        if alarm.pause:
            raise StopRun("stuck")
        self.messages.add_note("stuck", loop_note(loop))

    def watch_redoing(self) -> None:
        """Work that earlier sessions did, done again (guards.py): the agent is told once
        in a session; if the session goes on being mostly repeats, the run pauses."""
        digest, agent = self.state.digest, self.services.config.agent
        action = redoing(
            digest.repeats,
            digest.side_effects,
            digest.told_redoing,
            notice_after=agent.redo_notice_repeats,
            pause_after=agent.redo_pause_repeats,
            before=digest.redone_before,
        )
        if action is None:
            return
        detail = redo_detail(
            digest.repeats, digest.side_effects, digest.repeated, digest.redone_before
        )
        self.log.emit(ev.Stuck(kind="redoing", detail=detail, action=action))
        if action == "pause":
            raise StopRun("redoing")
        self.messages.add_note("redoing", redo_note(detail))

    async def idle(self, text: str) -> None:
        """A reply without a tool call: the continue message, at once for a reply with new
        text, else after a pause (guards.py); after `max_idle_turns` empty or repeated
        replies in a row the run pauses instead."""
        if self.services.stuck.new_text(text):
            self.state.idle_turns = 0
            self.messages.add_note("continue", self.services.config.agent.continue_message)
            return
        self.state.idle_turns += 1
        turns, limit = self.state.idle_turns, self.services.config.agent.max_idle_turns
        if limit and turns >= limit:
            raise StopRun("idle")
        pause = idle_pause(turns, self.services.config.agent.idle_pause_max_secs)
        if pause:
            self.log.emit(ev.Idle(idle_turns=turns, pause_secs=pause, max_idle_turns=limit))
            await asyncio.sleep(pause)
        self.messages.add_note("continue", self.services.config.agent.continue_message)

    def on_retry(self, attempt: int, delay: float, error: Exception) -> None:
        self.log.emit(ev.Retry(attempt=attempt, delay_secs=round(delay, 2), error=str(error)))

    def warn_once(self, key: str, message: str) -> None:
        self.state.warn_once(self.log, key, message)
