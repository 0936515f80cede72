"""ouroboros.toml: the typed tables, how the layers merge, how problems are worded, editing.

    loaded = load_config(flags={"model.name": "qwen3"})
    loaded.config.context.soft_threshold_pct, loaded.workspace, loaded.sources["model.name"]

Every problem is a ConfigError with one line naming where the value came from, the dotted key
and what is allowed. The modules, by concept:

    schema.py    the pydantic models: one per table, a description per key; KEYS
    layering.py  defaults < user file < project file < environment < flags, validated once
    loaded.py    LoadedConfig: the result, its paths resolved and checked
    wording.py   one plain line for a validation error
    editing.py   `config set` and `unset`: one key changed, every other byte kept
    template.py  the file `ouroboros init` writes
    values.py    a value as TOML writes it

Editing (and tomlkit with it) is imported on first use of its names, so a command that only
reads the config does not pay for it.

May import `store.atomic` (an edited file replaced whole) and the base modules. The one
exception, named in tests/test_architecture.py: the schema checks blocked patterns with the
screening that compiles them.
"""

from typing import TYPE_CHECKING, Any

from ouroboros.config.layering import (
    CONFIG_FILENAME,
    DEFAULT_PROJECT_FILE,
    DEFAULT_USER_FILE,
    INIT_HINT,
    UNSET,
    find_project,
    load_config,
)
from ouroboros.config.loaded import LoadedConfig, effective_items
from ouroboros.config.schema import (
    DEFAULT_BLOCKED_PATTERNS,
    ENV_PREFIX,
    KEYS,
    AgentConfig,
    Config,
    ContextConfig,
    LoggingConfig,
    ModelConfig,
    SafetyConfig,
    default_flag_name,
    env_var_for,
)
from ouroboros.config.template import render_template
from ouroboros.config.wording import describe_validation_error

if TYPE_CHECKING:
    from ouroboros.config.editing import edit_toml, set_config_value, unset_config_value

_EDITING = ("edit_toml", "set_config_value", "unset_config_value")


def __getattr__(name: str) -> Any:
    if name in _EDITING:
        from ouroboros.config import editing

        return getattr(editing, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "CONFIG_FILENAME",
    "DEFAULT_BLOCKED_PATTERNS",
    "DEFAULT_PROJECT_FILE",
    "DEFAULT_USER_FILE",
    "ENV_PREFIX",
    "INIT_HINT",
    "KEYS",
    "UNSET",
    "AgentConfig",
    "Config",
    "ContextConfig",
    "LoadedConfig",
    "LoggingConfig",
    "ModelConfig",
    "SafetyConfig",
    "default_flag_name",
    "describe_validation_error",
    "edit_toml",
    "effective_items",
    "env_var_for",
    "find_project",
    "load_config",
    "render_template",
    "set_config_value",
    "unset_config_value",
]
