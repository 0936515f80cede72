"""A session restart: whether it may happen, what the next session begins with, or why the
run cannot go on.

The runner, when a session raised RestartSession (after reading the config again):

    may_restart(state, policy, reason, confirm)  # StopRun: max_restarts, restart_declined
    cause = count_progress(state, digest)        # sessions in a row without one successful
                                                 # tool call: WindowTooSmallError when the
                                                 # window is to blame, else the cause
    fitted = fresh_start(state, system, tools, policy, told, facts_chars=...)  # or
                                                 # WindowTooSmallError
    previous_turns = begin_session(state, fitted.messages, marks)  # the conversation adopts them

The next session reads in the order things happened: the system prompt as it is on disk now
(with the memory file pinned), the newest `carryover_turns` complete turns that fit (the
turns the agent has not acted on yet, the newest and back to the one a wind-down
interrupted, always, whatever `carryover_turns` says), and last the restart note with the
handoff's facts and what to do first (handoff.py). A small model acts on what it read last.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from ouroboros.config import ContextConfig
from ouroboros.errors import WindowTooSmallError
from ouroboros.loop.endings import StopRun
from ouroboros.loop.guards import barren_cause
from ouroboros.loop.handoff import Digest, restart_note
from ouroboros.loop.memory import SystemMarks
from ouroboros.loop.state import RunState
from ouroboros.protocols import ConfirmRestart, Message
from ouroboros.window import ledger
from ouroboros.window.conversation import (
    Conversation,
    Record,
    carryover,
    note,
    unacted_turns,
)
from ouroboros.window.manager import ContextManager, Fitted

# Sessions in a row that end without one successful tool call before the run is stopped.
MAX_BARREN_SESSIONS = 3


def may_restart(
    state: RunState, policy: ContextConfig, reason: str, confirm: ConfirmRestart | None
) -> None:
    """Raise StopRun if the run has had its `max_restarts`, or if restarts need confirming
    (`auto_restart = false`) and the person says no (or cannot be asked)."""
    if policy.max_restarts and state.restarts >= policy.max_restarts:
        raise StopRun("max_restarts")
    if not policy.auto_restart and (confirm is None or not confirm(reason)):
        raise StopRun("restart_declined")


def count_progress(state: RunState, digest: Digest | None = None) -> str | None:
    """Count the session that ends. After MAX_BARREN_SESSIONS in a row without one
    successful tool call: the cause when the agent is to blame (its `digest` says every call
    failed, or it made none in many turns), else raise WindowTooSmallError."""
    state.barren_sessions = 0 if state.session_successes else state.barren_sessions + 1
    if state.barren_sessions < MAX_BARREN_SESSIONS:
        return None
    if digest is not None:
        cause = barren_cause(state.session_turns, digest.calls, digest.failed, digest.top_failure())
        if cause is not None:
            return (
                f"{state.barren_sessions} sessions in a row ended without one successful "
                f"tool call; in the last, {cause}"
            )
    raise WindowTooSmallError(
        cannot_progress(
            state.context,
            (f"{state.barren_sessions} sessions in a row ended without one successful tool call"),
        )
    )


def fresh_start(
    state: RunState,
    system: Message,
    tools: list[dict[str, Any]],
    policy: ContextConfig,
    told: tuple[int, str] | None,
    *,
    facts_chars: int = 0,
    memory: str | None = None,
    brief: list[dict[str, Any]] | None = None,
) -> Fitted:
    """The conversation the next session begins with, the window believed afresh (with the
    window the server says it has now, and where it said so, if it says): the system
    prompt, the turns carried over, then the restart note (handoff.restart_note, its facts
    within `facts_chars`; `memory`: the pinned memory file's name) as the last message, so
    what the agent reads last is what to do first. Fitted with the tools as the session
    will send them (`brief`, their short form, when the window is small); when room is
    short the carried turns go before the note's facts do. Raises WindowTooSmallError when
    even that would start at the hard threshold, or leave less room than one tool result
    may take: a session that cannot read one result and act on it would only restart
    again."""
    context = state.context
    held = state.messages
    starts = held.tally.starts  # the turns, without a walk through the messages
    unacted = unacted_turns(held, held.notes, starts)
    carried = carryover(held.records, max(policy.carryover_turns, unacted), starts)
    context.new_session(told)
    if brief is not None:
        tools = context.session_tools(system, tools, brief)
    session, target = state.session + 1, context.fresh_start_target()
    for chars in (facts_chars, 0):
        text = restart_note(
            state.digest,
            session=session,
            previous_turns=state.session_turns,
            carried=bool(carried),
            facts_chars=chars,
            memory=memory,
        )
        messages = [
            Record(system),
            *carried_from(session - 1, carried),
            *carried,
            note("restart", text),
        ]
        fitted = context.fit(
            Conversation(messages, context.worth_masking), tools, target, keep=unacted, fresh=True
        )
        if fitted.tokens <= target:
            break
    room = context.budget - fitted.tokens
    if (
        context.used_pct(fitted.tokens) >= policy.hard_threshold_pct
        or room < context.result_tokens()
    ):
        raise WindowTooSmallError(
            cannot_progress(
                context,
                (
                    f"a fresh session would start {context.used_pct(fitted.tokens):.0%} full "
                    f"(~{fitted.tokens} tokens: the system prompt, the tool definitions and the "
                    f"newest turn), leaving {max(room, 0)} tokens of the {context.budget}-token "
                    f"budget where one tool result may take {context.result_tokens()}"
                ),
                largest_part(context, fitted.messages, tools),
            )
        )
    context.masked(fitted.masked)
    return fitted


def carried_from(session: int, carried: Sequence[Record]) -> list[Record]:
    """The line before the turns carried over (a user turn first, as strict chat templates
    want): where they come from, and nothing to act on."""
    if not carried:
        return []
    return [
        note("restart", f"[Carried over from session {session}: its last turns, as they happened.]")
    ]


def carried_messages(messages: Conversation) -> int:
    """How many messages of a fresh start were carried over (all but the system prompt and
    the harness's restart notes)."""
    return sum(1 for kind in messages.notes[1:] if kind != "restart")


def begin_session(state: RunState, messages: Conversation, marks: SystemMarks | None = None) -> int:
    """Make `messages` (fitted apart; `marks`: what its system prompt is made of, None if not
    known) the conversation of the run's next session; return how many turns the previous
    one ran."""
    previous_turns = state.session_turns
    state.session += 1
    state.restarts += 1
    state.session_turns = state.session_successes = 0
    state.reload = ""
    state.messages.adopt(messages)
    state.system_marks = marks
    state.context.forget_unreferenced(messages)
    return previous_turns


@dataclass(frozen=True)
class Part:
    """One part of a fresh session's first prompt: what it is, its size, and what makes it
    smaller."""

    what: str
    tokens: int
    fix: str


def largest_part(
    context: ContextManager, messages: Conversation, tools: list[dict[str, Any]]
) -> Part:
    """The largest part of a fresh session's first prompt (`messages`, sent with `tools`):
    the system prompt, the tool definitions, one tool call of the turns carried over (its
    arguments), or one tool result."""
    cpt, per_dense = context.chars_per_token, context.per_dense
    parts = [
        Part(
            "the system prompt",
            ledger.message_tokens(messages[0], cpt, per_dense, messages.measured_at(0)),
            "shorten SYSTEM_PROMPT.md",
        ),
        Part(
            "the tool definitions",
            context.tools_tokens(tools),
            "give the model fewer or shorter tools",
        ),
    ]
    names = {}
    for at, message in enumerate(messages[1:], 1):
        for call in message.get("tool_calls") or ():
            function = call.get("function", {})
            name = function.get("name", "")
            names[call.get("id")] = name
            size = ledger.estimate_text(function.get("arguments", ""), cpt, per_dense)
            parts.append(
                Part(
                    f"one {name} call of the newest turn (its arguments)",
                    size,
                    f"tell the agent in SYSTEM_PROMPT.md to keep each {name} call "
                    "small (a big file in several parts): a turn is carried into "
                    "the next session whole",
                )
            )
        if message["role"] == "tool":
            name = names.get(message.get("tool_call_id"), "tool")
            parts.append(
                Part(
                    f"the result of one {name} call",
                    ledger.message_tokens(message, cpt, per_dense, messages.measured_at(at)),
                    "lower context.max_tool_result_tokens",
                )
            )
    return max(parts, key=lambda part: part.tokens)


def cannot_progress(context: ContextManager, why: str, largest: Part | None = None) -> str:
    """The one line for a run that cannot make progress in the window it believes; with
    the `largest` part of the prompt named, with its size and its own fix."""
    named = (
        f" The largest part is {largest.what}, ~{largest.tokens} tokens."
        if largest is not None
        else ""
    )
    fix = largest.fix if largest is not None else "shorten SYSTEM_PROMPT.md"
    return (
        f"the run cannot make progress: {why}, in a {context.limit}-token window "
        f"({context.limit_source}).{named} Give the model a bigger window "
        "(Ollama: OLLAMA_CONTEXT_LENGTH or num_ctx; llama.cpp: -c) and set "
        f"model.context_limit to match, or {fix}"
    )
