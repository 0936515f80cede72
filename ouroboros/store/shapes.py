"""The shapes of the run's own JSON files, as pydantic models (as the events are, events.py):
manifest.json, totals.json and state.json (and the checkpoints state.json of schema 1 had in
the log). A file that is JSON but not of its shape is
damaged, as one that is not JSON is: its readers rebuild it from what remains (the segments,
the log), never trust its fields. The models check; the readers keep the plain dicts.

    check_manifest(json.loads(text))   # ValueError (a ValidationError) naming the field
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ouroboros.protocols import JsonObject


class Shape(BaseModel):
    """Strict: a number written as a string, or a bool where a count belongs, is damage."""

    model_config = ConfigDict(extra="allow", strict=True)


class SessionShape(Shape):
    session: int
    turns: int = Field(ge=0)
    peak_pct: float | None
    mask_rounds: int = Field(ge=0)
    masked: int = Field(ge=0)
    end: str | None
    prompt_tokens: int = Field(ge=0)
    completion_tokens: int = Field(ge=0)


class Sessions(Shape):
    """The sessions' figures and the chart's readings (RunSummary, summary.py)."""

    sessions: int = Field(0, ge=0)
    first: list[SessionShape] = []
    recent: list[SessionShape] = []
    earlier: SessionShape | None = None
    readings: int = Field(0, ge=0)
    span: int = Field(1, ge=1)
    buckets: list[list[Any]] = []
    restart_next: bool = False


class Figures(Sessions):
    """The sessions' figures as a manifest kept them before the summary held them itself."""

    run_id: str = ""
    soft: float | None = None
    hard: float | None = None
    window: int | None = None
    budget: int | None = None
    end: str | None = None
    restarts: int = Field(0, ge=0)


class SummaryShape(Sessions):
    """RunSummary (summary.py): the run's summary as of the newest closed segment."""

    run_start: JsonObject | None = None
    run_id: str = ""
    soft: float | None = None
    hard: float | None = None
    anchors: dict[str, JsonObject] = {}
    config_changes: list[JsonObject] = []
    flags: JsonObject = {}
    started: str | None = None
    last: JsonObject = {}
    session: int = Field(1, ge=0)
    turn: int = Field(0, ge=0)
    window: int | None = None
    budget: int | None = None
    prompt_tokens: int | None = None
    context_pct: float | None = None
    turns: int = Field(0, ge=0)
    assistants: int = Field(0, ge=0)
    restarts: int = Field(0, ge=0)
    masked: int = Field(0, ge=0)
    mask_rounds: int = Field(0, ge=0)
    alerts: int = Field(0, ge=0)
    retries: int = Field(0, ge=0)
    tool_calls: dict[str, int] = {}
    session_restarts: int = Field(0, ge=0)
    figures: Figures | None = None  # where a manifest written before the summary kept them


class Segment(Shape):
    """A closed segment as the manifest lists it (segment_entry)."""

    number: int = Field(ge=1)
    file: str = Field(pattern=r"^\d{6}\.jsonl(\.gz)?$")  # a name in segments/, nothing else
    bytes: int = Field(ge=0)
    first_seq: int = Field(ge=0)
    last_seq: int = Field(ge=0)
    sessions: list[int] = Field(min_length=2, max_length=2)
    turns: list[int] = Field(min_length=2, max_length=2)
    time: list[str | None] = Field(min_length=2, max_length=2)
    last_state: JsonObject


class Pruned(Shape):
    """What retention removed: the newest segment number and seq gone, how many, how big."""

    number: int = Field(0, ge=0)
    seq: int = Field(0, ge=0)
    segments: int = Field(0, ge=0)
    bytes: int = Field(0, ge=0)
    after_session: int = Field(0, ge=0)


class ManifestShape(Shape):
    format_version: int = Field(0, ge=0)
    segments: list[Segment]
    state: SummaryShape = SummaryShape()
    pruned: Pruned = Pruned()


class TotalsShape(Shape):
    """totals.json: the summary as of closed segment `number`, and what retention removed;
    written with every manifest, never pruned, so a manifest rebuilt after a pruning keeps
    the run's totals."""

    format_version: int = Field(0, ge=0)
    number: int = Field(ge=0)
    state: SummaryShape
    pruned: Pruned = Pruned()


class ToolFunction(Shape):
    name: str
    arguments: str = ""


class ToolCallShape(Shape):
    id: str
    function: ToolFunction


