"""Stats over a run's events, and the context chart."""

from __future__ import annotations

from rich.console import Console

from ouroboros.store import events as ev
from ouroboros.store.log import EventLog, read_events, read_tail
from ouroboros.ui.chart import HARD_LINE, RESTART, SOFT_LINE, context_chart
from ouroboros.ui.stats import (
    RunStats,
    SessionStats,
    run_stats,
    shown_sessions,
    stats_view,
    summary_stats,
)
from tests.ui_sample import RESTART_REASON, RUN_ID, SESSION_1, SESSION_2, write_sample_run


def sample_stats(tmp_path, **options):
    return run_stats(read_events(write_sample_run(tmp_path / ".ouroboros", **options)).events)


def test_stats_per_session(tmp_path):
    stats = sample_stats(tmp_path)

    first, second = stats.sessions
    assert (stats.run_id, stats.soft, stats.hard, stats.end) == (RUN_ID, 0.7, 0.9, "max_turns")
    assert (first.session, first.turns, first.peak_pct) == (1, 6, 93.5)
    assert (first.mask_rounds, first.masked) == (2, 4)
    assert first.end == f"restart: {RESTART_REASON}"
    assert first.prompt_tokens == sum(round(6144 * step[-1] / 100) for step in SESSION_1)
    assert first.completion_tokens == sum(40 + n for n in range(1, 7))
    assert (second.session, second.turns, second.peak_pct) == (2, 3, 61.8)
    assert (second.mask_rounds, second.masked, second.end) == (0, 1, "max_turns")
    assert stats.context_pcts == [step[-1] for step in SESSION_1 + SESSION_2]
    assert stats.restarts_at == [6] and stats.total_turns == 9 and stats.restarts == 1


def test_stats_of_a_run_still_going(tmp_path):
    stats = sample_stats(tmp_path, ended=False)

    assert stats.end is None
    assert [s.end for s in stats.sessions] == [f"restart: {RESTART_REASON}", "running"]
    assert stats.total_turns == 8


def test_a_turn_counts_once_its_reply_came_as_status_counts_it(tmp_path):
    path = write_sample_run(tmp_path / ".ouroboros", ended=False)
    log = EventLog(path)
    log.session, log.turn = 2, 3  # the third request of session 2 is sent, no reply yet
    log.emit(ev.StopRequested(signal="SIGTERM"))
    log.close()
    summary = read_tail(path.parent).summary()  # what `status` and default `stats` read

    stats = run_stats(read_events(path).events)  # `stats --all`
    quick = summary_stats(summary)

    assert stats.total_turns == quick.total_turns == summary.turns == 8
    assert [s.turns for s in stats.sessions] == [s.turns for s in quick.sessions] == [6, 2]


def test_stats_of_a_resumed_run_say_running_again():
    events = [
        ev.SessionEnd(reason="interrupted_now", turn=2),
        ev.RunEnd(
            reason="interrupted_now", exit_code=0, sessions=1, total_turns=2, restarts=0, turn=2
        ),
        ev.RunResumed(
            total_turns=2,
            restarts=0,
            torn_line_dropped=False,
            interrupted_tools=[],
            context_limit=8192,
            limit_source="config",
            budget=6144,
            turn=2,
        ),
    ]

    assert run_stats(events).sessions[0].end == "running"
    assert run_stats(events[:2]).sessions[0].end == "interrupted_now"


def test_thresholds_fall_back_to_the_given_ones():
    stats = run_stats([], soft=0.5, hard=0.8)

    assert (stats.soft, stats.hard, stats.sessions) == (0.5, 0.8, [])


def test_chart_puts_each_value_in_its_row_with_thresholds_and_restarts():
    lines = context_chart([50.0, 95.0], 0.7, 0.9, [1], height=10, width=2)

    assert lines == [
        " 100% ┤ ▄",
        f"  90% ┤{HARD_LINE}█ hard 90%",
        "  80% ┤ █",
        f"  70% ┤{SOFT_LINE}█ soft 70%",
        "  60% ┤ █",
        "  50% ┤██",
        "  40% ┤██",
        "  30% ┤██",
        "  20% ┤██",
        "  10% ┤██",
        "     └──",
        f"       {RESTART}",
        f"      turn 1 2   {RESTART} restart",
    ]


