"""`ouroboros status|stats|logs|watch` on a real run log written with EventLog."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ouroboros.cli import app
from ouroboros.store import events as ev
from ouroboros.store.holder import LOCK_FILE
from ouroboros.store.log import EVENTS_FILE, EventLog, read_events, runs_dir
from ouroboros.ui.chart import RESTART
from ouroboros.ui.plain import EVENT_TYPES
from tests.helpers import clean_env, hold_state_lock, ouroboros_here
from tests.ui_sample import RESTART_REASON, RUN_ID, sample_resumed, write_sample_run


def project(tmp_path: Path, *, ended: bool = True) -> tuple[Path, Path]:
    """ouroboros.toml in tmp_path, the sample run in its state dir; (config, events file)."""
    config = tmp_path / "ouroboros.toml"
    config.write_text("[context]\nsoft_threshold_pct = 0.7\n")
    return config, write_sample_run(tmp_path / ".ouroboros", ended=ended)


def invoke(*args: str) -> object:
    clean: dict[str, str | None] = {
        name: None for name in os.environ if name.startswith("OUROBOROS_") or name == "OLLAMA_HOST"
    }
    clean.update(COLUMNS="100", XDG_CONFIG_HOME="/nonexistent-ouroboros-test")
    return CliRunner(env=clean).invoke(app, list(args))


# -- status --


@pytest.mark.parametrize("command", ["status", "runs"])
def test_with_no_runs_says_where_it_looked(tmp_path, command):
    config = tmp_path / "ouroboros.toml"
    config.write_text("")

    result = invoke(command, "-c", str(config))

    assert result.exit_code == 0
    assert result.output == f"no runs yet in {tmp_path / '.ouroboros'}\n"


def test_status_of_a_finished_run(tmp_path):
    config, _ = project(tmp_path)

    result = invoke("status", "-c", str(config))

    assert result.exit_code == 0, result.output
    lines = [" ".join(line.split()) for line in result.output.splitlines()]
    assert lines[:9] == [
        f"run {RUN_ID}",
        "state not running: ended (max_turns, exit 0)",
        "session 2",
        "turn 3 in this session, 9 in total",
        "context 61.8% of the budget (3,797/6,144 tokens)",
        "window 8,192 tokens (server /api/show)",
        "budget 6,144 tokens (the window less the reply's room); soft 70%, hard 90% of it",
        "restarts 1",
        "masking 5 tool results masked (2 masking rounds)",
    ]
    assert lines[9].startswith("last event run_end, ") and lines[9].endswith(" ago")


def test_status_of_a_run_going_on(tmp_path):
    config, _ = project(tmp_path, ended=False)
    held = hold_state_lock(
        tmp_path / ".ouroboros",
        {"pid": os.getpid(), "host": socket.gethostname(), "run_id": RUN_ID},
    )
    try:
        result = invoke("status", "-c", str(config))
    finally:
        os.close(held)

    assert result.exit_code == 0, result.output
    assert f"running (pid {os.getpid()})" in result.output
    assert "last event tool_result" in " ".join(result.output.split())


def test_status_of_a_killed_run(tmp_path):
    config, _ = project(tmp_path, ended=False)

    result = invoke("status", "-c", str(config))

    assert (
        "not running: stopped without an end record (killed or crashed); `ouroboros "
        f"resume --config {config}` continues it" in " ".join(result.output.split())
    )


def test_status_its_json_and_logs_agree_on_a_turn_stopped_before_its_reply(tmp_path):
    config, events = project(tmp_path, ended=False)
    log = EventLog(events)
    log.session, log.turn = 2, 3  # session 2's third request is out; SIGTERM before its reply
    log.emit(ev.StopRequested(signal="SIGTERM"))
    log.emit(ev.SessionEnd(reason="interrupted"))
    log.emit(
        ev.RunEnd(
            reason="interrupted",
            exit_code=143,
            sessions=2,
            total_turns=8,
            restarts=1,
            resumable=True,
        )
    )
    log.close()

    shown = " ".join(invoke("status", "-c", str(config)).output.split())
    health = json.loads(invoke("status", "--json", "-c", str(config)).output)
    logged = invoke("logs", "-n", "1", "-c", str(config)).output

    assert "turn 2 in this session, 8 in total; turn 3 asked, its reply never came" in shown
    assert (health["turn"], health["total_turns"], health["unanswered_turn"]) == (2, 8, 3)
    assert " s2 t3 run ended: interrupted after 8 turns" in logged


def test_status_of_a_completed_run_says_how_to_give_it_more_to_do(tmp_path):
    config = tmp_path / "ouroboros.toml"
    config.write_text("")
    (tmp_path / "SYSTEM_PROMPT.md").write_text("mission")
    (tmp_path / "workspace").mkdir()
    write_run(
        tmp_path / ".ouroboros",
        "20250302-090000-cd34",
        1,
        end={
            "reason": "task_complete",
            "resumable": True,
            "next": "the agent says the task is done; to give it more to do: "
            'ouroboros resume --message "what to do next"',
        },
    )

    result = invoke("status", "-c", str(config))

    assert (
        "ended (task_complete, exit 0); the agent says the task is done; to give it more "
        f'to do: ouroboros resume --config {config} --message "what to do next"'
        in " ".join(result.output.split())
    )


# -- runs --


def write_run(
    state_dir: Path, run_id: str, sessions: int, *, turns: int = 2, end: dict | None = None
) -> Path:
    """A run of `sessions` sessions of `turns` turns each, ended by `end` (a run_end record's
    fields) or cut off as a killed run's log is; returns its events.jsonl."""
    path = runs_dir(state_dir) / run_id / EVENTS_FILE
    log = EventLog(path)
    log.emit(ev.RunStart(run_id=run_id, version="0.1.0", pid=1, config={}))
    for session in range(1, sessions + 1):
        log.session, log.turn = session, 0
        if session > 1:
            log.emit(
                ev.SessionRestart(
                    previous_turns=turns,
                    carryover_messages=2,
                    carryover_masked=0,
                    carryover_turns_dropped=0,
                    reason="context full",
                )
            )
        for number in range(1, turns + 1):
            log.turn = number
            log.emit(ev.Assistant(text="Working.", finish_reason="stop", tool_calls=[]))
            log.emit(
                ev.TokenUsage(
                    prompt_tokens=100 * number,
                    completion_tokens=10,
                    total_tokens=100 * number + 10,
                    context_limit=1000,
                    budget=800,
                    context_used_pct=40.0 + 10 * number,
                    source="server",
                )
            )
            log.emit(
                ev.ContextMask(
                    observations_masked=1,
                    total_masked=session,
                    tokens_before=500,
                    tokens_after=400,
                    reclaimed_pct=20.0,
                    preflight=False,
                )
            )
    if end is not None:
        log.emit(ev.SessionEnd(reason=end["reason"]))
        log.emit(
            ev.RunEnd(
                **{
                    "exit_code": 0,
                    "sessions": sessions,
                    "restarts": sessions - 1,
                    "total_turns": sessions * turns,
                    **end,
                }
            )
        )
    log.close()
    return path


