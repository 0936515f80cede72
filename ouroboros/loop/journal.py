"""Between snapshots, the run's state lives in the event log as checkpoints.

A full snapshot (`state.json`) costs what the conversation holds, so it is written only at
session boundaries, when the run ends, and every SNAPSHOT_EVERY_TURNS turns (further apart as
the conversation grows, so its cost per turn stays flat). After every step the session logs a
`checkpoint` event (or a `checkpoint` field on the `tool_result` that ends the step) with
only what changed since the one before: the messages appended (or, after masking or dropped
turns, which of the earlier ones are kept; a tool result as the observation holding its
text), the token counts written on earlier messages, new and newly masked observations, and
the counters that changed. Each checkpoint names the snapshot it builds on (`base`, that
snapshot's seq); a resume applies the checkpoints logged after the snapshot, in order.

    journal.reset(state, seq)           # a snapshot as of `seq` was written
    delta = journal.delta(state)        # what changed since; None when nothing did
    state_dict, seq = replay(snapshot, events, read_observation)

Which messages are kept, new or measured since the last checkpoint is recorded by the
conversation itself, as it carries out each change (window.conversation.Changes states the
invariants, Conversation.check asserts them); the journal keeps the rest: the observations
and the counters, compared with what it last logged.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, is_dataclass
from functools import cache
from typing import Any, Callable

from ouroboros.config import ContextConfig
from ouroboros.loop.state import RunState
from ouroboros.protocols import Message
from ouroboros.window.conversation import cap_text
from ouroboros.window.ledger import TOKENS_KEY
from ouroboros.window.policy import ContextManager

# A full snapshot at least this many turns apart ...
SNAPSHOT_EVERY_TURNS = 50
# ... and, in a longer conversation, once per this many messages it holds, in turns: each
# snapshot costs what the conversation holds, so spacing them by its length keeps the cost
# per turn flat (10,000 messages: one snapshot every 1,000 turns).
MESSAGES_PER_SNAPSHOT_TURN = 10
CHECKPOINT = "checkpoint"

REFERABLE_KEYS = frozenset({"role", "tool_call_id", "content", TOKENS_KEY})
ObservationReader = Callable[[str], "str | None"]  # obs id -> its full text, None if gone


@dataclass
class Journal:
    """What the state was at the last snapshot or checkpoint, to log only what changed.

    Invariants: the state as of the last snapshot, with every delta since applied in order
    (`apply_delta`), is the state now (tests/test_journal.py checks it at every step of a
    real run, tests/test_conversation_owner.py for the messages under any mix of changes).
    It rests on the conversation's Changes (see window.conversation) and on observations
    being only added at the end of `context.observations` or marked masked between two
    checkpoints (unreferenced ones are dropped only at a session boundary, which a snapshot
    follows).
    """

    base: int = 0  # the seq of the snapshot the checkpoints build on
    turns: int = 0  # total_turns at that snapshot
    _last_observation: str | None = None  # the newest key of context.observations
    _masked: set[str] = field(default_factory=set)
    _total_masked: int = 0
    _scalars: dict[str, Any] = field(default_factory=dict)
    _context: dict[str, Any] = field(default_factory=dict)

    def reset(self, state: RunState, seq: int) -> None:
        """A full snapshot of `state` as of event `seq` was written."""
        self.base, self.turns = seq, state.total_turns
        state.messages.mark()
        context = state.context
        self._last_observation = next(reversed(context.observations), None)
        self._masked = {k for k, o in context.observations.items() if o.masked}
        self._total_masked = context.total_masked
        self._scalars, self._context = state_scalars(state), context_scalars(context)

    def snapshot_due(self, state: RunState) -> bool:
        interval = max(SNAPSHOT_EVERY_TURNS, len(state.messages) // MESSAGES_PER_SNAPSHOT_TURN)
        return state.total_turns - self.turns >= interval

    def delta(self, state: RunState) -> dict[str, Any] | None:
        """What changed since the last snapshot or delta (and remember it), or None."""
        delta: dict[str, Any] = {}
        ops, tokens = state.messages.checkpoint(logged)
        if ops is not None:
            delta["messages"] = ops
        if tokens:
            delta["tokens"] = tokens
        if observations := self._new_observations(state.context):
            delta["observations"] = observations
        for key, now, before in (
            ("state", state_scalars(state), self._scalars),
            ("context", context_scalars(state.context), self._context),
        ):
            if changed := {k: v for k, v in now.items() if before.get(k) != v}:
                delta[key] = changed
                before.update(changed)
        return delta or None

    def _new_observations(self, context: ContextManager) -> dict[str, Any]:
        observations = context.observations
        changed = {}
        # New records are appended; the session boundary drops unreferenced ones (which may
        # include the newest), so the new ones are those after the newest seen before.
        for key in reversed(observations):
            if key == self._last_observation:
                break
            changed[key] = observations[key]
        if context.total_masked != self._total_masked:
            changed.update(
                (k, o) for k, o in observations.items() if o.masked and k not in self._masked
            )
        self._last_observation = next(reversed(observations), None)
        self._total_masked = context.total_masked
        self._masked.update(k for k, o in changed.items() if o.masked)
        return {k: asdict(o) for k, o in changed.items()}


def logged(message: Message, ref: dict[str, Any] | None) -> Message:
    """A new message as logged: its reference (`tool_result_ref`) if it has one, else
    itself."""
    if ref is None or not message.keys() <= REFERABLE_KEYS:
        return message
    return {**ref, TOKENS_KEY: message[TOKENS_KEY]} if TOKENS_KEY in message else ref


def state_scalars(state: RunState) -> dict[str, Any]:
    """The RunState fields other than the conversation, the context manager and the digest
    (which the snapshot holds, and a resume folds forward from the log)."""
    return {
        f.name: copied(getattr(state, f.name))
        for f in fields(state)
        if f.name not in ("messages", "context", "digest")
    }


def context_scalars(context: ContextManager) -> dict[str, Any]:
    """The context manager's saved fields other than its observations, as `to_dict` has them."""
    return {key: plain(getattr(context, key)) for key in context_keys()}


