"""`ouroboros run` in a real terminal: tmux runs the real command at 80x24, 100x30 and
160x50 against a scripted server, and `capture-pane` reads what a person would see.

The server sends no token usage, so the harness warns after the first reply, long before the
run ends; the test waits (polling the screen, never timing anything) for the dashboard to show
that warning while the run goes on, and again on the frame left when it has ended.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Callable, Iterator

import pytest

from ouroboros.protocols import Message
from ouroboros.testing import Reply
from tests.helpers import clean_env, make_project, whole_panels

pytestmark = [
    pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux"),
    pytest.mark.slow,
]  # a real terminal, read as the run goes on

SIZES = [(80, 24), (100, 30), (160, 50)]
WARNING = "WARNING the server sent no token usage"
TURNS = 10
PATIENCE_SECS = 60  # a busy machine may be slow; nothing here measures how slow
REPLY_SECS = 0.4  # a brain slow enough for the screen to be read while the run goes on
PANELS = ["ouroboros", "assistant", "tools", "activity"]


def slow_brain(messages: list[Message]) -> Reply:
    """A few seconds of work: reads a file with a long path, then runs a long command."""
    time.sleep(REPLY_SECS)
    turn = sum(m["role"] == "assistant" for m in messages)
    if turn % 2:
        return Reply(
            "Counting the lines of every data file so far, to compare with my notes.",
            [("shell_exec", {"command": "wc -l data/*.txt | sort -n | tail -5"})],
        )
    return Reply(
        "Reading the next part of the data set before I summarise it in my notes.",
        [("file_read", {"path": f"data/archive/2025/part-{turn:02d}.txt"})],
    )


class Tmux:
    """A tmux server of our own (a private socket and no user config), one session in it."""

    def __init__(self, directory: Path) -> None:
        self.socket = f"ouroboros-test-{uuid.uuid4().hex[:12]}"
        self.conf = directory / "tmux.conf"
        self.conf.write_text("set -g remain-on-exit on\nset -g history-limit 5000\n")

    def tmux(self, *args: str) -> str:
        return subprocess.run(
            ["tmux", "-L", self.socket, "-f", str(self.conf), *args],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout

    def start(self, command: list[str], width: int, height: int, cwd: Path) -> None:
        env = clean_env()
        for name in ("COLUMNS", "LINES", "TMUX", "NO_COLOR"):
            env.pop(name, None)
        subprocess.run(
            [
                "tmux",
                "-L",
                self.socket,
                "-f",
                str(self.conf),
                "new-session",
                "-d",
                "-x",
                str(width),
                "-y",
                str(height),
                "-c",
                str(cwd),
                shlex.join(command),
            ],
            env=env,
            check=True,
            timeout=30,
        )

    def screen(self) -> list[str]:
        """The visible screen, one string per row."""
        return self.tmux("capture-pane", "-p").rstrip("\n").split("\n")

    def everything(self) -> list[str]:
        """The scrollback and the screen."""
        return self.tmux("capture-pane", "-p", "-S", "-").rstrip("\n").split("\n")

    def wait_for(self, seen: Callable[[list[str]], bool], what: str) -> list[str]:
        deadline = time.monotonic() + PATIENCE_SECS
        while True:
            screen = self.screen()
            if seen(screen):
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"never saw {what}; the screen:\n" + "\n".join(screen))
            time.sleep(0.2)

    def kill(self) -> None:
        """Stop the server and whatever runs in it, and remove its socket file."""
        path = subprocess.run(
            ["tmux", "-L", self.socket, "display-message", "-p", "#{socket_path}"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, timeout=30)
        if path.returncode == 0 and path.stdout.strip():
            Path(path.stdout.strip()).unlink(missing_ok=True)


@pytest.fixture
def tmux(tmp_path: Path) -> Iterator[Tmux]:
    session = Tmux(tmp_path)
    try:
        yield session
    finally:
        session.kill()


def last_frame(lines: list[str]) -> list[str]:
    """The last dashboard frame in `lines`: from its header's top border to its end."""
    top = max(i for i, line in enumerate(lines) if line.startswith("╭─ ouroboros"))
    frame = lines[top:]
    bottom = max(i for i, line in enumerate(frame) if line.startswith("╰"))
    return frame[: bottom + 1]


def header(frame: list[str]) -> list[str]:
    return frame[: next(i for i, line in enumerate(frame) if line.startswith("╰"))]


def problems(frame: list[str], width: int, height: int) -> list[str]:
    """What a person would find wrong with the frame: too big, a panel cut off, the context
    line wrapped, the warning missing from the header."""
    found = []
    if len(frame) >= height:
        found.append(f"{len(frame)} lines tall in a terminal of {height}")
    if max(len(line) for line in frame) > width:
        found.append(f"a line wider than {width}")
    if whole_panels(frame) != PANELS:
        found.append(f"whole panels: {whole_panels(frame)}")
    if any(line.strip() in ("...", "…") for line in frame):
        found.append("rich's mark of a frame cut short")
    context = [line for line in frame if line.startswith("│ context ")]
    if len(context) != 1 or not context[0].rstrip(" │").endswith("%"):
        found.append("the context line is not one line ending with its percentage")
    if not any(WARNING in line for line in header(frame)):
        found.append("no warning on the alert line")
    return found


