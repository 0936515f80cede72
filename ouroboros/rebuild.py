"""A run's state rebuilt from its log, for a `state.json` that is damaged, empty or missing.

The log is the source of truth. Its `assistant` events hold every reply with its tool calls,
and each `tool_result` names the observation file holding the result's full text, so the
current session's conversation can be replayed: the system prompt, the session's opening
note, then every turn with its results. What an earlier session carried over is not in the
log and is left out (the restart note sends the agent to its files, as after any restart).
The context manager starts afresh: it measures again from the first request.

    state, seq = rebuild_state(events, run_id, policy, system_prompt, read_observation)

A snapshot that is whole but older than the log (the process died, or the disk filled up,
between logging a step and saving the snapshot) takes the newer reply and tool results from
the log too (`restore_results`): a reply that arrived whole is not asked for again, and a
tool that did run is not reported interrupted and run again.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from ouroboros import context as ctx
from ouroboros.config import AgentConfig, ContextConfig, ModelConfig
from ouroboros.context import ContextManager
from ouroboros.protocols import Message, ToolCall, ToolResult
from ouroboros.reload import RELOAD_WIND_DOWN_TEXT, recorded_config
from ouroboros.state import RunState

Event = dict[str, Any]
ObservationReader = Callable[[str], str | None]  # obs id -> its full text, None if gone
UNKNOWN_LIMIT = 8192  # a log that never said its window (the resume claims one anyway)
OBS_NUMBER = re.compile(r"obs-(\d+)$")


def rebuild_state(events: list[Event], run_id: str, policy: ContextConfig,
                  system_prompt: str, read_observation: ObservationReader) -> tuple[RunState, int]:
    """The state as of the log's last reply or tool result, and that event's `seq`: tool
    calls logged after it as started have no result, so a resume reports them interrupted."""
    config = recorded_config(events)
    session = max((e.get("session", 1) for e in events), default=1)
    context = ContextManager.create(*last_window(events),
                                    setting(config, "model", "max_output_tokens"), policy)
    context.next_observation = next_observation(events)
    replay = Replay(context, read_observation, setting(config, "agent", "continue_message"))
    messages = [{"role": "system", "content": system_prompt}, opening(events, session, config)]
    seq = 0
    for event in events:
        if event.get("session") == session and replay.apply(event, messages):
            seq = event["seq"]
    state = RunState(run_id, messages, context, session=session,
                     session_turns=len(replay.turns), total_turns=count_turns(events),
                     restarts=sum(e["type"] == "session_restart" for e in events))
    context.wound_down = replay.wound_down
    return state, seq


class Replay:
    """Appends one event's part of the conversation to the messages being rebuilt."""

    def __init__(self, context: ContextManager, read_observation: ObservationReader,
                 continue_message: str) -> None:
        self.context = context
        self.read_observation = read_observation
        self.continue_message = continue_message
        self.turns: dict[int, int] = {}  # turn number -> index of its assistant message
        self.calls: dict[str, ToolCall] = {}
        self.wound_down = False

    def apply(self, event: Event, messages: list[Message]) -> bool:
        """True when the event added to the conversation."""
        kind = event["type"]
        if kind == "assistant":
            self.reply(event, messages)
        elif kind == "tool_result" and event.get("id") in self.calls:
            messages.append(self.result(event))
        elif kind == "wind_down":
            self.wound_down = True
            text = RELOAD_WIND_DOWN_TEXT if event.get("reason") == "reload" else \
                ctx.WIND_DOWN_TEXT.format(pct=float(event.get("context_used_pct", 90)) / 100)
            messages.append(ctx.note("wind_down", text))
        else:
            return False
        return True

    def reply(self, event: Event, messages: list[Message], *, note: bool = True) -> None:
        turn = int(event.get("turn", 0))
        if turn in self.turns:  # asked again after a crash: the later answer is the one kept
            del messages[self.turns[turn]:]
        self.turns[turn] = len(messages)
        calls = [ToolCall(str(c.get("id")), str(c.get("name")), str(c.get("arguments") or ""))
                 for c in event.get("tool_calls") or []]
        self.calls.update({call.id: call for call in calls})
        message: Message = {"role": "assistant",
                            "content": ctx.without_reasoning(str(event.get("text") or ""))}
        if calls:
            message["tool_calls"] = [call.to_wire() for call in calls]
        messages.append(message)
        if not calls and note:
            messages.append(ctx.note("continue", self.continue_message))

    def result(self, event: Event) -> Message:
        call = self.calls[event["id"]]
        obs_id = str(event.get("observation") or self.context.new_observation_id())
        text = self.read_observation(obs_id)
        if event.get("interrupted"):  # made up by a resume; never saved
            from ouroboros.resume import interrupted_text  # resume.py builds on this module

            text = interrupted_text(call.name)
        elif text is None:
            text = (f"[the full result is no longer on disk; its first line was: "
                    f"{event.get('summary', '')}]")
        result = ToolResult(text, ok=bool(event.get("ok", True)))
        obs = ctx.describe(call.name, ctx.call_arguments(call.arguments), result, obs_id, call.id)
        return {"role": "tool", "tool_call_id": call.id,
                "content": self.context.admit(obs, text)}


