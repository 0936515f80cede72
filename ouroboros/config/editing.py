"""`ouroboros config set` and `config unset`: one key changed in (or taken out of) a config
file, validated first, with every other byte of the file (comments, order, layout) kept.

    set_config_value(Path("ouroboros.toml"), "model.temperature", "0.2")  # 0.2
    unset_config_value(Path("ouroboros.toml"), "model.temperature")       # True
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

import tomlkit
from tomlkit.exceptions import TOMLKitError

from ouroboros.config.layering import (
    DEFAULT_USER_FILE,
    file_layer,
    init_hint,
    merge_layers,
    read_toml,
)
from ouroboros.config.schema import FIELDS, KEYS
from ouroboros.config.values import parse_toml_value, toml_value
from ouroboros.config.wording import did_you_mean
from ouroboros.errors import ConfigError
from ouroboros.store.atomic import write_atomically


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
    shown, doc = _file_for(path, key)
    value = parse_toml_value(raw)
    if FIELDS[key].annotation is str and not isinstance(value, str):
        value = raw
    table, name = key.split(".")
    doc.setdefault(table, {})[name] = value
    env = os.environ if env is None else env
    merge_layers(doc, shown, user_file, env, {}, {}, file_wins=key)
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
    line = f"{name} = {toml_value(value)}".replace("\n", newline)
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


def check_key(key: str) -> None:
    """Raise ConfigError unless `key` is a dotted key of the schema (with the nearest ones)."""
    if key not in FIELDS:
        raise ConfigError(
            f"unknown key {key}"
            + did_you_mean(key, KEYS, str, "keys look like table.key, e.g. model.name")
        )


def _file_for(path: Path, key: str) -> tuple[str, dict[str, Any]]:
    """The file as shown in messages and as parsed, once it and `key` are known good."""
    if not path.exists():
        raise ConfigError(f"config file not found: {path} ({init_hint(path)})")
    check_key(key)
    shown = str(path)
    doc = read_toml(path, shown)
    file_layer(doc, shown, "")  # the keys already in the file must be known
    return shown, doc


def unset_config_value(
    path: Path,
    key: str,
    *,
    env: Mapping[str, str] | None = None,
    user_file: Path | None = DEFAULT_USER_FILE,
) -> bool:
    """Take one key out of a config file, as `ouroboros config unset model.temperature`, so
    the layers below (the user file, the default) apply again. The file without it is
    validated like load_config first; on any error it is left untouched. Every other byte of
    the file is kept. Returns False, changing nothing, when the file does not set the key."""
    shown, doc = _file_for(path, key)
    table, name = key.split(".")
    if name not in doc.get(table, {}):
        return False
    del doc[table][name]
    merge_layers(doc, shown, user_file, os.environ if env is None else env, {}, {})
    text = next(
        (
            candidate
            for candidate in _unset_candidates(path, table, name)
            if _parses_to(candidate, doc)
        ),
        None,
    )
    if text is None:
        raise ConfigError(
            f"cannot unset {key} in {shown} without rewriting its layout; remove it by hand"
        )
    try:
        write_atomically(path.resolve(), text)
    except OSError as error:
        raise ConfigError(f"cannot write config file {path}: {error.strerror}") from None
    return True


def _unset_candidates(path: Path, table: str, name: str) -> Iterator[str]:
    """The file without `name`: its lines turned back into the commented-out default that
    `ouroboros init` writes (so `set` then `unset` gives the file back), else removed."""
    text = path.read_bytes().decode("utf-8")
    lines = text.splitlines(keepends=True)
    span = _table_span(lines, table)
    default = FIELDS[f"{table}.{name}"].get_default(call_default_factory=True)
    for at in range(span[0] + 1, span[1]) if span is not None else ():
        if re.match(rf"{re.escape(name)}\s*=", lines[at]):
            stop = _value_end(lines, at, span[1], name)
            newline = "\r\n" if lines[stop - 1].endswith("\r\n") else "\n"
            commented = "".join(
                f"# {line}{newline}" for line in f"{name} = {toml_value(default)}".split("\n")
            )
            yield "".join([*lines[:at], commented, *lines[stop:]])
    edited = tomlkit.parse(text)
    body = edited.get(table)
    if isinstance(body, dict) and name in body:
        del body[name]
    yield edited.as_string()


def _value_end(lines: list[str], at: int, end: int, name: str) -> int:
    """The index just after the `name = value` that starts at lines[at] (one or more lines)."""
    for stop in range(at + 1, end + 1):
        try:
            if name in tomllib.loads("".join(lines[at:stop])):
                return stop
        except tomllib.TOMLDecodeError:
            continue
    return at + 1


def _parses_to(text: str, doc: dict[str, Any]) -> bool:
    try:
        return tomllib.loads(text) == doc
    except tomllib.TOMLDecodeError:
        return False
