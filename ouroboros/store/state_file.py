"""The run's state (`state.json`): one versioned file, written whole, read back for a resume.

The state is what a resumed run needs back (loop/state.py's RunState as a dict): the
conversation, the context manager's records and the counters. It is bounded: the
conversation by the window (masking, dropped turns and restarts keep it within it), the
observation records by the conversation (those no message refers to leave at each session
boundary), the digest by its own caps (loop/handoff.py); so a write costs what the window
holds, not what the run has done.

    writer = StateWriter(run_dir)                # one per run: it encodes each message once
    writer.write(seq, state, redact)             # atomic replace; at every turn's end
    saved = read_state(run_dir)                  # as written, its version's shape checked
    saved = upgrade(saved, records, read)        # brought to CURRENT_SCHEMA_VERSION

Schema versions, a line each; `UPGRADES[n]` takes a state of version n to version n + 1:
    1  no `schema_version` (`format_version` 1-3): a snapshot written at session boundaries,
       at the end and now and then; the `checkpoint` events logged after it that name it as
       their `base` hold what each step changed since. Read only (`from_v1`).
    2  `schema_version` 2: the whole state as of event `seq`, written after every step; a
       message held the harness's `_tokens` (its measured size) and `_note` (the kind of a
       note the harness wrote) beside its wire form. Read only (`from_v2`).
    3  `schema_version` 3: as 2, each message without `_tokens` and `_note`; the state's
       `tokens` and `notes` hold each one's measured size and note kind (or null), by
       position; `system_marks` what the system prompt is made of (loop/memory.py; before,
       its `_mission`, `_mission_chars` and `_memory` were in it, as they may still be in a
       file of schema 3 written first). Written at every turn's end; a resume replays the
       events after `seq` (loop/rebuild.py).

A file that is not JSON, not of its version's shape, or whose checkpoints do not apply is
DamagedSnapshot (the message says what is wrong; a resume rebuilds the state from the log);
one written by a newer Ouroboros is UsageError. Anything else raised is a bug, not damage.
"""

from __future__ import annotations

import json
import operator
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Generic, Iterable, TypeVar

from pydantic import ValidationError

from ouroboros.errors import UsageError
from ouroboros.store.atomic import cannot_write, open_directory, replace_in, sync_in
from ouroboros.store.files import read_regular
from ouroboros.store.shapes import DeltaShape, check_state, check_v1, check_v2, why_not

CURRENT_SCHEMA_VERSION = 3
STATE_FILE = "state.json"
MAX_STATE_BYTES = 1 << 30  # a window's worth of conversation and counters: far less
# The last `format_version` a state.json of schema 1 had; one above it was written by an
# Ouroboros newer than any that wrote schema 1, which this one cannot know.
V1_FORMAT_VERSION = 3
# Schemas 1 and 2 kept these beside a message's wire form, in it: its measured size and the
# kind of a note the harness wrote.
TOKENS_KEY, NOTE_KEY = "_tokens", "_note"
# And the system prompt's marks (state["system_marks"] since) were in it, under these keys.
MARK_KEYS = {"_mission": "mission", "_mission_chars": "mission_chars", "_memory": "memory"}
T, V = TypeVar("T"), TypeVar("V")
ObservationReader = Callable[[str], "str | None"]  # obs id -> its full text, None if gone
# A turn's end may leave a large state's write to a later one (StateWriter.may_wait): a state
# under WAIT_MIN_BYTES is written at every turn's end (a local model's window holds far less);
# a larger one once what was appended to it reaches 1/WAIT_SHARE of it, so a turn costs what
# it added, and a resume replays at most that share of the state from the log.
WAIT_MIN_BYTES = 256 * 1024
WAIT_SHARE = 8


class DamagedSnapshot(Exception):
    """state.json is there but cannot be read back; the message says how it is damaged."""


