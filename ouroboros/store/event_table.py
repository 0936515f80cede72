"""The manual's event table (docs/event-log.md), generated from the event models (events.py):
each type, when it is written, and its fields with their descriptions. A test checks the page
holds exactly this table between the markers; after changing a model, paste the output of

    python -m ouroboros.store.event_table

over the page's table (markers included).
"""

from __future__ import annotations

from ouroboros.store.events import ENVELOPE, EVENT_MODELS


def event_table() -> str:
    """The event table, from the models: each type, when, and its fields."""
    rows = ["| type | when | fields |", "|---|---|---|"]
    for name, model in EVENT_MODELS.items():
        when = " ".join((model.__doc__ or "").split())
        fields = ", ".join(
            f"`{field}`" + (f" ({info.description})" if info.description else "")
            for field, info in model.model_fields.items()
            if field not in ENVELOPE
        )
        rows.append(f"| `{name}` | {when} | {fields} |")
    return "\n".join(rows) + "\n"


TABLE_BEGIN, TABLE_END = "<!-- events:begin -->", "<!-- events:end -->"


def marked_table() -> str:
    """The table between the markers the page holds it in."""
    return f"{TABLE_BEGIN}\n{event_table()}{TABLE_END}\n"


if __name__ == "__main__":
    print(marked_table(), end="")
