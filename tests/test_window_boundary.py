"""A tool result crosses the loop/window boundary once each way (issue 32): the loop hands it
to the window (ContextManager.add_result), and what the window later does to it (its
placeholder) comes back as a decision already carried out (ContextManager.after_turn)."""

from __future__ import annotations

import sys
from collections import Counter

from typer.testing import CliRunner

from ouroboros.cli import app
from ouroboros.window.conversation import Conversation
from ouroboros.window.manager import ContextManager
from tests.helpers import run_events


def spy(monkeypatch, cls: type, name: str, calls: list[tuple[str, str]]) -> None:
    original = getattr(cls, name)

    def recorded(self, *args, **kwargs):
        calls.append((f"{cls.__name__}.{name}", sys._getframe(1).f_globals["__name__"]))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(cls, name, recorded)


def test_a_result_goes_into_the_window_once_and_comes_back_as_a_decision(tmp_path, monkeypatch):
    calls: list[tuple[str, str]] = []
    for name in ("add_result", "admit", "new_observation_id", "mask", "after_turn"):
        spy(monkeypatch, ContextManager, name, calls)
    for name in ("add_result", "mask"):
        spy(monkeypatch, Conversation, name, calls)

    result = CliRunner().invoke(app, ["demo", "--headless", "--keep", str(tmp_path / "d")])

    assert result.exit_code == 0, result.output
    events = run_events(tmp_path / "d")
    results = sum(1 for e in events if e["type"] == "tool_result")
    masks = [e for e in events if e["type"] == "context_mask" and not e["preflight"]]
    assert results and masks  # the demo masks: the path to a placeholder is taken
    from_loop = Counter(name for name, caller in calls if caller.startswith("ouroboros.loop"))
    assert from_loop["ContextManager.add_result"] == results  # in: once a result
    assert from_loop["ContextManager.after_turn"] >= len(masks)  # out: a decision
    # nothing else of the path is done by the loop: registering, capping, adding, masking
    assert set(from_loop) == {"ContextManager.add_result", "ContextManager.after_turn"}
