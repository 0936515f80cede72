"""The event log in segments: rollover, the manifest, reading across segments, readers that
read only the manifest and the current segment, retention, and damaged or missing files."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from ouroboros.errors import StateError
from ouroboros.store import events as ev
from ouroboros.store.log import (
    EVENTS_FILE,
    EventLog,
    last_records,
    prune_run,
    read_tail,
    run_records,
)
from ouroboros.store.observations import ObservationStore, packs
from ouroboros.store.retention import Retention
from ouroboros.store.segments import MANIFEST_FILE, SEGMENTS_DIR, load_manifest
from ouroboros.store.state_file import write_state
from ouroboros.ui.dashboard import DashboardState
from ouroboros.ui.follow import follow_events, follow_run
from ouroboros.ui.status import replay

WINDOW = {"context_limit": 8192, "limit_source": "config", "budget": 6144}
V1_LOG = Path(__file__).parent / "events_v1.jsonl"


def write_run(
    run_dir: Path,
    sessions: int,
    turns: int = 3,
    segment_bytes: int = 1,
    retention: Retention | None = None,
    end: bool = True,
) -> EventLog:
    """A run of `sessions` sessions of `turns` turns, a segment closed at every boundary."""
    log = EventLog(run_dir / EVENTS_FILE, segment_bytes=segment_bytes)
    log.retention = retention
    log.emit(
        ev.RunStart(
            run_id=run_dir.name,
            version="0.1.0",
            pid=1,
            config={"context": {"soft_threshold_pct": 0.6}},
            flags={"x": 1},
        )
    )
    store = ObservationStore(run_dir / "observations")
    obs = 0
    for session in range(1, sessions + 1):
        if session > 1:
            log.emit(ev.SessionEnd(reason="restart"))
            log.at_session_boundary(keep_obs_from=obs)
            log.session, log.turn = session, 0
            log.emit(
                ev.SessionRestart(
                    previous_turns=turns,
                    carryover_messages=0,
                    carryover_masked=1,
                    carryover_turns_dropped=0,
                    reason="full",
                )
            )
        log.emit(ev.SessionStart(**WINDOW, carryover_messages=0))
        for turn in range(1, turns + 1):
            log.turn = turn
            log.emit(
                ev.Assistant(text=f"turn {session}.{turn}", finish_reason="stop", tool_calls=[])
            )
            log.emit(
                ev.TokenUsage(
                    prompt_tokens=100 * turn,
                    completion_tokens=5,
                    context_used_pct=1.5 * turn,
                    budget=6144,
                    total_tokens=105,
                    context_limit=8192,
                    source="server",
                )
            )
            obs += 1
            store.save(f"obs-{obs}", f"result {obs} " + "x" * 500, session=session)
        if session == 2:
            log.emit(
                ev.ConfigChanged(
                    key="context.soft_threshold_pct", old=0.6, new=0.5, source="ouroboros.toml"
                )
            )
            log.emit(ev.WarningEvent(message="careful"))
    if end:
        log.emit(ev.SessionEnd(reason="max_turns"))
        log.emit(
            ev.RunEnd(
                reason="max_turns",
                exit_code=0,
                sessions=sessions,
                total_turns=sessions * turns,
                restarts=sessions - 1,
            )
        )
    log.close()
    return log


def whole_replay(run_dir: Path) -> DashboardState:
    state = DashboardState()
    for record in run_records(run_dir):
        state.apply(record)
    return state


def test_a_link_planted_where_a_segment_is_compressed_is_not_written_through(tmp_path):
    """The .gz.tmp a compression writes is a file of its own: a link there (a killed
    compression's name, planted) is replaced, and what it points to is left whole."""
    elsewhere = tmp_path / "elsewhere.txt"
    elsewhere.write_text("not the harness's\n")
    run = tmp_path / "run1"
    (run / SEGMENTS_DIR).mkdir(parents=True)
    (run / SEGMENTS_DIR / "000001.jsonl.gz.tmp").symlink_to(elsewhere)
    write_run(run, sessions=2)

    assert elsewhere.read_text() == "not the harness's\n"
    assert sorted(p.name for p in (run / SEGMENTS_DIR).iterdir()) == ["000001.jsonl.gz"]
    with gzip.open(run / SEGMENTS_DIR / "000001.jsonl.gz") as f:
        assert json.loads(f.readline())["type"] == "run_start"


def test_the_log_rolls_over_at_session_boundaries_into_compressed_segments(tmp_path):
    run = tmp_path / "run1"
    write_run(run, sessions=4)

    manifest = json.loads((run / MANIFEST_FILE).read_text())
    assert manifest["format_version"] == 3
    assert [s["file"] for s in manifest["segments"]] == [
        "000001.jsonl.gz",
        "000002.jsonl.gz",
        "000003.jsonl.gz",
    ]
    assert sorted(p.name for p in (run / SEGMENTS_DIR).iterdir()) == [
        "000001.jsonl.gz",
        "000002.jsonl.gz",
        "000003.jsonl.gz",
    ]
    first, second = manifest["segments"][:2]
    assert first["sessions"] == [1, 1] and second["sessions"] == [2, 2]
    assert first["turns"] == [0, 3] and second["turns"] == [3, 6]
    assert second["first_seq"] == first["last_seq"] + 1
    assert first["time"][0] <= first["time"][1] and first["last_state"]["total_turns"] == 3
    with gzip.open(run / SEGMENTS_DIR / "000001.jsonl.gz") as f:
        assert json.loads(f.readline())["type"] == "run_start"
    records = list(run_records(run))
    assert [r["seq"] for r in records] == list(range(1, len(records) + 1))
    assert records[-1]["type"] == "run_end"
    assert [r["seq"] for r in last_records(run, 12)] == list(
        range(len(records) - 11, len(records) + 1)
    )


def test_status_from_the_manifest_and_current_segment_equals_a_replay_of_everything(tmp_path):
    run = tmp_path / "runs" / "run1"
    write_run(run, sessions=5, end=False)
    full = whole_replay(run)

    status = replay(tmp_path, "run1", None)

    s = status.state
    for name in (
        "session",
        "turn",
        "total_turns",
        "restarts",
        "masked",
        "context_limit",
        "budget",
        "prompt_tokens",
        "context_pct",
        "soft",
        "last_type",
        "last_ts",
        "alerts",
        "status",
    ):
        assert getattr(s, name) == getattr(full, name), name
    assert s.total_turns == 15 and s.restarts == 4 and s.soft == 0.5
    assert [c.key for c in status.changes] == ["context.soft_threshold_pct"]
    assert status.end is None and status.summary.started == next(run_records(run))["ts"]


def test_status_reads_no_closed_segment(tmp_path):
    run = tmp_path / "runs" / "run1"
    write_run(run, sessions=4)
    for segment in (run / SEGMENTS_DIR).iterdir():
        segment.write_bytes(b"not gzip at all")  # would fail any reader of history

    status = replay(tmp_path, "run1", None)

    assert status.state.total_turns == 12 and status.end is not None
    with pytest.raises(StateError, match="000001.jsonl.gz"):
        list(run_records(run))


def test_a_log_written_before_segments_still_reads(tmp_path):
    run = tmp_path / "runs" / "old"
    run.mkdir(parents=True)
    shutil.copy(V1_LOG, run / EVENTS_FILE)
    records = [json.loads(line) for line in V1_LOG.read_text().splitlines()]

    assert list(run_records(run)) == records
    status = replay(tmp_path, "old", None)
    assert status.state.total_turns == whole_replay(run).total_turns > 0


@pytest.mark.parametrize("damage", ["missing", "not json", "truncated"])
def test_a_damaged_or_missing_manifest_is_rebuilt_from_the_segments(tmp_path, damage):
    run = tmp_path / "run1"
    write_run(run, sessions=4)
    before = json.loads((run / MANIFEST_FILE).read_text())
    path = run / MANIFEST_FILE
    if damage == "missing":
        path.unlink()
    else:
        path.write_text("{" if damage == "not json" else path.read_text()[:40])

    manifest = load_manifest(run)

    assert manifest.problem is not None and str(path) in manifest.problem
    assert [s["last_seq"] for s in manifest.segments] == [s["last_seq"] for s in before["segments"]]
    assert manifest.state["turns"] == before["state"]["turns"]
    assert len(list(run_records(run))) == before["segments"][-1]["last_seq"] + len(
        read_tail(run).records
    )


def test_a_segment_closed_by_a_process_killed_before_the_manifest_is_found(tmp_path):
    """The rename happened, the manifest write and the new events.jsonl did not."""
    run = tmp_path / "run1"
    write_run(run, sessions=3)
    records = list(run_records(run))
    (run / EVENTS_FILE).rename(run / SEGMENTS_DIR / "000003.jsonl")

    assert [r["seq"] for r in run_records(run)] == [r["seq"] for r in records]
    assert load_manifest(run).segments[-1]["file"] == "000003.jsonl"


def test_following_a_log_goes_on_across_a_rollover(tmp_path):
    run = tmp_path / "run1"
    log = EventLog(run / EVENTS_FILE, segment_bytes=1)
    log.emit(ev.RunStart(run_id="run1", version="0.1.0", pid=1, config={}))
    log.emit(ev.SessionStart(**WINDOW, carryover_messages=0))
    seen = []
    steps = iter(
        [
            lambda: log.roll(),
            lambda: log.emit(ev.SessionStart(**WINDOW, carryover_messages=0)),
            lambda: log.emit(
                ev.RunEnd(reason="max_turns", exit_code=0, sessions=1, total_turns=0, restarts=0)
            ),
        ]
    )

    def wait():
        next(steps)()

    for event in follow_events(run / EVENTS_FILE, wait):
        seen.append(event.seq)
    assert seen == [1, 2, 3, 4]
    assert [e.seq for e in follow_run(run, wait=lambda: None)] == [1, 2, 3, 4]


def test_retention_removes_the_oldest_history_and_says_what_it_freed(tmp_path):
    run = tmp_path / "run1"
    write_run(run, sessions=8)
    write_state(
        run,
        10_000,
        {
            "run_id": "run1",
            "messages": [{"role": "system", "content": "Mission."}],
            "tokens": [None],
            "notes": [None],
            "session": 8,
            "context": {"observations": {"c1": {"id": "obs-22"}}, "next_observation": 25},
        },
    )
    before = sum(p.stat().st_size for p in run.rglob("*") if p.is_file())

    freed = prune_run(run, Retention(keep_bytes=0, keep_sessions=3))

    assert freed.segments > 0 and freed.packs > 0 and freed.bytes > 0
    assert "freed" in freed.describe() and "log segments" in freed.describe()
    manifest = load_manifest(run)
    assert manifest.segments[0]["sessions"][0] >= 4
    assert manifest.pruned["segments"] == freed.segments
    kept = {p.session for p in packs(run / "observations")}
    assert min(kept) >= 5 and 8 in kept
    store = ObservationStore(run / "observations")
    assert store.read("obs-1") is None and store.pruned_after("obs-1") == 8
    assert store.read("obs-24") is not None and store.pruned_after("obs-24") is None
    records = list(run_records(run))  # what is left still reads, in order
    assert [r["seq"] for r in records] == sorted(r["seq"] for r in records)
    after = sum(p.stat().st_size for p in run.rglob("*") if p.is_file())
    assert before - after >= freed.bytes * 0.9
    assert (
        prune_run(run, Retention(keep_bytes=0, keep_sessions=3))
        .describe()
        .startswith("nothing to prune")
    )


def test_retention_keeps_what_the_live_conversation_and_a_resume_need(tmp_path):
    run = tmp_path / "run1"
    write_run(run, sessions=6)
    write_state(
        run,
        5,
        {
            "run_id": "run1",
            "messages": [{"role": "system", "content": "Mission."}],
            "tokens": [None],
            "notes": [None],
            "session": 6,
            "context": {"observations": {"c1": {"id": "obs-4"}}, "next_observation": 19},
        },
    )

    prune_run(run, Retention(keep_bytes=1))

    assert ObservationStore(run / "observations").read("obs-4") is not None
    assert load_manifest(run).segments[0]["number"] == 1  # it holds seq 5 and after


def test_a_rolling_log_applies_retention_by_itself(tmp_path):
    run = tmp_path / "run1"
    write_run(run, sessions=10, retention=Retention(keep_bytes=0, keep_sessions=2))

    manifest = load_manifest(run)
    assert manifest.pruned["segments"] >= 6
    assert len(manifest.segments) <= 3
    assert read_tail(run).summary().turns == 30  # the totals survive the history removed


def test_a_session_that_never_ends_stays_within_retention_and_its_segment_bound(
    tmp_path, monkeypatch
):
    monkeypatch.setattr("ouroboros.store.observations.PACK_BYTES", 20_000)
    run = tmp_path / "run1"
    log = EventLog(run / EVENTS_FILE, segment_bytes=20_000)
    log.retention = Retention(keep_bytes=100_000)
    log.emit(ev.RunStart(run_id="run1", version="0.1.0", pid=1, config={}, flags={}))
    log.emit(ev.SessionStart(**WINDOW, carryover_messages=0))
    store = ObservationStore(run / "observations")
    biggest = 0
    for turn in range(1, 1201):  # one session, never restarted
        log.turn = turn
        log.emit(
            ev.Assistant(text=f"turn {turn} " + "y" * 300, finish_reason="stop", tool_calls=[])
        )
        store.save(f"obs-{turn}", f"result {turn} " + "x" * 500, session=1)
        if turn % 10 == 0:  # a snapshot now and then: it refers to the newest result only
            write_state(
                run,
                log.seq,
                {
                    "run_id": "run1",
                    "messages": [{"role": "system", "content": "Mission."}],
                    "tokens": [None],
                    "notes": [None],
                    "session": 1,
                    "context": {
                        "observations": {"c": {"id": f"obs-{turn}"}},
                        "next_observation": turn + 1,
                    },
                },
            )
        log.commit()
        biggest = max(biggest, (run / EVENTS_FILE).stat().st_size)
    log.close()

    total = sum(p.stat().st_size for p in run.rglob("*") if p.is_file())
    assert biggest < 20_000 + 1_000  # the segment bound, give or take a turn
    assert total < 100_000 + 3 * 20_000  # retention, plus the files it never removes
    assert load_manifest(run).pruned["segments"] > 0
    assert ObservationStore(run / "observations").read("obs-1200") is not None
    assert read_tail(run).summary().assistants == 1200


def stats_text(stats) -> str:
    from rich.console import Console

    from ouroboros.ui.stats import stats_view

    console = Console(record=True, width=100)
    console.print(stats_view(stats))
    return console.export_text()


def default_stats(run: Path):
    from ouroboros.ui.stats import summary_stats

    return summary_stats(read_tail(run).summary())


@pytest.mark.parametrize("sessions,turns", [(5, 3), (40, 6)])
def test_stats_by_default_shows_from_the_manifest_what_the_whole_log_says(
    tmp_path, sessions, turns
):
    from ouroboros.ui.stats import run_stats

    run = tmp_path / "run1"
    write_run(run, sessions=sessions, turns=turns, end=False)
    whole = stats_text(run_stats(run_records(run)))
    closed = list((run / SEGMENTS_DIR).iterdir())
    assert closed  # history on disk that the default view must not need
    for segment in closed:
        segment.write_bytes(b"not gzip at all")  # would fail any reader of history

    shown = stats_text(default_stats(run))

    if sessions * turns <= 144:  # every reading kept: the same to the character
        assert shown == whole
    else:  # the same summary and table; the chart's readings folded in pairs or more
        cut = "context use per turn"
        assert shown.split(cut)[0] == whole.split(cut)[0]
        assert f"{sessions} sessions, {sessions * turns} turns" in shown
        assert shown.rstrip().splitlines()[-1].split()[-3] == str(sessions * turns)


def test_figures_a_manifest_lacks_are_rebuilt_once_from_its_segments(tmp_path):
    from ouroboros.store.segments import complete_summary
    from ouroboros.ui.stats import run_stats, summary_stats

    run = tmp_path / "run1"
    write_run(run, sessions=6, end=False)
    manifest = json.loads((run / MANIFEST_FILE).read_text())
    state = manifest["state"]  # as an Ouroboros before the summary (or its figures) wrote it
    manifest["state"] = {key: state[key] for key in OLD_TALLY}
    (run / MANIFEST_FILE).write_text(json.dumps(manifest))
    assert not read_tail(run).summary().complete  # `stats` reads the whole log, and says so

    summary = complete_summary(run, load_manifest(run))
    for record in read_tail(run).records:
        summary.add_record(record)

    assert summary.complete
    assert stats_text(summary_stats(summary)) == stats_text(run_stats(run_records(run)))


OLD_TALLY = (
    "run_start",
    "anchors",
    "config_changes",
    "flags",
    "turns",
    "assistants",
    "restarts",
    "masked",
    "mask_rounds",
    "alerts",
    "started",
    "last",
)


def test_a_live_run_goes_on_past_a_damaged_manifest_and_segment_and_says_which(tmp_path):
    run = tmp_path / "run1"
    write_run(run, sessions=5, end=False)
    (run / MANIFEST_FILE).write_text("{")
    damaged = run / SEGMENTS_DIR / "000002.jsonl.gz"
    damaged.write_bytes(b"not gzip at all")
    tail = read_tail(run)  # what a resume reads: the manifest is rebuilt without segment 2
    log = EventLog(
        run / EVENTS_FILE,
        seq=tail.last_seq,
        session=5,
        summary=tail.manifest.summary(),
        current=tail.records,
        segment_bytes=1,
    )

    log.emit(ev.WarningEvent(message="still here"))
    log.commit()  # the live run closes its segment: no exception
    log.emit(ev.WarningEvent(message="and on"))
    log.close()

    warnings = [r["message"] for r in read_tail(run).records if r["type"] == "warning"]
    assert warnings[0].count("\n") == 0
    assert str(run / MANIFEST_FILE) in warnings[0] and str(damaged) in warnings[0]
    assert warnings[-1] == "and on"
    manifest = load_manifest(run)  # written whole again
    assert manifest.problem is None and 2 not in [s["number"] for s in manifest.segments]
    assert read_tail(run).summary().assistants == 12  # the turns of segment 2 cannot be read


def test_a_reader_racing_a_rollover_reads_the_segment_compressed_meanwhile(tmp_path):
    from ouroboros.store.segments import scan_unlisted, write_manifest

    run = tmp_path / "run1"
    write_run(run, sessions=3)
    manifest = load_manifest(run)
    manifest.segments.pop()  # the writer has not listed segment 2 yet ...
    write_manifest(run, manifest)
    stale = run / SEGMENTS_DIR / "000002.jsonl"  # ... and the reader saw it before its gzip

    scan_unlisted(run, manifest, 2, stale)

    assert manifest.segments[-1]["file"] == "000002.jsonl.gz" and manifest.problem is None


def test_runs_started_in_one_second_sort_as_they_started():
    from datetime import datetime, timezone

    from ouroboros.store.log import new_run_id

    second = datetime(2026, 11, 26, 17, 5, 41, tzinfo=timezone.utc)
    ids = [new_run_id(second.replace(microsecond=us)) for us in (0, 15, 16, 160_000, 999_999)]

    assert ids == sorted(ids) and len(set(ids)) == len(ids) - 1  # 0 and 15 share a step
    assert ids[-1] == "20261126-170541-f423"


def test_a_run_changing_its_config_forever_keeps_a_bounded_summary():
    from ouroboros.store.summary import RECENT_CHANGES, RunSummary

    summary = RunSummary()
    for i in range(1000):
        key = ("context.soft_threshold_pct", "agent.max_turns", "model.name")[i % 3]
        record = {"type": "config_changed", "seq": i + 1, "key": key, "new": i}
        summary.add("config_changed", record, lambda record=record: record)

    newest = {r["key"]: r["new"] for r in summary.config_changes}
    assert len(summary.config_changes) <= RECENT_CHANGES + 3
    assert newest == {
        "context.soft_threshold_pct": 999,
        "agent.max_turns": 997,
        "model.name": 998,
    }  # what the config is now, for a resume
    assert [r["new"] for r in summary.config_changes][-RECENT_CHANGES:] == list(
        range(1000 - RECENT_CHANGES, 1000)
    )  # what status lists
