"""The config as far as it holds, for the commands that only read a run (`status`, `runs`,
`logs`, `stats`, `watch`): a typo in ouroboros.toml must not hide a run that is going on.

    loaded = load_leniently(Path("ouroboros.toml"))   # never raises for a bad value
    loaded.state_dir                                   # from the file when that key is good

Every value that cannot be read (an unknown table or key, a value of the wrong type, a file
that is not TOML) is left at its default; the rest are taken as `load_config` takes them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ouroboros.config.layering import (
    DEFAULT_USER_FILE,
    _env_layer,
    _user_file,
    read_toml,
)
from ouroboros.config.loaded import LoadedConfig
from ouroboros.config.schema import FIELDS, Config
from ouroboros.errors import ConfigError


def load_leniently(
    path: Path, env: Mapping[str, str] | None = None, user_file: Path | None = DEFAULT_USER_FILE
) -> LoadedConfig:
    """The project's config with every value that does not validate left at its default."""
    env = os.environ if env is None else env
    values: dict[str, tuple[Any, str]] = {}
    user = _user_file(user_file, env)
    for file, label in ((user, "user file"), (path, "project file")):
        if file is not None and file.is_file():
            values.update(_known_values(file, f"{label} {file}"))
    try:
        values.update(_env_layer(env))
    except ConfigError:
        pass  # an unknown OUROBOROS_ variable: the environment layer is left out
    config = _validated(values)
    sources = dict.fromkeys(FIELDS, "default")
    sources.update({key: source for key, (_, source) in values.items()})
    absolute = path.resolve()
    return LoadedConfig(config, absolute, absolute.parent, sources)


def _known_values(file: Path, source: str) -> dict[str, tuple[Any, str]]:
    try:
        doc = read_toml(file, str(file))
    except ConfigError:
        return {}
    return {
        f"{table}.{name}": (value, source)
        for table, body in doc.items()
        if isinstance(body, dict)
        for name, value in body.items()
        if f"{table}.{name}" in FIELDS
    }


def _validated(values: dict[str, tuple[Any, str]]) -> Config:
    """Validate, dropping what an error names until the rest holds (at worst: the defaults)."""
    while True:
        nested: dict[str, dict[str, Any]] = {}
        for key, (value, _) in values.items():
            table, name = key.split(".")
            nested.setdefault(table, {})[name] = value
        try:
            return Config.model_validate(nested, strict=True)
        except ValidationError as error:
            named = {
                ".".join(str(part) for part in problem["loc"][:2]) for problem in error.errors()
            }
            bad = {
                key
                for key in values
                if any(key == place or key.startswith(place + ".") or not place for place in named)
            }
            if not bad:
                return Config()
            for key in bad:
                del values[key]
