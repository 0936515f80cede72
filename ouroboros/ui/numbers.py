"""The one way every view writes a number about the context: the dashboard, the plain lines
of `logs` and `--headless`, `status`, `stats` and the demo's captions all call these, so one
event reads the same on each.

Every context percentage is a share of the prompt budget (the window less the room kept for
the reply: `budget = window - model.max_output_tokens`), written with one decimal; the
thresholds are shares of the same budget, written whole.

    used(92.8)                      # '92.8%'
    threshold(0.7)                  # '70%'
    of_budget(3079, 3584)           # '3,079/3,584 tokens'
    sizes(8192, 6144, 0.7, 0.9)     # 'window 8,192 · budget 6,144 · soft 70% · hard 90%'
"""

from __future__ import annotations

BASE = "% of the prompt budget"
"""What every context percentage is a share of, as the views say it."""


def used(pct: float | None) -> str:
    """A context reading (a percentage of the budget): `92.8%`; `--` when there is none."""
    return "--" if pct is None else f"{pct:.1f}%"


def threshold(fraction: float) -> str:
    """A threshold (a fraction of the budget, as in ouroboros.toml): `70%`."""
    return f"{100 * fraction:.0f}%"


def of_budget(tokens: int, budget: int) -> str:
    """`3,079/3,584 tokens`: a prompt's size over the budget it is a share of."""
    return f"{tokens:,}/{budget:,} tokens"


def sizes(window: int | None, budget: int | None, soft: float, hard: float) -> str:
    """The window, the budget and the thresholds side by side, as every view names them."""
    parts = [
        f"window {window:,}" if window else "",
        f"budget {budget:,}" if budget else "",
        f"soft {threshold(soft)}",
        f"hard {threshold(hard)}",
    ]
    return " · ".join(part for part in parts if part)
