"""Loading a config: the layers, read and merged as raw values, then validated once.

Layers, highest first:

    flags  >  OUROBOROS_<TABLE>_<KEY> (then OLLAMA_HOST)  >  ./ouroboros.toml
           >  $XDG_CONFIG_HOME/ouroboros/ouroboros.toml  >  defaults

    loaded = load_config(flags={"model.name": "qwen3"})
    loaded.config.context.soft_threshold_pct, loaded.workspace, loaded.sources["model.name"]
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any, Final, get_origin

from pydantic import TypeAdapter, ValidationError

from ouroboros.config.loaded import PROJECT_FILENAME, LoadedConfig
from ouroboros.config.schema import (
    ENV_PREFIX,
    FIELDS,
    KEYS,
    PATH_KEYS,
    TABLES,
    Config,
    default_flag_name,
    env_var_for,
)
from ouroboros.config.urls import BadURL, normalize_base_url
from ouroboros.config.values import parse_toml_value, show_value
from ouroboros.config.wording import describe_validation_error, did_you_mean, problem_line
from ouroboros.errors import ConfigError

MAX_NESTING = 32  # levels of arrays and tables in a config file; the schema needs 3

CONFIG_FILENAME: Final = PROJECT_FILENAME
DEFAULT_PROJECT_FILE: Final = Path(CONFIG_FILENAME)
# Compared by identity: this exact object means "the per-user file, honouring XDG_CONFIG_HOME".
DEFAULT_USER_FILE: Final = Path("~/.config/ouroboros") / CONFIG_FILENAME
INIT_HINT: Final = "run `ouroboros init` to create one"


def init_hint(path: Path | str) -> str:
    """What creates a missing config file at `path`, as a message says it."""
    return f"create it with `ouroboros init --missing --config {path}`"


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Final = _Unset()
"""A flag the user did not give. load_config skips flags whose value is UNSET."""


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
            raise ConfigError(f"config file not found: {path} ({init_hint(path)})")
    project_doc = read_toml(project, shown) if project is not None else None
    config, sources = merge_layers(project_doc, shown, user_file, env, flags or {}, names)
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


def merge_layers(
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
        layers.append(file_layer(read_toml(user, str(user)), str(user), f"user file {user}"))
    if project_doc is not None:
        layers.append(file_layer(project_doc, project_shown, f"project file {project_shown}"))
    layers.append(_env_layer(env))
    layers.append(_flag_layer(flags, flag_names))
    if file_wins is not None:  # set_config_value: validate the file's own value for this key
        for layer in layers[-2:]:
            layer.pop(file_wins, None)

    values: dict[str, Any] = {}
    sources = dict.fromkeys(FIELDS, "default")
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


def read_toml(path: Path, shown: str) -> dict[str, Any]:
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {shown} ({init_hint(shown)})") from None
    except IsADirectoryError:
        raise ConfigError(f"config file {shown} is a directory, not a file") from None
    except OSError as error:
        raise ConfigError(f"cannot read config file {shown}: {error.strerror}") from None
    except UnicodeDecodeError as error:
        raise ConfigError(f"{shown} is not UTF-8 text (bad byte at offset {error.start})") from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        reason = str(error)
        raise ConfigError(f"{shown} is not valid TOML: {reason[:1].lower()}{reason[1:]}") from None
    except RecursionError:  # the parser recurses once per level of nesting
        doc = None
    if doc is None or nesting(doc) > MAX_NESTING:
        raise ConfigError(
            f"{shown} nests arrays or tables too deeply: at most {MAX_NESTING} levels are allowed"
        ) from None
    return doc


def nesting(value: Any) -> int:
    """How many levels of arrays and tables `value` holds (without recursing)."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        if isinstance(item, dict):
            stack += [(inner, depth + 1) for inner in item.values()]
        elif isinstance(item, list):
            stack += [(inner, depth + 1) for inner in item]
    return deepest


def file_layer(doc: Mapping[str, Any], shown: str, source: str) -> _Layer:
    layer: _Layer = {}
    for table, body in doc.items():
        if table not in TABLES:
            if not isinstance(body, dict):
                owners = [key for key in FIELDS if key.endswith(f".{table}")]
                hint = ""
                if owners:
                    hint = f" (did you mean {owners[0]}, under [{owners[0].split('.')[0]}]?)"
                raise ConfigError(f"key {table} in {shown} is outside any table{hint}")
            tables = "tables are " + ", ".join(TABLES)
            hint = did_you_mean(table, TABLES, lambda t: f"[{t}]", tables)
            raise ConfigError(f"unknown table [{table}] in {shown}{hint}")
        if not isinstance(body, dict):
            raise ConfigError(
                f"{table} in {shown} must be a table ([{table}]), got {show_value(body)}"
            )
        for name, value in body.items():
            key = f"{table}.{name}"
            if key not in FIELDS:
                takes = f"[{table}] takes " + ", ".join(TABLES[table].model_fields)
                hint = did_you_mean(key, KEYS, str, takes)
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
        if table.lower() not in TABLES or not rest:
            continue  # not one of ours (OUROBOROS_HOME and the like)
        key = f"{table.lower()}.{rest.lower()}"
        if key not in FIELDS:
            raise ConfigError(
                f"unknown environment variable {name}"
                + did_you_mean(name, [env_var_for(k) for k in KEYS], str, "")
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
        if key not in FIELDS:
            hint = did_you_mean(key, KEYS, str, "")
            raise ConfigError(f"flag {flag} sets unknown key {key}{hint}")
        if isinstance(value, os.PathLike):
            value = os.fspath(value)
        if key == "model.base_url" and isinstance(value, str) and "://" not in value:
            value = _ollama_host_url(value)  # as OLLAMA_HOST is read: host[:port], http
        layer[key] = (_coerce(key, value, f"from flag {flag}"), "flag")
    return layer


def _coerce(key: str, value: Any, origin: str) -> Any:
    """Parse an env var or flag value to the field's type (leniently: "0.6", "true", "[...]")."""
    info = FIELDS[key]
    if isinstance(value, str) and get_origin(info.annotation) is list:
        parsed = parse_toml_value(value)
        if not isinstance(parsed, list):
            raise ConfigError(
                f'{key} {origin} must be a TOML array of strings like ["a", "b"], '
                f"got {show_value(value)}"
            )
        value = parsed
    try:
        value = TypeAdapter(info.annotation).validate_python(value)
    except ValidationError as error:
        raise ConfigError(problem_line(error.errors(include_url=False)[0], key, origin)) from None
    if key in PATH_KEYS and value:
        value = os.path.abspath(os.path.expanduser(value))  # typed by someone in the cwd
    return value
