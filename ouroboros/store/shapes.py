"""The shapes of the run's own JSON files, as pydantic models (as the events are, events.py):
manifest.json, totals.json and state.json. A file that is JSON but not of its shape is
damaged, as one that is not JSON is: its readers rebuild it from what remains (the segments,
the log), never trust its fields. The models check; the readers keep the plain dicts.

    check_manifest(json.loads(text))   # ValueError (a ValidationError) naming the field
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

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


class StateShape(Shape):
    """RunState (loop/state.py) as the snapshot holds it."""

    run_id: str
    messages: list[JsonObject]
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
    digest: JsonObject | None = None


class ContextShape(Shape):
    """The parts of the context manager's state that are read without it (prune_run)."""

    observations: dict[str, JsonObject] = {}
    next_observation: int = Field(0, ge=0)


class SnapshotShape(Shape):
    format_version: int = Field(0, ge=0)
    seq: int = Field(ge=0)
    state: StateShape


def why_not(error: ValidationError) -> str:
    """The first thing wrong, in a few words: "segments.0.file: String should match ..."."""
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"])
    return f"{where}: {first['msg']}" if where else first["msg"]


def check(model: type[Shape], data: Any) -> None:
    """ValueError (a ValidationError) when `data` is not of the model's shape."""
    model.model_validate(data)


def check_snapshot(data: Any) -> None:
    check(SnapshotShape, data)
    check(ContextShape, data["state"]["context"])
    for message in data["state"]["messages"]:
        if not isinstance(message.get("role"), str):
            raise ValueError("state.messages: a message without a role")