def restore_results(state: RunState, events: list[Event], seq: int,
                    read_observation: ObservationReader) -> int:
    """Bring a snapshot taken as of `seq` up to the log: the next reply, if the log has it,
    then the results the log holds for its unanswered tool calls, in order. Returns the seq
    the state is now as of."""
    replay = Replay(state.context, read_observation, "")
    reply = next((e for e in events if e["seq"] > seq and e["type"] == "assistant"
                  and e.get("session") == state.session
                  and e.get("turn") == state.session_turns + 1), None)
    if reply is not None and state.messages[-1]["role"] != "assistant" \
            and not ctx.pending_calls(state.messages):
        replay.reply(reply, state.messages, note=False)  # the session adds what follows
        state.session_turns += 1
        state.total_turns += 1
        seq = reply["seq"]
    pending = ctx.pending_calls(state.messages)
    replay.calls = {call.id: call for call in pending}
    logged = {e.get("id"): e for e in events if e["seq"] > seq and e["type"] == "tool_result"
              and not e.get("interrupted")}
    for call in pending:
        event = logged.get(call.id)
        if event is None or read_observation(str(event.get("observation"))) is None:
            break  # the calls after an unanswered one never ran
        state.messages.append(replay.result(event))
        state.session_successes += int(bool(event.get("ok", True)))
        state.context.next_observation = max(state.context.next_observation,
                                             next_observation([event]))
        seq = event["seq"]
    return seq


def opening(events: list[Event], session: int, config: dict[str, Any]) -> Message:
    """The note a session starts with: the kickoff, or the restart marker."""
    restarts = [e for e in events if e["type"] == "session_restart" and e.get("session") == session]
    if restarts:
        return ctx.restart_marker(session, int(restarts[-1].get("previous_turns", 0)))
    return ctx.note("continue", setting(config, "agent", "continue_message"))


def last_window(events: list[Event]) -> tuple[int, str]:
    for event in reversed(events):
        if isinstance(event.get("context_limit"), int) and event.get("limit_source"):
            return event["context_limit"], str(event["limit_source"])
    return UNKNOWN_LIMIT, "unknown (rebuilt from the log)"


def next_observation(events: list[Event]) -> int:
    """One past the highest observation number the log names, so none is overwritten."""
    numbers = [int(m.group(1)) for e in events
               if (m := OBS_NUMBER.match(str(e.get("observation") or "")))]
    return max(numbers, default=0) + 1


def count_turns(events: list[Event]) -> int:
    """Replies recorded, each (session, turn) once: a reply asked again after a crash is
    logged twice but counts once."""
    return len({(e.get("session"), e.get("turn")) for e in events if e["type"] == "assistant"})


def setting(config: dict[str, Any], table: str, name: str) -> Any:
    """A key of the config the run last ran with, else its default."""
    value = (config.get(table) or {}).get(name)
    if value is not None:
        return value
    model = {"model": ModelConfig, "agent": AgentConfig}[table]
    return model.model_fields[name].get_default(call_default_factory=True)

