"""Showing configuration: `ouroboros config show` and what `config set` prints."""

from __future__ import annotations

from typing import Any

import tomli_w
from rich.console import Group
from rich.table import Table
from rich.text import Text

from ouroboros.config import LoadedConfig, effective_items


FILE_LAYERS = ("project file", "user file")


def toml_value(value: Any) -> str:
    """A value as it would be written in ouroboros.toml: 0.6, true, "llama3.2", [...]; a
    string with backslashes (a regex) as a 'literal string' when it can be one."""
    if isinstance(value, str) and "\\" in value and value.isprintable():
        if "'" not in value:
            return f"'{value}'"
        if "'''" not in value and not value.endswith("'"):
            return f"'''{value}'''"
    return tomli_w.dumps({"v": value}).removeprefix("v = ").strip()


def config_table(loaded: LoadedConfig) -> Group:
    """Every key, its effective value and the layer it came from; the files named above."""
    items = effective_items(loaded)
    files = dict.fromkeys(source for _, _, source in items if source.startswith(FILE_LAYERS))
    table = Table(expand=True)
    table.add_column("key", no_wrap=True, style="bold")
    table.add_column("value", ratio=2, overflow="fold")
    table.add_column("from", ratio=1, overflow="fold")
    for key, value, source in items:
        shown = "\n".join(toml_value(item) for item in value) if isinstance(value, list) \
            else toml_value(value)
        table.add_row(key, Text(shown or "[]"), Text(short_source(source), style="dim"
                                                     if source == "default" else "cyan"))
    named = [Text(f"{layer}: {source.removeprefix(layer + ' ')}")
             for source in files for layer in FILE_LAYERS if source.startswith(layer)]
    return Group(*named, table)


def short_source(source: str) -> str:
    """"project file ./ouroboros.toml" -> "project file"; "environment X" -> "env X"."""
    for layer in FILE_LAYERS:
        if source.startswith(layer):
            return layer
    return source.replace("environment ", "env ", 1)


def override_note(loaded: LoadedConfig, key: str) -> str | None:
    """After `config set`: what still overrides the key just written to the project file."""
    for item, value, source in effective_items(loaded):
        if item == key and not source.startswith("project file"):
            return f"note: {source} still overrides it (effective value: {toml_value(value)})"
    return None
