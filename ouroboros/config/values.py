"""A config value as TOML writes it: shown in a message, written to a file, read from a flag.

show_value(["a", 1.0])         # '["a", 1]', for a message
toml_value(True)               # 'true', for a file
parse_toml_value("0.6")        # 0.6; parse_toml_value("llama3.2") -> "llama3.2"
"""

from __future__ import annotations

import json
import math
import re
import tomllib
from typing import Any

import tomli_w


def plain_number(value: Any) -> str:
    """A number without a needless fraction: 1.0 -> "1", 0.5 -> "0.5"."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return str(int(value))
    return str(value)


def show_value(value: Any) -> str:
    """A value as a person would write it in the TOML file."""
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (int, float)):
        return plain_number(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(show_value(item) for item in value) + "]"
    if isinstance(value, dict):
        return "a table"
    return str(value)


def parse_toml_value(raw: str) -> Any:
    """`raw` read as a TOML value (0.6, true, ["a"], "x") when it parses as one, else the text."""
    try:
        doc = tomllib.loads(f"value = {raw}")
    except (tomllib.TOMLDecodeError, RecursionError):
        return raw
    return doc["value"] if set(doc) == {"value"} else raw


def toml_value(value: Any) -> str:
    """`value` as a TOML value for a file: a list one item a line, a string with backslashes
    (a regex) as a 'literal string' when it can be one."""
    if isinstance(value, list):
        if not value:
            return "[]"
        return "[\n" + "".join(f"    {toml_value(item)},\n" for item in value) + "]"
    if isinstance(value, str) and "\\" in value and not re.search(r"[\x00-\x1f\x7f]", value):
        # literal strings keep regexes readable
        if "'" not in value:
            return f"'{value}'"
        if "'''" not in value and not value.endswith("'"):
            return f"'''{value}'''"
    return tomli_w.dumps({"v": value}).removeprefix("v = ").rstrip("\n")
