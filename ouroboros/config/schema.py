"""The typed tables of ouroboros.toml: one pydantic model per table, a description per key.

    Config().context.soft_threshold_pct  # 0.7
    KEYS                                  # ("model.base_url", ..., "logging.durability")
    env_var_for("model.name")             # "OUROBOROS_MODEL_NAME"

The models are the one definition of every key: loading (layering.py), the wording of errors
(wording.py), `config set` (editing.py) and the file `ouroboros init` writes (template.py) all
read them.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError

from ouroboros.config.urls import URL_RULE, is_server_url, normalize_base_url
from ouroboros.config.values import show_value

ENV_PREFIX: Final = "OUROBOROS_"


# Searched (case-sensitive) in each shell command, as written and normalised, before it runs
# (tools/screening.py). RE2 syntax, which Python's engine reads the same way: no lookarounds or
# backreferences, so screening stays linear in the command. A guard against accidents, not a
# security boundary.
DEFAULT_BLOCKED_PATTERNS: Final[tuple[str, ...]] = (
    # rm -r / -rf (any flag order) of /, /*, ~, ~/, *, $HOME
    r"""\brm\s+(?:-\S+\s+)*(?:-[a-zA-Z]*[rR][a-zA-Z]*|--recursive)\s+(?:[^\s;&|]+\s+)*["']?"""
    r"""(?:/|/\*|~/?\*?|\*|\$\{?HOME\}?/?\*?)["']?(?:$|[\s;&|)])""",
    r"\bmkfs(?:\.\w+)?\b",
    r"\bdd\b[^;&|\n]*\bof=/dev/(?:sd|hd|vd|xvd|nvme|mmcblk|disk|loop|md|dm-|mapper/)",
    r"\(\)\s*\{\s*[\w:]+\s*\|\s*[\w:]+\s*&",  # fork bomb :(){ :|:& };:
    r"(?:^|[;&|(`\n]|\bsudo|\bexec|\bnohup)\s*(?:/usr)?(?:/s?bin/)?"
    r"(?:shutdown|reboot|halt|poweroff)\b",
    r"\bsystemctl\s+(?:-\S+\s+)*(?:poweroff|reboot|halt|kexec)\b",
    r"""\bchmod\s+(?:-\S+\s+)*(?:0?777|a\+rwx|ugo\+rwx)\s+(?:-\S+\s+)*"""
    r"""["']?/\*?["']?(?:$|[\s;&|)])""",
    r"(?:>|\btee\s+(?:-\S+\s+)*)\s*/dev/(?:sd|hd|vd|xvd|nvme|mmcblk)",
    r"\b(?:curl|wget|base64|xxd|openssl)\b[^|;&\n]*\|\s*(?:sudo\s+)?(?:ba|z|da|k)?sh\b",
    r"""\b(?:ba|z|da|k)?sh\s+(?:-c\s+)?["']?(?:\$\(|<\()\s*(?:curl|wget)\b""",
)


LIVE: Final = {"live": True}
"""A field's `json_schema_extra` when a running run takes a new value for it at its next
session (`ouroboros reload`, SIGHUP, an edit the run notices); see `is_live`."""


class _Table(BaseModel):
    model_config = ConfigDict(extra="forbid")

    live: ClassVar[bool] = False  # every key of the table is live


