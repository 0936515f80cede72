"""An edit to SYSTEM_PROMPT.md during a run gets its line, as a config edit does: the next
session starts with the new text and the log (and so `logs`, the headless lines and the
dashboard's activity) says so."""

from __future__ import annotations

from pathlib import Path

from ouroboros.ui.plain import format_line
from tests.helpers import of_type, run_events
from tests.test_e2e_reload import EditingAgent, run_task

ADDED = "\nAlso: keep progress.md short.\n"


def test_an_edited_system_prompt_is_said_at_the_next_session(tmp_path: Path):
    prompt = tmp_path / "SYSTEM_PROMPT.md"

    def edit() -> None:
        prompt.write_text(prompt.read_text() + ADDED)

    before: list[int] = []
    agent = EditingAgent(14, lambda: (before.append(len(prompt.read_text())), edit()))
    code, _ = run_task(tmp_path, agent, 14)

    assert code == 0
    events = run_events(tmp_path)
    changed = of_type(events, "prompt_changed")
    assert len(changed) == 1  # one edit, one line; later restarts change nothing
    assert changed[0]["path"] == str(prompt.resolve())
    assert (changed[0]["old_chars"], changed[0]["new_chars"]) == (before[0], before[0] + len(ADDED))
    restart = of_type(events, "session_restart")[0]
    assert changed[0]["session"] == restart["session"]
    line = format_line(changed[0])
    assert line is not None and "system prompt changed: " in line
    assert "in use from this session" in line