class GrowingMemo(Generic[T, V]):
    """A value made for each item of a registry that grows at its end (the context's
    observations, in the order their results came), made again only for an item that
    changed: so a write costs what the turn added, not what the registry holds. What is held
    is checked in one pass of C-level comparisons, never a Python loop over the items.

        texts = GrowingMemo(lambda key, saved: json.dumps(saved))
        texts.update(registry)           # each item's value, in order
        texts.update(registry, marks)    # marks[i] == the one held: item i unchanged
    """

    def __init__(self, make: Callable[[str, T], V]) -> None:
        self._make = make
        self.clear()

    def clear(self) -> None:
        """Forget what was made (it was made otherwise: a redaction changed)."""
        self._keys: list[str] = []
        self._marks: list[Any] = []
        self._made: list[V] = []

    def update(self, registry: dict[str, T], marks: list[Any] | None = None) -> list[V]:
        """Each item's value, in order: made for the items after those held, and again for
        each whose mark (by default the item itself) is no longer equal to the one held; made
        for all when the keys held are not the registry's first ones (some have gone)."""
        keys, items = list(registry), list(registry.values())
        marks = items if marks is None else marks
        n = len(self._keys)
        if len(keys) < n or keys[:n] != self._keys:
            self.clear()
            n = 0
        made = self._made
        if marks[:n] != self._marks:  # identity first: equal unless one was replaced
            for i in [i for i in range(n) if marks[i] != self._marks[i]]:
                made[i] = self._make(keys[i], items[i])
        made.extend(map(self._make, keys[n:], items[n:]))
        self._keys, self._marks = keys, marks
        return made


@dataclass(frozen=True)
class Growth:
    """A state in brief, for whether its write may wait (StateWriter.may_wait): how many
    times its conversation changed other than by growing at its end (`edits`), how many bytes
    of messages were added to it there (`appended`, ever), and the JSON of its parts that the
    events logged after the state do not bring back on a resume (`steady`)."""

    edits: int
    appended: int
    steady: str


@dataclass(frozen=True)
class SavedState:
    """state.json as read: the run's state (RunState.to_dict) as of event `seq`. Upgraded
    from schema 1, all of it but the digest, which its checkpoints did not carry: that is as
    of the seq the file was written as of."""

    schema_version: int
    seq: int
    state: dict[str, Any]


