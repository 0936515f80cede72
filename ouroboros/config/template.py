"""The ouroboros.toml that `ouroboros init` writes: each key commented out under its
description."""

from __future__ import annotations

import textwrap

from ouroboros.config.schema import TABLES
from ouroboros.config.values import toml_value


def render_template() -> str:
    """The text of a fresh ouroboros.toml: every table, and every key commented out with its
    default under its description, so a key takes effect (over the user file and the
    defaults) only once someone uncomments or sets it.

    Generated from the models, so it cannot drift from them. `ouroboros init` writes it.
    """
    lines = [
        "# Ouroboros configuration. Every key is listed, commented out, with its default and what",
        "# it does; uncomment one (or run `ouroboros config set KEY VALUE`) to change it.",
        "# Precedence: flags > OUROBOROS_<TABLE>_<KEY> environment variables > this file",
        "#   > ~/.config/ouroboros/ouroboros.toml > defaults.",
        "# `ouroboros config show` prints the effective values, where each came from and what",
        "# differs from the default.",
    ]
    for table, model in TABLES.items():
        summary = (model.__doc__ or "").strip().split("\n\n")[0]
        lines += ["", *_comment(summary), f"[{table}]"]
        for index, (name, info) in enumerate(model.model_fields.items()):
            if index:
                lines.append("")
            default = info.get_default(call_default_factory=True)
            setting = f"{name} = {toml_value(default)}"
            lines += [*_comment(info.description or ""), *_comment_out(setting)]
    return "\n".join(lines) + "\n"


def _comment_out(text: str) -> list[str]:
    return ["# " + line for line in text.split("\n")]


def _comment(text: str) -> list[str]:
    return ["# " + line for line in textwrap.wrap(" ".join(text.split()), width=92)]
