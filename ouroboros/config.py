"""ouroboros.toml: the typed tables, how the layers merge, and editing the file.

Layers, highest first; they are merged as raw values and validated once:

    flags  >  OUROBOROS_<TABLE>_<KEY> (then OLLAMA_HOST)  >  ./ouroboros.toml
           >  $XDG_CONFIG_HOME/ouroboros/ouroboros.toml  >  defaults

Every problem is a ConfigError with one line naming where the value came from, the dotted
key and what is allowed.

    loaded = load_config(flags={"model.name": "qwen3"})
    loaded.config.context.soft_threshold_pct, loaded.workspace, loaded.sources["model.name"]
"""

from __future__ import annotations

import difflib
import json
import math
import os
import re
import textwrap
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Callable, Final, Literal, get_args, get_origin
from urllib.parse import urlsplit, urlunsplit

import tomli_w
import tomlkit
from annotated_types import Ge, Gt, Le, Lt
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails, PydanticCustomError
from tomlkit.exceptions import TOMLKitError

from ouroboros.atomic import write_atomically
from ouroboros.errors import ConfigError
from ouroboros.urls import URL_RULE, BadURL, is_server_url, normalize_base_url

CONFIG_FILENAME: Final = "ouroboros.toml"
DEFAULT_PROJECT_FILE: Final = Path(CONFIG_FILENAME)
# Compared by identity: this exact object means "the per-user file, honouring XDG_CONFIG_HOME".
DEFAULT_USER_FILE: Final = Path("~/.config/ouroboros") / CONFIG_FILENAME
ENV_PREFIX: Final = "OUROBOROS_"
INIT_HINT: Final = "run `ouroboros init` to create one"


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Final = _Unset()
"""A flag the user did not give. load_config skips flags whose value is UNSET."""


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


class _Table(BaseModel):
    model_config = ConfigDict(extra="forbid")


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
        0, ge=0, description="Context window in tokens; 0 = find out from the server."
    )
    temperature: float = Field(
        0.7, ge=0, le=2, allow_inf_nan=False, description="Sampling temperature, 0 to 2."
    )
    max_output_tokens: int = Field(
        2048,
        ge=1,
        description="Most tokens per reply, sent as max_tokens and reserved in the context budget.",
    )
    request_timeout_secs: float = Field(
        600.0,
        gt=0,
        allow_inf_nan=False,
        description="Seconds one reply may take in all, from sending the request to its last "
        "byte; a slower reply is a failed attempt, retried.",
    )
    first_token_timeout_secs: float = Field(
        300.0,
        gt=0,
        allow_inf_nan=False,
        description="Seconds to wait for the first data of a reply (connecting, loading the "
        "model and reading the prompt included); keep-alive comments do not count.",
    )
    idle_timeout_secs: float = Field(
        60.0,
        gt=0,
        allow_inf_nan=False,
        description="Seconds a reply may go without new data once it has begun; keep-alive "
        "comments and empty chunks do not count.",
    )
    max_reply_bytes: int = Field(
        0,
        ge=0,
        description="Most bytes one reply may take on the wire; 0 = 512 per max_output_tokens "
        "plus 1 MB (2.05 MB for 2048).",
    )
    max_retry_secs: float = Field(
        600.0,
        ge=0,
        allow_inf_nan=False,
        description="Seconds to keep retrying a server that is down; 0 = fail at once.",
    )

    @field_validator("base_url")
    @classmethod
    def _server_root(cls, value: str) -> str:
        url = value.strip().rstrip("/")
        if url.endswith("/v1"):
            url = url[: -len("/v1")].rstrip("/")
        if not is_server_url(url):
            raise PydanticCustomError("url", URL_RULE)
        return url

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
    max_turns: int = Field(0, ge=0, description="Model turns in total; 0 = no limit.")
    continue_message: str = Field(
        "Continue working towards your goals. Use your tools.",
        min_length=1,
        description="User message sent to keep the agent going when it ends a turn without "
        "calling a tool.",
    )
    allow_complete: bool = Field(
        True,
        description="Offer the agent the task_complete tool, which ends the run (exit 0) once "
        "the task is done; false: the run goes on until stopped.",
    )
    max_idle_turns: int = Field(
        3,
        ge=0,
        description="Pause the run (resumable) after this many turns in a row without a tool "
        "call; the continue_message before each is sent after a growing pause (0, 2, 4 ... "
        "60 s). 0 = never pause.",
    )


