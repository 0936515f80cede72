"""The dashboard: its reducer over real events, its rendering, and the live display."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from ouroboros.store import events as ev
from ouroboros.store.log import read_events
from ouroboros.ui.dashboard import RATE_WINDOW_SECS, DashboardState, call_summary, window_rate, zone
from ouroboros.ui.live import LiveDashboard, watch
from ouroboros.ui.render import gauge, render
from ouroboros.window.ledger import DEFAULT_CHARS_PER_TOKEN
from tests.helpers import whole_panels
from tests.ui_sample import RESTART_REASON, RUN_ID, write_sample_run


def sample_events(tmp_path: Path, *, ended: bool = True) -> list[dict]:
    return read_events(write_sample_run(tmp_path / ".ouroboros", ended=ended)).events


def replay(events: list[dict], state: DashboardState | None = None) -> DashboardState:
    state = state or DashboardState()
    for event in events:
        state.apply(event)
    return state


def rendered(state: DashboardState) -> str:
    console = Console(record=True, width=100)
    console.print(render(state))
    return console.export_text()


NO_USAGE = (
    "the server sent no token usage (or a prompt count of 0); estimating at 4.0 "
    "characters per token, and the server is asked to count the whole prompt once a "
    "session"
)
SIZES = [(80, 24), (100, 30), (160, 50)]


def rendered_at(state: DashboardState, width: int, height: int) -> list[str]:
    """The frame as a terminal of that size shows it, one string per line."""
    console = Console(record=True, width=width, height=height)
    console.print(render(state, width, height))
    return console.export_text().rstrip("\n").split("\n")


def warned_early(events: list[dict]) -> list[dict]:
    """The sample run with a long warning right after its first reply, as a server without
    usage causes, and without its own later warning: the early one is the only one."""
    first_usage = next(i for i, e in enumerate(events) if e["type"] == "token_usage")
    warning = {**events[first_usage], "type": "warning", "message": NO_USAGE}
    rest = [e for e in events if e["type"] != "warning"]
    return rest[: first_usage + 1] + [warning] + rest[first_usage + 1 :]


def upto(events: list[dict], type: str, nth: int = 1) -> list[dict]:
    """The events up to and including the nth of a type."""
    seen = 0
    for index, event in enumerate(events):
        seen += event["type"] == type
        if seen == nth:
            return events[: index + 1]
    raise AssertionError(f"fewer than {nth} {type} events")


def test_reducer_follows_a_whole_run(tmp_path):
    state = replay(sample_events(tmp_path))

    assert (state.run_id, state.model) == (RUN_ID, "qwen3:8b")
    assert (state.session, state.turn, state.total_turns) == (2, 3, 9)
    assert (state.restarts, state.masked) == (1, 5)  # 4 by masking, 1 fitting the carryover
    assert (state.context_pct, state.prompt_tokens, state.budget) == (61.8, 3797, 6144)
    assert state.ended and state.status == "ended: max_turns (exit 0)"
    assert state.text == "Adding examples to the help."
    assert len(state.tools) == 9  # every call of the run: the layout decides how many show
    assert state.tools[-1].call == "file_write src/cli.py"  # the path, not the content
    assert state.tools[-1].result == "ok: wrote 4,096 bytes" and state.tools[-1].ok
    kinds = [note.text.split()[0] for note in state.notes]
    # The start line is the first note (it says what confines the shell).
    assert kinds == ["run", "masked", "masked", "wind-down:", "restart", "retry", "WARNING", "run"]
    assert [note.level for note in state.notes][5:7] == ["warn", "warn"]


def test_thresholds_come_from_the_run_start_record(tmp_path):
    events = sample_events(tmp_path)
    events[0]["config"]["context"].update(soft_threshold_pct=0.6, hard_threshold_pct=0.8)

    state = replay(events[:1], DashboardState(soft=0.5, hard=0.55))

    assert (state.soft, state.hard) == (0.6, 0.8)
    assert DashboardState(soft=0.5, hard=0.55).apply({**events[1]}).soft == 0.5


def test_masking_lowers_the_reading_and_a_restart_clears_it(tmp_path):
    events = sample_events(tmp_path)

    before = replay(upto(events, "token_usage", 4))
    masked = replay(upto(events, "context_mask", 1))
    restarted = replay(upto(events, "session_restart"))

    assert before.context_pct == 74.6 and before.zone == "yellow"
    assert masked.context_pct == round(100 * 3310 / 6144, 1) and masked.masked == 3
    assert masked.zone == "green"
    assert restarted.context_pct is None and restarted.prompt_tokens is None
    assert (restarted.session, restarted.restarts, restarted.masked) == (2, 1, 5)


def test_zones():
    assert [zone(pct, 0.7, 0.9) for pct in (0, 69.9, 70, 89.9, 90, 130)] == [
        "green",
        "green",
        "yellow",
        "yellow",
        "red",
        "red",
    ]


def test_streamed_text_and_its_rate(tmp_path):
    events = sample_events(tmp_path)
    state = replay(upto(events, "tool_result", 2))

    state.add_text("Let me ", now=100.0)
    state.add_text("look at the failing test.", now=100.25)
    assert state.streaming and state.text == "Let me look at the failing test."
    assert state.tokens_per_sec is None  # too early to tell
    state.add_text("x" * 68, now=101.0)
    # the first piece starts the clock: what came after it, over the second since
    assert state.tokens_per_sec == (25 + 68) / DEFAULT_CHARS_PER_TOKEN / 1.0

    state.apply(upto(events, "assistant", 3)[-1])
    state.apply(upto(events, "token_usage", 3)[-1])
    assert not state.streaming and state.text == "The tokenizer drops trailing spaces; reading it."
    # the same second of streaming, its characters now counted in the server's tokens (43
    # for the 100 characters streamed), not one reply's count over its own time
    assert state.tokens_per_sec == pytest.approx((25 + 68) * 43 / 100 / 1.0)

    state.add_text("Next", now=200.0)
    assert state.text == "Next"  # a new stream starts afresh


def test_the_rate_is_over_the_newest_seconds_of_streaming():
    assert window_rate([], 10, 4.0) is None  # nothing streamed: blank
    assert window_rate([(0.0, 40), (0.2, 40)], 10, 4.0) is None  # too briefly to time
    assert window_rate([(0.0, 4), (1.0, 40), (2.0, 40)], 10, 4.0) == 10.0
    # what streamed more than the window before the newest piece no longer counts
    old_and_slow = [(0.0, 0), (20.0, 8)]
    assert window_rate(old_and_slow + [(21.0, 40), (22.0, 40)], 10, 4.0) == 10.0


def test_the_rate_stays_steady_across_replies_and_the_pauses_between_them():
    """A model streaming 40 characters a second, reply after reply, with a tool run of 30 s
    between the replies: the figure is the same every time, never a per-chunk or per-reply
    jump, and the pauses do not drag it down."""
    state, now, seen = DashboardState(), 0.0, []
    for reply_no in range(3):
        for second in range(4):
            state.add_text("x" * 40, now=now + second)
            if second:
                seen.append(state.tokens_per_sec)
        state.apply(
            ev.Assistant(
                ts="2025-03-01T10:00:00.000Z",
                turn=reply_no + 1,
                text="x",
                finish_reason="stop",
                tool_calls=[],
            )
        )
        now += 3 + 30  # the tools run: no streaming
    steady = 40 / DEFAULT_CHARS_PER_TOKEN
    assert all(rate == pytest.approx(steady) for rate in seen), seen
    assert len(state._pieces) <= RATE_WINDOW_SECS + 2  # what it keeps does not grow


def shell_result(ts: str) -> ev.ToolResultEvent:
    """A short shell result, logged at `ts`."""
    return ev.ToolResultEvent(
        ts=ts,
        turn=1,
        id="a",
        name="shell_exec",
        ok=True,
        bytes=3,
        observation="obs-1",
        truncated=False,
        summary="ok",
        duration_ms=5,
    )


def reply(ts: str) -> ev.Assistant:
    return ev.Assistant(ts=ts, turn=1, text="Done.", finish_reason="stop", tool_calls=[])


def usage(ts: str, completion_tokens: int) -> ev.TokenUsage:
    return ev.TokenUsage(
        ts=ts,
        turn=1,
        prompt_tokens=900,
        completion_tokens=completion_tokens,
        total_tokens=900 + completion_tokens,
        context_limit=4096,
        budget=3584,
        context_used_pct=25.1,
        source="server",
    )


def test_replayed_rate_comes_from_the_timestamps():
    state = replay(
        [
            shell_result("2025-03-01T10:00:00.000Z"),
            reply("2025-03-01T10:00:04.000Z"),
            usage("2025-03-01T10:00:04.001Z", completion_tokens=120),
        ]
    )

    assert state.tokens_per_sec == 30.0
    assert state.tools[0].call == "shell_exec(...)"  # its call was in an earlier log


def test_render_shows_gauge_counters_tools_and_activity(tmp_path):
    text = rendered(replay(sample_events(tmp_path)))

    assert f"ouroboros · run {RUN_ID} · qwen3:8b" in text
    assert "session 2   turn 3   total turns 9   restarts 1   masked 5" in text
    assert "3,797/6,144 tokens  61.8%" in text
    assert "↑soft 70%" in text and "↑hard 90%" in text
    assert "ended: max_turns (exit 0)" in text
    assert "FAILED: [exit code 1] 2 failed" in text
    assert "restart -> session 2" in text and "retry 1 in 2.0s: server returned 503" in text
    assert "WARNING the server is slow to answer" in text


def test_render_while_streaming_shows_the_last_lines(tmp_path):
    state = replay(upto(sample_events(tmp_path), "tool_result", 1))
    state.add_text("\n".join(f"line {n}" for n in range(1, 8)), now=0.0)

    text = rendered(state)

    assert "assistant (streaming)" in text
    assert "line 4" in text and "line 7" in text and "line 3" not in text


def test_render_before_any_reading(tmp_path):
    text = rendered(replay(sample_events(tmp_path)[:2]))

    assert "no reading yet" in text and "(no tool calls yet)" in text
    assert "running" in text


def test_gauge_marks_the_thresholds_where_they_are():
    bar, labels = gauge(61.8, 0.7, 0.9, width=50)

    assert len(bar.plain) == 50
    assert bar.plain[35] == "│" and bar.plain[45] == "│"
    assert bar.plain == "█" * 31 + "░" * 4 + "│" + "░" * 9 + "│" + "░" * 4
    assert labels.plain.index("↑soft 70%") == 35 and labels.plain.index("↑hard 90%") == 45
    assert str(bar.spans[0].style) == "green"
    assert str(gauge(95.0, 0.7, 0.9, width=50)[0].spans[0].style) == "red"


def test_gauge_labels_never_overlap():
    _, labels = gauge(10.0, 0.85, 0.9, width=20)

    assert "↑soft 85% ↑hard 90%" in labels.plain


def test_live_dashboard_prints_the_final_frame_and_asks_before_a_restart(tmp_path):
    out = io.StringIO()
    dashboard = LiveDashboard(DashboardState(), Console(file=out, width=100))
    hooks = dashboard.hooks(input_stream=io.StringIO("n\n\n"))

    for event in sample_events(tmp_path):
        hooks.on_event(event)
        if event["type"] == "wind_down":
            assert hooks.confirm_restart(RESTART_REASON) is False
            assert hooks.confirm_restart(RESTART_REASON) is True  # Enter means yes

    text = out.getvalue()
    assert f"Context full ({RESTART_REASON}). Restart the session? [Y/n]" in text
    assert text.rstrip().endswith("╯")
    assert "ended: max_turns (exit 0)" in text.split("Restart the session?")[-1]


def test_watch_follows_a_growing_log_to_its_end(tmp_path):
    whole = write_sample_run(tmp_path / "whole").read_bytes()
    lines = whole.splitlines(keepends=True)
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"".join(lines[:5]))
    rest = [piece for line in lines[5:] for piece in (line[:7], line[7:])]  # torn, then whole

    def wait() -> None:
        with path.open("ab") as f:
            f.write(rest.pop(0))

    out = io.StringIO()
    state = watch(path, DashboardState(), Console(file=out, width=100), wait=wait)

    assert not rest
    assert state.ended and state.total_turns == 9 and state.restarts == 1
    assert "ended: max_turns (exit 0)" in out.getvalue()


@pytest.mark.parametrize("width,height", SIZES)
def test_the_whole_dashboard_fits_the_terminal(tmp_path, width, height):
    state = replay(warned_early(sample_events(tmp_path)))

    lines = rendered_at(state, width, height)

    assert len(lines) <= height and max(len(line) for line in lines) <= width
    assert whole_panels(lines) == ["ouroboros", "assistant", "tools", "activity"]  # none cut off
    context = [line for line in lines if line.startswith("│ context ")]
    assert len(context) == 1 and "3,797/6,144" in context[0] and "61.8%" in context[0]
    below = lines[lines.index(context[0]) + 1]
    assert "↑soft 70%" in below and "↑hard 90%" in below
    assert "file_write src/cli.py" in "\n".join(lines)  # the path, not `content='...'`


@pytest.mark.parametrize("width,height", SIZES)
def test_an_early_warning_stays_on_the_alert_line(tmp_path, width, height):
    state = replay(warned_early(sample_events(tmp_path)))

    lines = rendered_at(state, width, height)

    header = lines[: next(i for i, line in enumerate(lines) if line.startswith("╰"))]
    assert any("WARNING the server sent no token usage" in line for line in header)
    if height == 24:  # the activity panel has moved on; only the alert line still says it
        activity = lines[next(i for i, line in enumerate(lines) if "╭─ activity" in line) :]
        assert not any("WARNING" in line for line in activity)


def test_the_alert_keeps_the_newest_with_no_unexplained_count(tmp_path):
    events = warned_early(sample_events(tmp_path))
    state = replay(events)
    late = {**events[-1], "type": "warning", "message": "the server is slow to answer"}
    error = {
        **events[-1],
        "type": "error",
        "message": "the server went away",
        "kind": "ServerUnreachableError",
    }

    state.apply(late)
    shown = "\n".join(rendered_at(state, 80, 24))
    assert "WARNING the server is slow to answer" in shown
    assert "earlier" not in shown  # "(+1 earlier)" was explained nowhere
    assert "no token usage" not in shown.split("╰")[0]  # replaced on the alert line
    state.apply(
        {
            **events[-1],
            "type": "tool_call",
            "id": "x",
            "name": "recall",
            "arguments": '{"id": "obs-3"}',
        }
    )
    assert "WARNING the server is slow to answer" in "\n".join(
        rendered_at(state, 80, 24)
    )  # other events leave it where it is
    state.apply(error)
    assert "ERROR the server went away" in "\n".join(rendered_at(state, 80, 24))


def test_a_long_alert_is_cut_in_its_middle_never_in_what_to_do(tmp_path):
    state = replay(warned_early(sample_events(tmp_path)))
    fix = "set model.context_limit to the window the server really has"
    state.apply({**state_event(), "type": "warning", "message": "word " * 200 + "; " + fix})

    for width, height in SIZES:
        header = "\n".join(rendered_at(state, width, height)).split("╰")[0]
        flat = " ".join(line.strip("│ ") for line in header.splitlines())
        assert "… " + fix in " ".join(flat.split()), header
        assert header.count("word") <= 3 * width // 5


def state_event() -> dict:
    return {"ts": "2025-03-01T10:00:00.000Z", "seq": 99, "session": 2, "turn": 3}


def test_tool_calls_are_shown_by_what_their_tool_says_they_are_about():
    content = '{"content": "x' + "y" * 500 + '", "path": "out.md"}'
    assert call_summary("file_write", content, "out.md") == "file_write out.md"
    assert (
        call_summary("shell_exec", '{"command": "pytest -q\\n  tests"}', "pytest -q\n  tests")
        == "shell_exec pytest -q tests"
    )
    assert call_summary("recall", '{"id": "obs-12", "offset": 4000}', "obs-12") == "recall obs-12"


def test_a_call_logged_without_its_subject_is_shown_by_its_first_argument():
    assert call_summary("file_read", '{"path": "data/part-07.txt"}') == "file_read data/part-07.txt"
    assert call_summary("list_dir", "{}") == "list_dir"
    assert call_summary("web_fetch", '{"url": "https://x.org"}') == "web_fetch https://x.org"
    assert call_summary("file_read", '{"path": "a') == 'file_read {"path": "a'


def test_the_dashboard_names_a_call_by_the_subject_in_its_event():
    state = replay(
        [
            ev.ToolCallEvent(
                ts="2025-03-01T10:00:00.000Z",
                id="c1",
                name="file_write",
                arguments='{"content": "long text", "path": "out.md"}',
                subject="out.md",
            )
        ]
    )
    assert state.tools[-1].call == "file_write out.md"


def test_rate_comes_from_usage_when_the_stream_was_too_short_to_time():
    state = replay(
        [
            ev.SessionStart(
                ts="2025-03-01T10:00:00.000Z",
                turn=1,
                context_limit=4096,
                limit_source="config",
                budget=3584,
                carryover_messages=0,
            )
        ]
    )
    state.add_text("Done.", now=50.0)  # one piece: no streamed rate
    assert state.tokens_per_sec is None
    replay(
        [
            reply("2025-03-01T10:00:02.000Z"),
            usage("2025-03-01T10:00:02.001Z", completion_tokens=64),
        ],
        state,
    )

    assert state.tokens_per_sec == 32.0  # 64 tokens over the 2 s the reply took
    assert "~tok/s 32" in rendered(state)


def test_the_live_frame_fits_and_is_redrawn_only_after_a_change(tmp_path):
    state = replay(warned_early(sample_events(tmp_path, ended=False)))
    console = Console(file=io.StringIO(), width=80, height=24, force_terminal=True)
    now = [1000.0]
    # not started: no redrawing thread to race; a clock of its own, that moves when told to
    dashboard = LiveDashboard(state, console, clock=lambda: now[0])
    drawn = Console(width=80, height=24, record=True)
    drawn.print(dashboard.renderable())
    frame = drawn.export_text().rstrip("\n").split("\n")

    assert not dashboard.stale()  # nothing new within the second
    now[0] += 1
    assert dashboard.stale()  # waiting for the model: its count of seconds moves on
    dashboard.renderable()
    dashboard.on_text("Reading")
    assert dashboard.stale()
    dashboard.renderable()
    assert not dashboard.stale()
    console.size = (100, 30)  # the terminal was resized
    assert dashboard.stale()

    assert len(frame) < 24  # one line to spare: the last frame's newline scrolls nothing away
    assert whole_panels(frame) == ["ouroboros", "assistant", "tools", "activity"]
    assert any("WARNING the server sent no token usage" in line for line in frame[:7])


def test_a_checkpoint_is_not_shown_as_the_last_thing_the_run_did():
    state = DashboardState()
    state.apply(reply("2026-11-26T08:00:00+00:00"))
    state.apply(ev.Checkpoint(ts="2026-11-26T08:00:01+00:00", turn=1, base=1))
    assert (state.last_type, state.last_ts) == ("assistant", "2026-11-26T08:00:00+00:00")


def test_a_warning_leaves_the_header_when_its_condition_is_over():
    def warning(seq: int, text: str, condition: str = "") -> ev.WarningEvent:
        return ev.WarningEvent(
            ts=f"2025-03-01T10:00:{seq:02d}.000Z", seq=seq, message=text, condition=condition
        )

    def cleared(seq: int, condition: str) -> ev.WarningCleared:
        return ev.WarningCleared(
            ts=f"2025-03-01T10:00:{seq:02d}.000Z", seq=seq, condition=condition, message="over"
        )

    state = replay(
        [
            warning(1, "no token usage", "estimate"),
            warning(2, "unknown key context.sof", "config error: unknown key"),
        ]
    )
    assert "unknown key" in rendered(state)

    replay([cleared(3, "config error: unknown key")], state)
    assert "unknown key" not in rendered(state).split("╰")[0]  # gone from the header
    assert "WARNING no token usage" in rendered(state).split("╰")[0]  # its cause holds
    assert "warning over: over" in rendered(state)  # the activity says why it went

    replay([cleared(4, "estimate")], state)
    assert state.alert is None and "WARNING" not in rendered(state).split("╰")[0]

    replay(
        [
            warning(5, "window smaller", "window"),
            ev.ErrorEvent(
                ts="2025-03-01T10:00:06.000Z", seq=6, message="server gone", kind="ModelError"
            ),
            ev.RunResumed(
                ts="2025-03-01T10:00:07.000Z",
                seq=7,
                total_turns=3,
                restarts=0,
                context_limit=4096,
                limit_source="config",
                budget=3584,
                torn_line_dropped=False,
                interrupted_tools=[],
            ),
        ],
        state,
    )
    assert state.alert is not None and state.alert.text == "WARNING window smaller"


def test_one_reading_reads_the_same_on_every_surface(tmp_path):
    """The dashboard, the plain line, `status` and `stats` write a context reading in one form,
    as a share of one base they name, beside the budget it is a share of."""
    from datetime import datetime, timezone

    from ouroboros.ui.plain import format_line
    from ouroboros.ui.stats import run_stats, stats_view
    from ouroboros.ui.status import RunStatus, status_view

    events = sample_events(tmp_path)
    usage = [e for e in events if e["type"] == "token_usage"][-1]
    reading = f"{usage['context_used_pct']:.1f}%"
    state = replay(events)
    shown = {
        "dashboard": rendered(state),
        "plain": format_line(usage),
        "status": printed(
            status_view(RunStatus(RUN_ID, state, None, None), now=datetime.now(timezone.utc))
        ),
    }
    budget = f"{usage['budget']:,}"
    for surface, text in shown.items():
        assert reading in text and budget in text, surface
    stats = printed(stats_view(run_stats(events)))
    peak = max(e["context_used_pct"] for e in events if e["type"] == "token_usage")
    assert f"{peak:.1f}%" in stats and "% of the prompt budget" in stats
    assert f"{usage['prompt_tokens']:,}/{budget} tokens" in shown["plain"]
    assert f"{reading} of the budget" in shown["status"]
    wind_down = ev.WindDown(ts="2025-03-01T10:00:00.000Z", context_used_pct=93.5)
    assert "context at 93.5% of the budget" in format_line(wind_down)


def printed(renderable) -> str:
    console = Console(record=True, width=100, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def test_a_replayed_rate_is_over_the_newest_replies_not_the_last_one():
    """`watch` reads no streamed text: the rate is over the replies of the newest seconds, as
    their timestamps time them, so a reply of 10 tokens in 0.06 s does not make it jump to
    166."""
    from ouroboros.ui.dashboard import replies_rate

    assert replies_rate([], 10) is None
    assert replies_rate([(20.0, 100)], 10) == 5.0  # the newest reply, however long it took
    assert replies_rate([(2.0, 60), (9.0, 9), (2.0, 60)], 10) == 60 / 2.0

    def turn(start: int, secs: float, tokens: int) -> list[ev.EventBase]:
        done = f"2025-03-01T10:00:{start + secs:06.3f}Z"
        return [
            shell_result(f"2025-03-01T10:00:{start:02d}.000Z"),
            reply(done),
            usage(done, completion_tokens=tokens),
        ]

    state = replay(turn(0, 2.0, 60) + turn(10, 2.0, 60) + turn(20, 0.06, 10))
    assert state.tokens_per_sec == pytest.approx(130 / 4.06)
