"""Tuning a running agent: edits to ouroboros.toml take effect at the next session (and at a
resume), a bad edit never stops the run, and a reload (SIGHUP) ends the session early.

The scripted agent does the demo task in a 4k window with small parts, so it masks many times
a session; it edits its own ouroboros.toml when it is told to wind down."""

from __future__ import annotations

import asyncio
import io
import os
import signal
import tomllib
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import pytest
import tomli_w
from rich.console import Console

from ouroboros.config import load_config
from ouroboros.demo import RecordingAgent, expected_results, make_workspace, write_demo_project
from ouroboros.errors import RunFailed
from ouroboros.loop.reload import RELOAD_REASON
from ouroboros.loop.runner import run_agent
from ouroboros.protocols import Message, RunHooks
from ouroboros.testing import Fault, Reply, ScriptedServer
from ouroboros.ui.dashboard import DashboardState
from ouroboros.ui.plain import format_line
from ouroboros.ui.render import header
from ouroboros.ui.stats import run_stats
from ouroboros.ui.status import run_status, status_view
from tests.helpers import of_type, run_events

CONTEXT = 4096
CHARS_PER_PART = 1500  # about a ninth of the budget per read: masks come often, and early
SOFT, NEW_SOFT = 0.70, 0.55
SOFT_KEY = "context.soft_threshold_pct"


def edit_config(root: Path, table: str, key: str, value: Any) -> None:
    """What a person does with an editor (no validation): set one key in ouroboros.toml."""
    path = root / "ouroboros.toml"
    doc = tomllib.loads(path.read_text())
    doc.setdefault(table, {})[key] = value
    path.write_text(tomli_w.dumps(doc))


class EditingAgent(RecordingAgent):
    """Does the demo task; when first told to wind down, runs `edit` (on every wind-down
    with `every=True`)."""

    def __init__(self, parts: int, edit: Callable[[], None], *, every: bool = False) -> None:
        super().__init__(parts)
        self.edit, self.every, self.edits = edit, every, 0

    def __call__(self, messages: list[Message]) -> Reply:
        told = "Context nearly full" in (messages[-1].get("content") or "")
        if told and (self.every or not self.edits):  # told to wind down (it may not save)
            self.edit()
            self.edits += 1
        return super().__call__(messages)


def run_task(
    root: Path, brain, parts: int, *, resume: bool = False, hooks: RunHooks | None = None
) -> tuple[int, dict[int, str]]:
    """Run (or resume) the demo task against a scripted server answering with `brain`."""
    with ScriptedServer(brain, model="scripted-demo", context_length=CONTEXT) as server:
        if not resume:
            write_demo_project(root, server.base_url, parts)
            # one recent result kept: masking comes a read after the soft threshold, so the
            # decisions show which threshold they were taken at
            edit_config(root, "context", "keep_recent_observations", 1)
            # and rounds that need free only a little, so they come between the thresholds
            edit_config(root, "context", "mask_low_water_pct", 0.54)
            # on any server: a prefix cache would make most such rounds give way to restarts
            edit_config(root, "context", "prefix_cache", False)
        else:
            edit_config(root, "model", "base_url", server.base_url)
        keys = make_workspace(root / "workspace", parts, chars_per_part=CHARS_PER_PART)
        loaded = load_config(
            root / "ouroboros.toml", {"safety.sandbox": "off"}, env={}, user_file=None
        )
        code = asyncio.run(run_agent(loaded, hooks or RunHooks(), resume=resume))
    return code, keys


def rendered(status) -> str:
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(status_view(status, now=datetime.now(timezone.utc)))
    return console.export_text()


def mask_levels(events: list[dict[str, Any]]) -> dict[int, list[float]]:
    """For each session, how full the window was (of the budget) at each masking decision."""
    budget, levels = 0, {}
    for e in events:
        if e["type"] in ("session_start", "run_resumed"):
            budget = e["budget"]
        if e["type"] == "context_mask" and not e["preflight"]:
            levels.setdefault(e["session"], []).append(e["tokens_before"] / budget)
    return levels