class SafetyConfig(_Table):
    """Limits on the shell tool."""

    shell_timeout_secs: float = Field(
        30.0, gt=0, allow_inf_nan=False, description="Seconds before a shell command is killed."
    )
    max_output_bytes: int = Field(
        65536, ge=1024, description="Most bytes of output kept from one shell command."
    )
    sandbox: Literal["auto", "required", "off"] = Field(
        "auto",
        description='Confining shell commands (Linux Landlock): reads of the system, writes '
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
                    {"pattern": _show(pattern), "reason": str(error)},
                ) from None
        return patterns

    def compiled_patterns(self) -> list[Any]:
        """The blocked patterns as screening compiles them (RE2 where it can):
        `any(p.search(command) for p in ...)`."""
        from ouroboros.tools.screening import compiled

        return [found for found in map(compiled, self.blocked_patterns) if found is not None]


class ContextConfig(_Table):
    """Managing the context window: masking old tool results, winding down, restarting."""

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
        3, ge=1, description="Old tool results masked together in one step."
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
        description="When the event log is made durable with fsync: \"turn\" once per turn "
        "(a killed process loses nothing; a power cut may lose the turn in progress), or "
        "\"event\" after every event and tool result (slower; a power cut loses at most the "
        "event being written).",
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


_TABLES: Final[dict[str, type[_Table]]] = {
    name: info.annotation for name, info in Config.model_fields.items()  # type: ignore[misc]
}
_FIELDS: Final[dict[str, FieldInfo]] = {
    f"{table}.{name}": info
    for table, model in _TABLES.items()
    for name, info in model.model_fields.items()
}
KEYS: Final[tuple[str, ...]] = tuple(_FIELDS)
"""Every dotted key, in table order: ("model.base_url", ..., "logging.state_dir")."""
_PATH_KEYS: Final = frozenset({"agent.workspace", "agent.system_prompt", "logging.state_dir"})


def env_var_for(key: str) -> str:
    """The environment variable for a dotted key: "model.name" -> "OUROBOROS_MODEL_NAME"."""
    return ENV_PREFIX + key.replace(".", "_").upper()


def default_flag_name(key: str) -> str:
    """How an error names a flag when load_config gets no flag_names: "--model-name"."""
    return "--" + key.replace(".", "-").replace("_", "-")


# ---------------------------------------------------------------------------------------------
# The loaded result


