"""Writing the run's state as it goes: after every step a `checkpoint` event with what the
step changed (see journal.py), and a full snapshot (state.json) at session boundaries, at
the end of the run and now and then.

    checkpoints = Checkpoints(state, log, run_dir, journal)
    checkpoints.step()       # after a model reply, a tool result, ...
    checkpoints.end_turn()   # the log made durable (or a snapshot, when one is due)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ouroboros.loop.journal import CHECKPOINT, Journal
from ouroboros.loop.state import RunState
from ouroboros.protocols import RunLog
from ouroboros.store.events import Checkpoint
from ouroboros.store.log import write_snapshot


class Checkpoints:
    """The state's writer; `journal` remembers what the last snapshot and checkpoint held."""

    def __init__(self, state: RunState, log: RunLog, run_dir: Path, journal: Journal) -> None:
        self.state = state
        self.log = log
        self.run_dir = run_dir
        self.journal = journal

    def changes(self) -> dict[str, Any]:
        """What the step changed in the state, for the event that ends it to carry instead of
        a checkpoint of its own; nothing if nothing changed."""
        delta = self.journal.delta(self.state)
        return {CHECKPOINT: {"base": self.journal.base, **delta}} if delta else {}

    def step(self) -> None:
        """After a step: log what it changed in the state, if anything."""
        if (delta := self.journal.delta(self.state)) is not None:
            self.log.emit(Checkpoint(base=self.journal.base, **delta))

    def end_turn(self) -> None:
        """At the end of a turn: the step's checkpoint, and the log made durable; now and
        then a full snapshot instead."""
        if self.journal.snapshot_due(self.state):
            self.snapshot()
            return
        self.step()
        self.log.commit()

    def snapshot(self) -> None:
        """Write the whole state (at session boundaries, at the end, now and then)."""
        self.log.sync()
        write_snapshot(self.run_dir, self.log.seq, self.state.to_dict(), self.log.redact)
        self.journal.reset(self.state, self.log.seq)
