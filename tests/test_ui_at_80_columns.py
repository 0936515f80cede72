"""At 80x24, what a message says to do survives: an alert's `Fix:`, its `(did you mean …)`, a
run end's `to go on:` and a restart's reason are shown whole, in the header and in the
activity pane, however long the rest of the message is."""

from __future__ import annotations

from pathlib import Path

import pytest

from ouroboros.config import load_config
from ouroboros.errors import ConfigError
from ouroboros.loop.continuation import how_to_continue
from ouroboros.loop.reload import bad_edit
from ouroboros.server.kinds import bigger_window
from ouroboros.store import events as ev
from tests.test_ui_dashboard import rendered_at, replay, sample_events
from tests.ui_sample import RESTART_REASON

WIDTH, HEIGHT = 80, 24
ENVELOPE = {"ts": "2025-03-01T10:20:00.000Z", "session": 2, "turn": 3}


def panel_text(frame: list[str], title: str) -> str:
    """The words of a panel (`ouroboros` for the header), its rows joined, times left out."""
    start = next(i for i, line in enumerate(frame) if line.startswith(f"╭─ {title}"))
    end = next(i for i in range(start, len(frame)) if frame[i].startswith("╰"))
    rows = [line[2:-2] for line in frame[start + 1 : end]]
    return " ".join(" ".join(row.split()) for row in rows)


def typo_warning(tmp_path: Path) -> tuple[str, str]:
    config = tmp_path / "ouroboros.toml"
    config.write_text("[context]\nsof_threshold_pct = 0.6\n")
    with pytest.raises(ConfigError) as error:
        load_config(config, {}, env={}, user_file=None)
    return bad_edit(error.value.message), "(did you mean context.soft_threshold_pct?)"


def allocated_warning(tmp_path: Path) -> tuple[str, str]:
    fix = (
        f"Fix: give the model the bigger window ({bigger_window(8192)}), or set "
        "model.context_limit = 2048 to match"
    )
    return (
        "the server's window is 2048 tokens (allocated by Ollama (/api/ps)), but "
        f"model.context_limit in ouroboros.toml claims 8192: working within 2048 tokens. "
        f"{fix}"
    ), fix


def truncation_warning(tmp_path: Path) -> tuple[str, str]:
    fix = (
        "Fix: give the model a bigger window (OLLAMA_CONTEXT_LENGTH=32768 ollama serve, or "
        "PARAMETER num_ctx in a Modelfile) and set model.context_limit to match; if the "
        "server misreports its counts instead, set context.truncation_guard = false"
    )
    return (
        "the server cut the front of the conversation: its counts stayed near 1900 tokens "
        f"while the conversation grew. Working within 2048 tokens from now on. {fix}"
    ), fix


@pytest.mark.parametrize("warning", [typo_warning, allocated_warning, truncation_warning])
def test_an_alerts_fix_is_whole_in_the_header_and_the_activity_pane(tmp_path, warning):
    message, fix = warning(tmp_path)
    state = replay(sample_events(tmp_path))
    state.apply(ev.WarningEvent(message=message, seq=900, **ENVELOPE).record())

    frame = rendered_at(state, WIDTH, HEIGHT)

    assert len(frame) <= HEIGHT and max(len(line) for line in frame) <= WIDTH
    assert fix in panel_text(frame, "ouroboros"), "\n".join(frame)
    assert fix in panel_text(frame, "activity"), "\n".join(frame)


