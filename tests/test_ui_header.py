"""The dashboard's header: the window beside the budget, with where its size came from; an
error alert that goes when the run it failed is resumed."""

from __future__ import annotations

from pathlib import Path

import pytest

from ouroboros.store import events as ev
from tests.test_ui_dashboard import rendered_at, replay, sample_events


@pytest.mark.parametrize("width,height,label", [
    (80, 24, "window 8,192"),
    (160, 50, "window 8,192 (server /api/show)"),
])
def test_the_header_shows_the_window_and_where_its_size_came_from(tmp_path: Path, width, height,
                                                                   label):
    frame = rendered_at(replay(sample_events(tmp_path)), width, height)

    header = frame[:next(i for i, line in enumerate(frame) if line.startswith("╰"))]
    assert any(line.rstrip(" │").endswith(label) for line in header), "\n".join(header)
    assert any("/6,144 tokens" in line for line in header)  # the budget, beside it
    assert max(len(line) for line in frame) <= width


def test_an_error_alert_goes_when_the_failed_run_is_resumed(tmp_path: Path):
    state = replay(sample_events(tmp_path))
    state.apply(ev.ErrorEvent(message="the server went away", kind="X", seq=90,
                              ts="2025-03-01T10:20:00.000Z", session=2, turn=3))
    assert state.alert is not None

    state.apply(ev.RunResumed(total_turns=9, restarts=1, torn_line_dropped=False,
                              interrupted_tools=[], context_limit=8192,
                              limit_source="server /api/show", budget=6144, seq=91,
                              ts="2025-03-01T10:21:00.000Z", session=2, turn=3))

    assert state.alert is None