def assert_fits(frame: list[str], width: int, height: int) -> None:
    assert not problems(frame, width, height), "\n".join(problems(frame, width, height) + frame)


def running_and_whole(width: int, height: int) -> Callable[[list[str]], bool]:
    """A screen of the run going on, its warning shown, a file_read shown by its path, and
    nothing wrong with it (polled again if a capture caught a frame half drawn)."""

    def seen(screen: list[str]) -> bool:
        text = "\n".join(screen)
        going_on = re.search(r"(?:running|waiting for the model \d+s|running \w+ \d+s) ─╯", text)
        if not (WARNING in text and going_on and "file_read data/archive" in text):
            return False
        return not problems(last_frame(screen), width, height)

    return seen


@pytest.mark.parametrize("width,height", SIZES)
def test_the_dashboard_fits_and_keeps_an_early_warning(
    tmp_path, scripted_server, tmux, width, height
):
    server = scripted_server(slow_brain, send_usage=False)
    config = make_project(tmp_path / "project", server.base_url, agent={"max_turns": TURNS})

    tmux.start(
        [sys.executable, "-m", "ouroboros", "run", "--config", str(config)],
        width,
        height,
        cwd=tmp_path,
    )

    tmux.wait_for(
        running_and_whole(width, height),
        "while the run goes on, a whole frame "
        "with the warning on its alert line and a file_read by its path",
    )

    tmux.wait_for(lambda s: any("ended: max_turns" in line for line in s), "the run's end")
    final = last_frame(tmux.everything())
    assert_fits(final, width, height)
    assert "ended: max_turns (exit 3)" in final[len(header(final))]  # the header's border
    assert any(f"total turns {TURNS}" in line for line in final)


def test_ctrl_c_typed_at_80x24_stops_the_run_and_leaves_a_whole_frame(
    tmp_path, scripted_server, tmux
):
    server = scripted_server(slow_brain, send_usage=False)
    config = make_project(tmp_path / "project", server.base_url, agent={"max_turns": 500})
    tmux.start(
        [sys.executable, "-m", "ouroboros", "run", "--config", str(config)], 80, 24, cwd=tmp_path
    )
    tmux.wait_for(running_and_whole(80, 24), "the run going on, its warning shown")

    tmux.tmux("send-keys", "C-c")

    tmux.wait_for(
        lambda s: any("ended: interrupted (exit 130)" in line for line in s),
        "the run stopped by Ctrl+C",
    )
    final = last_frame(tmux.everything())
    assert_fits(final, 80, 24)
    assert any("SIGINT: stopping now" in line for line in final)


def quick_brain(messages: list[Message]) -> Reply:
    turn = sum(m["role"] == "assistant" for m in messages)
    time.sleep(REPLY_SECS if turn >= 3 else 0)
    return Reply(
        f"Reading part {turn}.", [("file_read", {"path": f"data/archive/2025/part-{turn:02d}.txt"})]
    )


@pytest.mark.parametrize("width,height", [(80, 24), (160, 50)])
def test_a_resumed_runs_dashboard_has_the_header_the_run_had(
    tmp_path, scripted_server, tmux, width, height
):
    server = scripted_server(quick_brain)
    config = make_project(tmp_path / "project", server.base_url, agent={"max_turns": 3})
    from tests.helpers import ouroboros, run_events

    first = ouroboros("run", "--config", str(config), "--headless")
    assert first.returncode == 3, first.stderr  # paused at its max_turns
    run_id = run_events(tmp_path / "project")[0]["run_id"]

    tmux.start(
        [sys.executable, "-m", "ouroboros", "resume", "--config", str(config), "--max-turns", "2"],
        width,
        height,
        cwd=tmp_path,
    )

    tmux.wait_for(
        lambda s: any("ended: max_turns (exit 3) ─╯" in line for line in s),
        "the resume's end, on the header's border",
    )
    final = last_frame(tmux.everything())
    title = final[0]
    assert f"run {run_id}" in title and "scripted" in title
    assert any("total turns 5" in line for line in final), "\n".join(final)
    assert any("window " in line for line in header(final))


def loading_brain(messages: list[Message]) -> Reply:
    """A model that takes its time over its second reply, as one loading would."""
    turn = sum(m["role"] == "assistant" for m in messages)
    if turn == 1:
        time.sleep(6)  # room for the wait's count to be seen at least twice
    return Reply(
        f"Reading part {turn}.", [("file_read", {"path": f"data/archive/2025/part-{turn:02d}.txt"})]
    )


