"""Tuning a running agent: what changed in the config since the run last read it, and what of
it a running run can take.

At every session start the runner reads the config layers again. Keys a session can pick up
(`is_live`) take effect; the others (the workspace, the state dir, the server and model) are
reported as needing a new run and left as they were. Decisions here are pure; the runner does
the reading, the applying and the logging.

    changes = config_diff(old.redacted(), new.redacted(), new.sources)
    applied = [c for c in changes if c.live]   # one `config_changed` event each
    kept = [c for c in changes if not c.live]  # one warning each: needs a new run
    loaded = with_live(old, new)               # what the next session runs with
"""

from __future__ import annotations

import json
import signal
from copy import deepcopy
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Mapping

from ouroboros.config import KEYS, Config, LoadedConfig
from ouroboros.config.schema import is_live
from ouroboros.errors import UsageError
from ouroboros.sandbox import lock
from ouroboros.store import holder as lock_file
from ouroboros.store.events import ConfigChanged, EventBase, RunStart

RELOAD_REASON: Final = "reload requested"
RELOAD_WIND_DOWN_TEXT: Final = (
    "[The harness will restart this session shortly, to apply new settings. Save your "
    "progress and state to workspace files now (what is done, what is next, anything you "
    "would need to continue); only your files carry over.]"
)

ConfigData = Mapping[str, Mapping[str, Any]]  # {"context": {"soft_threshold_pct": 0.7}, ...}


@dataclass(frozen=True)
class Change:
    """One key whose value differs, and the layer the new value came from."""

    key: str
    old: Any
    new: Any
    source: str

    @property
    def live(self) -> bool:
        return is_live(self.key)


def value_of(config: ConfigData, key: str) -> Any:
    table, name = key.split(".")
    return (config.get(table) or {}).get(name)


def config_diff(old: ConfigData, new: ConfigData, sources: Mapping[str, str]) -> list[Change]:
    """Every key whose value differs between two configs (as `LoadedConfig.redacted()` data),
    in table order, with the source of the new value.

        config_diff({"context": {"soft_threshold_pct": 0.7}},
                    {"context": {"soft_threshold_pct": 0.6}}, {})
        -> [Change("context.soft_threshold_pct", 0.7, 0.6, "default")]
    """
    return [
        Change(key, value_of(old, key), value_of(new, key), sources.get(key, "default"))
        for key in KEYS
        if value_of(old, key) != value_of(new, key)
    ]


def with_live(old: LoadedConfig, new: LoadedConfig) -> LoadedConfig:
    """`old` with the live keys (and their sources) taken from `new`; every other key keeps
    its old value, so a run never moves its workspace or its server under itself."""
    data = old.config.model_dump()
    fresh = new.config.model_dump()
    sources = dict(old.sources)
    for key in KEYS:
        if is_live(key):
            table, name = key.split(".")
            data[table][name] = fresh[table][name]
            sources[key] = new.sources.get(key, "default")
    return LoadedConfig(
        Config.model_validate(data), old.path, old.root, sources, old.flag_names, old.reader
    )


def recorded_config(events: list[EventBase]) -> dict[str, dict[str, Any]]:
    """The config a run last ran with, from its log: the `run_start` record's, then every
    `config_changed` after it."""
    config: dict[str, dict[str, Any]] = {}
    for event in events:
        if isinstance(event, RunStart):
            config = deepcopy(event.config)
        elif isinstance(event, ConfigChanged):
            table, name = event.key.split(".")
            config.setdefault(table, {})[name] = event.new
    return config


def show(value: Any) -> str:
    """A value as it reads in the log and in messages: 0.6, true, "text"."""
    return json.dumps(value, ensure_ascii=False)


def needs_new_run(change: Change) -> str:
    """The warning for a change the running run cannot take."""
    return (
        f"{change.key} changed to {show(change.new)} ({change.source}) but needs a new run; "
        f"this run keeps {show(change.old)}"
    )


def bad_edit(message: str) -> str:
    """The warning for a config that no longer loads: the error as at start, and what happens."""
    return f"{message}; the run keeps its current settings until that is fixed"


def effect_note(key: str, session: int | None, turn: int | None) -> str:
    """What `config set` says when a run is going on: when the new value takes effect."""
    where = f"; the run is in session {session}, turn {turn}" if session is not None else ""
    if not is_live(key):
        return (
            f"note: a run is going on{where}; {key} needs a new run to take effect "
            "(the running one keeps its value)"
        )
    return (
        f"note: takes effect at the next session{where} "
        "(`ouroboros reload` ends this session early)"
    )


def live_holder(state_dir: Path) -> dict[str, Any] | None:
    """Who holds the state dir's lock, if a process holds its kernel lock now; else None (a
    pid in the file alone proves nothing: the harness may have died, its pid reused)."""
    return lock_file.live_holder(state_dir / lock_file.LOCK_FILE)


def request_reload(state_dir: Path, host: str) -> dict[str, Any]:
    """Send SIGHUP to the harness running a run in `state_dir`: it ends its session early
    (wind-down first) and the next one reads the config again. Returns the lock holder.
    Raises UsageError when no run is going on (no process holds the lock: the pid the lock
    file names is not signalled) or it runs on another host."""
    holder = live_holder(state_dir)
    if holder is not None and holder.get("host") != host:
        raise UsageError(
            f"the run in {state_dir} is on host {holder.get('host')}; run `ouroboros reload` there"
        )
    signalled = (
        lock.signal_holder(state_dir / lock_file.LOCK_FILE, signal.SIGHUP)
        if holder is not None
        else None
    )
    if signalled is None:
        raise UsageError(
            f"no run is going on in {state_dir}; a new value is read when a run starts or resumes"
        )
    return signalled
