"""A loaded config: the validated tables, the paths they name resolved against the project,
and where each value came from.

    loaded = load_config()
    loaded.workspace, loaded.sources["model.name"]  # Path(...), "flag"
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ouroboros.config.schema import KEYS, Config
from ouroboros.config.urls import shown_url
from ouroboros.config.wording import where_set
from ouroboros.errors import ConfigError

PROJECT_FILENAME = "ouroboros.toml"


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

    def origin(self, key: str) -> str:
        """Where `key` was set, as a message says it: "in ouroboros.toml", "by default", ..."""
        return where_set(self.sources.get(key, "default"), key, self.flag_names)

    @property
    def workspace(self) -> Path:
        """The agent's workspace directory, absolute."""
        return self._resolve(self.config.agent.workspace)

    @property
    def system_prompt_path(self) -> Path:
        """The system prompt file, absolute."""
        return self._resolve(self.config.agent.system_prompt)

    @property
    def state_dir(self) -> Path:
        """Where runs are recorded, absolute."""
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
        origin = self.origin(key)
        raise ConfigError(
            f"state dir {path} must be a directory, but {existing} is a file "
            f"({key} {origin}); point {key} elsewhere or move the file"
        )

    def _require_text(self, key: str, what: str, path: Path) -> None:
        origin = self.origin(key)
        try:
            path.read_bytes().decode("utf-8")
        except UnicodeDecodeError as error:
            raise ConfigError(
                f"{what} {path} is not UTF-8 text (bad byte at offset "
                f"{error.start}; {key} {origin}); it must be saved as UTF-8"
            ) from None
        except OSError as error:
            raise ConfigError(
                f"cannot read the {what} {path}: {error.strerror} ({key} {origin})"
            ) from None

    def redacted(self) -> dict[str, Any]:
        """The effective config as plain JSON-able data for the log, with no secrets in it."""
        data = self.config.model_dump(mode="json")
        data["model"]["base_url"] = shown_url(data["model"]["base_url"])
        return data

    def _resolve(self, value: str) -> Path:
        return (self.root / Path(value).expanduser()).resolve()

    def _require(self, key: str, what: str, path: Path, kind: str) -> None:
        if path.is_dir() if kind == "directory" else path.is_file():
            return
        origin = self.origin(key)
        if path.exists():
            raise ConfigError(
                f"{what} is not a {kind}: {path} ({key} {origin}); point {key} at a {kind}"
            )
        raise ConfigError(
            f"{what} {kind} not found: {path} ({key} {origin}); create it with "
            f"`{self.init_missing_command()}`, or point {key} at yours"
        )

    def init_missing_command(self) -> str:
        """The command that creates what this project is missing, as typed from here:
        `ouroboros init --missing`, with --config when this directory would not find it."""
        here = Path.cwd()
        nearest = next(
            (
                directory / PROJECT_FILENAME
                for directory in (here, *here.parents)
                if (directory / PROJECT_FILENAME).is_file()
            ),
            None,
        )
        if self.path is None or nearest is not None and nearest.resolve() == self.path:
            return "ouroboros init --missing"
        return f"ouroboros init --missing --config {self.path}"


def effective_items(loaded: LoadedConfig) -> list[tuple[str, Any, str]]:
    """(dotted key, effective value, where it came from) for every key, in table order."""
    items = []
    for key in KEYS:
        table, name = key.split(".")
        value = getattr(getattr(loaded.config, table), name)
        items.append((key, value, loaded.sources[key]))
    return items