def test_edited_thresholds_take_effect_at_the_next_session(tmp_path):
    # 24 parts: masking carries session 1 far, and session 2 must live long enough to mask
    agent = EditingAgent(
        24, lambda: edit_config(tmp_path, "context", "soft_threshold_pct", NEW_SOFT)
    )
    code, keys = run_task(tmp_path, agent, 24)

    assert code == 0
    assert (tmp_path / "workspace/results.txt").read_text() == expected_results(keys)
    events = run_events(tmp_path)
    assert events[-1]["reason"] == "task_complete"
    changed = of_type(events, "config_changed")
    assert [(c["key"], c["old"], c["new"], c["session"]) for c in changed] == [
        (SOFT_KEY, SOFT, NEW_SOFT, 2)
    ]
    assert changed[0]["source"] == f"project file {tmp_path / 'ouroboros.toml'}"
    # announced with the new session, before its session_start
    types = [e["type"] for e in events]
    at = types.index("config_changed")
    assert types[at - 1 : at + 2] == ["session_restart", "config_changed", "session_start"]
    # The decisions follow: session 1 masked at 70% and above, session 2 below it too.
    levels = mask_levels(events)
    assert levels[1] and min(levels[1]) >= SOFT
    assert levels[2] and min(levels[2]) >= NEW_SOFT and min(levels[2]) < SOFT
    # Seen in the log, the stats and the status.
    assert format_line(changed[0]).endswith(
        f"config changed: {SOFT_KEY} 0.7 -> 0.55 (project file {tmp_path / 'ouroboros.toml'})"
    )
    stats = run_stats(events)
    assert stats.thresholds[0] == (SOFT, 0.9) and stats.thresholds[-1] == (NEW_SOFT, 0.9)
    status = run_status(tmp_path / ".ouroboros")
    assert status is not None and status.state.soft == NEW_SOFT
    assert "changed at session 2: soft 0.70 -> 0.55" in rendered(status)


@pytest.mark.parametrize(
    "edit,message",
    [
        (
            lambda root: edit_config(root, "context", "soft_threshold_pct", 1.5),
            "context.soft_threshold_pct in {path} must be greater than 0 and less than 1, got 1.5",
        ),
        (
            lambda root: (root / "ouroboros.toml").write_text(
                (root / "ouroboros.toml").read_text() + "\nsoft_threshold_pct = \n"
            ),
            "{path} is not valid TOML",
        ),
    ],
)
def test_a_bad_edit_keeps_the_run_going_with_one_warning(tmp_path, edit, message):
    agent = EditingAgent(30, lambda: edit(tmp_path), every=True)
    code, keys = run_task(tmp_path, agent, 30)

    assert code == 0
    assert (tmp_path / "workspace/results.txt").read_text() == expected_results(keys)
    events = run_events(tmp_path)
    assert events[-1]["reason"] == "task_complete"
    assert len(of_type(events, "session_restart")) >= 2  # read (and refused) more than once
    expected = message.format(path=tmp_path / "ouroboros.toml")
    warnings = [w["message"] for w in of_type(events, "warning")]
    assert len([w for w in warnings if w.startswith(expected)]) == 1, warnings
    assert any(
        w.endswith("the run keeps its current settings until that is fixed") for w in warnings
    )
    assert not of_type(events, "config_changed")
    assert all(min(levels) >= SOFT for levels in mask_levels(events).values())


def test_a_config_warning_is_taken_down_once_the_edit_is_fixed(tmp_path):
    """A typo (`sof_threshold_pct`) at one wind-down, fixed at the next: the warning names its
    condition, the next session's reread says it is over, and the dashboard's header, fed the
    run's events, no longer shows it."""
    toml = tmp_path / "ouroboros.toml"
    saved: list[str] = []

    def typo_then_fix() -> None:
        if not saved:
            saved.append(toml.read_text())
            edit_config(tmp_path, "context", "sof_threshold_pct", 0.6)
        elif len(saved) == 1:
            saved.append(toml.read_text())
            toml.write_text(saved[0])

    code, keys = run_task(tmp_path, EditingAgent(30, typo_then_fix, every=True), 30)

    assert code == 0
    events = run_events(tmp_path)
    warned = [w for w in of_type(events, "warning") if "sof_threshold_pct" in w["message"]]
    assert len(warned) == 1 and warned[0]["condition"], warned
    cleared = of_type(events, "warning_cleared")
    assert [c["condition"] for c in cleared] == [warned[0]["condition"]]
    assert cleared[0]["seq"] > warned[0]["seq"]
    assert format_line(cleared[0]).endswith("warning over: the config loads again")
    state = DashboardState()
    for event in events:
        state.apply(event)
        if event is warned[0]:
            assert state.alert is not None and "sof_threshold_pct" in state.alert.text
    assert state.alert is None or "sof_threshold_pct" not in state.alert.text
    assert "sof_threshold_pct" not in "\n".join(header_text(state))


def header_text(state: DashboardState) -> list[str]:
    console = Console(width=80, record=True, file=io.StringIO())
    console.print(header(state, 80))
    return console.export_text().splitlines()


def test_keys_that_need_a_new_run_are_reported_once_and_kept(tmp_path):
    (tmp_path / "elsewhere").mkdir(parents=True)
    agent = EditingAgent(
        30, lambda: edit_config(tmp_path, "agent", "workspace", "elsewhere"), every=True
    )
    code, keys = run_task(tmp_path, agent, 30)

    assert code == 0
    assert (tmp_path / "workspace/results.txt").read_text() == expected_results(keys)
    assert not any((tmp_path / "elsewhere").iterdir())
    events = run_events(tmp_path)
    assert len(of_type(events, "session_restart")) >= 2
    warnings = [w["message"] for w in of_type(events, "warning")]
    assert [w for w in warnings if "needs a new run" in w] == [
        f'agent.workspace changed to "elsewhere" (project file {tmp_path / "ouroboros.toml"}) '
        'but needs a new run; this run keeps "workspace"'
    ]
    assert not of_type(events, "config_changed")


