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
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, is_dataclass
from functools import cache
from typing import Any, Callable

from ouroboros.config import ContextConfig
from ouroboros.window.policy import ContextManager
from ouroboros.window.conversation import cap_text
from ouroboros.protocols import Message
from ouroboros.loop.state import RunState
from ouroboros.window.ledger import TOKENS_KEY

# A full snapshot at least this many turns apart ...
SNAPSHOT_EVERY_TURNS = 50
# ... and, in a longer conversation, once per this many messages it holds, in turns: each
# snapshot costs what the conversation holds, so spacing them by its length keeps the cost
# per turn flat (10,000 messages: one snapshot every 1,000 turns).
MESSAGES_PER_SNAPSHOT_TURN = 10
CHECKPOINT = "checkpoint"

Op = list[int] | Message  # [start, end]: the previous messages kept; a dict: a new message
REFERABLE_KEYS = frozenset({"role", "tool_call_id", "content", TOKENS_KEY})
ObservationReader = Callable[[str], "str | None"]  # obs id -> its full text, None if gone


@dataclass
class Journal:
    """What the state was at the last snapshot or checkpoint, to log only what changed."""

    base: int = 0  # the seq of the snapshot the checkpoints build on
    turns: int = 0  # total_turns at that snapshot
    _list: list[Message] = field(default_factory=list)
    _length: int = 0
    _unmeasured: list[int] = field(default_factory=list)  # indexes without `_tokens`
    _last_observation: str | None = None  # the newest key of context.observations
    _masked: set[str] = field(default_factory=set)
    _total_masked: int = 0
    _scalars: dict[str, Any] = field(default_factory=dict)
    _context: dict[str, Any] = field(default_factory=dict)
    # id(message) -> (the message, how to read it back): a tool result whose text is in
    # observations/ is logged as where to find it, not as its text again.
    _refs: dict[int, tuple[Message, dict[str, Any]]] = field(default_factory=dict)

    def refer(self, message: Message, ref: dict[str, Any]) -> None:
        """`message` is `resolve(ref, ...)`: log the reference instead of the message."""
        self._refs[id(message)] = (message, ref)

    def reset(self, state: RunState, seq: int) -> None:
        """A full snapshot of `state` as of event `seq` was written."""
        self.base, self.turns = seq, state.total_turns
        self._refs.clear()
        self._remember(state.messages, unmeasured_indexes(state.messages))
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
        ops, tokens = self._messages(state.messages)
        if ops is not None:
            delta["messages"] = ops
        if tokens:
            delta["tokens"] = tokens
        if observations := self._new_observations(state.context):
            delta["observations"] = observations
        for key, now, before in (("state", state_scalars(state), self._scalars),
                                 ("context", context_scalars(state.context), self._context)):
            if changed := {k: v for k, v in now.items() if before.get(k) != v}:
                delta[key] = changed
                before.update(changed)
        return delta or None

    def _remember(self, messages: list[Message], unmeasured: list[int]) -> None:
        self._list, self._length, self._unmeasured = messages, len(messages), unmeasured

    def _messages(self, messages: list[Message]) -> tuple[list[Op] | None, list[list[int]]]:
        """The message ops (None: none appended or changed) and the `_tokens` written on
        messages kept from before, as [index, tokens]."""
        previous, length = self._list, self._length
        if messages is previous and len(messages) >= length:
            # Only appended to. Counts are written on all unmeasured messages of a request at
            # once, or oldest first: the oldest (or newest) tells whether any was measured.
            unmeasured, tokens = self._unmeasured, []
            if unmeasured and (TOKENS_KEY in messages[unmeasured[0]]
                               or TOKENS_KEY in messages[unmeasured[-1]]):
                tokens = [[i, messages[i][TOKENS_KEY]] for i in unmeasured
                          if TOKENS_KEY in messages[i]]
                unmeasured = [i for i in unmeasured if TOKENS_KEY not in messages[i]]
            added = messages[length:]
            unmeasured.extend(length + i for i, m in enumerate(added) if TOKENS_KEY not in m)
            self._remember(messages, unmeasured)
            return ([[0, length], *map(self._logged, added)] if added else None), tokens
        ops, tokens = diff(previous[:length], messages, set(self._unmeasured))
        self._remember(messages, unmeasured_indexes(messages))
        return [op if isinstance(op, list) else self._logged(op) for op in ops], tokens

    def _logged(self, message: Message) -> Message:
        """A new message as logged: its reference if it has one, else itself."""
        _, ref = self._refs.pop(id(message), (None, None))
        if ref is None or not message.keys() <= REFERABLE_KEYS:
            return message
        return {**ref, TOKENS_KEY: message[TOKENS_KEY]} if TOKENS_KEY in message else ref

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
            changed.update((k, o) for k, o in observations.items()
                           if o.masked and k not in self._masked)
        self._last_observation = next(reversed(observations), None)
        self._total_masked = context.total_masked
        self._masked.update(k for k, o in changed.items() if o.masked)
        return {k: asdict(o) for k, o in changed.items()}


