"""Escape sequences from the model or a tool reach no terminal raw: headless lines, `logs`
and `watch` show them in caret notation, while the event log keeps the raw text."""

from __future__ import annotations

import io
import re
from pathlib import Path

from rich.console import Console

from ouroboros.store.log import EVENTS_FILE, list_runs
from ouroboros.testing import Reply
from ouroboros.ui.dashboard import DashboardState
from ouroboros.ui.live import watch
from ouroboros.ui.sanitize import neutralise, neutralise_all
from tests.helpers import clean_env, make_project, of_type, ouroboros_here, run_events

TITLE = "\x1b]0;PWNED-TITLE\x07"
CLIPBOARD = "\x1b]52;c;cm0gLXJmIH4=\x07"
CLEAR = "\x1b[2J\x9b31m"
# the shell prints the same sequences into the tool's output
PRINTF = r"printf '\033]0;TOOL-TITLE\007\033]52;c;dG9vbA==\007tool done\n'"

SCRIPT = [
    Reply(f"Hello {TITLE}{CLIPBOARD}{CLEAR}there", [("shell_exec", {"command": PRINTF})]),
    Reply(f"warn {TITLE}", [("file_read", {"path": f"nope{TITLE}.txt"})]),
    Reply("Done."),
]


# Every C0 control but tab and newline, DEL, and the C1 controls: written out here rather
# than taken from sanitize.py, so a control its table missed would fail these tests.
TERMINAL_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def no_terminal_controls(text: str) -> bool:
    return TERMINAL_CONTROL.search(text.replace("\r\n", "\n")) is None


def test_neutralise_shows_every_control_but_newline_and_tab() -> None:
    assert neutralise(f"a{TITLE}b") == "a^[]0;PWNED-TITLE^Gb"
    assert neutralise("\x1b[2J\x9b31m\x7f\x00") == "^[[2J\\x9b31m^?^@"
    assert neutralise("line\r\nnext\tcol\rover") == "line\nnext\tcol^Mover"
    event = {"type": "assistant", "text": TITLE, "tool_calls": [{"arguments": CLIPBOARD}]}
    clean = neutralise_all(event)
    assert clean["text"] == "^[]0;PWNED-TITLE^G"
    assert clean["tool_calls"][0]["arguments"].startswith("^[]52;")
    assert event["text"] == TITLE  # the original is left alone


def test_headless_output_and_logs_show_escapes_but_the_log_keeps_them(
    tmp_path: Path, scripted_server
) -> None:
    server = scripted_server(SCRIPT)
    config = make_project(tmp_path, server.base_url)
    env = clean_env(XDG_CACHE_HOME=str(tmp_path / "cache"))

    run = ouroboros_here("run", "--config", str(config), "--headless", "--max-turns", "3", env=env)
    logs = ouroboros_here("logs", "--config", str(config), env=env)

    assert run.returncode == 3, run.stderr
    assert logs.returncode == 0, logs.stderr
    for shown in (run.stdout, run.stderr, logs.stdout, logs.stderr):
        assert no_terminal_controls(shown), repr(shown)
    assert (
        "assistant: Hello ^[]0;PWNED-TITLE^G^[]52;c;cm0gLXJmIH4=^G^[[2J\\x9b31mthere" in run.stdout
    )
    assert "^[]0;TOOL-TITLE^G^[]52;c;dG9vbA==^Gtool done" in run.stdout
    assert "^[]0;PWNED-TITLE^G" in logs.stdout
    events = run_events(tmp_path)
    assert of_type(events, "assistant")[0]["text"] == f"Hello {TITLE}{CLIPBOARD}{CLEAR}there"
    assert "\x1b]0;TOOL-TITLE\x07" in of_type(events, "tool_result")[0]["summary"]


def test_watch_shows_escapes_without_sending_them(tmp_path: Path, scripted_server) -> None:
    server = scripted_server(SCRIPT)
    config = make_project(tmp_path, server.base_url)
    env = clean_env(XDG_CACHE_HOME=str(tmp_path / "cache"))
    assert (
        ouroboros_here(
            "run", "-c", str(config), "--headless", "--max-turns", "2", env=env
        ).returncode
        == 3
    )
    state_dir = tmp_path / ".ouroboros"
    path = state_dir / "runs" / list_runs(state_dir)[-1] / EVENTS_FILE
    out = io.StringIO()

    state = watch(path, DashboardState(), Console(file=out, width=120), wait=lambda: None)

    assert no_terminal_controls(out.getvalue()), repr(out.getvalue())
    assert "^[]0;PWNED-TITLE^G" in out.getvalue()
    assert state.text == "warn ^[]0;PWNED-TITLE^G"


def test_the_dashboard_shows_streamed_escapes_without_sending_them() -> None:
    state = DashboardState()
    state.add_text(f"a{TITLE}", now=0.0)
    state.add_text(CLIPBOARD, now=0.1)
    assert state.text == "a^[]0;PWNED-TITLE^G^[]52;c;cm0gLXJmIH4=^G"
