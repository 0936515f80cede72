"""Showing configuration: `ouroboros config show` and what `config set` prints."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from ouroboros.config import KEYS, Config, LoadedConfig, effective_items
from ouroboros.config.urls import shown_url
from ouroboros.config.values import toml_value

FILE_LAYERS = ("project file", "user file")
LIST_PREVIEW = 2
"""Items of a long list (safety.blocked_patterns) that `config show` prints without --full."""


def default_values() -> dict[str, Any]:
    """Every dotted key's default: {"model.base_url": "http://127.0.0.1:11434", ...}."""
    defaults = Config()
    values = {}
    for key in KEYS:
        table, name = key.split(".")
        values[key] = getattr(getattr(defaults, table), name)
    return values


def config_table(loaded: LoadedConfig, full: bool = False, keys: list[str] | None = None) -> Group:
    """Every key (or those in `keys`), its effective value (a long list folded to its first
    items unless `full`) and the layer it came from; a * and the default beside each value that
    differs from it; the files named above and a line below saying what changed."""
    items = [item for item in effective_items(loaded) if keys is None or item[0] in keys]
    defaults = default_values()
    changed = [key for key, value, _ in items if value != defaults[key]]
    files = dict.fromkeys(source for _, _, source in items if source.startswith(FILE_LAYERS))
    table = Table(expand=True)
    table.add_column("", no_wrap=True, style="bold yellow", width=1)
    table.add_column("key", no_wrap=True, style="bold")
    table.add_column("value", ratio=2, overflow="fold")
    table.add_column("from", ratio=1, overflow="fold")
    for key, value, source in items:
        default = defaults[key] if key in changed else None
        table.add_row(
            "*" if key in changed else "",
            key,
            value_cell(shown_value(key, value), full, default),
            Text(short_source(source), style="dim" if source == "default" else "cyan"),
        )
    named = [
        Text(f"{layer}: {source.removeprefix(layer + ' ')}")
        for source in files
        for layer in FILE_LAYERS
        if source.startswith(layer)
    ]
    if keys is not None:
        return Group(*named, table)
    return Group(*named, table, Text(changes_line(changed)))


def shown_value(key: str, value: Any) -> Any:
    """A key's value as shown: the base URL without its password."""
    return shown_url(value) if key == "model.base_url" and isinstance(value, str) else value


def value_cell(value: Any, full: bool, default: Any = None) -> Text | Group:
    """A value as written in the file; a list one item a line, and past LIST_PREVIEW items
    (unless `full`) its first ones, each cut to one line, and how many more; `default`, when
    given (the value was changed), in brackets after it."""
    if not isinstance(value, list):
        lines = [Text(toml_value(value))]
    elif full or len(value) <= LIST_PREVIEW:
        lines = [Text(toml_value(item)) for item in value] or [Text("[]")]
    else:
        lines = [
            Text(toml_value(item), no_wrap=True, overflow="ellipsis")
            for item in value[:LIST_PREVIEW]
        ]
        lines.append(
            Text(f"… {len(value) - LIST_PREVIEW} more (--full shows all {len(value)})", style="dim")
        )
    if default is not None:
        shown = f"{len(default)} items" if isinstance(default, list) else toml_value(default)
        lines[-1].append(f"  (default {shown})", style="dim")
    return lines[0] if len(lines) == 1 else Group(*lines)


def changes_line(changed: list[str]) -> str:
    """The line under the table: which keys differ from their defaults, or that none do."""
    if not changed:
        return "every value is its default (`ouroboros config set KEY VALUE` changes one)"
    return f"* changed from the default ({len(changed)} of {len(KEYS)}): " + ", ".join(changed)


def short_source(source: str) -> str:
    """ "project file ./ouroboros.toml" -> "project file"; "environment X" -> "env X"."""
    for layer in FILE_LAYERS:
        if source.startswith(layer):
            return layer
    return source.replace("environment ", "env ", 1)


def override_note(loaded: LoadedConfig, key: str) -> str | None:
    """After `config set`: what still overrides the key just written to the project file."""
    for item, value, source in effective_items(loaded):
        if item == key and not source.startswith("project file"):
            return (
                f"note: {source} still overrides it (effective value: "
                f"{toml_value(shown_value(key, value))})"
            )
    return None
