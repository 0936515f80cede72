"""Tuning a running agent, the pure parts: what changed, what a run can take, and how the
change shows in the log, `status`, the `stats` chart and the commands around it."""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ouroboros.cli import app
from ouroboros.config import KEYS, Config, LoadedConfig, load_config
from ouroboros.config.schema import is_live
from ouroboros.loop.reload import (
    Change,
    config_diff,
    effect_note,
    recorded_config,
    with_live,
)
from ouroboros.store import events as ev
from ouroboros.ui.chart import HARD_LINE, SOFT_LINE, context_chart
from ouroboros.ui.plain import format_line
from ouroboros.ui.stats import run_stats
from ouroboros.ui.status import change_line
from tests.helpers import harness_holding, hold_state_lock
from tests.ui_sample import RUN_ID, write_sample_run

NEEDS_A_NEW_RUN = {
    "model.base_url",
    "model.name",
    "model.api_key_env",
    "agent.workspace",
    "agent.system_prompt",
    "logging.state_dir",
    "logging.durability",
    "logging.segment_mb",
    "logging.keep_mb",
    "logging.keep_sessions",
    "logging.keep_days",
    "metrics.port",
    "metrics.address",
    "metrics.heartbeat_secs",
    "model.wait_for_server_secs",
    "model.ensure_window",
}


def data(**changes: object) -> dict:
    """The default config as redacted data, with dotted keys changed."""
    config = Config().model_dump(mode="json")
    for key, value in changes.items():
        table, name = key.split("__")
        config[table][name] = value
    return config


def loaded_from(path: Path, **flags: object) -> LoadedConfig:
    return load_config(path, flags, env={}, user_file=None)


# -- the diff --


def test_no_change_no_diff():
    assert config_diff(data(), data(), {}) == []


def test_diff_lists_each_changed_key_in_table_order_with_its_source():
    old = data()
    new = data(context__soft_threshold_pct=0.6, model__name="qwen3:8b", agent__max_turns=50)
    sources = {
        "context.soft_threshold_pct": "project file ouroboros.toml",
        "model.name": "environment OUROBOROS_MODEL_NAME",
    }

    changes = config_diff(old, new, sources)

    assert changes == [
        Change("model.name", "llama3.2", "qwen3:8b", "environment OUROBOROS_MODEL_NAME"),
        Change("agent.max_turns", 0, 50, "default"),
        Change("context.soft_threshold_pct", 0.7, 0.6, "project file ouroboros.toml"),
    ]
    assert [c.live for c in changes] == [False, True, True]


def test_live_keys_are_context_safety_and_the_listed_ones():
    assert {key for key in KEYS if not is_live(key)} == NEEDS_A_NEW_RUN
    assert all(is_live(key) for key in KEYS if key.startswith(("context.", "safety.")))


def test_diff_of_a_list_value():
    new = data(safety__blocked_patterns=["rm"])
    [change] = config_diff(data(), new, {})
    assert change.key == "safety.blocked_patterns" and change.new == ["rm"] and change.live


def test_with_live_takes_live_keys_and_keeps_the_others(tmp_path):
    path = tmp_path / "ouroboros.toml"
    path.write_text('[context]\nsoft_threshold_pct = 0.7\n[agent]\nworkspace = "ws"\n')
    old = loaded_from(path)
    path.write_text(
        "[context]\nsoft_threshold_pct = 0.5\nhard_threshold_pct = 0.8\n"
        '[agent]\nworkspace = "other"\nmax_turns = 9\n'
    )
    new = old.reread()

    merged = with_live(old, new)

    assert merged.config.context.soft_threshold_pct == 0.5
    assert merged.config.context.hard_threshold_pct == 0.8
    assert merged.config.agent.max_turns == 9
    assert merged.config.agent.workspace == "ws"
    assert merged.workspace == tmp_path / "ws"
    assert merged.sources["agent.max_turns"] == f"project file {path}"
    assert merged.reread().config.agent.max_turns == 9  # it can be read again


def test_reread_uses_the_same_flags_and_environment(tmp_path):
    path = tmp_path / "ouroboros.toml"
    path.write_text("[agent]\nmax_turns = 5\n")
    loaded = load_config(
        path,
        {"model.name": "from-flag"},
        env={"OUROBOROS_CONTEXT_CARRYOVER_TURNS": "2"},
        user_file=None,
    )
    path.write_text('[agent]\nmax_turns = 7\n[model]\nname = "from-file"\n')

    again = loaded.reread()

    assert again.config.agent.max_turns == 7
    assert again.config.model.name == "from-flag"
    assert again.config.context.carryover_turns == 2
    assert (
        again.sources["context.carryover_turns"] == "environment OUROBOROS_CONTEXT_CARRYOVER_TURNS"
    )


def test_recorded_config_folds_the_changes_into_the_start():
    events = [
        ev.RunStart(run_id="r1", version="0.1.0", pid=1, config=data()),
        ev.WarningEvent(message="slow"),
        ev.ConfigChanged(key="context.soft_threshold_pct", old=0.7, new=0.6, source="x"),
        ev.ConfigChanged(key="context.soft_threshold_pct", old=0.6, new=0.5, source="x"),
    ]
    recorded = recorded_config(events)
    assert recorded == data(context__soft_threshold_pct=0.5)
    assert events[0].config["context"]["soft_threshold_pct"] == 0.7  # not changed in place


def test_effect_note_says_when_a_change_takes_effect():
    assert effect_note("context.soft_threshold_pct", 4, 7) == (
        "note: takes effect at the next session; the run is in session 4, turn 7 "
        "(`ouroboros reload` ends this session early)"
    )
    assert effect_note("agent.workspace", 4, 7) == (
        "note: a run is going on; the run is in session 4, turn 7; agent.workspace needs a new "
        "run to take effect (the running one keeps its value)"
    )


