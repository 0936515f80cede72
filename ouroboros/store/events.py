"""Every event a run logs, one pydantic model per type: what the writer builds, what the
readers (`logs`, `stats`, `status`, `watch`, the dashboard, resume) parse, and what the
manual's event table (docs/event-log.md) is generated from.

Every record carries the envelope (`type`, `ts`, `seq`, `session`, `turn`), which the event
log fills in as it writes the event (store/log.py); the rest are the fields of its type.

    log.emit(Retry(attempt=2, delay_secs=7.0, error="server returned 503"))
    event = parse_event(json.loads(line))   # a model; UnknownEvent for a type not known here
    match event:
        case Retry(attempt=attempt): ...

The manual's event table (docs/event-log.md) is generated from these models
(`python -m ouroboros.store.event_table`).
"""

from typing import Annotated, Any, ClassVar, Literal, Mapping, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ouroboros.errors import StateError

FORMAT_VERSION = 3  # 3: the log in segments with a manifest (segments.py); 1 and 2 still read
ENVELOPE = ("type", "ts", "seq", "session", "turn")


def omitted(default: Any, description: str) -> Any:
    """A field left out of the record while it holds `default`."""
    return Field(default, description=description, json_schema_extra={"omitted": True})


class EventBase(BaseModel):
    """The envelope every record has; the event log fills it in when it writes the event."""

    model_config = ConfigDict(extra="ignore", defer_build=True)

    type: str
    ts: str = Field("", description="when it was written, ISO 8601 UTC")
    seq: int = Field(0, description="1, 2, ... in the order written")
    session: int = Field(1, description="the session it belongs to")
    turn: int = Field(0, description="the turn within the session")

    _omitted: ClassVar[dict[str, Any]] = {}

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        cls._omitted = {
            name: field.default
            for name, field in cls.model_fields.items()
            if isinstance(field.json_schema_extra, dict) and field.json_schema_extra.get("omitted")
        }

    def to_json(self) -> str:
        """The record as one line of JSON, without the fields that are left out at their
        default (an `interrupted` that is false, a `summary` that is empty, ...)."""
        return self.model_dump_json(exclude=self._left_out())

    def record(self) -> dict[str, Any]:
        """The record as the log holds it (see to_json), as a dict."""
        return self.model_dump(mode="json", exclude=self._left_out())

    def _left_out(self) -> set[str] | None:
        return {
            name for name, default in self._omitted.items() if getattr(self, name) == default
        } or None


class RunStart(EventBase):
    """A new run starts (the first record of its log)."""

    type: Literal["run_start"] = "run_start"
    format_version: int = Field(FORMAT_VERSION, description=f"the log's, {FORMAT_VERSION}")
    run_id: str = Field(description="the run's id, its directory's name")
    version: str = Field(description="of Ouroboros")
    pid: int = Field(description="of the harness process")
    config: dict[str, Any] = Field(description="the effective config; no secrets")
    flags: dict[str, Any] = Field(
        default_factory=dict,
        description="the command-line flags it began with, which `resume` reuses",
    )
    sandbox: dict[str, Any] | None = omitted(
        None,
        "what confines the shell: `setting`; `mechanism`: `landlock`, `none` or `off`; "
        "`abi`; `network`; `network_cut`: `namespace`, `tcp` or null; `exposed`: "
        "protected files the shell can still reach; `summary`: the start line's text",
    )


class RunResumed(EventBase):
    """`ouroboros resume` picks the run up again."""

    type: Literal["run_resumed"] = "run_resumed"
    total_turns: int = Field(description="turns the run had before")
    restarts: int = Field(description="session restarts before")
    torn_line_dropped: bool = Field(description="a last line cut short by a crash was dropped")
    interrupted_tools: list[str] = Field(
        description="tools whose calls a stop or crash cut short, answered as interrupted"
    )
    context_limit: int = Field(description="the window, in tokens")
    limit_source: str = Field(description="where the window's size came from")
    budget: int = Field(description="the prompt's share of the window, in tokens")
    flags: dict[str, Any] = Field(default_factory=dict, description="what this resume ran with")
    message: str = Field("", description="a `--message` instruction, or empty")
    sandbox: dict[str, Any] | None = omitted(None, "as in `run_start`")


class SessionStart(EventBase):
    """A session starts, the first or after a restart."""

    type: Literal["session_start"] = "session_start"
    context_limit: int = Field(description="the window, in tokens")
    limit_source: str = Field(description="where the window's size came from")
    budget: int = Field(description="the prompt's share of the window, in tokens")
    carryover_messages: int = Field(description="messages carried over from the session before")


class LoggedCall(BaseModel):
    """A tool call as an `assistant` record holds it."""

    id: str
    name: str
    arguments: str = Field(description="the JSON text as the model sent it")


