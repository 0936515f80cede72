"""A chart of context use over a run's turns, drawn with block characters.

    for line in context_chart([22.9, 41.0, 75.3, 92.4], soft=0.7, hard=0.9, restarts_at=[3]):
        print(line)

Each turn is a column or a few (in a long run, a column is the highest of a few turns); each
row is a band of percentages, labelled with its top. The soft and hard thresholds are drawn as
lines through the rows they fall in (moving where the run changed them, labelled with the
last), and `↻` under the axis marks the first turn of each restarted session.
"""

from __future__ import annotations

import math

from ouroboros.ui.numbers import threshold

EIGHTHS = " ▁▂▃▄▅▆▇█"
SOFT_LINE, HARD_LINE = "┄", "━"
RESTART = "↻"
LABEL_WIDTH = 6  # "100% ┤"
MAX_TURN_WIDTH = 3  # columns per turn in a short run


def context_chart(
    pcts: list[float],
    soft: float,
    hard: float,
    restarts_at: list[int],
    *,
    height: int = 10,
    width: int = 72,
    thresholds: list[tuple[float, float]] | None = None,
    turns: int | None = None,
) -> list[str]:
    """The chart's lines, top first. `pcts` are percentages of the prompt budget, one per
    turn; the thresholds are fractions, `(soft, hard)` per turn in `thresholds` when the run
    changed them (else `soft` and `hard` throughout); `restarts_at` are indexes into `pcts`;
    `turns`: how many turns the values stand for, when each is the highest of a few."""
    if not pcts:
        return ["(no context readings yet)"]
    columns = column_values(pcts, width)
    marks = {
        column_of(index, len(pcts), len(columns)) for index in restarts_at if index < len(pcts)
    }
    top = 100.0 if max(pcts) <= 100 else math.ceil(max(pcts) / 10) * 10.0
    step = top / height
    per_turn = (
        thresholds if thresholds and len(thresholds) == len(pcts) else [(soft, hard)] * len(pcts)
    )
    lines_at = [
        {
            row_of(100 * s, top, step, height): SOFT_LINE,
            row_of(100 * h, top, step, height): HARD_LINE,
        }
        for s, h in column_thresholds(per_turn, len(columns))
    ]
    last_soft, last_hard = per_turn[-1]
    labels = {
        row_of(100 * last_soft, top, step, height): f"soft {threshold(last_soft)}",
        row_of(100 * last_hard, top, step, height): f"hard {threshold(last_hard)}",
    }
    lines = []
    for row in range(height):
        ceiling = top - row * step
        label = labels.get(row, "")
        cells = "".join(
            cell(value, ceiling - step, step) or at.get(row, " ")
            for value, at in zip(columns, lines_at)
        )
        lines.append(f"{ceiling:>4.0f}% ┤{cells}" + (f" {label}" if label else ""))
    lines.append(" " * (LABEL_WIDTH - 1) + "└" + "─" * len(columns))
    if marks:
        lines.append(
            " " * LABEL_WIDTH + "".join(RESTART if c in marks else " " for c in range(len(columns)))
        )
    first, last = "turn 1", str(turns or len(pcts))
    gap = max(1, len(columns) - len(first) - len(last))
    legend = f"   {RESTART} restart" if marks else ""
    lines.append(" " * LABEL_WIDTH + first + " " * gap + last + legend)
    return lines


def column_values(pcts: list[float], width: int) -> list[float]:
    """One value per column: each turn over up to MAX_TURN_WIDTH columns, or, when there are
    more turns than columns, the highest of the turns sharing a column."""
    if len(pcts) <= width:
        repeat = turn_width(len(pcts), width)
        return [pct for pct in pcts for _ in range(repeat)]
    columns = [0.0] * width
    for index, pct in enumerate(pcts):
        column = column_of(index, len(pcts), width)
        columns[column] = max(columns[column], pct)
    return columns


def column_thresholds(
    per_turn: list[tuple[float, float]], columns: int
) -> list[tuple[float, float]]:
    """The thresholds each column shows: those of the last turn drawn in it."""
    shown = [per_turn[0]] * columns
    for index, pair in enumerate(per_turn):
        first = column_of(index, len(per_turn), columns)
        last = (
            columns
            if index + 1 == len(per_turn)
            else max(first + 1, column_of(index + 1, len(per_turn), columns))
        )
        for column in range(first, min(last, columns)):
            shown[column] = pair
    return shown


def turn_width(count: int, width: int) -> int:
    return max(1, min(MAX_TURN_WIDTH, width // max(count, 1)))


def column_of(index: int, count: int, width: int) -> int:
    """The (first) column that shows turn `index` of `count`."""
    if count > width:
        return index * width // count
    return index * turn_width(count, width)


def row_of(pct: float, top: float, step: float, height: int) -> int:
    """The row (0 = top) whose band (ceiling - step, ceiling] holds `pct`."""
    return min(height - 1, max(0, math.floor((top - pct) / step + 1e-9)))


def cell(value: float, floor: float, step: float) -> str:
    """The block for one column in the band above `floor`; empty (``) when it does not reach."""
    if value >= floor + step - 1e-9:
        return EIGHTHS[-1]
    if value <= floor:
        return ""
    return EIGHTHS[max(1, int((value - floor) / step * 8))]