def test_runs_lists_every_run_oldest_first_with_its_state(tmp_path):
    config, _ = project(tmp_path)
    state_dir = tmp_path / ".ouroboros"
    write_run(
        state_dir,
        "20250302-090000-cd34",
        3,
        end={"reason": "error", "exit_code": 1, "resumable": True},
    )
    write_run(state_dir, "20250303-090000-ef56", 1)  # killed: no end record
    write_run(state_dir, "20250304-090000-gh78", 2)
    held = hold_state_lock(
        state_dir,
        {"pid": os.getpid(), "host": socket.gethostname(), "run_id": "20250304-090000-gh78"},
    )
    try:
        result = invoke("runs", "-c", str(config))
    finally:
        os.close(held)

    assert result.exit_code == 0, result.output
    rows = [line.split("  ") for line in result.output.splitlines()]
    rows = [[cell.strip() for cell in row if cell.strip()] for row in rows]
    assert rows[0] == ["run", "started", "state", "sessions", "turns", "last event"]
    assert [row[0] for row in rows[1:]] == [
        RUN_ID,
        "20250302-090000-cd34",
        "20250303-090000-ef56",
        "20250304-090000-gh78",
    ]
    assert [row[2:5] for row in rows[1:]] == [
        ["ended: max_turns", "2", "9"],
        ["ended: error, resumable", "3", "6"],
        ["stopped (killed?), resumable", "1", "2"],
        [f"running (pid {os.getpid()})", "2", "4"],
    ]
    assert rows[1][5].startswith("run_end, ") and rows[4][5].startswith("context_mask, ")
    assert all(row[1].endswith(" ago") for row in rows[1:])