@dataclass
class LoadedConfig:
    """The validated config, the project file it came from, and where each value came from."""

    config: Config
    path: Path | None
    root: Path
    sources: dict[str, str]
    flag_names: dict[str, str] = field(default_factory=dict, repr=False)
    reader: Callable[[], LoadedConfig] | None = field(default=None, repr=False, compare=False)

    def reread(self) -> LoadedConfig:
        """The layers read again as load_config first read them (same flags, environment and
        user file): what a running run applies at its next session. Raises ConfigError."""
        if self.reader is None:
            return self
        return self.reader()

    @property
    def workspace(self) -> Path:
        return self._resolve(self.config.agent.workspace)

    @property
    def system_prompt_path(self) -> Path:
        return self._resolve(self.config.agent.system_prompt)

    @property
    def state_dir(self) -> Path:
        return self._resolve(self.config.logging.state_dir)

    def check_files(self) -> None:
        """Raise ConfigError unless the system prompt is a UTF-8 text file, the workspace a
        directory, and the state dir a directory or a path where one can be made."""
        self._require("agent.system_prompt", "system prompt", self.system_prompt_path, "file")
        self._require("agent.workspace", "workspace", self.workspace, "directory")
        self._require_text("agent.system_prompt", "system prompt", self.system_prompt_path)
        self.check_state_dir()

    def check_state_dir(self) -> None:
        """Raise ConfigError when the state dir, or a directory above it, is a file."""
        path = self.state_dir
        existing = next(p for p in (path, *path.parents) if p.exists())
        if existing.is_dir():
            return
        key = "logging.state_dir"
        origin = _origin(self.sources.get(key, "default"), key, self.flag_names)
        raise ConfigError(f"state dir {path} must be a directory, but {existing} is a file "
                          f"({key} {origin}); point {key} elsewhere or move the file")

    def _require_text(self, key: str, what: str, path: Path) -> None:
        origin = _origin(self.sources.get(key, "default"), key, self.flag_names)
        try:
            path.read_bytes().decode("utf-8")
        except UnicodeDecodeError as error:
            raise ConfigError(f"{what} {path} is not UTF-8 text (bad byte at offset "
                              f"{error.start}; {key} {origin}); it must be saved as UTF-8"
                              ) from None
        except OSError as error:
            raise ConfigError(f"cannot read the {what} {path}: {error.strerror} "
                              f"({key} {origin})") from None

    def redacted(self) -> dict[str, Any]:
        """The effective config as plain JSON-able data for the log, with no secrets in it."""
        data = self.config.model_dump(mode="json")
        data["model"]["base_url"] = _without_password(data["model"]["base_url"])
        return data

    def _resolve(self, value: str) -> Path:
        return (self.root / Path(value).expanduser()).resolve()

    def _require(self, key: str, what: str, path: Path, kind: str) -> None:
        if path.is_dir() if kind == "directory" else path.is_file():
            return
        origin = _origin(self.sources.get(key, "default"), key, self.flag_names)
        problem = f"is not a {kind}" if path.exists() else f"{kind} not found"
        raise ConfigError(
            f"{what} {problem}: {path} ({key} {origin}); run `ouroboros init` or create it"
        )


def _without_password(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username or ''}:***@{parts.hostname or ''}"
    if parts.port is not None:
        netloc += f":{parts.port}"
    return urlunsplit(parts._replace(netloc=netloc))


# ---------------------------------------------------------------------------------------------
# Loading

# dotted key -> (value, source label), one dict per layer
_Layer = dict[str, tuple[Any, str]]


def load_config(
    path: Path | None = None,
    flags: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    user_file: Path | None = DEFAULT_USER_FILE,
    *,
    flag_names: Mapping[str, str] | None = None,
) -> LoadedConfig:
    """Merge defaults, the user file, the project file, the environment and flags; validate once.

    `path` None means the nearest ouroboros.toml from the current directory up (see
    `find_project`), or no project file at all. `flags` maps dotted keys to values (only the
    flags given; UNSET values are skipped). `flag_names` maps dotted keys to the flag as the user
    typed it ("model.name" -> "--model") for error messages. `user_file` None skips that layer.

        loaded = load_config(Path("ouroboros.toml"), flags={"agent.max_turns": 10})
    """
    env = os.environ if env is None else env
    names = dict(flag_names or {})
    if path is None:
        project = find_project(Path.cwd())
        here = project is None or project.parent == Path.cwd()
        shown = str(DEFAULT_PROJECT_FILE) if here else str(project)
    else:
        project, shown = path, str(path)
        if not path.exists():
            raise ConfigError(f"config file not found: {path} ({INIT_HINT})")
    project_doc = _read_toml(project, shown) if project is not None else None
    config, sources = _build(project_doc, shown, user_file, env, flags or {}, names)
    absolute = project.resolve() if project is not None else None
    root = absolute.parent if absolute is not None else Path.cwd().resolve()
    reader = partial(load_config, path, flags, env, user_file, flag_names=flag_names)
    return LoadedConfig(config, absolute, root, sources, names, reader)


def find_project(start: Path) -> Path | None:
    """The nearest ouroboros.toml in `start` or a directory above it, as git finds its
    repository; None when there is none up to the filesystem root.

        find_project(Path("/home/me/proj/workspace/src"))  # /home/me/proj/ouroboros.toml
    """
    for directory in (start, *start.parents):
        candidate = directory / DEFAULT_PROJECT_FILE
        if candidate.is_file():
            return candidate
    return None