@pytest.mark.parametrize("width,height", [(80, 24), (160, 50)])
def test_a_slow_first_token_shows_a_wait_that_counts(
    tmp_path, scripted_server, tmux, width, height
):
    server = scripted_server(loading_brain)
    config = make_project(tmp_path / "project", server.base_url, agent={"max_turns": 3})

    tmux.start(
        [sys.executable, "-m", "ouroboros", "run", "--config", str(config)],
        width,
        height,
        cwd=tmp_path,
    )

    def waited(screen: list[str]) -> int:
        """The seconds of the wait on the header's border (0 when none is shown)."""
        found = [re.search(r"waiting for the model (\d+)s ─╯", line) for line in screen]
        return max((int(m.group(1)) for m in found if m), default=0)

    first = tmux.wait_for(lambda s: waited(s) >= 1, "a wait of 1 s on the header's border")
    tmux.wait_for(
        lambda s: waited(s) > waited(first), "the same wait, later (the frame redraws itself)"
    )
    assert any("assistant (last reply; waiting for the model" in line for line in first)
    tmux.wait_for(
        lambda s: any("ended: max_turns (exit 3) ─╯" in line for line in s), "the run's end"
    )


class TypoAgent:
    """The demo task, slowly; at the first wind-down it puts a typo in ouroboros.toml, at the
    next it fixes it (the config is read again at each session start)."""

    def __init__(self, project: Path, parts: int) -> None:
        from ouroboros.demo import RecordingAgent

        self.agent, self.toml, self.saved = RecordingAgent(parts), project / "ouroboros.toml", ""
        self.winds = 0

    def __call__(self, messages: list[Message]) -> Reply:
        time.sleep(0.15)
        if "Context nearly full" in (messages[-1].get("content") or ""):
            self.winds += 1
            if self.winds == 1:
                self.saved = self.toml.read_text()
                self.toml.write_text(
                    self.saved.replace("[context]", "[context]\nsof_threshold_pct = 0.6")
                )
            elif self.winds == 2:
                self.toml.write_text(self.saved)
        return self.agent(messages)


@pytest.mark.parametrize("width,height", [(80, 24), (160, 50)])
def test_a_config_warning_leaves_the_header_once_the_typo_is_fixed(
    tmp_path, scripted_server, tmux, width, height
):
    from ouroboros.demo import write_demo_project

    project = tmp_path / "project"
    agent = TypoAgent(project, 30)
    server = scripted_server(agent, model="scripted-demo", context_length=4096)
    write_demo_project(project, server.base_url, 30)
    assert "[context]" in (project / "ouroboros.toml").read_text()

    tmux.start(
        [sys.executable, "-m", "ouroboros", "run", "--config", str(project / "ouroboros.toml")],
        width,
        height,
        cwd=tmp_path,
    )

    def typo_in_header(screen: list[str]) -> bool:
        whole = any(line.startswith("╭─ ouroboros") for line in screen)
        return whole and any("sof_threshold_pct" in line for line in header(last_frame(screen)))

    typo = tmux.wait_for(typo_in_header, "the typo's warning on the header")
    assert any("WARNING" in line for line in header(last_frame(typo)))
    tmux.wait_for(
        lambda s: any("warning over: the config loads again" in line for line in s),
        "the activity saying the warning is over",
    )
    tmux.wait_for(lambda s: any("ended: " in line and "─╯" in line for line in s), "the run's end")
    frame = last_frame(tmux.everything())
    assert not any("sof_threshold_pct" in line for line in header(frame)), "\n".join(frame)
    assert max(len(line) for line in frame) <= width


@pytest.mark.parametrize("width,height", [(80, 24), (160, 50)])
def test_while_a_turn_waits_its_counters_agree(tmp_path, scripted_server, tmux, width, height):
    """The second request fails once (a 503): the retry's event carries turn 2 while one reply
    has come; the header counts the replies received in both counters."""
    from ouroboros.testing import Fault

    holder: list = []

    def failing_once(messages: list[Message]) -> Reply:
        turn = sum(m["role"] == "assistant" for m in messages)
        if turn == 0:
            holder[0].inject(Fault("status", 503, "model is loading"))
        return Reply(
            f"Reading part {turn}.",
            [("file_read", {"path": f"data/archive/2025/part-{turn:02d}.txt"})],
        )

    server = scripted_server(failing_once)
    holder.append(server)
    config = make_project(
        tmp_path / "project", server.base_url, agent={"max_turns": 3}, model={"max_retry_secs": 30}
    )
    tmux.start(
        [sys.executable, "-m", "ouroboros", "run", "--config", str(config)],
        width,
        height,
        cwd=tmp_path,
    )

    screen = tmux.wait_for(
        lambda s: any("waiting to retry" in line for line in s), "the wait for the retry"
    )
    counters = next(line for line in screen if "total turns" in line)
    assert re.search(r"turn 1 .*total turns 1\b", counters), counters
    tmux.wait_for(
        lambda s: any("ended: max_turns (exit 3) ─╯" in line for line in s), "the run's end"
    )
    final = last_frame(tmux.everything())
    counters = next(line for line in final if "total turns" in line)
    assert re.search(r"turn 3 .*total turns 3\b", counters), counters