class StateWriter:
    """Writes one run's state.json, encoding each message of the conversation once: one
    still in its place, the same object (the conversation never changes a message it holds:
    it replaces it), is written as it was encoded before. The rest of the state is small
    (the measured sizes and note kinds are a number or a word a message), and encoded each
    time."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / STATE_FILE
        # Position by position: the message encoded, its JSON.
        self._messages: list[dict[str, Any]] = []
        self._texts: list[str] = []
        self._redact: Callable[[str], str] | None = None
        # Each observation's JSON, as a "key": value pair, made again when its dict is
        # another (loop/state.py's SavedObservations makes a new one when it changes)
        self._observation_texts = GrowingMemo(self._observation_text)
        self._body: str | None = None  # what the file on disk holds, but its seq
        self._durable = False  # and whether it is synced to the disk
        self._directory: int | None = None  # the run dir, opened once: a write is a step
        self._written = 0  # bytes, the last time
        self._growth: Growth | None = None  # of the state written then (None: not known)

    def write(
        self,
        seq: int,
        state: dict[str, Any],
        redact: Callable[[str], str] | None = None,
        *,
        durable: bool = True,
        growth: Callable[[], Growth] | None = None,
    ) -> None:
        """Replace state.json with the run's state as of event `seq` (its strings redacted),
        whole or not at all. `durable` syncs it to the disk (a turn's end); without, a killed
        process still leaves it whole, and a power cut at worst an older or a damaged one,
        which the log makes good. `growth`: the state in brief, asked for only when the file
        is large enough for `may_wait` to want it later."""
        self._encode(state["messages"], redact)
        rest = {key: value for key, value in state.items() if key not in _APART}
        parts = [self._fields(rest)]
        if "context" in state:
            context = state["context"]
            observations = context.get("observations")
            if isinstance(observations, dict):
                inner = self._fields({k: v for k, v in context.items() if k != "observations"})
                parts.append(
                    f'"context": {{{inner}, "observations": {self._observations(observations)}}}'
                )
            else:
                parts.append(f'"context": {self._json(context)}')
        if "tokens" in state:  # numbers and the harness's words: nothing to redact
            parts.append(f'"tokens": {json.dumps(state["tokens"])}')
            parts.append(f'"notes": {json.dumps(state["notes"])}')
        parts.append(f'"messages": [{", ".join(self._texts)}]')
        body = "{" + ", ".join(part for part in parts if part) + "}"
        with cannot_write(self.path):
            if self._directory is None:
                self._directory = open_directory(self.path.parent)
            if body == self._body:  # only the seq moved on: the file on disk says the same
                if durable and not self._durable:
                    sync_in(self._directory, self.path.name)
                    self._durable = True
                self._growth = self._large(growth)
                return
            text = f'{{"schema_version": {CURRENT_SCHEMA_VERSION}, "seq": {seq}, "state": {body}}}'
            data = text.encode("utf-8")
            replace_in(self._directory, self.path.name, data, durable=durable)
        self._body, self._durable, self._written = body, durable, len(data)
        self._growth = self._large(growth)

    def may_wait(self, growth: Callable[[], Growth]) -> bool:
        """Whether a turn's end (the log durable up to it) may leave the file as it is: the
        file holds at least WAIT_MIN_BYTES, the state only grew since it was written, by
        less than 1/WAIT_SHARE of it, and changed nowhere else but in what the log brings
        back on a resume (loop/rebuild.py's replay_tail). A smaller file never waits, and
        its state is not looked at."""
        last = self._growth
        if last is None:
            return False
        now = growth()
        return (
            now.edits == last.edits
            and now.steady == last.steady
            and (now.appended - last.appended) * WAIT_SHARE < self._written
        )

    def _large(self, growth: Callable[[], Growth] | None) -> Growth | None:
        """The state just written, in brief, when its file is large enough to wait."""
        return growth() if growth is not None and self._written >= WAIT_MIN_BYTES else None

    def close(self) -> None:
        """Let the run directory go (the writer writes no more)."""
        if self._directory is not None:
            os.close(self._directory)
            self._directory = None

    def _json(self, value: Any) -> str:
        if self._redact is not None:
            value = redact_strings(value, self._redact)
        return json.dumps(value, ensure_ascii=False)

    def _fields(self, values: dict[str, Any]) -> str:
        """`values` as the members of a JSON object, without its braces."""
        return self._json(values)[1:-1]

    def _observations(self, observations: dict[str, Any]) -> str:
        """The JSON of the context's observations, each encoded once (GrowingMemo)."""
        return "{" + ", ".join(self._observation_texts.update(observations)) + "}"

    def _observation_text(self, key: str, saved: dict[str, Any]) -> str:
        return f"{json.dumps(key)}: {self._json(saved)}"

    def _encode(self, messages: list[dict[str, Any]], redact: Callable[[str], str] | None) -> None:
        """Bring the JSON held for each position up to `messages`."""
        if redact is not self._redact:  # what was encoded was redacted otherwise
            self._messages, self._texts, self._redact = [], [], redact
            self._observation_texts.clear()
        del self._messages[len(messages) :], self._texts[len(messages) :]
        held = self._messages
        if not all(map(operator.is_, messages, held)):  # one replaced (masked), or dropped
            for i, message in enumerate(messages[: len(held)]):
                if message is not held[i]:
                    held[i], self._texts[i] = message, self._encoded(message)
        for message in messages[len(held) :]:
            held.append(message)
            self._texts.append(self._encoded(message))

    def _encoded(self, message: dict[str, Any]) -> str:
        redacted = message if self._redact is None else redact_strings(message, self._redact)
        return json.dumps(redacted, ensure_ascii=False)


_APART = ("messages", "context", "tokens", "notes")  # encoded apart, by StateWriter.write


def write_state(
    run_dir: Path,
    seq: int,
    state: dict[str, Any],
    redact: Callable[[str], str] | None = None,
    *,
    durable: bool = True,
) -> None:
    """Write state.json once (see StateWriter.write)."""
    StateWriter(run_dir).write(seq, state, redact, durable=durable)


def redact_strings(data: Any, redact: Callable[[str], str]) -> Any:
    """`data` (JSON-like) with every string value passed through `redact`, before it is
    written (dict keys are the harness's own names and stay as they are)."""
    if isinstance(data, str):
        return redact(data)
    if isinstance(data, dict):
        return {key: redact_strings(value, redact) for key, value in data.items()}
    if isinstance(data, list):
        return [redact_strings(value, redact) for value in data]
    return data


def read_state(run_dir: Path) -> SavedState | None:
    """state.json as written, or None when there is none. Raises DamagedSnapshot when it
    cannot be read or is not of its version's shape, UsageError when a newer Ouroboros wrote
    it."""
    path = run_dir / STATE_FILE
    try:
        data = json.loads(read_regular(path, MAX_STATE_BYTES).decode("utf-8"))
    except FileNotFoundError:
        return None
    except OSError as error:
        raise DamagedSnapshot(f"cannot be read ({error.strerror or error})") from None
    except ValueError:
        raise DamagedSnapshot("is not JSON (truncated, empty or overwritten)") from None
    if not isinstance(data, dict):
        raise DamagedSnapshot("does not hold a run's state (not a JSON object)")
    version = schema_version(data)
    if version > CURRENT_SCHEMA_VERSION:
        raise UsageError(
            f"{path} was written by a newer Ouroboros (state schema {version}, this one "
            f"reads {CURRENT_SCHEMA_VERSION}); upgrade to resume it"
        )
    try:
        {1: check_v1, 2: check_v2}.get(version, check_state)(data)
    except ValidationError as error:
        raise DamagedSnapshot(f"does not hold a run's state ({why_not(error)})") from None
    except ValueError as error:
        raise DamagedSnapshot(f"does not hold a run's state ({error})") from None
    return SavedState(version, data["seq"], data["state"])


def schema_version(data: dict[str, Any]) -> int:
    """The version of the state.json holding `data` (see the module's docstring)."""
    version = data.get("schema_version")
    if version is None:
        old = data.get("format_version", 0)
        # A `format_version` past schema 1's is a newer Ouroboros's, whatever it holds.
        return 1 if not isinstance(old, int) or old <= V1_FORMAT_VERSION else old
    if not isinstance(version, int) or isinstance(version, bool) or version < 2:
        raise DamagedSnapshot(f"does not hold a run's state (schema_version {version!r})")
    return version


def upgrade(
    saved: SavedState, records: Iterable[dict[str, Any]], read_observation: ObservationReader
) -> SavedState:
    """The state brought to CURRENT_SCHEMA_VERSION, a version at a time; `records` are the
    log's records after `saved.seq` (schema 1's checkpoints are among them), and
    `read_observation` reads a tool result's full text back. Raises DamagedSnapshot when a
    step finds the state or its checkpoints damaged."""
    records = list(records)
    while saved.schema_version < CURRENT_SCHEMA_VERSION:
        saved = UPGRADES[saved.schema_version](saved, records, read_observation)
    if "system_marks" not in saved.state:  # schema 3 as first written: the marks in messages[0]
        saved = replace(saved, state=marks_apart(saved.state))
    return saved


# -- schema 1: a snapshot and the checkpoints logged after it (read only) --


def from_v1(
    saved: SavedState, records: list[dict[str, Any]], read_observation: ObservationReader
) -> SavedState:
    """Schema 1 to 2: the snapshot brought forward by the checkpoints logged after it that
    build on it, in order (each a `checkpoint` event, or a `checkpoint` field on the
    `tool_result` that ended its step). The digest was not in the checkpoints: it stays as
    of the snapshot."""
    state, seq = saved.state, saved.seq
    for record in records:
        delta = record if record.get("type") == "checkpoint" else record.get("checkpoint")
        if (
            record.get("seq", 0) > saved.seq
            and isinstance(delta, dict)
            and delta.get("base") == saved.seq
        ):
            try:
                DeltaShape.model_validate(delta)
            except ValidationError as error:
                raise DamagedSnapshot(
                    f"has a checkpoint (event {record['seq']}) that is not one ({why_not(error)})"
                ) from None
            apply_delta(state, delta, read_observation, record["seq"])
            seq = record["seq"]
    try:
        check_v2({"schema_version": 2, "seq": seq, "state": state})
    except ValidationError as error:
        raise DamagedSnapshot(
            f"with the checkpoints after it does not hold a run's state ({why_not(error)})"
        ) from None
    except ValueError as error:
        raise DamagedSnapshot(
            f"with the checkpoints after it does not hold a run's state ({error})"
        ) from None
    return replace(saved, schema_version=2, seq=seq, state=state)


def apply_delta(
    state: dict[str, Any],
    delta: dict[str, Any],
    read_observation: ObservationReader,
    seq: int,
) -> None:
    """Bring a schema-1 state forward by one checkpoint (of DeltaShape), in place; event
    `seq` logged it. DamagedSnapshot when it names messages the state does not hold."""
    if delta.get("messages") is not None:
        previous = state["messages"]
        messages: list[dict[str, Any]] = []
        for op in delta["messages"]:
            if isinstance(op, list):
                start, end = op
                if not 0 <= start <= end <= len(previous):
                    raise DamagedSnapshot(
                        f"has a checkpoint (event {seq}) that keeps messages {start}-{end} of "
                        f"{len(previous)}"
                    )
                messages.extend(previous[start:end])
            else:
                messages.append(resolve(op, read_observation, seq))
        state["messages"] = messages
    for index, tokens in delta.get("tokens") or ():
        if not 0 <= index < len(state["messages"]):
            raise DamagedSnapshot(
                f"has a checkpoint (event {seq}) that measures message {index} of "
                f"{len(state['messages'])}"
            )
        state["messages"][index] = {**state["messages"][index], TOKENS_KEY: tokens}
    state.update(delta.get("state") or {})
    context = state["context"]
    context.update(delta.get("context") or {})
    if not isinstance(context.get("observations"), dict):
        raise DamagedSnapshot(f"has no observations to apply the checkpoint of event {seq} to")
    context["observations"].update(delta.get("observations") or {})


def resolve(op: dict[str, Any], read_observation: ObservationReader, seq: int) -> dict[str, Any]:
    """The message a logged one stands for: itself, or the tool result a reference names
    (`obs`, `tool_call_id`, `limit`, `keep`: its observation, cut as on arrival)."""
    if "obs" not in op:
        return dict(op)
    obs, call_id, limit, keep = (op.get(key) for key in ("obs", "tool_call_id", "limit", "keep"))
    if not (
        isinstance(obs, str)
        and isinstance(call_id, str)
        and isinstance(limit, int)
        and keep in ("head", "tail", "both")
    ):
        raise DamagedSnapshot(f"has a checkpoint (event {seq}) with a result it cannot read")
    text = read_observation(obs)
    if text is None:  # gone from the disk: the model is told, and may run the tool again
        text = f"[the full result of this call ({obs}) is no longer on disk]"
    message = {"role": "tool", "tool_call_id": call_id, "content": capped(text, limit, keep, obs)}
    if TOKENS_KEY in op:
        message[TOKENS_KEY] = op[TOKENS_KEY]
    return message


def capped(text: str, max_chars: int, keep: str, obs_id: str) -> str:
    """A result cut as schema 1's writers cut it (window/conversation.py's cap_text then), so
    that the message read back is the one the model was sent. A frozen copy, not a call:
    store/ may not import window/, and what schema 1 wrote must not follow later changes."""
    if len(text) <= max_chars:
        return text
    cut = len(text) - max_chars
    marker = (
        f"[... {cut:,} characters cut ({keep} kept); "
        f'recall(id="{obs_id}", offset=N) reads the full output ...]'
    )
    if keep == "head":
        return f"{text[:max_chars]}\n{marker}"
    if keep == "tail":
        return f"{marker}\n{text[-max_chars:]}"
    half = max_chars // 2
    return f"{text[:half]}\n{marker}\n{text[len(text) - (max_chars - half) :]}"


# -- schema 2: the harness's keys in each message (read only) --


def from_v2(
    saved: SavedState, records: list[dict[str, Any]], read_observation: ObservationReader
) -> SavedState:
    """Schema 2 to 3: each message's `_tokens` and `_note` move out of it, to the state's
    `tokens` and `notes` (null where it had none); the system prompt's marks, to its
    `system_marks` (marks_apart)."""
    state = marks_apart(saved.state)
    messages, tokens, notes = [], [], []
    for message in state["messages"]:
        measured, kind = message.get(TOKENS_KEY), message.get(NOTE_KEY)
        tokens.append(measured if type(measured) is int else None)
        notes.append(kind if isinstance(kind, str) else None)
        messages.append({k: v for k, v in message.items() if k not in (TOKENS_KEY, NOTE_KEY)})
    state.update(messages=messages, tokens=tokens, notes=notes)
    try:
        check_state({"schema_version": 3, "seq": saved.seq, "state": state})
    except ValidationError as error:
        raise DamagedSnapshot(f"does not hold a run's state ({why_not(error)})") from None
    return replace(saved, schema_version=3, state=state)


def marks_apart(state: dict[str, Any]) -> dict[str, Any]:
    """The state with the system prompt's marks (loop/memory.py's SystemMarks) out of it, in
    `system_marks`: None when it had none, or none of the right types (a resume then takes
    its whole text for the mission). The state given is left as it was."""
    system = state["messages"][0]
    found = {name: system.get(key) for key, name in MARK_KEYS.items()}
    well_formed = (
        isinstance(found["mission"], str)
        and type(found["mission_chars"]) is int
        and found["mission_chars"] >= 0
        and isinstance(found["memory"], str | None)
    )
    clean = {k: v for k, v in system.items() if k not in MARK_KEYS}
    return {
        **state,
        "messages": [clean, *state["messages"][1:]],
        "system_marks": found if well_formed else None,
    }


Upgrade = Callable[[SavedState, list[dict[str, Any]], ObservationReader], SavedState]
UPGRADES: dict[int, Upgrade] = {1: from_v1, 2: from_v2}