class ModelConfig(_Table):
    """The model server: any OpenAI-compatible chat API (Ollama, llama.cpp, vLLM, ...)."""

    base_url: str = Field(
        "http://127.0.0.1:11434",
        description="Root URL of the server; a trailing /v1 is accepted and dropped.",
    )
    name: str = Field("llama3.2", min_length=1, description="Model name sent with each request.")
    api_key_env: str = Field(
        "",
        description="Name of the environment variable holding a bearer token for hosted servers "
        "(the name, never the key itself); empty for none.",
    )
    context_limit: int = Field(
        0,
        ge=0,
        description="Context window in tokens; 0 = find out from the server.",
        json_schema_extra=LIVE,
    )
    ensure_window: bool = Field(
        True,
        description="With Ollama, make the window model.context_limit asks for real when "
        "Ollama reports less for the model (/api/ps, else num_ctx in /api/show) or nothing: "
        "run on a model `<name>-ctx<N>` made from it with num_ctx N (/api/create; made once, "
        "reused by later runs); false = use the model as it is.",
    )
    temperature: float = Field(
        0.7,
        ge=0,
        le=2,
        allow_inf_nan=False,
        description="Sampling temperature, 0 to 2.",
        json_schema_extra=LIVE,
    )
    max_output_tokens: int = Field(
        2048,
        ge=1,
        description="Most tokens per reply, sent as max_tokens and reserved in the context budget.",
        json_schema_extra=LIVE,
    )
    request_timeout_secs: float = Field(
        600.0,
        gt=0,
        allow_inf_nan=False,
        description="Seconds one reply may take in all, from sending the request to its last "
        "byte; a slower reply is a failed attempt, retried.",
        json_schema_extra=LIVE,
    )
    first_token_timeout_secs: float = Field(
        300.0,
        gt=0,
        allow_inf_nan=False,
        description="Seconds to wait for the first data of a reply (connecting, loading the "
        "model and reading the prompt included); keep-alive comments do not count.",
        json_schema_extra=LIVE,
    )
    idle_timeout_secs: float = Field(
        60.0,
        gt=0,
        allow_inf_nan=False,
        description="Seconds a reply may go without new data once it has begun; keep-alive "
        "comments and empty chunks do not count.",
        json_schema_extra=LIVE,
    )
    max_reply_bytes: int = Field(
        0,
        ge=0,
        description="Most bytes one reply may take on the wire; 0 = 512 per max_output_tokens "
        "plus 1 MB (2.05 MB for 2048).",
        json_schema_extra=LIVE,
    )
    max_retry_secs: float = Field(
        600.0,
        ge=0,
        allow_inf_nan=False,
        description="Seconds to keep retrying a server that is down; 0 = fail at once.",
        json_schema_extra=LIVE,
    )
    wait_for_server_secs: float = Field(
        300.0,
        ge=0,
        allow_inf_nan=False,
        description="At start, seconds to wait for a model server that nothing answers at yet "
        "(after a reboot, a slow Ollama), trying again with backoff; then the run exits 1. "
        "0 = fail at once.",
    )

    @field_validator("base_url")
    @classmethod
    def _server_root(cls, value: str) -> str:
        if not is_server_url(value.strip()):
            raise PydanticCustomError("url", URL_RULE)
        return normalize_base_url(value)

    @field_validator("api_key_env")
    @classmethod
    def _variable_name(cls, value: str) -> str:
        if value and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
            raise PydanticCustomError(
                "env_var_name",
                "must be the name of an environment variable (like OPENAI_API_KEY), "
                "not the key itself",
            )
        return value