# -- where it shows --


def change_event(key: str, old: object, new: object, session: int = 5) -> ev.ConfigChanged:
    return ev.ConfigChanged(
        ts="2025-03-01T10:15:00.000Z",
        seq=9,
        session=session,
        turn=0,
        key=key,
        old=old,
        new=new,
        source="project file ouroboros.toml",
    )


def test_log_and_status_lines():
    soft = change_event("context.soft_threshold_pct", 0.7, 0.6)
    assert format_line(soft) == (
        "10:15:00 s5 t0 config changed: context.soft_threshold_pct "
        "0.7 -> 0.6 (project file ouroboros.toml)"
    )
    assert change_line(soft) == "changed at session 5: soft 0.70 -> 0.60"
    assert (
        change_line(change_event("agent.continue_message", "a", "b", 2))
        == 'changed at session 2: agent.continue_message "a" -> "b"'
    )


def test_stats_thresholds_move_where_they_changed():
    usage = {
        "type": "token_usage",
        "prompt_tokens": 1,
        "completion_tokens": 1,
        "total_tokens": 2,
        "context_limit": 8,
        "budget": 2,
        "context_used_pct": 50.0,
        "source": "server",
        "session": 1,
        "turn": 1,
    }
    events = [
        {
            "type": "run_start",
            "run_id": "r",
            "version": "0.1.0",
            "pid": 1,
            "session": 1,
            "turn": 0,
            "config": data(),
        },
        usage,
        usage,
        change_event("context.soft_threshold_pct", 0.7, 0.5, 2),
        change_event("context.hard_threshold_pct", 0.9, 0.8, 2),
        {**usage, "session": 2},
    ]

    stats = run_stats(events)

    assert stats.thresholds == [(0.7, 0.9), (0.7, 0.9), (0.5, 0.8)]
    assert (stats.soft, stats.hard) == (0.5, 0.8)


def test_chart_draws_threshold_lines_where_they_were():
    lines = context_chart(
        [10.0] * 4,
        0.5,
        0.8,
        [],
        width=12,
        thresholds=[(0.7, 0.9), (0.7, 0.9), (0.5, 0.8), (0.5, 0.8)],
    )
    rows = {line[:5].strip(): line[7:] for line in lines[:10]}
    assert rows["70%"].startswith(SOFT_LINE * 6) and rows["70%"][6:12] == " " * 6
    assert rows["50%"].startswith(" " * 6) and rows["50%"][6:12] == SOFT_LINE * 6
    assert rows["90%"][:6] == HARD_LINE * 6 and rows["80%"][6:12] == HARD_LINE * 6
    assert rows["50%"].endswith("soft 50%") and rows["80%"].endswith("hard 80%")
    assert "soft" not in rows["70%"]


def test_chart_without_changes_is_as_before():
    pcts = [22.9, 41.0, 75.3, 92.4]
    assert context_chart(pcts, 0.7, 0.9, [3]) == context_chart(
        pcts, 0.7, 0.9, [3], thresholds=[(0.7, 0.9)] * 4
    )


# -- the commands --


def invoke(*args: str):
    env: dict[str, str | None] = {
        name: None for name in os.environ if name.startswith("OUROBOROS_") or name == "OLLAMA_HOST"
    }
    env.update(COLUMNS="120", XDG_CONFIG_HOME="/nonexistent-ouroboros-test")
    return CliRunner(env=env).invoke(app, list(args))


def hold_lock(state_dir: Path, pid: int) -> int:
    return hold_state_lock(state_dir, {"pid": pid, "host": socket.gethostname(), "run_id": RUN_ID})


@pytest.fixture
def project(tmp_path: Path) -> Path:
    config = tmp_path / "ouroboros.toml"
    config.write_text("[context]\nsoft_threshold_pct = 0.7\n")
    write_sample_run(tmp_path / ".ouroboros", ended=False)
    return config


def test_config_set_on_a_running_run_says_when_it_takes_effect(project):
    held = hold_lock(project.parent / ".ouroboros", os.getpid())
    try:
        live = invoke("config", "set", "context.soft_threshold_pct", "0.6", "-c", str(project))
        fixed = invoke("config", "set", "model.name", "qwen3:8b", "-c", str(project))
    finally:
        os.close(held)

    assert live.exit_code == 0, live.output
    assert live.output.splitlines()[-1] == (
        "note: takes effect at the next session; the run is in session 2, turn 2 "
        "(`ouroboros reload` ends this session early)"
    )
    assert fixed.output.splitlines()[-1].endswith(
        "model.name needs a new run to take effect (the running one keeps its value)"
    )


def test_config_set_without_a_running_run_says_nothing_more(project):
    result = invoke("config", "set", "context.soft_threshold_pct", "0.6", "-c", str(project))
    assert result.output == f"context.soft_threshold_pct = 0.6 (in {project})\n"


def test_reload_without_a_running_run(project):
    result = invoke("reload", "-c", str(project))
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: no run is going on in {project.parent / '.ouroboros'}; a "
        "new value is read when a run starts or resumes\n"
    )


def test_reload_sends_sighup_to_the_harness(project):
    harness = harness_holding(project.parent / ".ouroboros", RUN_ID)
    try:
        result = invoke("reload", "-c", str(project))
        assert result.exit_code == 0, result.output
        assert result.output.startswith(
            f"asked run {RUN_ID} (pid {harness.pid}) to end its session"
        )
        assert harness.wait(timeout=10) == -signal.SIGHUP
    finally:
        harness.kill()
        harness.wait()