class FailingAgent(RecordingAgent):
    """Does the demo task, but makes the server refuse for good (a 401) at request `at`."""

    def __init__(self, parts: int, at: int) -> None:
        super().__init__(parts)
        self.at, self.calls = at, 0
        self.server: ScriptedServer | None = None

    def __call__(self, messages: list[Message]) -> Reply:
        self.calls += 1
        if self.calls == self.at and self.server is not None:
            self.server.inject(Fault("status", 401, "unauthorized"))
        return super().__call__(messages)


def test_resume_after_an_edit_uses_the_edited_values(tmp_path):
    failing = FailingAgent(24, at=14)
    with ScriptedServer(failing, model="scripted-demo", context_length=CONTEXT) as server:
        failing.server = server
        write_demo_project(tmp_path, server.base_url, 24)
        edit_config(tmp_path, "context", "keep_recent_observations", 1)  # as run_task does
        edit_config(tmp_path, "context", "mask_low_water_pct", 0.54)
        edit_config(tmp_path, "context", "prefix_cache", False)
        make_workspace(tmp_path / "workspace", 24, chars_per_part=CHARS_PER_PART)
        loaded = load_config(tmp_path / "ouroboros.toml", {}, env={}, user_file=None)
        with pytest.raises(RunFailed):
            asyncio.run(run_agent(loaded, RunHooks()))
    before = run_events(tmp_path)
    assert not of_type(before, "session_restart")  # still in session 1 when it failed
    assert mask_levels(before)[1] and min(mask_levels(before)[1]) >= SOFT

    edit_config(tmp_path, "context", "soft_threshold_pct", NEW_SOFT)
    edit_config(tmp_path, "agent", "continue_message", "Keep going.")
    code, keys = run_task(tmp_path, RecordingAgent(24), 24, resume=True)

    assert code == 0
    assert (tmp_path / "workspace/results.txt").read_text() == expected_results(keys)
    events = run_events(tmp_path)
    after = events[len(before) :]
    assert after[0]["type"] == "run_resumed"
    changed = [(c["key"], c["old"], c["new"]) for c in of_type(after, "config_changed")]
    assert (SOFT_KEY, SOFT, NEW_SOFT) in changed
    assert (
        "agent.continue_message",
        "Continue working towards your goals. Use your tools.",
        "Keep going.",
    ) in changed
    assert all(c["session"] == 1 for c in of_type(after, "config_changed"))
    # the resumed run decides at the edited threshold
    resumed_levels = [level for levels in mask_levels(after).values() for level in levels]
    assert min(resumed_levels) >= NEW_SOFT and min(resumed_levels) < SOFT
    assert run_stats(events).thresholds[-1] == (NEW_SOFT, 0.9)
    status = run_status(tmp_path / ".ouroboros")
    assert status is not None and status.state.soft == NEW_SOFT


@pytest.fixture
def sighup_ignored():
    """Without the harness's handler a SIGHUP would end the test process: ignore it then."""
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    yield
    signal.signal(signal.SIGHUP, previous)


class HangingUpAgent(RecordingAgent):
    """Does the demo task; at request `at` sends SIGHUP to the harness (this process), as
    `ouroboros reload` does."""

    def __init__(self, parts: int, at: int) -> None:
        super().__init__(parts)
        self.at, self.calls = at, 0

    def __call__(self, messages: list[Message]) -> Reply:
        self.calls += 1
        if self.calls == self.at:
            os.kill(os.getpid(), signal.SIGHUP)
        return super().__call__(messages)


def test_sighup_asks_the_run_to_reload(tmp_path, sighup_ignored):
    code, keys = run_task(tmp_path, HangingUpAgent(4, at=3), 4)

    assert code == 0
    assert (tmp_path / "workspace/results.txt").read_text() == expected_results(keys)
    events = run_events(tmp_path)
    requested = of_type(events, "reload_requested")
    assert [(e["signal"], e["session"]) for e in requested] == [("SIGHUP", 1)]
    assert "reload requested" in format_line(requested[0])


def test_reload_ends_the_session_early_after_a_wind_down(tmp_path, sighup_ignored):
    code, keys = run_task(tmp_path, HangingUpAgent(6, at=3), 6)

    assert code == 0
    assert (tmp_path / "workspace/results.txt").read_text() == expected_results(keys)
    events = run_events(tmp_path)
    at = events.index(of_type(events, "reload_requested")[0])
    after = events[at:]
    winds = of_type(after, "wind_down")
    restarts = of_type(after, "session_restart")
    assert winds and restarts and restarts[0]["reason"] == RELOAD_REASON
    assert after.index(winds[0]) < after.index(restarts[0])
    # the wind-down came at once, not when the window filled
    assert winds[0]["session"] == 1 and winds[0]["turn"] <= 5
    assert all(e["type"] != "context_mask" for e in after[: after.index(restarts[0])])
