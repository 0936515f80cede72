"""What a long run keeps: the live state bounded by the window (records of observations no
message refers to leave it at the session boundary), result texts packed per session, and
`recall` honest about what retention removed."""

from __future__ import annotations

import asyncio
import json

from ouroboros.loop.endings import RestartSession
from ouroboros.store.observations import PRUNED_FILE, ObservationStore, packs
from ouroboros.tools.recall import RecallArguments, RecallTool
from tests.fakes import FakeModel
from tests.session_rig import Rig, reads


def referenced(messages):
    return {m["tool_call_id"] for m in messages if m["role"] == "tool"}


def test_records_of_observations_no_message_refers_to_leave_the_state_at_a_restart(tmp_path):
    model = FakeModel()
    rig = Rig(tmp_path, model, limit=3000, carryover_turns=1)
    model.then = reads(rig, 1500)
    sizes = []
    for _ in range(4):
        assert isinstance(rig.run(), RestartSession)
        rig.restart()
        context = rig.state.context
        assert set(context.observations) == referenced(rig.state.messages)
        sizes.append(len(json.dumps(context.to_dict())))
    assert context.next_observation > 10  # many results were recorded in all
    assert max(sizes) <= 2 * min(sizes)  # the snapshot's share does not grow with history


def test_results_are_packed_per_session_and_read_back_by_id(tmp_path):
    store = ObservationStore(tmp_path / "observations")
    store.save("obs-1", "first\r\nline", session=1)
    store.save("obs-2", "", session=1)
    store.save("obs-3", "third ✓", session=2)
    assert [(p.session, p.first) for p in packs(tmp_path / "observations")] == [(1, 1), (2, 3)]
    reader = ObservationStore(tmp_path / "observations")
    assert reader.read("obs-1") == "first\r\nline"
    assert reader.read("obs-2") == "" and reader.read("obs-3") == "third ✓"
    assert reader.read("obs-4") is None and reader.read("nonsense") is None


def test_a_record_torn_by_a_crash_reads_as_missing_and_the_others_stay(tmp_path):
    store = ObservationStore(tmp_path)
    store.save("obs-1", "whole", session=1)
    store.save("obs-2", "x" * 100, session=1)
    pack = packs(tmp_path)[0].path
    pack.write_bytes(pack.read_bytes()[:-40])
    assert store.read("obs-1") == "whole" and store.read("obs-2") is None


def test_observation_files_of_older_runs_still_read(tmp_path):
    (tmp_path / "obs-7.txt").write_text("old layout", encoding="utf-8")
    assert ObservationStore(tmp_path).read("obs-7") == "old layout"


def test_recall_of_a_pruned_observation_says_retention_removed_it(tmp_path):
    store = ObservationStore(tmp_path)
    store.save("obs-9", "kept", session=3)
    (tmp_path / PRUNED_FILE).write_text(json.dumps({"below": 5, "after_session": 2}))
    tool = RecallTool(tmp_path, lambda: 1000)

    pruned = asyncio.run(tool.call(RecallArguments(id="obs-3")))
    kept = asyncio.run(tool.call(RecallArguments(id="obs-9")))
    unknown = asyncio.run(tool.call(RecallArguments(id="obs-12")))

    assert not pruned.ok and "obs-3 was pruned by retention after session 2" in pruned.content
    assert kept.ok and kept.content == "kept"
    assert not unknown.ok and "no observation 'obs-12'" in unknown.content