def diff(previous: list[Message], messages: list[Message],
         unmeasured: set[int]) -> tuple[list[Op], list[list[int]]]:
    """`messages` as ranges of `previous` (by identity) and new messages; plus the `_tokens`
    written since on kept messages that had none (`unmeasured` indexes of `previous`)."""
    where = {id(m): i for i, m in enumerate(previous)}
    ops: list[Op] = []
    tokens: list[list[int]] = []
    for index, message in enumerate(messages):
        j = where.get(id(message))
        if j is None or previous[j] is not message:
            ops.append(message)
            continue
        last = ops[-1] if ops else None
        if isinstance(last, list) and last[1] == j:
            last[1] = j + 1
        else:
            ops.append([j, j + 1])
        if j in unmeasured and TOKENS_KEY in message:
            tokens.append([index, message[TOKENS_KEY]])
    return ops, tokens


def unmeasured_indexes(messages: list[Message]) -> list[int]:
    return [i for i, m in enumerate(messages) if TOKENS_KEY not in m]


def state_scalars(state: RunState) -> dict[str, Any]:
    """The RunState fields other than the conversation and the context manager."""
    return {f.name: copied(getattr(state, f.name)) for f in fields(state)
            if f.name not in ("messages", "context")}


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


def apply_delta(state: dict[str, Any], delta: dict[str, Any],
                read_observation: ObservationReader = lambda obs_id: None) -> None:
    """Bring a saved state (RunState.to_dict) forward by one checkpoint, in place."""
    if "messages" in delta:
        previous = state["messages"]
        messages: list[Message] = []
        for op in delta["messages"]:
            if isinstance(op, list):
                messages.extend(previous[op[0]:op[1]])
            else:
                messages.append(resolve(op, read_observation))
        state["messages"] = messages
    for index, tokens in delta.get("tokens", ()):
        state["messages"][index] = {**state["messages"][index], TOKENS_KEY: tokens}
    state.update(delta.get("state", {}))
    context = state["context"]
    context.update(delta.get("context", {}))
    context["observations"].update(delta.get("observations", {}))


def replay(snapshot: dict[str, Any], events: list[dict[str, Any]],
           read_observation: ObservationReader) -> tuple[dict[str, Any], int]:
    """The state of a snapshot (as read from state.json) brought forward by the checkpoints
    logged after it; and the seq it is now as of."""
    seq = snapshot["seq"]
    state = snapshot["state"]
    for event in events:
        delta = event if event["type"] == CHECKPOINT else event.get(CHECKPOINT)
        if event["seq"] > snapshot["seq"] and isinstance(delta, dict) \
                and delta.get("base") == snapshot["seq"]:
            apply_delta(state, delta, read_observation)
            seq = event["seq"]
    return state, seq