class AgentConfig(_Table):
    """The agent: where it works, what it is told, how long it runs."""

    workspace: str = Field(
        "workspace",
        min_length=1,
        description="Directory the agent works in; relative paths are relative to this file.",
    )
    system_prompt: str = Field(
        "SYSTEM_PROMPT.md",
        min_length=1,
        description="File holding the system prompt; relative paths are relative to this file.",
    )
    max_turns: int = Field(
        0, ge=0, description="Model turns in total; 0 = no limit.", json_schema_extra=LIVE
    )
    max_tokens: int = Field(
        0,
        ge=0,
        description="Budget: prompt plus completion tokens, as the server counts them, summed "
        "over the whole run (across resumes); reaching it pauses the run (exit 3, run_end "
        "reason `budget`; raise it, then `ouroboros resume`). 0 = no limit.",
        json_schema_extra=LIVE,
    )
    max_wall_secs: float = Field(
        0,
        ge=0,
        allow_inf_nan=False,
        description="Budget: seconds the run may run, counted while a harness runs it (across "
        "resumes, not the time it is stopped); reaching it pauses the run as max_tokens does. "
        "0 = no limit.",
        json_schema_extra=LIVE,
    )
    continue_message: str = Field(
        "Continue working towards your goals. Use your tools.",
        min_length=1,
        description="User message sent to keep the agent going when it ends a turn without "
        "calling a tool.",
        json_schema_extra=LIVE,
    )
    allow_complete: bool = Field(
        True,
        description="Offer the agent the task_complete tool, which ends the run (exit 0) once "
        "the task is done; false: the run goes on until stopped.",
        json_schema_extra=LIVE,
    )
    max_idle_turns: int = Field(
        3,
        ge=0,
        description="Pause the run (resumable) after this many turns in a row without a tool "
        "call; the continue_message before each is sent after a growing pause (0, 2, 4 ... "
        "60 s). 0 = never pause. A reply with new text (an agent writing) is not idle; an "
        "empty or repeated one is.",
        json_schema_extra=LIVE,
    )
    idle_pause_max_secs: float = Field(
        60.0,
        ge=0,
        allow_inf_nan=False,
        description="Longest pause before the continue message after idle turns in a row (it "
        "doubles from 2 s up to this); 0 = no pause.",
        json_schema_extra=LIVE,
    )
    memory_file: str = Field(
        "NOTES.md",
        min_length=1,
        description="The agent's own memory: a file in the workspace it may edit, re-read at "
        "every session start and pinned in the system message after the mission "
        "(SYSTEM_PROMPT.md, which is the person's). An AGENTS.md in the workspace is pinned "
        "too, read-only.",
        json_schema_extra=LIVE,
    )
    memory_max_tokens: int = Field(
        2000,
        ge=0,
        description="Most tokens of the memory file (and of AGENTS.md) pinned; over it, the "
        "newest part is kept and the agent is told. 0 = pin neither.",
        json_schema_extra=LIVE,
    )
    stuck_repeats: int = Field(
        4,
        ge=0,
        description="A stuck loop: the same call failing the same way, or the same reply with "
        "nothing new, this many turns in a row. The agent is told; if the loop goes on as "
        "long again, the run pauses (reason stuck, resumable). 0 = off.",
        json_schema_extra=LIVE,
    )
    stuck_cycles: int = Field(
        3,
        ge=0,
        description="A stuck loop: two steps taking turns (A B A B ...) with the same results, "
        "this many times each; treated as stuck_repeats is. 0 = off.",
        json_schema_extra=LIVE,
    )
    redo_notice_repeats: int = Field(
        3,
        ge=0,
        description="Work done again: when this many of a session's writes and commands "
        "repeat ones that already succeeded in an earlier session (the same arguments), the "
        "agent is told once, with the figures. 0 = off.",
        json_schema_extra=LIVE,
    )
    redo_pause_repeats: int = Field(
        12,
        ge=0,
        description="Work done again: when this many of a session's writes and commands "
        "repeat earlier sessions' and they are most of the session's, the run pauses (reason "
        "redoing, resumable). Short sessions in a row that are mostly repeats count "
        "together. 0 = never pause.",
        json_schema_extra=LIVE,
    )


class SafetyConfig(_Table):
    """Limits on the shell tool."""

    live = True

    shell_timeout_secs: float = Field(
        30.0, gt=0, allow_inf_nan=False, description="Seconds before a shell command is killed."
    )
    max_output_bytes: int = Field(
        65536, ge=1024, description="Most bytes of output kept from one shell command."
    )
    sandbox: Literal["auto", "required", "off"] = Field(
        "auto",
        description="Confining shell commands (Linux Landlock): reads of the system, writes "
        'only to the workspace and a private temp dir. "auto" uses it where the system has it '
        'and says at start when it does not; "required" refuses to start without it; "off" '
        "runs the shell unconfined.",
    )
    network: bool = Field(
        True,
        description="Whether shell commands may use the network; false gives each command its "
        "own network namespace with only loopback (or, without user namespaces, cuts TCP).",
    )
    blocked_patterns: list[str] = Field(
        default_factory=lambda: list(DEFAULT_BLOCKED_PATTERNS),
        description="Regexes searched in each shell command, as written and with quotes, "
        "backslashes, ${IFS} and variables it sets undone; a command that matches any of them "
        "is refused. A guard against accidents, not a security boundary (the sandbox is). "
        "Patterns run on RE2, in time linear in the command; one RE2 cannot run (lookarounds, "
        "backreferences) runs on Python's engine, which can be slow on long commands.",
    )

    @field_validator("blocked_patterns")
    @classmethod
    def _compiles(cls, patterns: list[str]) -> list[str]:
        from ouroboros.tools.screening import linear_time

        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as error:
                if linear_time(pattern):  # RE2 syntax Python lacks, such as \z
                    continue
                raise PydanticCustomError(
                    "regex",
                    "has a pattern that is not a valid Python regex: {pattern} ({reason})",
                    {"pattern": show_value(pattern), "reason": str(error)},
                ) from None
        return patterns

    def compiled_patterns(self) -> list[Any]:
        """The blocked patterns as screening compiles them (RE2 where it can):
        `any(p.search(command) for p in ...)`."""
        from ouroboros.tools.screening import compiled

        return [found for found in map(compiled, self.blocked_patterns) if found is not None]


