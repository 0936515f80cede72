"""manifest.json and state.json that are valid JSON of the wrong shape (shapes.py): each is
damaged, rebuilt from what remains (the segments, the log) and the run resumed to the end,
never a traceback. And after retention pruned old segments, a lost manifest or state.json
keeps the run's totals (totals.json, which retention never prunes).

One genuine run (the demo agent against the scripted server, stopped by a permanent server
error after a few turns, its log closed into a segment nearly every turn) is made once per
module; each case damages a copy of it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Iterator

import pytest

from ouroboros.config import ContextConfig
from ouroboros.loop.continuation import plan_resume
from ouroboros.loop.resume import recover
from ouroboros.store.log import read_tail, run_records
from ouroboros.store.segments import MANIFEST_FILE, TOTALS_FILE, load_manifest
from ouroboros.store.state_file import STATE_FILE, read_state
from ouroboros.testing import Fault, ScriptedServer
from tests.crash_helpers import CountingAgent, demo_project
from tests.helpers import ouroboros_here, parts_recorded, run_dir, sweep

PARTS = 4
STOP_AT = 9  # the model call after which the server refuses (401): the run stops, resumable
PRUNING_PARTS = 12
PRUNING_STOP_AT = 24

SEGMENT = {
    "number": 1,
    "file": "000001.jsonl.gz",
    "bytes": 10,
    "first_seq": 1,
    "last_seq": 5,
    "sessions": [1, 1],
    "turns": [0, 1],
    "time": [None, None],
    "last_state": {},
}
MANIFESTS = {
    "a list": [],
    "segments of numbers": {"segments": [1, 2]},
    "a segment without fields": {"segments": [{"number": 1}]},
    "a segment outside segments/": {"segments": [{**SEGMENT, "file": "../../state.json"}]},
    "a segment numbered as a string": {"segments": [{**SEGMENT, "number": "1"}]},
    "segments out of order": {"segments": [{**SEGMENT, "number": 2}, SEGMENT]},
    "state a list": {"segments": [], "state": [1]},
    "turns in words": {"segments": [], "state": {"turns": "many"}},
    "figures of numbers": {"segments": [], "state": {"figures": {"recent": [1]}}},
    "pruned a number": {"segments": [], "pruned": 5},
    "format a string": {"segments": [], "format_version": "3"},
}
STATE = {"run_id": "r", "messages": [], "context": {}}
SNAPSHOTS = {
    "a list": [],
    "format a string": {"format_version": "x", "seq": 3, "state": STATE},
    "seq true": {"seq": True, "state": STATE},
    "seq negative": {"seq": -1, "state": STATE},
    "messages a string": {"seq": 3, "state": {**STATE, "messages": "hi"}},
    "messages of numbers": {"seq": 3, "state": {**STATE, "messages": [1, 2]}},
    "a message without a role": {"seq": 3, "state": {**STATE, "messages": [{"content": "x"}]}},
    "context a list": {"seq": 3, "state": {**STATE, "context": [1]}},
    "observations a list": {"seq": 3, "state": {**STATE, "context": {"observations": [1]}}},
    "session in words": {"seq": 3, "state": {**STATE, "session": "two"}},
    "reload unknown": {"seq": 3, "state": {**STATE, "reload": "later"}},
}


@pytest.fixture(scope="module")
def genuine(tmp_path_factory) -> Iterator[tuple[Path, str]]:
    """A project whose run stopped after some turns, its log in segments: (its directory,
    the results.txt the task must end with). Its server stays up for the resumes."""
    agent = CountingAgent(PARTS, inject_at={STOP_AT: [Fault("status", 401, "unauthorized")]})
    with ScriptedServer(agent) as server:
        agent.server = server
        root = tmp_path_factory.mktemp("genuine")
        config, expected = demo_project(
            root, server.base_url, PARTS, max_turns=40, logging={"segment_mb": 0.0001}
        )
        result = ouroboros_here("run", "--config", str(config), "--headless")
        assert result.returncode == 2, result.stderr
        assert load_manifest(run_dir(root)).segments
        yield root, expected


def copy_of(genuine: tuple[Path, str], tmp_path: Path, name: str) -> Path:
    root = tmp_path / name.replace(" ", "_").replace("/", "_")
    shutil.copytree(genuine[0], root, symlinks=True)
    return root


def resumes_to_the_end(root: Path, expected: str) -> list[str]:
    """What went wrong resuming the run in `root` to the end (nothing: [])."""
    config = str(root / "ouroboros.toml")
    status = ouroboros_here("status", "--config", config)
    resumed = ouroboros_here("resume", "--config", config, "--headless")
    logs = ouroboros_here("logs", "--config", config)
    failures = [
        f"{name}: exit {result.returncode}: {(result.stderr + result.stdout)[-600:]}"
        for name, result in (("status", status), ("resume", resumed), ("logs", logs))
        if result.returncode != 0 or "Traceback" in result.stderr + result.stdout
    ]
    if not failures and (root / "workspace" / "results.txt").read_text() != expected:
        failures.append(f"results.txt is {parts_recorded(root)}")
    return failures


SHAPES = [(MANIFEST_FILE, name) for name in MANIFESTS] + [(STATE_FILE, name) for name in SNAPSHOTS]


@pytest.mark.parametrize(
    "file,name",
    sweep(
        SHAPES,
        set(SHAPES[:3]) | {(STATE_FILE, name) for name in list(SNAPSHOTS)[:3]},
        [f"{file}-{name}" for file, name in SHAPES],
    ),
)
def test_json_of_the_wrong_shape_is_damage_rebuilt_and_the_run_resumes(
    genuine, tmp_path, file, name
):
    shape = (MANIFESTS if file == MANIFEST_FILE else SNAPSHOTS)[name]
    root = copy_of(genuine, tmp_path, name)
    (run_dir(root) / file).write_text(json.dumps(shape))
    failures = resumes_to_the_end(root, genuine[1])
    assert not failures, "\n".join(failures)


@pytest.fixture(scope="module")
def pruned(tmp_path_factory) -> Iterator[tuple[Path, str]]:
    """As `genuine`, a longer run whose oldest segments retention removed."""
    agent = CountingAgent(
        PRUNING_PARTS, inject_at={PRUNING_STOP_AT: [Fault("status", 401, "unauthorized")]}
    )
    with ScriptedServer(agent) as server:
        agent.server = server
        root = tmp_path_factory.mktemp("pruned")
        config, expected = demo_project(
            root,
            server.base_url,
            PRUNING_PARTS,
            max_turns=200,
            chars_per_part=3000,
            model={"context_limit": 4096},
            context={"carryover_turns": 2},
            logging={"segment_mb": 0.0001, "keep_mb": 0.000001},
        )
        result = ouroboros_here("run", "--config", str(config), "--headless")
        assert result.returncode == 2, result.stderr
        assert load_manifest(run_dir(root)).pruned.get("segments", 0) > 0
        yield root, expected


@pytest.mark.parametrize(
    "lost",
    [
        [MANIFEST_FILE],
        [STATE_FILE],
        [MANIFEST_FILE, STATE_FILE],
        [MANIFEST_FILE, TOTALS_FILE],
    ],
)
def test_a_pruned_run_that_loses_its_manifest_or_snapshot_keeps_its_totals(pruned, tmp_path, lost):
    root = copy_of(pruned, tmp_path, "-".join(lost))
    run = run_dir(root)
    before = read_tail(run).summary()
    turns = read_state(run).state["total_turns"]
    state_dir = root / ".ouroboros"
    taken = plan_resume(state_dir, None, {}, None).total_turns

    for name in lost:
        (run / name).unlink()
    after = read_tail(run).summary()
    recovered = recover(run, ContextConfig())

    if TOTALS_FILE in lost:  # nothing keeps them: the rebuild says so, and reads on
        assert load_manifest(run).problem is not None
        assert after.assistants < before.assistants
    else:
        assert (after.turns, after.assistants, after.restarts) == (
            before.turns,
            before.assistants,
            before.restarts,
        )
        assert after.run_start == before.run_start
        assert plan_resume(state_dir, None, {}, None).total_turns == taken
        assert recovered.state.total_turns == turns
    assert resumes_to_the_end(root, pruned[1]) == []
    end = list(run_records(run))[-1]
    assert end["type"] == "run_end" and end["reason"] == "task_complete"
