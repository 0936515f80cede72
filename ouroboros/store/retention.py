"""How much history a run keeps: closed log segments and packed tool results, removed
oldest first when they are older than `keep_sessions` sessions or `keep_days` days, or
while the two together take more than `keep_bytes` (the `[logging]` keep_* keys).

Never removed: the current segment, the newest closed one, any a resume still needs (after
the snapshot), the pack being written and any result the live conversation refers to (a
session that never ends has its full packs removed as its old segments are). The manifest
(and observations/pruned.json) are rewritten before files are unlinked, so a crash in
between leaves only files nothing lists, removed at the next pruning; `recall` of a removed
result says after which session retention removed it.

    freed = apply_retention(run_dir, Retention(keep_bytes=256 << 20), session=40,
                            keep_seq=snapshot_seq, keep_obs_from=345)
"""

from __future__ import annotations

import bisect
import json
import os
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from ouroboros.store.atomic import write_atomically
from ouroboros.store.observations import OBSERVATIONS_DIR, PRUNED_FILE, Pack, packs, read_pruned
from ouroboros.store.segments import (
    SEGMENTS_DIR,
    Manifest,
    load_manifest,
    reached,
    segment_files,
    segment_path,
    write_manifest,
)

DAY_SECS = 86400


@dataclass(frozen=True)
class Retention:
    keep_bytes: int = 256 << 20  # 0: no size limit
    keep_sessions: int = 0  # 0: no limit by sessions
    keep_days: float = 0  # 0: no limit by age


@dataclass
class Freed:
    """What a pruning removed."""

    segments: int = 0
    packs: int = 0
    bytes: int = 0
    kept_bytes: int = 0
    sessions: list[int] = field(default_factory=list)  # the range of sessions removed

    def describe(self) -> str:
        if not self.segments and not self.packs:
            return f"nothing to prune ({self.kept_bytes / 1e6:.1f} MB of history kept)"
        span = f" (sessions {self.sessions[0]}-{self.sessions[1]})" if self.sessions else ""
        return (
            f"freed {self.bytes / 1e6:.1f} MB: {self.segments} log segments and "
            f"{self.packs} files of tool results{span}; {self.kept_bytes / 1e6:.1f} MB "
            "of history kept"
        )


@dataclass
class Item:
    """A closed segment or a pack, as a candidate for removal."""

    session: int  # the newest session it holds
    size: int
    age_secs: float
    segment: dict[str, Any] | None = None
    pack: Pack | None = None


def apply_retention(
    run_dir: Path,
    retention: Retention,
    *,
    session: int,
    keep_seq: int,
    keep_obs_from: int,
    now: float | None = None,
) -> Freed:
    """Remove what `retention` lets go (see the module's docstring); what was freed."""
    now = time.time() if now is None else now
    manifest = load_manifest(run_dir)
    items = candidates(run_dir, manifest, now)
    firsts = sorted(i.pack.first for i in items if i.pack is not None)
    total = sum(item.size for item in items)
    gone: list[Item] = []
    for item in sorted(items, key=lambda i: i.session):
        if not removable(item, manifest, session, keep_seq, keep_obs_from, firsts):
            continue
        if expired(item, retention, session) or (
            retention.keep_bytes and total > retention.keep_bytes
        ):
            gone.append(item)
            total -= item.size
    freed = Freed(kept_bytes=total)
    if gone:
        forget(run_dir, manifest, gone, session)
        freed = Freed(
            sum(1 for i in gone if i.segment),
            sum(1 for i in gone if i.pack),
            sum(i.size for i in gone),
            total,
            [min(i.session for i in gone), max(i.session for i in gone)],
        )
    remove_unlisted(run_dir, manifest)
    return freed


def candidates(run_dir: Path, manifest: Manifest, now: float) -> list[Item]:
    items = [
        Item(s["sessions"][1], s["bytes"], now - timestamp(s["time"][1], now), segment=s)
        for s in manifest.segments
    ]
    for pack in packs(run_dir / OBSERVATIONS_DIR):
        try:
            info = pack.path.stat()
        except OSError:
            continue
        items.append(Item(pack.session, info.st_size, now - info.st_mtime, pack=pack))
    return items


def removable(
    item: Item,
    manifest: Manifest,
    session: int,
    keep_seq: int,
    keep_obs_from: int,
    firsts: list[int],
) -> bool:
    """Whether an item may go at all: not what the run still needs (`firsts`: the first
    observation of every pack, in order)."""
    if item.segment is not None:
        return item.segment is not manifest.segments[-1] and item.segment["last_seq"] <= keep_seq
    assert item.pack is not None
    after = bisect.bisect_right(firsts, item.pack.first)
    holds_up_to = firsts[after] - 1 if after < len(firsts) else None
    return item.pack.session <= session and holds_up_to is not None and holds_up_to < keep_obs_from


def expired(item: Item, retention: Retention, session: int) -> bool:
    return bool(
        (retention.keep_sessions and item.session <= session - retention.keep_sessions)
        or (retention.keep_days and item.age_secs > retention.keep_days * DAY_SECS)
    )


def forget(run_dir: Path, manifest: Manifest, gone: list[Item], session: int) -> None:
    """List the removal first (manifest, pruned.json), then unlink the files."""
    segments = [i.segment for i in gone if i.segment is not None]
    if segments:
        previous = manifest.pruned
        manifest.segments = [s for s in manifest.segments if all(s is not g for g in segments)]
        manifest.pruned = {
            "number": max([s["number"] for s in segments] + [previous.get("number", 0)]),
            "seq": max([s["last_seq"] for s in segments] + [previous.get("seq", 0)]),
            "segments": previous.get("segments", 0) + len(segments),
            "bytes": previous.get("bytes", 0) + sum(s["bytes"] for s in segments),
            "after_session": session,
        }
        write_manifest(run_dir, manifest)
        reached("pruning: manifest written")
    removed_packs = [i.pack for i in gone if i.pack is not None]
    if removed_packs:
        directory = run_dir / OBSERVATIONS_DIR
        newest = max(r.first for r in removed_packs)
        later = [p.first for p in packs(directory) if p.first > newest]
        below = min(later, default=newest + 1)
        marker = read_pruned(directory) or {}
        below = max(below, marker.get("below", 0))
        write_atomically(
            directory / PRUNED_FILE, json.dumps({"below": below, "after_session": session})
        )
        reached("pruning: pruned.json written")
    for item in gone:
        path = item.pack.path if item.pack else segment_path(run_dir, item.segment["file"])
        path.unlink(missing_ok=True)
        reached("pruning: a file removed")


def remove_unlisted(run_dir: Path, manifest: Manifest) -> None:
    """Files a pruning cut short by a crash listed as gone but left on disk."""
    pruned = manifest.pruned.get("number", 0)
    listed = {s["number"] for s in manifest.segments}
    for number, path in segment_files(run_dir).items():
        if number <= pruned and number not in listed:
            path.unlink(missing_ok=True)
    directory = run_dir / OBSERVATIONS_DIR
    below = (read_pruned(directory) or {}).get("below", 0)
    found = packs(directory)
    for pack, following in zip(found, found[1:]):
        if following.first <= below:
            pack.path.unlink(missing_ok=True)
    for leftover in (
        (run_dir / SEGMENTS_DIR).glob("*.tmp") if (run_dir / SEGMENTS_DIR).is_dir() else ()
    ):
        os.unlink(leftover)


def timestamp(ts: str | None, default: float) -> float:
    if not ts:
        return default
    try:
        return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return default