# -- stats --


def test_stats_of_a_long_run_shows_its_ends_and_totals(tmp_path):
    config = tmp_path / "ouroboros.toml"
    config.write_text("")
    write_run(tmp_path / ".ouroboros", "20250302-090000-cd34", 40, end={"reason": "max_turns"})

    short = invoke("stats", "-c", str(config))
    full = invoke("stats", "--all", "-c", str(config))

    assert short.exit_code == 0 and full.exit_code == 0, short.output + full.output
    listed = [
        int(line.split("│")[1])
        for line in short.output.splitlines()
        if line.startswith("│") and line.split("│")[1].strip().isdigit()
    ]
    assert listed == [1, 2, 3, 38, 39, 40]
    assert "│     ... │" in short.output and "(34 more)" in short.output
    assert "34 sessions not shown: `ouroboros stats --all` lists every one" in short.output
    totals = next(line for line in short.output.splitlines() if line.startswith("│     all"))
    assert [cell.strip() for cell in totals.split("│")[1:6]] == ["all", "80", "60.0%", "80", "80"]
    assert sum("% ┤" in line for line in short.output.splitlines()) == 10  # the chart
    assert len(short.output.splitlines()) < 50
    listed_all = [
        int(line.split("│")[1])
        for line in full.output.splitlines()
        if line.startswith("│") and line.split("│")[1].strip().isdigit()
    ]
    assert listed_all == list(range(1, 41))
    assert "not shown" not in full.output


def test_stats_table_and_chart(tmp_path):
    config, _ = project(tmp_path)

    result = invoke("stats", RUN_ID, "--config", str(config))

    assert result.exit_code == 0, result.output
    out = result.output
    assert (
        f"run {RUN_ID}: 2 sessions, 9 turns, 1 restart, ended: max_turns\n"
        "masking: 5 tool results masked (2 masking rounds)"
    ) in out
    session_rows = [
        line for line in out.splitlines() if line.startswith(("│       1 ", "│       2 "))
    ]
    assert [[cell.strip() for cell in row.split("│")[1:8]] for row in session_rows] == [
        ["1", "6", "93.5%", "2", "4", "22,837", "261"],
        ["2", "3", "61.8%", "0", "1", "8,804", "126"],
    ]
    assert [row.split("│")[8].strip() for row in session_rows] == ["restart [1]", "max_turns"]
    assert f"[1] restart: {RESTART_REASON}" in out
    assert "soft 70%" in out and "hard 90%" in out and f"{RESTART} restart" in out
    assert sum("% ┤" in line for line in out.splitlines()) == 10  # the chart's rows


def resumed(events: Path) -> None:
    """The sample run (paused by max_turns) resumed, one turn into its new session."""
    log = EventLog(events)
    log.session, log.turn = 3, 0
    log.emit(sample_resumed(limit_source="config"))
    log.emit(
        ev.SessionStart(
            context_limit=8192, limit_source="config", budget=6144, carryover_messages=4
        )
    )
    log.turn = 1
    log.emit(ev.Assistant(text="Going on.", finish_reason="stop", tool_calls=[]))
    log.close()


@pytest.mark.parametrize("every", [[], ["--all"]])
def test_stats_of_a_run_resumed_and_going_on_says_running_not_its_old_end(tmp_path, every):
    config, events = project(tmp_path)
    resumed(events)
    held = hold_state_lock(
        tmp_path / ".ouroboros",
        {"pid": os.getpid(), "run_id": RUN_ID, "host": socket.gethostname()},
    )
    try:
        going = invoke("stats", *every, "-c", str(config))
    finally:
        os.close(held)
    killed = invoke("stats", *every, "-c", str(config))  # no process runs it any more

    assert going.exit_code == 0, going.output
    assert f"run {RUN_ID}: 3 sessions, 10 turns, 1 restart, running\n" in going.output
    assert "ended:" not in going.output
    assert killed.output.splitlines()[0].endswith("1 restart, stopped (killed?), resumable")