class ContextConfig(_Table):
    """Managing the context window: masking old tool results, winding down, restarting."""

    live = True

    soft_threshold_pct: float = Field(
        0.70,
        gt=0,
        lt=1,
        allow_inf_nan=False,
        description="Fraction of the prompt budget (context limit less the reply's reserve) in "
        "use at which the oldest tool results start being masked.",
    )
    hard_threshold_pct: float = Field(
        0.90,
        gt=0,
        lt=1,
        allow_inf_nan=False,
        description="Fraction of the prompt budget in use at which the agent is told to save "
        "its state; still above it a turn later, the session restarts. Above "
        "soft_threshold_pct.",
    )
    carryover_turns: int = Field(
        5, ge=0, description="Most recent turns carried over into the fresh context on a restart."
    )
    max_restarts: int = Field(0, ge=0, description="Context restarts allowed; 0 = unlimited.")
    auto_restart: bool = Field(
        True,
        description="Restart without asking; false asks before each restart (and stops when "
        "there is no one to ask).",
    )
    mask_batch_size: int = Field(
        3, ge=1, description="Fewest old tool results masked together in one masking round."
    )
    mask_low_water_pct: float = Field(
        0.4,
        gt=0,
        lt=1,
        allow_inf_nan=False,
        description="Fraction of the prompt budget a masking round masks down to, when the "
        "results it may mask free that much: every round makes a server's prompt cache "
        "process everything after the first masked result again, so fewer, larger rounds "
        "cost less. Below soft_threshold_pct.",
    )
    prefix_cache: bool = Field(
        True,
        description="Whether the server keeps the previous prompt's prefix cache (llama.cpp, "
        "Ollama and vLLM do): a masking round then makes it process everything after the first "
        "masked result again, and a round that frees less than that gives way to a restart. "
        "false: masking costs nothing more, as on a server that processes every prompt whole.",
    )
    keep_recent_observations: int = Field(
        2, ge=0, description="Most recent tool results that are never masked."
    )
    max_tool_result_tokens: int = Field(
        8000,
        ge=100,
        description="Longest tool result the model sees, in tokens (and never more than a "
        "quarter of the prompt budget); longer ones are cut, the full text kept for recall.",
    )
    tool_result_truncation: Literal["head", "tail", "both"] = Field(
        "head",
        description='Which part of a long tool result to keep: "head", "tail" or "both" ends.',
    )
    handoff_max_tokens: int = Field(
        600,
        ge=0,
        description="Size of the handoff in the note a restarted session's first prompt ends "
        "with, in tokens (and at most a twentieth of the prompt budget): the facts of the run "
        "so far (files written, last commands, calls failing or cut short), built by the "
        "harness from its log. 0 = the note without them.",
    )
    truncation_guard: bool = Field(
        True,
        description="Watch the server's token counts for signs that it cuts prompts to a "
        "smaller window than configured, and work within that window when they prove it; "
        "false trusts every count (for servers that misreport).",
    )

    @model_validator(mode="after")
    def _soft_below_hard(self) -> ContextConfig:
        if self.soft_threshold_pct >= self.hard_threshold_pct:
            raise PydanticCustomError(
                "threshold_order",
                "soft_threshold_pct ({soft}) must be less than hard_threshold_pct ({hard})",
                {"soft": self.soft_threshold_pct, "hard": self.hard_threshold_pct},
            )
        if self.mask_low_water_pct >= self.soft_threshold_pct:
            raise PydanticCustomError(
                "low_water_order",
                "mask_low_water_pct ({low}) must be less than soft_threshold_pct ({soft})",
                {"low": self.mask_low_water_pct, "soft": self.soft_threshold_pct},
            )
        return self