@cache
def context_keys() -> tuple[str, ...]:
    saved = ContextManager.create(1, "", 0, ContextConfig()).to_dict()
    return tuple(key for key in saved if key != "observations")


def plain(value: Any) -> Any:
    """A dataclass field of the context as a dict. Shallow, which is what `asdict` gives for
    the flat Window and Calibration, at a fraction of its cost (this runs every step)."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in fields(value)}
    return value


def copied(value: Any) -> Any:
    return list(value) if isinstance(value, list) else value


# -- reading back --


def tool_result_ref(obs_id: str, tool_call_id: str, limit: int, keep: str) -> dict[str, Any]:
    """How to read a tool result back: its observation, cut as on arrival."""
    return {"obs": obs_id, "tool_call_id": tool_call_id, "limit": limit, "keep": keep}


def resolve(op: dict[str, Any], read_observation: ObservationReader) -> Message:
    """The message a logged one stands for: itself, or the tool result a reference names."""
    if "obs" not in op:
        return dict(op)
    text = read_observation(op["obs"])
    if text is None:  # gone from the disk: the model is told, and may run the tool again
        text = f"[the full result of this call ({op['obs']}) is no longer on disk]"
    content, _ = cap_text(text, op["limit"], op["keep"], op["obs"])
    message = {"role": "tool", "tool_call_id": op["tool_call_id"], "content": content}
    if TOKENS_KEY in op:
        message[TOKENS_KEY] = op[TOKENS_KEY]
    return message


def apply_delta(
    state: dict[str, Any],
    delta: dict[str, Any],
    read_observation: ObservationReader = lambda obs_id: None,
) -> None:
    """Bring a saved state (RunState.to_dict) forward by one checkpoint, in place."""
    if "messages" in delta:
        previous = state["messages"]
        messages: list[Message] = []
        for op in delta["messages"]:
            if isinstance(op, list):
                messages.extend(previous[op[0] : op[1]])
            else:
                messages.append(resolve(op, read_observation))
        state["messages"] = messages
    for index, tokens in delta.get("tokens", ()):
        state["messages"][index] = {**state["messages"][index], TOKENS_KEY: tokens}
    state.update(delta.get("state", {}))
    context = state["context"]
    context.update(delta.get("context", {}))
    context["observations"].update(delta.get("observations", {}))


def replay(
    snapshot: dict[str, Any], events: list[dict[str, Any]], read_observation: ObservationReader
) -> tuple[dict[str, Any], int]:
    """The state of a snapshot (as read from state.json) brought forward by the checkpoints
    logged after it; and the seq it is now as of."""
    seq = snapshot["seq"]
    state = snapshot["state"]
    for event in events:
        delta = event if event["type"] == CHECKPOINT else event.get(CHECKPOINT)
        if (
            event["seq"] > snapshot["seq"]
            and isinstance(delta, dict)
            and delta.get("base") == snapshot["seq"]
        ):
            apply_delta(state, delta, read_observation)
            seq = event["seq"]
    return state, seq