class Assistant(EventBase):
    """A reply from the model arrived whole; only now does the turn count."""

    type: Literal["assistant"] = "assistant"
    text: str = Field(description="the reply's text")
    finish_reason: str | None = Field(description="as the server said")
    tool_calls: list[LoggedCall] = Field(description="each with `id`, `name`, `arguments`")


class ToolCallEvent(EventBase):
    """A tool call is about to run."""

    type: Literal["tool_call"] = "tool_call"
    id: str = Field(description="the call's id")
    name: str = Field(description="the tool")
    arguments: str = Field(description="the JSON text as the model sent it")
    subject: str = omitted(
        "",
        "what the call is about, as the tool names it (a path, a "
        "command); left out where the tool names none, and in older logs",
    )


class ToolResultEvent(EventBase):
    """A tool call's result is back (or made up, for a call cut short)."""

    type: Literal["tool_result"] = "tool_result"
    id: str = Field(description="the call's id")
    name: str = Field(description="the tool")
    ok: bool = Field(description="whether it succeeded")
    bytes: int = Field(description="the size of its full text")
    observation: str = Field(description="its recall id")
    truncated: bool = Field(description="cut on arrival to fit a tool result's share")
    summary: str = Field(description="its first line")
    duration_ms: int = Field(description="how long it ran")
    interrupted: bool = omitted(False, "when cut short by a stop signal or made up after a crash")
    checkpoint: dict[str, Any] | None = omitted(
        None, "in logs written before the state was versioned: as in a `checkpoint` event"
    )
    exit_code: int | None = omitted(None, "a shell command's; left out when it timed out")


Verdict = Literal["whole", "unknown", "uncached", "suspect", "truncated", "nonsense"]


class TokenUsage(EventBase):
    """What a reply cost, and how full the window now is."""

    type: Literal["token_usage"] = "token_usage"
    prompt_tokens: int = Field(
        description="the server's count when it proved whole, else the ledger's figure"
    )
    completion_tokens: int = Field(description="the reply's tokens")
    total_tokens: int = Field(description="the two together")
    context_limit: int = Field(description="the window, in tokens")
    budget: int = Field(description="the prompt's share of the window")
    context_used_pct: float = Field(description="of the budget")
    source: Literal["server", "estimate"] = Field(description="`server` or `estimate`")
    reported: int | None = Field(None, description="what the server said")
    estimated: int | None = omitted(
        None, "the harness's estimate of the prompt, made before the count"
    )
    cached_tokens: int | None = Field(
        None, description="prompt tokens the server took from its prefix cache, where it says"
    )
    processed_tokens: int | None = omitted(
        None, "prompt tokens the server processed for this request, where it says (llama.cpp)"
    )
    verdict: Verdict | None = Field(
        None,
        description="what the server's count proved: `whole`, `unknown`, `uncached`, "
        "`suspect`, `truncated` or `nonsense`",
    )
    served_model: str = omitted(
        "",
        "the model the reply's chunks name, where it is not `model.name` (llama.cpp "
        "answers with its one model whatever the name asked for); left out when the same",
    )


class ContextMask(EventBase):
    """The oldest tool results were replaced by placeholders."""

    type: Literal["context_mask"] = "context_mask"
    observations_masked: int = Field(description="tool results masked now")
    total_masked: int = Field(description="masked in the run so far")
    tokens_before: int = Field(description="the conversation's size before")
    tokens_after: int = Field(description="and after")
    reclaimed_pct: float = Field(description="how much smaller it got")
    preflight: bool = Field(description="true when done to fit a request")


class ContextDrop(EventBase):
    """The oldest whole turns were dropped to fit a request."""

    type: Literal["context_drop"] = "context_drop"
    turns_dropped: int = Field(description="how many")
    tokens_after: int = Field(description="the conversation's size after")


class WindDown(EventBase):
    """The agent was told to save its state: the session ends soon."""

    type: Literal["wind_down"] = "wind_down"
    context_used_pct: float = Field(description="of the budget")
    reason: Literal["reload"] | None = omitted(None, "`reload` when a reload asked for it")


class SessionRestart(EventBase):
    """A new session starts from a fresh context; its `session` is the new one."""

    type: Literal["session_restart"] = "session_restart"
    previous_turns: int = Field(description="turns the session before had")
    carryover_messages: int = Field(description="messages carried over")
    carryover_masked: int = Field(0, description="tool results masked to fit them")
    carryover_turns_dropped: int = Field(0, description="turns dropped to fit them")
    reason: str = Field(description="why the session restarted")
    context_used_pct: float | None = omitted(
        None,
        "the conversation's share of the budget when the restart was decided (the "
        "session's last figure, above its last prompt's when results came in after it)",
    )


