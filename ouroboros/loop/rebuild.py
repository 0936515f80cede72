"""A run's state rebuilt from its log, for a `state.json` that is missing or damaged.

The log is the source of truth. Its `assistant` events hold every reply with its tool calls,
and each `tool_result` names the observation file holding the result's full text, so the
current session's conversation can be replayed: the system prompt, the session's opening
note, then every turn with its results. What an earlier session carried over is not in the
log and is left out (the restart note sends the agent to its files, as after any restart).
The context manager starts afresh: it measures again from the first request.

    state, seq = rebuild_state(events, run_id, policy, system_prompt, read_observation)
"""

from __future__ import annotations

from typing import Any

from ouroboros.config import AgentConfig, ContextConfig, ModelConfig
from ouroboros.loop.budgets import spent_in, tokens_counted
from ouroboros.loop.handoff import Digest, restart_note
from ouroboros.loop.memory import mission_prompt
from ouroboros.loop.reload import RELOAD_WIND_DOWN_TEXT, recorded_config
from ouroboros.loop.state import RunState
from ouroboros.protocols import Message, ToolCall, ToolResult
from ouroboros.store import events as ev
from ouroboros.store.events import EventBase, EventLike, parse_event
from ouroboros.store.observations import obs_number
from ouroboros.store.state_file import ObservationReader
from ouroboros.window import conversation as conv
from ouroboros.window.manager import ContextManager

UNKNOWN_LIMIT = 8192  # a log that never said its window (the resume claims one anyway)


def rebuild_state(
    records: list[EventLike],
    run_id: str,
    policy: ContextConfig,
    system_prompt: str,
    read_observation: ObservationReader,
) -> tuple[RunState, int]:
    """The state as of the log's last reply or tool result, and that event's `seq`: tool
    calls logged after it as started have no result, so a resume reports them interrupted."""
    events = [parse_event(record) for record in records]
    config = recorded_config(events)
    session = max((e.session for e in events), default=1)
    context = ContextManager.create(
        *last_window(events), setting(config, "model", "max_output_tokens"), policy
    )
    context.restored(next_observation(events), wound_down=False)
    replay = Replay(context, read_observation, setting(config, "agent", "continue_message"))
    system = mission_prompt(system_prompt, system_prompt)
    messages = conv.Conversation(
        [system.message, opening(events, session, config)], context.worth_masking
    )
    seq = 0
    for event in events:
        if event.session == session and replay.apply(event, messages):
            seq = event.seq
    state = RunState(
        run_id,
        messages,
        context,
        system_marks=system.marks,
        session=session,
        session_turns=len(replay.turns),
        total_turns=count_turns(events),
        restarts=sum(isinstance(e, ev.SessionRestart) for e in events),
    )
    state.tokens_used, state.wall_secs = spent_in(events)
    context.restored(context.next_observation, replay.wound_down)
    return state, seq


def replay_tail(
    state: RunState,
    events: list[EventBase],
    read_observation: ObservationReader,
    continue_message: str,
) -> None:
    """Bring a state written at a turn's end forward by the events logged after it (`events`,
    in order): the turns since (a large state leaves its write to a later turn's end, see
    store/state_file.py) and the reply of the turn the process died in, with the results
    their calls had (their full text is in the observation files) and the wind-down note, as
    the turn's end would have written them. Its counters follow (turns, successes, tokens
    counted), and a count the server took whole raises the window known held, as it did. A
    call logged as started with no result stays unanswered: the resume answers it as
    interrupted."""
    tail = [e for e in events if e.session == state.session]
    if not tail:
        return
    context = state.context
    replay = Replay(context, read_observation, continue_message)
    replay.calls.update({call.id: call for call in conv.pending_calls(state.messages)})
    context.restored(next_observation(tail), context.wound_down)
    for event in tail:
        replay.apply(event, state.messages)
        match event:
            case ev.Assistant():
                state.session_turns += 1
                state.total_turns += 1
            case ev.ToolResultEvent(ok=ok, interrupted=False) if ok:
                state.session_successes += 1
            case ev.TokenUsage(verdict=verdict, reported=reported):
                state.tokens_used += tokens_counted(event)
                if verdict == "whole" and reported is not None:
                    context.counted_whole(reported)
    context.restored(context.next_observation, context.wound_down or replay.wound_down)