def test_chart_widens_short_runs_and_squeezes_long_ones():
    short = context_chart([10.0, 20.0], 0.7, 0.9, [], width=60)
    long = context_chart([float(n % 100) for n in range(200)], 0.7, 0.9, [100], width=50)

    assert short[-2] == "     └" + "─" * 6  # 3 columns a turn, no restart row
    assert RESTART not in "".join(short)
    assert long[-3] == "     └" + "─" * 50
    assert long[-2].index(RESTART) == 6 + 25
    assert long[-1].endswith(f"200   {RESTART} restart")


def test_chart_grows_above_a_full_budget():
    lines = context_chart([40.0, 130.0], 0.7, 0.9, [])

    assert lines[0].startswith(" 130% ┤")
    assert lines[0].endswith("█")
    assert context_chart([], 0.7, 0.9, []) == ["(no context readings yet)"]


def test_stats_view_renders_the_table_and_the_chart(tmp_path):
    console = Console(record=True, width=100)
    console.print(stats_view(sample_stats(tmp_path)))
    text = console.export_text()

    assert (
        f"run {RUN_ID}: 2 sessions, 9 turns, 1 restart, ended: max_turns\n"
        "masking: 5 tool results masked (2 masking rounds)"
    ) in text
    assert "93.5%" in text and "61.8%" in text and "restart [1]" in text
    assert f"[1] restart: {RESTART_REASON}" in text
    assert "soft 70%" in text and "hard 90%" in text and RESTART in text


def test_stats_names_the_window_the_budget_and_the_thresholds_as_status_does(tmp_path):
    path = write_sample_run(tmp_path / ".ouroboros")
    quick = summary_stats(read_tail(path.parent).summary())  # default `stats`
    whole = run_stats(read_events(path).events)  # `stats --all`

    for stats in (quick, whole):
        console = Console(record=True, width=80)
        console.print(stats_view(stats))
        assert "window 8,192 · budget 6,144 · soft 70% · hard 90%" in console.export_text()


def test_restart_reasons_become_numbered_notes_under_the_table():
    stats = run_stats([])
    stats.sessions = [
        SessionStats(1, end="restart: full"),
        SessionStats(2, end="restart: cut"),
        SessionStats(3, end="restart: full"),
        SessionStats(4, end="max_turns"),
    ]
    console = Console(record=True, width=100)
    console.print(stats_view(stats))
    text = console.export_text()

    ended = [line.split("│")[8].strip() for line in text.splitlines() if line.count("│") == 9]
    assert ended[:4] == ["restart [1]", "restart [2]", "restart [1]", "max_turns"]
    assert "[1] restart: full\n[2] restart: cut\n" in text


def test_a_long_run_shows_its_first_and_last_sessions():
    sessions = [SessionStats(n, turns=1) for n in range(1, 21)]

    shown, hidden = shown_sessions(sessions)

    assert [s.session for s in shown] == [1, 2, 3, 18, 19, 20] and hidden == 14
    assert shown_sessions(sessions, all_sessions=True) == (sessions, 0)
    assert shown_sessions(sessions[:12]) == (sessions[:12], 0)


def test_the_summary_keeps_the_totals_of_every_session():
    stats = RunStats()
    stats.sessions = [
        SessionStats(n, turns=n, mask_rounds=1, masked=2, end="restart: full") for n in range(1, 31)
    ]
    console = Console(record=True, width=100)
    console.print(stats_view(stats))
    text = console.export_text()

    rows = [line.split("│") for line in text.splitlines() if line.count("│") == 9]
    assert [row[1].strip() for row in rows] == ["1", "2", "3", "...", "28", "29", "30", "all"]
    assert [cell.strip() for cell in rows[-1][2:6]] == [f"{sum(range(1, 31)):,}", "--", "30", "60"]
    assert "masking: 60 tool results masked (30 masking rounds)" in text
    assert "24 sessions not shown: `ouroboros stats --all` lists every one" in text


def test_the_table_fits_80_columns_with_every_column(tmp_path):
    console = Console(record=True, width=80)
    console.print(stats_view(sample_stats(tmp_path)))
    lines = console.export_text().splitlines()

    assert max(len(line) for line in lines) <= 80
    assert any("ended by" in line for line in lines)
    assert "…" not in "\n".join(lines)  # no header or number cut short