def test_stats_of_an_unknown_run(tmp_path):
    config, _ = project(tmp_path)

    result = invoke("stats", "20990101-000000-0000", "-c", str(config))

    assert result.exit_code == 2
    assert result.stderr.strip() == (
        f"error: no run '20990101-000000-0000' in "
        f"{tmp_path / '.ouroboros' / 'runs'} (latest: {RUN_ID})"
    )


def test_stats_with_no_runs(tmp_path):
    config = tmp_path / "ouroboros.toml"
    config.write_text("")

    result = invoke("stats", "-c", str(config))

    assert result.exit_code == 2
    assert "no runs in" in result.stderr


# -- logs --


def test_logs_prints_every_event(tmp_path):
    config, path = project(tmp_path)

    result = invoke("logs", "-c", str(config))

    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert len(lines) == len(read_events(path).events)
    assert lines[0].endswith(f"s1 t0 run {RUN_ID} started (ouroboros 0.1.0)")
    assert any(line.endswith("s1 t6 session_end reason=restart") for line in lines)
    assert any(f"restart -> session 2: {RESTART_REASON} (" in line for line in lines)


def test_logs_into_a_reader_that_stops_early_ends_quietly(tmp_path):
    config, path = project(tmp_path)
    log = EventLog(path, seq=len(read_events(path).events))
    for n in range(2000):  # far more than a pipe holds
        log.emit(ev.WarningEvent(message=f"warning {n} " + "x" * 100))
    log.close()

    # a whole `python -m ouroboros`: its stdout a real pipe that its reader closes
    reader = subprocess.Popen(
        [sys.executable, "-m", "ouroboros", "logs", "-c", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=clean_env(),
    )
    assert reader.stdout is not None and reader.stderr is not None
    first = reader.stdout.readline()
    reader.stdout.close()  # `| head -1`
    errors = reader.stderr.read()
    reader.wait(timeout=30)

    assert first.rstrip().endswith(f"run {RUN_ID} started (ouroboros 0.1.0)".encode())
    assert (reader.returncode, errors) == (0, b"")


def test_logs_leaves_out_checkpoints_unless_asked_for_them(tmp_path):
    config, path = project(tmp_path)
    log = EventLog(path)
    log.emit(ev.Checkpoint(base=1, state={"total_turns": 7}))
    log.close()

    everything = invoke("logs", "-c", str(config)).output
    asked = invoke("logs", "--type", "checkpoint", "-c", str(config)).output

    assert "checkpoint" not in everything
    assert len(everything.splitlines()) == len(read_events(path).events) - 1
    assert "checkpoint base=1 state={'total_turns': 7}" in asked


def test_logs_filters_by_type(tmp_path):
    config, _ = project(tmp_path)

    result = invoke("logs", RUN_ID, "--type", "context_mask", "-t", "wind_down", "-c", str(config))

    assert result.exit_code == 0, result.output
    texts = [line.split(" ", 3)[3] for line in result.output.splitlines()]
    assert texts == [
        "masked 3 tool results (4,584 -> 3,310 tokens, 1,274 freed; 3 masked in total)",
        "masked 1 tool result (5,290 -> 4,950 tokens, 340 freed; 4 masked in total)",
        "wind-down: context at 93.5% of the budget, agent asked to save state",
    ]


def test_logs_refuses_an_unknown_type(tmp_path):
    config, _ = project(tmp_path)

    result = invoke("logs", "--type", "tool_cal", "-c", str(config))

    assert result.exit_code == 2
    assert result.stderr.startswith("error: unknown event type tool_cal; known types: ")
    assert all(name in result.stderr for name in EVENT_TYPES)
    assert result.stdout == ""


def test_logs_follow_starts_at_the_tail_and_reads_to_the_run_end(tmp_path):
    config, _ = project(tmp_path)

    followed = invoke("logs", "--follow", "-c", str(config))
    plain = invoke("logs", "-c", str(config))

    assert followed.exit_code == 0, followed.output
    assert followed.output.splitlines() == plain.output.splitlines()[-10:]
    assert followed.output.splitlines()[-1].endswith(
        "run ended: max_turns after 9 turns, 2 sessions, 1 restart (exit 0)"
    )


# -- watch --


def test_watch_a_finished_run_shows_its_final_state(tmp_path):
    config, _ = project(tmp_path)

    result = invoke("watch", "-c", str(config))

    assert result.exit_code == 0, result.output
    out = result.output
    assert f"ouroboros · run {RUN_ID} · qwen3:8b" in out
    assert "session 2   turn 3   total turns 9   restarts 1   masked 5" in out
    assert "3,797/6,144 tokens  61.8%" in out and "↑soft 70%" in out
    assert "ended: max_turns (exit 0)" in out
    assert out.count("ended: max_turns (exit 0)") == 1  # one frame, not one per event


def test_watch_an_unknown_run(tmp_path):
    config, _ = project(tmp_path)

    result = invoke("watch", "nope", "-c", str(config))

    assert result.exit_code == 2 and f"(latest: {RUN_ID})" in result.stderr


# -- at 80 columns, through the command as `ouroboros` runs it (tests.helpers.ouroboros_here:
# the width from its environment) --


def at_columns(columns: int, *args: str) -> list[str]:
    result = ouroboros_here(*args, env=clean_env(COLUMNS=str(columns)))
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


@pytest.mark.parametrize("columns", [80, 160])
def test_runs_fits_the_terminal_one_line_a_run(tmp_path, columns):
    config, _ = project(tmp_path)
    state_dir = tmp_path / ".ouroboros"
    write_run(
        state_dir, "20250302-090000-cd34", 3, end={"reason": "task_complete", "resumable": True}
    )
    write_run(state_dir, "20250303-090000-ef56", 1)  # killed: no end record
    write_run(state_dir, "20250304-090000-gh78", 2)
    (state_dir / LOCK_FILE).write_text(
        json.dumps(
            {"pid": 4_194_304, "host": socket.gethostname(), "run_id": "20250304-090000-gh78"}
        )
    )

    lines = at_columns(columns, "runs", "-c", str(config))

    assert len(lines) == 5, "\n".join(lines)  # the header and one line per run: none wraps
    assert all(len(line) <= columns for line in lines)
    assert "task_complete, resumable" in lines[2] and "stopped (killed?), resumable" in lines[3]
    assert lines[0].split()[-2:] == ["last", "event"]
    if columns >= 100:
        assert "ended: task_complete, resumable" in lines[2] and "run_end, " in lines[2]


@pytest.mark.parametrize("columns", [80, 160])
def test_stats_chart_fits_with_its_threshold_labels_beside_it(tmp_path, columns):
    config = tmp_path / "ouroboros.toml"
    config.write_text("")
    write_run(
        tmp_path / ".ouroboros", "20250302-090000-cd34", 4, turns=6, end={"reason": "max_turns"}
    )  # 24 turns: 3 columns each at full width

    lines = at_columns(columns, "stats", "-c", str(config))

    assert all(len(line) <= columns for line in lines), "\n".join(lines)
    rows = [line for line in lines if "% ┤" in line]
    assert len(rows) == 10, "\n".join(lines)  # no chart row wrapped onto a second line
    assert any(row.endswith(" hard 90%") for row in rows)
    assert any(row.endswith(" soft 70%") for row in rows)
    assert lines[-1].rstrip().endswith("24   ↻ restart")


def test_status_named_with_config_says_how_to_go_on_with_that_config(tmp_path):
    """From another directory, `ouroboros resume` alone would find another project (or none):
    the command `status --config PATH` suggests carries the same --config."""
    config = tmp_path / "elsewhere" / "ouroboros.toml"
    config.parent.mkdir()
    config.write_text("")
    write_run(
        config.parent / ".ouroboros",
        "20250302-090000-cd34",
        1,
        end={
            "reason": "max_turns",
            "exit_code": 3,
            "resumable": True,
            "next": 'ouroboros resume --message "what to do next"',
        },
    )

    result = ouroboros_here(
        "status", "--config", str(config), cwd=tmp_path, env=clean_env(COLUMNS="200")
    )

    assert result.returncode == 0, result.stderr
    assert f'ouroboros resume --config {config} --message "what to do next"' in " ".join(
        result.stdout.split()
    )