class Replay:
    """Appends one event's part of the conversation to the messages being rebuilt."""

    def __init__(
        self, context: ContextManager, read_observation: ObservationReader, continue_message: str
    ) -> None:
        self.context = context
        self.read_observation = read_observation
        self.continue_message = continue_message
        self.turns: dict[int, int] = {}  # turn number -> index of its assistant message
        self.calls: dict[str, ToolCall] = {}
        self.subjects: dict[str, str] = {}  # call id -> what the call was about
        self.wound_down = False

    def apply(self, event: EventBase, messages: conv.Conversation) -> bool:
        """True when the event added to the conversation."""
        match event:
            case ev.Assistant():
                self.reply(event, messages)
            case ev.ToolCallEvent(id=call_id, subject=subject):
                self.subjects[call_id] = subject
                return False
            case ev.ToolResultEvent(id=call_id) if call_id in self.calls:
                messages.append(self.result(event))
            case ev.WindDown(reason=reason, context_used_pct=pct):
                self.wound_down = True
                text = (
                    RELOAD_WIND_DOWN_TEXT
                    if reason == "reload"
                    else conv.WIND_DOWN_TEXT.format(pct=pct / 100)
                )
                messages.add_note("wind_down", text)
            case _:
                return False
        return True

    def reply(self, event: ev.Assistant, messages: conv.Conversation) -> None:
        turn = event.turn
        if turn in self.turns:  # asked again after a crash: the later answer is the one kept
            messages.drop(self.turns[turn])
        self.turns[turn] = len(messages)
        calls = [ToolCall(c.id, c.name, c.arguments) for c in event.tool_calls]
        self.calls.update({call.id: call for call in calls})
        message: Message = {"role": "assistant", "content": conv.without_reasoning(event.text)}
        if calls:
            message["tool_calls"] = [call.to_wire() for call in calls]
        messages.append(message)
        if not calls:
            messages.add_note("continue", self.continue_message)

    def result(self, event: ev.ToolResultEvent) -> Message:
        call = self.calls[event.id]
        obs_id = event.observation or self.context.new_observation_id()
        text = self.read_observation(obs_id)
        if event.interrupted:  # made up by a resume; never saved
            text = conv.interrupted_text(call.name)
        elif text is None:
            text = f"[the full result is no longer on disk; its first line was: {event.summary}]"
        result = ToolResult(text, ok=event.ok)
        obs = conv.describe(call, self.subjects.get(call.id, ""), result, obs_id)
        return {"role": "tool", "tool_call_id": call.id, "content": self.context.admit(obs, text)}


def opening(events: list[EventBase], session: int, config: dict[str, Any]) -> conv.Record:
    """The note a session starts with: the kickoff, or the restart marker."""
    restarts = [e for e in events if isinstance(e, ev.SessionRestart) and e.session == session]
    if restarts:
        return conv.note(
            "restart",
            restart_note(
                Digest(),
                session=session,
                previous_turns=restarts[-1].previous_turns,
                carried=False,
                facts_chars=0,
                memory=None,
            ),
        )
    return conv.note("continue", setting(config, "agent", "continue_message"))


def last_window(events: list[EventBase]) -> tuple[int, str]:
    """The window the log last said the run worked within, and where it came from."""
    for event in reversed(events):
        if isinstance(event, (ev.SessionStart, ev.RunResumed)) and event.limit_source:
            return event.context_limit, event.limit_source
    return UNKNOWN_LIMIT, "unknown (rebuilt from the log)"


def next_observation(events: list[EventBase]) -> int:
    """One past the highest observation number the log names, so none is overwritten."""
    numbers = [
        number
        for e in events
        if isinstance(e, ev.ToolResultEvent) and (number := obs_number(e.observation)) is not None
    ]
    return max(numbers, default=0) + 1


def count_turns(events: list[EventBase]) -> int:
    """Replies recorded, each (session, turn) once: a reply asked again after a crash is
    logged twice but counts once."""
    return len({(e.session, e.turn) for e in events if isinstance(e, ev.Assistant)})


def setting(config: dict[str, Any], table: str, name: str) -> Any:
    """A key of the config the run last ran with, else its default."""
    value = (config.get(table) or {}).get(name)
    if value is not None:
        return value
    model = {"model": ModelConfig, "agent": AgentConfig}[table]
    return model.model_fields[name].get_default(call_default_factory=True)