class MessageShape(Shape):
    """A message of the conversation as the state holds it: its wire form (before schema 3,
    with the harness's `_tokens` and `_note` in it too, and the system prompt with its
    marks)."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = None
    tool_calls: list[ToolCallShape] | None = None
    tool_call_id: str | None = None


class DigestShape(BaseModel):
    """The digest of what the run did (loop/handoff.py's Digest.to_dict); lax, as the digest
    reads it (a count is taken with int(), a name with str())."""

    model_config = ConfigDict(extra="allow")

    turns: int = 0
    calls: int = 0
    failed: int = 0
    side_effects: int = 0
    repeats: int = 0
    told_redoing: int = 0
    sessions_turns: int = 0
    sessions_calls: int = 0
    files_dropped: int = 0
    failures: dict[str, int]
    last_failure: dict[str, str]
    repeated: list[tuple[str, int]]
    files: list[tuple[str, int]]
    commands: list[tuple[str, int | None]]
    interrupted: list[tuple[str, int]]
    done: list[tuple[str, int]]
    seen: list[str] = []
    pending: dict[str, tuple[str, str, str]]


class StateShape(Shape):
    """RunState (loop/state.py) as state.json holds it (schemas 1 and 2)."""

    run_id: str
    messages: list[MessageShape] = Field(min_length=1)
    context: JsonObject
    session: int = Field(1, ge=1)
    session_turns: int = Field(0, ge=0)
    total_turns: int = Field(0, ge=0)
    restarts: int = Field(0, ge=0)
    session_successes: int = Field(0, ge=0)
    barren_sessions: int = Field(0, ge=0)
    warned: list[str] = []
    reload: Literal["", "requested", "wound_down"] = ""
    idle_turns: int = Field(0, ge=0)
    instruction: str = ""
    tokens_used: int = Field(0, ge=0)
    wall_secs: float = Field(0.0, ge=0)
    digest: DigestShape | Annotated[JsonObject, Field(max_length=0)] | None = None


class SystemMarksShape(Shape):
    """What the system prompt is made of (loop/memory.py's SystemMarks)."""

    mission: str
    mission_chars: int = Field(ge=0)
    memory: str | None = None


class StateShape3(StateShape):
    """RunState as state.json of schema 3 holds it: beside the messages, each one's measured
    size and the kind of each note of the harness's (null where none), by position, and the
    system prompt's marks (absent from a file written before they were kept apart)."""

    tokens: list[Annotated[int, Field(ge=0)] | None]
    notes: list[str | None]
    system_marks: SystemMarksShape | None = None

    @model_validator(mode="after")
    def by_position(self) -> StateShape3:
        if not len(self.tokens) == len(self.notes) == len(self.messages):
            raise ValueError(
                f"{len(self.messages)} messages, {len(self.tokens)} tokens, {len(self.notes)} notes"
            )
        return self


class ContextShape(Shape):
    """The parts of the context manager's state that are read without it (prune_run)."""

    observations: dict[str, JsonObject]
    next_observation: int = Field(0, ge=0)


class SavedStateShape(Shape):
    """state.json (state_file.py), schema 3."""

    schema_version: int
    seq: int = Field(ge=0)
    state: StateShape3


class SavedStateShape2(Shape):
    """state.json of schema 2."""

    schema_version: int
    seq: int = Field(ge=0)
    state: StateShape


class SnapshotShape(Shape):
    """state.json of schema 1: a snapshot, the checkpoints after it in the log."""

    format_version: int = Field(0, ge=0)
    seq: int = Field(ge=0)
    state: StateShape


Pair = Annotated[list[int], Field(min_length=2, max_length=2)]


class DeltaShape(Shape):
    """A `checkpoint` of schema 1 (an event, or a field of a `tool_result`): what a step
    changed in the state; the messages as `[start, end]` ranges kept and messages new."""

    base: int = Field(ge=0)
    messages: list[Pair | JsonObject] | None = None
    tokens: list[Pair] | None = None
    observations: dict[str, JsonObject] | None = None
    state: JsonObject | None = None
    context: JsonObject | None = None


def why_not(error: ValidationError) -> str:
    """The first thing wrong, in a few words: "segments.0.file: String should match ..."."""
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"])
    return f"{where}: {first['msg']}" if where else first["msg"]


def check(model: type[Shape], data: Any) -> None:
    """ValueError (a ValidationError) when `data` is not of the model's shape."""
    model.model_validate(data)


def check_state(data: Any) -> None:
    """ValueError (a ValidationError naming the field) when `data` is not state.json of
    schema 3."""
    check(SavedStateShape, data)
    check(ContextShape, data["state"]["context"])


def check_v2(data: Any) -> None:
    """As check_state, for state.json of schema 2."""
    check(SavedStateShape2, data)
    check(ContextShape, data["state"]["context"])


def check_v1(data: Any) -> None:
    """As check_state, for state.json of schema 1."""
    check(SnapshotShape, data)
    check(ContextShape, data["state"]["context"])