def _build(
    project_doc: Mapping[str, Any] | None,
    project_shown: str,
    user_file: Path | None,
    env: Mapping[str, str],
    flags: Mapping[str, Any],
    flag_names: Mapping[str, str],
    *,
    file_wins: str | None = None,
) -> tuple[Config, dict[str, str]]:
    layers: list[_Layer] = []
    user = _user_file(user_file, env)
    if user is not None and user.exists():
        layers.append(_file_layer(_read_toml(user, str(user)), str(user), f"user file {user}"))
    if project_doc is not None:
        layers.append(_file_layer(project_doc, project_shown, f"project file {project_shown}"))
    layers.append(_env_layer(env))
    layers.append(_flag_layer(flags, flag_names))
    if file_wins is not None:  # set_config_value: validate the file's own value for this key
        for layer in layers[-2:]:
            layer.pop(file_wins, None)

    values: dict[str, Any] = {}
    sources = dict.fromkeys(_FIELDS, "default")
    for layer in layers:
        for key, (value, source) in layer.items():
            values[key] = value
            sources[key] = source
    nested: dict[str, dict[str, Any]] = {}
    for key, value in values.items():
        table, name = key.split(".")
        nested.setdefault(table, {})[name] = value
    try:
        config = Config.model_validate(nested, strict=True)
    except ValidationError as error:
        raise ConfigError(describe_validation_error(error, sources, flag_names)) from None
    return config, sources


def _user_file(user_file: Path | None, env: Mapping[str, str]) -> Path | None:
    if user_file is None:
        return None
    if user_file is not DEFAULT_USER_FILE:
        return user_file.expanduser()
    xdg = env.get("XDG_CONFIG_HOME", "")
    if xdg and Path(xdg).is_absolute():
        base = Path(xdg)
    else:
        home = env.get("HOME")
        base = (Path(home) if home else Path.home()) / ".config"
    return base / "ouroboros" / CONFIG_FILENAME


def _read_toml(path: Path, shown: str) -> dict[str, Any]:
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {shown} ({INIT_HINT})") from None
    except IsADirectoryError:
        raise ConfigError(f"config file {shown} is a directory, not a file") from None
    except OSError as error:
        raise ConfigError(f"cannot read config file {shown}: {error.strerror}") from None
    except UnicodeDecodeError as error:
        raise ConfigError(f"{shown} is not UTF-8 text (bad byte at offset {error.start})") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        reason = str(error)
        raise ConfigError(f"{shown} is not valid TOML: {reason[:1].lower()}{reason[1:]}") from None


def _file_layer(doc: Mapping[str, Any], shown: str, source: str) -> _Layer:
    layer: _Layer = {}
    for table, body in doc.items():
        if table not in _TABLES:
            if not isinstance(body, dict):
                owners = [key for key in _FIELDS if key.endswith(f".{table}")]
                hint = ""
                if owners:
                    hint = f" (did you mean {owners[0]}, under [{owners[0].split('.')[0]}]?)"
                raise ConfigError(f"key {table} in {shown} is outside any table{hint}")
            tables = "tables are " + ", ".join(_TABLES)
            hint = _did_you_mean(table, _TABLES, lambda t: f"[{t}]", tables)
            raise ConfigError(f"unknown table [{table}] in {shown}{hint}")
        if not isinstance(body, dict):
            raise ConfigError(f"{table} in {shown} must be a table ([{table}]), got {_show(body)}")
        for name, value in body.items():
            key = f"{table}.{name}"
            if key not in _FIELDS:
                takes = f"[{table}] takes " + ", ".join(_TABLES[table].model_fields)
                hint = _did_you_mean(key, KEYS, str, takes)
                raise ConfigError(f"unknown key {key} in {shown}{hint}")
            layer[key] = (value, source)
    return layer