class LoggingConfig(_Table):
    """Where runs are recorded."""

    state_dir: str = Field(
        ".ouroboros",
        min_length=1,
        description="Directory for run logs and state; relative paths are relative to this file.",
    )
    durability: Literal["turn", "event"] = Field(
        "turn",
        description='When the event log is made durable with fsync: "turn" once per turn '
        "(a killed process loses nothing; a power cut may lose the turn in progress), or "
        '"event" after every event and tool result (slower; a power cut loses at most the '
        "event being written).",
    )
    segment_mb: float = Field(
        2.0,
        gt=0,
        description="The most the event log's current file holds, in MB (give or take one "
        "turn): it is closed into a numbered, compressed segment at a turn's end once it holds "
        "this much, or at the first session boundary once it holds half of it; readers such as "
        "`status` read only the manifest and the current file.",
    )
    keep_mb: float = Field(
        256.0,
        ge=0,
        description="Retention: the closed log segments and saved tool results a run keeps, in "
        "MB; the oldest go first (at each segment's close, and on `ouroboros prune`). 0: no "
        "size limit.",
    )
    keep_sessions: int = Field(
        0,
        ge=0,
        description="Retention: also remove closed segments and tool results of sessions more "
        "than this many sessions old. 0: no limit by sessions.",
    )
    keep_days: float = Field(
        0,
        ge=0,
        description="Retention: also remove closed segments and tool results older than this "
        "many days. 0: no limit by age.",
    )


class MetricsConfig(_Table):
    """Prometheus metrics of the run, served while it goes on."""

    port: int = Field(
        0,
        ge=0,
        le=65535,
        description="Serve Prometheus text at http://<address>:<port>/metrics while a run goes "
        "on (turns, tool calls, restarts, masks, tokens, context use, retries, the window); "
        "0 = off. A port in use stops the run before it starts.",
    )
    address: str = Field(
        "127.0.0.1",
        min_length=1,
        description="The address the metrics server binds: 127.0.0.1 (this machine only) by "
        "default; 0.0.0.0 for a scraper on another host (a pod's Prometheus).",
    )
    heartbeat_secs: float = Field(
        15.0,
        gt=0,
        description="How often <state_dir>/heartbeat is rewritten while the run waits (a model "
        "reply, a retry, a tool call); it is also rewritten at every event. A liveness probe "
        "reads its age: `ouroboros status --json --stale-after SECS`.",
    )


class Config(_Table):
    """The whole of ouroboros.toml."""

    model: ModelConfig = Field(default_factory=ModelConfig, description="The model server.")
    agent: AgentConfig = Field(default_factory=AgentConfig, description="The agent.")
    safety: SafetyConfig = Field(default_factory=SafetyConfig, description="Shell tool limits.")
    context: ContextConfig = Field(
        default_factory=ContextConfig, description="Context window management."
    )
    logging: LoggingConfig = Field(default_factory=LoggingConfig, description="Run records.")
    metrics: MetricsConfig = Field(default_factory=MetricsConfig, description="Prometheus metrics.")


TABLES: Final[dict[str, type[_Table]]] = {
    name: info.annotation
    for name, info in Config.model_fields.items()  # type: ignore[misc]
}
FIELDS: Final[dict[str, FieldInfo]] = {
    f"{table}.{name}": info
    for table, model in TABLES.items()
    for name, info in model.model_fields.items()
}
KEYS: Final[tuple[str, ...]] = tuple(FIELDS)
"""Every dotted key, in table order: ("model.base_url", ..., "logging.durability")."""
PATH_KEYS: Final = frozenset({"agent.workspace", "agent.system_prompt", "logging.state_dir"})


def is_live(key: str) -> bool:
    """Whether a running run takes a new value for `key` at its next session: its table is
    live, or its field is marked LIVE. The others (the workspace, the state dir, the server
    and model) need a new run."""
    table = TABLES[key.split(".")[0]]
    extra = FIELDS[key].json_schema_extra
    return table.live or (isinstance(extra, dict) and bool(extra.get("live")))


def env_var_for(key: str) -> str:
    """The environment variable for a dotted key: "model.name" -> "OUROBOROS_MODEL_NAME"."""
    return ENV_PREFIX + key.replace(".", "_").upper()


def default_flag_name(key: str) -> str:
    """How an error names a flag when load_config gets no flag_names: "--model-name"."""
    return "--" + key.replace(".", "-").replace("_", "-")
