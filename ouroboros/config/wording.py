"""How a config problem is worded: one line naming the key, where its value came from, what
is allowed and what was given.

    context.soft_threshold_pct in ouroboros.toml must be greater than 0 and less than 1, got 1.5
    unknown key model.nmae (did you mean model.name?)
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Mapping
from typing import Any, Callable, Literal, get_args, get_origin

from annotated_types import Ge, Gt, Le, Lt
from pydantic import ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails

from ouroboros.config.schema import FIELDS, KEYS, default_flag_name
from ouroboros.config.urls import shown_url
from ouroboros.config.values import plain_number, show_value

# Errors of two keys out of order: the keys, and the names of their values in the error.
ORDERED = {
    "threshold_order": (
        ("context.soft_threshold_pct", "soft"),
        ("context.hard_threshold_pct", "hard"),
    ),
    "low_water_order": (
        ("context.mask_low_water_pct", "low"),
        ("context.soft_threshold_pct", "soft"),
    ),
}


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
        return where_set(sources.get(key, "default"), key, flag_names)

    if first["type"] in ORDERED:
        (lower, low), (upper, high) = ORDERED[first["type"]]
        ctx = first.get("ctx", {})
        line = (
            f"{lower} ({show_value(ctx.get(low))} {origin(lower)}) must be less than "
            f"{upper} ({show_value(ctx.get(high))} {origin(upper)})"
        )
    elif len(loc) >= 2:
        key = ".".join(loc[:2])
        if first["type"] == "extra_forbidden" or key not in FIELDS:
            line = f"unknown key {key}" + did_you_mean(key, KEYS, str, "")
        else:
            line = problem_line(first, key, origin(key))
    else:
        line = f"{'.'.join(loc) or 'config'}: {first['msg']}"
    more = len(problems) - 1
    if more:
        line += f" (and {more} more problem{'s' if more > 1 else ''})"
    return one_line(line)


def problem_line(problem: ErrorDetails, key: str, origin: str) -> str:
    """'<key> <origin> must be <allowed>, got <value>' for one pydantic error on one field."""
    info = FIELDS[key]
    kind = problem["type"]
    value = problem["input"]
    if key == "model.base_url" and isinstance(value, str):
        value = shown_url(value)  # its password is not echoed
    index = [part for part in problem["loc"] if isinstance(part, int)]
    got = f", got {show_value(value)}" + (f" (item {index[0] + 1})" if index else "")
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
        return one_line(f"{key} {origin} {problem['msg']}")
    else:
        allowed = problem["msg"].removeprefix("Value error, ")
        allowed = allowed[:1].lower() + allowed[1:]
        if not allowed.startswith("must "):
            return one_line(f"{key} {origin}: {allowed}{got}")
        return one_line(f"{key} {origin} {allowed}{got}")
    return one_line(f"{key} {origin} must be {allowed}{got}")


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
                bounds[kind.__name__] = plain_number(getattr(item, kind.__name__.lower()))
    if "Ge" in bounds and "Le" in bounds:
        return f"between {bounds['Ge']} and {bounds['Le']}"
    words = {"Gt": "greater than", "Ge": "at least", "Lt": "less than", "Le": "at most"}
    return " and ".join(f"{words[kind]} {bound}" for kind, bound in bounds.items())


def where_set(source: str, key: str, flag_names: Mapping[str, str]) -> str:
    """Where a value came from, as a message says it: "in ouroboros.toml", "from environment
    variable OUROBOROS_MODEL_NAME", "from flag --model" or "by default"."""
    for prefix in ("user file ", "project file "):
        if source.startswith(prefix):
            return "in " + source.removeprefix(prefix)
    if source.startswith("environment "):
        return "from environment variable " + source.removeprefix("environment ")
    if source == "flag":
        return "from flag " + (flag_names.get(key) or default_flag_name(key))
    return "by default"


def did_you_mean(
    word: str, choices: Iterable[str], fmt: Callable[[str], str], otherwise: str
) -> str:
    """A hint to append: ' (did you mean <the closest choice>?)', else ' (<otherwise>)', or
    nothing when `otherwise` is empty. A dotted key is matched within its own table, a
    short name against the start of each key too (`context.sotf`: soft_threshold_pct)."""
    match = _closest(word, list(choices))
    if match is not None:
        return f" (did you mean {fmt(match)}?)"
    return f" ({otherwise})" if otherwise else ""


def _closest(word: str, choices: list[str], cutoff: float = 0.6) -> str | None:
    table, dot, name = word.rpartition(".")
    same_table = [choice for choice in choices if dot and choice.startswith(table + ".")]
    if not same_table:
        match = difflib.get_close_matches(word, choices, n=1, cutoff=cutoff)
        return match[0] if match else None

    def likeness(choice: str) -> float:
        full = choice.rpartition(".")[2]
        return max(
            difflib.SequenceMatcher(None, name, full).ratio(),
            difflib.SequenceMatcher(None, name, full[: len(name)]).ratio(),
        )

    best = max(same_table, key=likeness)
    return best if likeness(best) >= cutoff else None


def one_line(text: str) -> str:
    """`text` with every run of whitespace (newlines too) as one space."""
    return " ".join(text.split())