def _env_layer(env: Mapping[str, str]) -> _Layer:
    layer: _Layer = {}
    host = env.get("OLLAMA_HOST", "").strip()
    if host:
        layer["model.base_url"] = (_ollama_host_url(host), "environment OLLAMA_HOST")
    for name, text in sorted(env.items()):
        if not name.startswith(ENV_PREFIX):
            continue
        table, _, rest = name[len(ENV_PREFIX) :].partition("_")
        if table.lower() not in _TABLES or not rest:
            continue  # not one of ours (OUROBOROS_HOME and the like)
        key = f"{table.lower()}.{rest.lower()}"
        if key not in _FIELDS:
            raise ConfigError(
                f"unknown environment variable {name}"
                + _did_you_mean(name, [env_var_for(k) for k in KEYS], str, "")
            )
        value = _coerce(key, text, f"from environment variable {name}")
        layer[key] = (value, f"environment {name}")
    return layer


def _ollama_host_url(host: str) -> str:
    try:
        return normalize_base_url(host)
    except BadURL:  # left for the URL check to name
        return host


def _flag_layer(flags: Mapping[str, Any], flag_names: Mapping[str, str]) -> _Layer:
    layer: _Layer = {}
    for key, value in flags.items():
        if value is UNSET:
            continue
        flag = flag_names.get(key) or default_flag_name(key)
        if key not in _FIELDS:
            hint = _did_you_mean(key, KEYS, str, "")
            raise ConfigError(f"flag {flag} sets unknown key {key}{hint}")
        if isinstance(value, os.PathLike):
            value = os.fspath(value)
        layer[key] = (_coerce(key, value, f"from flag {flag}"), "flag")
    return layer


def _coerce(key: str, value: Any, origin: str) -> Any:
    """Parse an env var or flag value to the field's type (leniently: "0.6", "true", "[...]")."""
    info = _FIELDS[key]
    if isinstance(value, str) and get_origin(info.annotation) is list:
        parsed = _parse_toml_value(value)
        if not isinstance(parsed, list):
            example = '["a", "b"]'
            raise ConfigError(
                f"{key} {origin} must be a TOML array of strings like {example}, got {_show(value)}"
            )
        value = parsed
    try:
        value = TypeAdapter(info.annotation).validate_python(value)
    except ValidationError as error:
        raise ConfigError(_problem_line(error.errors(include_url=False)[0], key, origin)) from None
    if key in _PATH_KEYS and value:
        value = os.path.abspath(os.path.expanduser(value))  # typed by someone in the cwd
    return value


# ---------------------------------------------------------------------------------------------
# Error messages


def describe_validation_error(
    error: ValidationError,
    sources: Mapping[str, str] | None = None,
    flag_names: Mapping[str, str] | None = None,
) -> str:
    """One plain-English line for a Config ValidationError, blaming the layer that set the key.

        "context.soft_threshold_pct in ouroboros.toml must be greater than 0 and less than 1,
        got 1.5"
    """
    sources = sources or {}
    flag_names = flag_names or {}
    problems = error.errors(include_url=False)
    first = problems[0]
    loc = [str(part) for part in first["loc"]]

    def origin(key: str) -> str:
        return _origin(sources.get(key, "default"), key, flag_names)

    if first["type"] == "threshold_order":
        soft, hard = "context.soft_threshold_pct", "context.hard_threshold_pct"
        ctx = first.get("ctx", {})
        line = (
            f"{soft} ({_show(ctx.get('soft'))} {origin(soft)}) must be less than "
            f"{hard} ({_show(ctx.get('hard'))} {origin(hard)})"
        )
    elif len(loc) >= 2:
        key = ".".join(loc[:2])
        if first["type"] == "extra_forbidden" or key not in _FIELDS:
            line = f"unknown key {key}" + _did_you_mean(key, KEYS, str, "")
        else:
            line = _problem_line(first, key, origin(key))
    else:
        line = f"{'.'.join(loc) or 'config'}: {first['msg']}"
    more = len(problems) - 1
    if more:
        line += f" (and {more} more problem{'s' if more > 1 else ''})"
    return _one_line(line)