@pytest.mark.parametrize(
    "reason,fix",
    [
        ("idle", 'to go on: ouroboros resume --message "what to do next" (or `ouroboros resume`)'),
        ("task_complete", 'to give it more to do: ouroboros resume --message "what to do next"'),
        ("max_turns", "`ouroboros resume --max-turns N` gives it N more"),
    ],
)
def test_a_run_ends_way_to_go_on_is_whole(tmp_path, reason, fix):
    state = replay(sample_events(tmp_path, ended=False))
    state.apply(
        ev.RunEnd(
            reason=reason,
            exit_code=3,
            sessions=2,
            total_turns=8,
            restarts=1,
            summary="all parts recorded" * (reason == "task_complete"),
            next=how_to_continue(reason, max_turns=8, max_idle_turns=3),
            seq=900,
            **ENVELOPE,
        ).record()
    )

    frame = rendered_at(state, WIDTH, HEIGHT)

    assert max(len(line) for line in frame) <= WIDTH
    assert fix in panel_text(frame, "activity"), "\n".join(frame)


def test_a_restarts_reason_is_whole(tmp_path):
    frame = rendered_at(replay(sample_events(tmp_path)), WIDTH, HEIGHT)

    assert f"restart -> session 2: {RESTART_REASON}" in panel_text(frame, "activity"), "\n".join(
        frame
    )


def test_a_restart_with_one_row_left_says_its_reason_in_it(tmp_path):
    state = replay(sample_events(tmp_path))
    state.apply(
        ev.WarningEvent(message=allocated_warning(tmp_path)[0], seq=900, **ENVELOPE).record()
    )
    state.apply(
        ev.SessionRestart(
            previous_turns=6,
            carryover_messages=7,
            carryover_masked=0,
            carryover_turns_dropped=0,
            reason=RESTART_REASON,
            seq=901,
            **{**ENVELOPE, "session": 3},
        ).record()
    )
    state.apply(
        ev.RunEnd(
            reason="max_turns",
            exit_code=3,
            sessions=3,
            total_turns=9,
            restarts=2,
            next=how_to_continue("max_turns", max_turns=9),
            seq=902,
            **ENVELOPE,
        ).record()
    )

    frame = rendered_at(state, WIDTH, HEIGHT)

    assert f"restart: {RESTART_REASON}" in panel_text(frame, "activity"), "\n".join(frame)


def test_status_at_80_columns_shows_the_standing_alert_with_its_fix_whole(tmp_path):
    from typer.testing import CliRunner

    from ouroboros.cli import app
    from ouroboros.store.log import EventLog
    from tests.ui_sample import write_sample_run

    message, fix = allocated_warning(tmp_path)
    config = tmp_path / "ouroboros.toml"
    config.write_text("")
    log = EventLog(write_sample_run(tmp_path / ".ouroboros", ended=False))
    log.session, log.turn = 2, 2
    log.emit(ev.WarningEvent(message=message))
    log.close()

    result = CliRunner(env={"COLUMNS": str(WIDTH)}).invoke(app, ["status", "-c", str(config)])

    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= WIDTH
    assert fix in " ".join(" ".join(line.split()) for line in lines), result.output


def test_the_way_to_go_on_after_a_run_wraps_at_spaces_on_an_80_column_terminal(
    tmp_path, scripted_server
):
    import fcntl
    import os
    import pty
    import struct
    import subprocess
    import sys
    import termios

    from ouroboros.testing import Reply
    from tests.helpers import clean_env, make_project

    server = scripted_server([Reply("", [("task_complete", {"summary": "done"})])])
    config = make_project(tmp_path, server.base_url)
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", HEIGHT, WIDTH, 0, 0))
    try:
        subprocess.run(
            [sys.executable, "-m", "ouroboros", "run", "--json", "-c", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=follower,
            stdin=subprocess.DEVNULL,
            env=clean_env(),
            timeout=50,
            check=True,
        )
        os.close(follower)
        said = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the terminal's other end is closed: all is read
                break
            if not chunk:
                break
            said += chunk
    finally:
        os.close(leader)
    lines = said.decode().replace("\r", "").splitlines()

    assert lines and max(len(line) for line in lines) <= WIDTH, lines
    assert 'ouroboros resume --message "what to do next"' in " ".join(lines)
    assert all(not line.startswith(("-message", "essage", "ge ")) for line in lines), lines