class ContextTruncationDetected(EventBase):
    """The server's counts show it cuts the front of prompts: a smaller window is believed."""

    type: Literal["context_truncation_detected"] = "context_truncation_detected"
    reported: int = Field(description="what the server counted")
    estimated: int = Field(description="what was sent, by the ledger")
    new_limit: int = Field(description="the window believed from now on")
    limit_source: str = Field(description="why")


class ContextOverflowRecovered(EventBase):
    """The server refused a prompt as too long: a smaller window is believed, and the prompt
    fitted to it."""

    type: Literal["context_overflow_recovered"] = "context_overflow_recovered"
    error: str = Field(description="the server's words")
    rejected_tokens: int = Field(description="the size of the prompt it refused")
    new_limit: int = Field(description="the window believed from now on")
    limit_source: str = Field(description="why")


class Retry(EventBase):
    """A request failed in a way that may pass: it is asked again after a pause."""

    type: Literal["retry"] = "retry"
    attempt: int = Field(description="1, 2, ...")
    delay_secs: float = Field(description="the pause before it")
    error: str = Field(description="what failed")


class Idle(EventBase):
    """A reply without a tool call: the continue message follows a pause."""

    type: Literal["idle"] = "idle"
    idle_turns: int = Field(description="in a row without a tool call")
    pause_secs: float = Field(description="before the continue message")
    max_idle_turns: int = Field(description="the run pauses after this many; 0: never")


class Stuck(EventBase):
    """The agent is in a loop: it is told (`note`), or, as the loop goes on, the run pauses
    (`pause`, run_end reason `stuck`)."""

    type: Literal["stuck"] = "stuck"
    kind: Literal["repeat", "cycle", "echo", "barren", "redoing"] = Field(
        description="`repeat`: the same failing call; `cycle`: A B A B; `echo`: the same reply "
        "with nothing new; `barren`: sessions in a row without a successful call; "
        "`redoing`: writes and commands that succeeded in an earlier session, done "
        "again (run_end reason `redoing`)"
    )
    detail: str = Field(description="the loop, in words")
    action: Literal["note", "pause"] = Field(description="`note` or `pause`")


class UserMessage(EventBase):
    """A message from a person (`ouroboros tell`) was given to the agent."""

    type: Literal["user_message"] = "user_message"
    text: str = Field(description="the message")
    queued_at: str = Field("", description="when it was sent, ISO 8601 UTC")


class Handoff(EventBase):
    """A restarted session begins with the harness's handoff of the session before."""

    type: Literal["handoff"] = "handoff"
    text: str = Field(description="the handoff as the agent reads it")
    tokens: int = Field(description="its size, estimated")


class Security(EventBase):
    """A tool refused what it was asked to do as unsafe."""

    type: Literal["security"] = "security"
    kind: Literal["path_escape", "hard_link", "blocked_command"] = Field(
        description="`path_escape`, `hard_link` or `blocked_command`"
    )
    tool: str = Field(description="the tool")
    path: str | None = omitted(None, "the path, for a file tool")
    command: str | None = omitted(None, "the command, for the shell")
    pattern: str | None = omitted(None, "the blocked pattern it matched")


class WarningEvent(EventBase):
    """Something a person should know (each kind once per run; also when a resume rebuilt
    `state.json` from the log)."""

    type: Literal["warning"] = "warning"
    message: str = Field(description="what, and what to do")
    condition: str = omitted(
        "",
        "what raised it, when it can clear: a `warning_cleared` with "
        "the same condition says it is over",
    )


class WarningCleared(EventBase):
    """The condition a warning named is over (the config loads again, the server counts
    again); views take the warning down."""

    type: Literal["warning_cleared"] = "warning_cleared"
    condition: str = Field(description="the `condition` of the warning that is over")
    message: str = Field(description="what changed")


class ErrorEvent(EventBase):
    """The run failed; it stays resumable."""

    type: Literal["error"] = "error"
    message: str = Field(description="what, and what to do")
    kind: str = Field(
        description="the error class: `StateError` when the run's files could "
        "not be written, `NotAnLLMServerError`, ..."
    )


class StopRequested(EventBase):
    """A stop signal came: the run stops now, resumable."""

    type: Literal["stop_requested"] = "stop_requested"
    signal: str = Field(description="`SIGINT`, `SIGTERM`, or `SIGPIPE` when the output pipe closed")


class ReloadRequested(EventBase):
    """A reload was asked for: the session winds down, and the next reads the config again."""

    type: Literal["reload_requested"] = "reload_requested"
    signal: str = Field(description="`SIGHUP`, also sent by `ouroboros reload`")


class ConfigChanged(EventBase):
    """A key of the config took a new value, at a session start or a resume."""

    type: Literal["config_changed"] = "config_changed"
    key: str = Field(description="`table.key`")
    old: Any = Field(description="the value before")
    new: Any = Field(description="the value now")
    source: str = Field(description="the layer the new value came from")


