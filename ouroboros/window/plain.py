"""Plain data: a dataclass of the window's as the state saves it, one level deep (flat), made
without asdict's deep copies, at every turn's end.

    flat(window)             # {"limit": 8192, "source": "config", ...}
    flat({"c1": obs})        # {"c1": {"id": "obs-1", ...}}
"""

from __future__ import annotations

from dataclasses import fields
from functools import cache
from operator import attrgetter
from typing import Any, Callable


def flat(value: Any) -> Any:
    """A field of the manager as plain data, as `asdict` gives it but one level deep: its
    dataclasses are flat (the window, the calibration, the last count, each observation), so
    the same, without asdict's deep copies."""
    kind = type(value)
    if hasattr(kind, "__dataclass_fields__"):  # an instance (is_dataclass costs more)
        names, values = field_getter(kind)
        return dict(zip(names, values(value)))
    if isinstance(value, dict):
        return {key: flat(item) for key, item in value.items()}
    if isinstance(value, list):
        return list(value)
    return value


@cache
def field_getter(kind: type) -> tuple[tuple[str, ...], Callable[[Any], tuple[Any, ...]]]:
    """A dataclass's field names, and a function giving their values in that order."""
    names = tuple(f.name for f in fields(kind))
    getter = attrgetter(*names)
    return names, (getter if len(names) > 1 else lambda value: (getter(value),))