def _problem_line(problem: ErrorDetails, key: str, origin: str) -> str:
    """'<key> <origin> must be <allowed>, got <value>' for one pydantic error on one field."""
    info = _FIELDS[key]
    kind = problem["type"]
    value = problem["input"]
    index = [part for part in problem["loc"] if isinstance(part, int)]
    got = f", got {_show(value)}" + (f" (item {index[0] + 1})" if index else "")
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        allowed = _range(info)
    elif kind == "finite_number":
        allowed = "a finite number"
    elif kind == "string_too_short":
        return f"{key} {origin} must not be empty"
    elif kind.endswith(("_type", "_parsing", "_from_float")) or kind == "literal_error":
        allowed = _kind(info.annotation)
    elif kind in ("env_var_name", "regex"):
        # the message says it all; an env_var_name value may be a secret, so it is not echoed
        return _one_line(f"{key} {origin} {problem['msg']}")
    else:
        allowed = problem["msg"].removeprefix("Value error, ")
        allowed = allowed[:1].lower() + allowed[1:]
        if not allowed.startswith("must "):
            return _one_line(f"{key} {origin}: {allowed}{got}")
        return _one_line(f"{key} {origin} {allowed}{got}")
    return _one_line(f"{key} {origin} must be {allowed}{got}")


def _kind(annotation: Any) -> str:
    if annotation is bool:
        return "true or false"
    if annotation is int:
        return "a whole number"
    if annotation is float:
        return "a number"
    if annotation is str:
        return "a string"
    if get_origin(annotation) is list:
        return "a list of strings"
    if get_origin(annotation) is Literal:
        choices = [json.dumps(choice) for choice in get_args(annotation)]
        return "one of " + ", ".join(choices[:-1]) + " or " + choices[-1]
    return str(annotation)


def _range(info: FieldInfo) -> str:
    bounds: dict[str, Any] = {}
    for item in info.metadata:
        for kind in (Gt, Ge, Lt, Le):
            if isinstance(item, kind):
                bounds[kind.__name__] = _number(getattr(item, kind.__name__.lower()))
    if "Ge" in bounds and "Le" in bounds:
        return f"between {bounds['Ge']} and {bounds['Le']}"
    words = {"Gt": "greater than", "Ge": "at least", "Lt": "less than", "Le": "at most"}
    return " and ".join(f"{words[kind]} {bound}" for kind, bound in bounds.items())


def _number(value: Any) -> str:
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return str(int(value))
    return str(value)


def _show(value: Any) -> str:
    """A value as a person would write it in the TOML file."""
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (int, float)):
        return _number(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_show(item) for item in value) + "]"
    if isinstance(value, dict):
        return "a table"
    return str(value)


def _origin(source: str, key: str, flag_names: Mapping[str, str]) -> str:
    for prefix in ("user file ", "project file "):
        if source.startswith(prefix):
            return "in " + source.removeprefix(prefix)
    if source.startswith("environment "):
        return "from environment variable " + source.removeprefix("environment ")
    if source == "flag":
        return "from flag " + (flag_names.get(key) or default_flag_name(key))
    return "by default"


def _did_you_mean(word: str, choices: Any, fmt: Any, otherwise: str) -> str:
    match = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    if match:
        return f" (did you mean {fmt(match[0])}?)"
    return f" ({otherwise})" if otherwise else ""


def _one_line(text: str) -> str:
    return " ".join(text.split())


# ---------------------------------------------------------------------------------------------
# Showing and editing


def effective_items(loaded: LoadedConfig) -> list[tuple[str, Any, str]]:
    """(dotted key, effective value, where it came from) for every key, in table order."""
    items = []
    for key in KEYS:
        table, name = key.split(".")
        value = getattr(getattr(loaded.config, table), name)
        items.append((key, value, loaded.sources[key]))
    return items