class PromptChanged(EventBase):
    """The system prompt file was edited since the session before (by a person or the
    agent): the new session starts with it as it is now."""

    type: Literal["prompt_changed"] = "prompt_changed"
    path: str = Field(description="the system prompt file")
    old_chars: int = Field(description="its length before, in characters")
    new_chars: int = Field(description="and now")


class Checkpoint(EventBase):
    """Only in logs written before the state was versioned: a step changed the run's state;
    each change below only when there was one."""

    type: Literal["checkpoint"] = "checkpoint"
    base: int = Field(description="the `seq` of the snapshot it builds on")
    messages: list[Any] | None = omitted(
        None,
        "the conversation as `[start, end]` ranges of the previous one kept, then the "
        "new messages; a tool result as `obs`, `tool_call_id`, `limit`, `keep`: its "
        "observation cut to `limit` characters, `keep` kept",
    )
    tokens: list[list[int]] | None = omitted(
        None, "`[index, tokens]` counts written on earlier messages"
    )
    observations: dict[str, Any] | None = omitted(None, "new or newly masked, by tool-call id")
    state: dict[str, Any] | None = omitted(None, "the run's counters")
    context: dict[str, Any] | None = omitted(None, "the context manager's")


class SessionEnd(EventBase):
    """A session ends."""

    type: Literal["session_end"] = "session_end"
    reason: str = Field(description="`restart`, or how the run ended")


class RunEnd(EventBase):
    """The run stops (the last record, until a resume)."""

    type: Literal["run_end"] = "run_end"
    reason: str = Field(
        description="`task_complete`, `idle`, `stuck`, `redoing`, `max_turns`, "
        "`budget`, `interrupted`, `interrupted_now`, "
        "`max_restarts`, `restart_declined`, `error`"
    )
    exit_code: int = Field(description="of the process")
    sessions: int = Field(description="sessions the run had")
    total_turns: int = Field(description="turns the run had")
    restarts: int = Field(description="session restarts")
    resumable: bool = Field(False, description="always true")
    summary: str = omitted("", "task_complete's")
    next: str = Field("", description="how to continue, as shown")
    budget: str = omitted(
        "", "for reason `budget`: the key reached, `agent.max_tokens` or `agent.max_wall_secs`"
    )
    tokens_used: int = omitted(0, "prompt and completion tokens the run has used, in all")
    wall_secs: float = omitted(0.0, "seconds the run has run, in all, across resumes")
    said_done: str | None = omitted(
        None,
        "for reason `idle`: the words in which the agent's last reply said the work is "
        "done, though it did not call task_complete",
    )


class UnknownEvent(EventBase):
    """A record of a type this version does not know (written by a newer one): readers skip
    it, `logs` shows its fields."""

    model_config = ConfigDict(extra="allow")


MODELS = (
    RunStart,
    RunResumed,
    SessionStart,
    Assistant,
    ToolCallEvent,
    ToolResultEvent,
    TokenUsage,
    ContextMask,
    ContextDrop,
    WindDown,
    SessionRestart,
    ContextTruncationDetected,
    ContextOverflowRecovered,
    Retry,
    Idle,
    Stuck,
    UserMessage,
    Handoff,
    Security,
    WarningEvent,
    WarningCleared,
    ErrorEvent,
    StopRequested,
    ReloadRequested,
    ConfigChanged,
    PromptChanged,
    Checkpoint,
    SessionEnd,
    RunEnd,
)
"""Every event the harness writes, in roughly the order a run meets them."""

Event = Annotated[Union[MODELS], Field(discriminator="type")]
"""Any known event, told apart by `type`."""

EVENT_MODELS: dict[str, type[EventBase]] = {
    model.model_fields["type"].default: model for model in MODELS
}
EVENT_TYPES = tuple(EVENT_MODELS)

EventLike = Union[Mapping[str, Any], EventBase]
"""An event as a reader may be given it: a record as read from the log, or its model."""


class EventError(StateError):
    """A record of a known type whose fields do not fit it (a damaged or edited log)."""


def parse_event(record: EventLike) -> EventBase:
    """A record as read from the log, as its model; an UnknownEvent for a type this version
    does not know. Raises EventError when a known type's fields do not fit it."""
    if isinstance(record, EventBase):
        return record
    model = EVENT_MODELS.get(record.get("type"), UnknownEvent)  # type: ignore[arg-type]
    try:
        return model.model_validate(record)  # the union's dispatch on `type`, done directly
    except ValidationError as error:
        problem = error.errors()[0]
        where = ".".join(str(part) for part in problem["loc"])
        raise EventError(
            f"event {record.get('seq', '?')} ({record.get('type')}) does not fit "
            f"its type: {where}: {problem['msg']}"
        ) from None