def set_config_value(
    path: Path,
    key: str,
    raw: str,
    *,
    env: Mapping[str, str] | None = None,
    user_file: Path | None = DEFAULT_USER_FILE,
) -> Any:
    """Set one key in a config file, as `ouroboros config set context.soft_threshold_pct 0.6`.

    `raw` is read as a TOML value when it parses as one (0.6, -1, true, ["a"], "x"), else as a
    string; a string key always gets text. The new file is validated like load_config (with the
    user file and the environment, but with this key's value taken from the file); on any error
    the file is left untouched. Every other byte of the file is kept (see `edit_toml`).
    Returns the value written.
    """
    if not path.exists():
        raise ConfigError(f"config file not found: {path} ({INIT_HINT})")
    if key not in _FIELDS:
        raise ConfigError(
            f"unknown key {key}"
            + _did_you_mean(key, KEYS, str, "keys look like table.key, e.g. model.name")
        )
    shown = str(path)
    doc = _read_toml(path, shown)
    _file_layer(doc, shown, "")  # the keys already in the file must be known
    value = _parse_toml_value(raw)
    if _FIELDS[key].annotation is str and not isinstance(value, str):
        value = raw
    table, name = key.split(".")
    doc.setdefault(table, {})[name] = value
    env = os.environ if env is None else env
    _build(doc, shown, user_file, env, {}, {}, file_wins=key)
    try:
        text = edit_toml(path.read_bytes().decode("utf-8"), key, value)
    except ValueError:
        raise ConfigError(
            f"cannot set {key} in {shown} without rewriting its layout; set it by hand"
        ) from None
    try:
        write_atomically(path.resolve(), text)
    except OSError as error:
        raise ConfigError(f"cannot write config file {path}: {error.strerror}") from None
    return value


def edit_toml(text: str, key: str, value: Any) -> str:
    """`text` with one dotted key set to `value` and every other byte kept.

    A key already there gets the new value in place (tomlkit); a commented-out default, as
    `ouroboros init` writes them (`# temperature = 0.7`), is replaced by the uncommented line;
    otherwise the line goes at the end of its table, or a new table at the end. The result is
    checked to parse to the intended document; ValueError when no edit gives it.

        edit_toml("[model]\n# temperature = 0.7\n", "model.temperature", 0.2)
        # "[model]\ntemperature = 0.2\n"
    """
    expected = tomllib.loads(text)
    table, name = key.split(".")
    if not isinstance(expected.setdefault(table, {}), dict):
        raise ValueError(f"{table} is not a table")
    expected[table][name] = value
    newline = "\r\n" if "\r\n" in text else "\n"
    line = f"{name} = {_toml_value(value)}".replace("\n", newline)
    for edit in (_edit_in_place, _edit_by_lines, _edit_anyhow):
        try:
            candidate = edit(text, table, name, line, newline)
            if candidate is not None and tomllib.loads(candidate) == expected:
                return candidate
        except (tomllib.TOMLDecodeError, TOMLKitError):
            continue
    raise ValueError(f"cannot set {key} in place")


def _edit_in_place(text: str, table: str, name: str, line: str, newline: str) -> str | None:
    """A key already in the file, set by tomlkit where it is (its trailing comment kept)."""
    doc = tomlkit.parse(text)
    body = doc.get(table)
    if not isinstance(body, dict) or name not in body:
        return None
    body[name] = tomlkit.parse(line + newline)[name]
    return doc.as_string()


def _edit_anyhow(text: str, table: str, name: str, line: str, newline: str) -> str:
    """The last resort, for layouts the line edits do not know (dotted keys, quoted headers)."""
    doc = tomlkit.parse(text)
    doc.setdefault(table, tomlkit.table())[name] = tomlkit.parse(line + newline)[name]
    return doc.as_string()


_TABLE_HEADER: Final = re.compile(r"\s*\[\s*([A-Za-z0-9_-]+)\s*\]\s*(?:#.*)?")


def _edit_by_lines(text: str, table: str, name: str, line: str, newline: str) -> str:
    """A key not in the file: its commented-out default uncommented where it is, else the
    line added at the end of its table, else a new table at the end of the file."""
    lines = text.splitlines(keepends=True)
    span = _table_span(lines, table)
    if span is None:
        ending = "" if not text or text.endswith(("\n", "\r")) else newline
        gap = newline if text.strip() else ""
        return f"{text}{ending}{gap}[{table}]{newline}{line}{newline}"
    header, end = span
    for at in range(header + 1, end):
        stop = _commented_value_end(lines, at, end, name)
        if stop is not None:
            ending = newline if lines[stop - 1].endswith(("\n", "\r")) else ""
            return "".join([*lines[:at], line + ending, *lines[stop:]])
    if end < len(lines):
        while end > header + 1 and lines[end - 1].lstrip().startswith("#"):
            end -= 1  # the comment just above the next header describes that table
    while end > header + 1 and not lines[end - 1].strip():
        end -= 1
    before = lines[end - 1]
    ending = "" if before.endswith(("\n", "\r")) else newline
    return "".join([*lines[: end - 1], before + ending, line + newline, *lines[end:]])


def _table_span(lines: list[str], table: str) -> tuple[int, int] | None:
    """(index of the `[table]` header line, index of the next header or the end)."""
    starts = [at for at, row in enumerate(lines) if row.lstrip().startswith("[")]
    for start, end in zip(starts, [*starts[1:], len(lines)]):
        match = _TABLE_HEADER.fullmatch(lines[start].rstrip("\r\n"))
        if match and match.group(1) == table:
            return start, end
    return None


def _commented_value_end(lines: list[str], at: int, end: int, name: str) -> int | None:
    """If lines[at] starts a commented-out `name = value` (over one or more comment lines),
    the index just after it."""
    if not re.match(rf"#\s?{re.escape(name)}\s*=", lines[at]):
        return None
    body = ""
    for stop in range(at, end):
        if not lines[stop].startswith("#"):
            return None
        body += re.sub(r"^#\s?", "", lines[stop])
        try:
            if name in tomllib.loads(body):
                return stop + 1
        except tomllib.TOMLDecodeError:
            continue
    return None


def _parse_toml_value(raw: str) -> Any:
    try:
        doc = tomllib.loads(f"value = {raw}")
    except tomllib.TOMLDecodeError:
        return raw
    return doc["value"] if set(doc) == {"value"} else raw


def render_template() -> str:
    """The text of a fresh ouroboros.toml: every table, and every key commented out with its
    default under its description, so a key takes effect (over the user file and the
    defaults) only once someone uncomments or sets it.

    Generated from the models, so it cannot drift from them. `ouroboros init` writes it.
    """
    lines = [
        "# Ouroboros configuration. Every key is listed, commented out, with its default and what",
        "# it does; uncomment one (or run `ouroboros config set KEY VALUE`) to change it.",
        "# Precedence: flags > OUROBOROS_<TABLE>_<KEY> environment variables > this file",
        "#   > ~/.config/ouroboros/ouroboros.toml > defaults.",
        "# `ouroboros config show` prints the effective values, where each came from and what",
        "# differs from the default.",
    ]
    for table, model in _TABLES.items():
        summary = (model.__doc__ or "").strip().split("\n\n")[0]
        lines += ["", *_comment(summary), f"[{table}]"]
        for index, (name, info) in enumerate(model.model_fields.items()):
            if index:
                lines.append("")
            default = info.get_default(call_default_factory=True)
            setting = f"{name} = {_toml_value(default)}"
            lines += [*_comment(info.description or ""), *_comment_out(setting)]
    return "\n".join(lines) + "\n"


def _comment_out(text: str) -> list[str]:
    return ["# " + line for line in text.split("\n")]


def _comment(text: str) -> list[str]:
    return ["# " + line for line in textwrap.wrap(" ".join(text.split()), width=92)]


def _toml_value(value: Any) -> str:
    if isinstance(value, list):
        if not value:
            return "[]"
        return "[\n" + "".join(f"    {_toml_value(item)},\n" for item in value) + "]"
    if isinstance(value, str) and "\\" in value and not re.search(r"[\x00-\x1f\x7f]", value):
        # literal strings keep regexes readable
        if "'" not in value:
            return f"'{value}'"
        if "'''" not in value and not value.endswith("'"):
            return f"'''{value}'''"
    return tomli_w.dumps({"v": value}).removeprefix("v = ").rstrip("\n")
