"""The event log in segments, and the manifest that lets a reader find what it needs.

Layout of a run's directory (format 3):
    events.jsonl               the current segment: append-only JSONL, as it always was
    segments/000001.jsonl.gz   closed segments, numbered in order (gzip; a segment closed
                               by a process that died before compressing it stays .jsonl)
    manifest.json              per closed segment: its file, seqs, sessions, turns, time
                               range and last state; and the run's state as of the newest
                               one (`RunSummary`), so a reader needs only it and events.jsonl
    totals.json                that summary and what retention removed, written with each
                               manifest and never pruned: a manifest rebuilt after a
                               pruning keeps the run's totals

A segment is closed (`close_segment`) by writing the manifest first when the run has none yet
(so a run is always listed by a file of its own), renaming events.jsonl into segments/
(atomic), then writing the manifest (atomic), then starting an empty events.jsonl; a crash
between those leaves a segment the manifest does not list yet, which `load_manifest` finds
and adds. A run dir with a manifest, a current segment or closed segments is a run. Logs
written before segments (formats 1 and 2: one events.jsonl) read as a log of one segment.

    manifest = load_manifest(run_dir)        # an empty one for a log without segments
    for record in run_records(run_dir):      # every record, oldest first, streamed
        ...
"""

from __future__ import annotations

import gzip
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from pydantic import ValidationError

from ouroboros.errors import StateError
from ouroboros.protocols import JsonObject
from ouroboros.store.atomic import write_atomically
from ouroboros.store.files import open_regular, read_regular
from ouroboros.store.shapes import ManifestShape, TotalsShape, check, why_not
from ouroboros.store.summary import RunSummary, envelope

MANIFEST_FILE = "manifest.json"
TOTALS_FILE = "totals.json"
SEGMENTS_DIR = "segments"
MANIFEST_FORMAT = 3
MAX_MANIFEST_BYTES = 256 << 20  # a line per closed segment: far more than any run has
SEGMENT_NAME = re.compile(r"(\d{6})\.jsonl(\.gz)?$")


@dataclass
class Manifest:
    """What manifest.json says (or what was rebuilt from the segments, and why)."""

    segments: list[dict[str, Any]] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)  # the summary as of the newest one
    pruned: dict[str, Any] = field(default_factory=dict)
    problem: str | None = None  # set when it was damaged or missing and was rebuilt

    @property
    def last_seq(self) -> int:
        return self.segments[-1]["last_seq"] if self.segments else self.pruned.get("seq", 0)

    @property
    def next_number(self) -> int:
        numbers = [s["number"] for s in self.segments] + [self.pruned.get("number", 0)]
        return max(numbers) + 1

    def summary(self) -> RunSummary:
        return RunSummary.from_dict(self.state)

    def to_json(self) -> str:
        return json.dumps(
            {
                "format_version": MANIFEST_FORMAT,
                "segments": self.segments,
                "state": self.state,
                "pruned": self.pruned,
            },
            ensure_ascii=False,
        )


def segment_entry(
    number: int, file: str, first: JsonObject, summary: RunSummary, size: int, turns_before: int
) -> dict[str, Any]:
    """A closed segment as the manifest lists it: where it is, what it spans, its last
    state (session, turn, turns in all, last record's type)."""
    last = summary.last
    return {
        "number": number,
        "file": file,
        "bytes": size,
        "first_seq": first.get("seq", 0),
        "last_seq": last.get("seq", 0),
        "sessions": [first.get("session", 1), last.get("session", 1)],
        "turns": [turns_before, summary.assistants],
        "time": [first.get("ts"), last.get("ts")],
        "last_state": {
            "session": last.get("session"),
            "turn": last.get("turn"),
            "total_turns": summary.turns,
            "type": last.get("type"),
        },
    }


def write_manifest(run_dir: Path, manifest: Manifest) -> None:
    """The manifest, then totals.json: the summary it holds, where retention never prunes."""
    write_atomically(run_dir / MANIFEST_FILE, manifest.to_json())
    number = (
        manifest.segments[-1]["number"] if manifest.segments else manifest.pruned.get("number", 0)
    )
    write_atomically(
        run_dir / TOTALS_FILE,
        json.dumps(
            {
                "format_version": MANIFEST_FORMAT,
                "number": number,
                "state": manifest.state,
                "pruned": manifest.pruned,
            },
            ensure_ascii=False,
        ),
    )


def segment_path(run_dir: Path, name: str) -> Path:
    """A listed segment's file; the other form of it where a compression was cut short."""
    path = run_dir / SEGMENTS_DIR / name
    if not path.exists():
        other = path.with_name(name[:-3] if name.endswith(".gz") else name + ".gz")
        if other.exists():
            return other
    return path


def read_manifest_file(run_dir: Path) -> Manifest:
    """manifest.json as written. Raises OSError or ValueError when it is missing or
    damaged, StateError when a newer Ouroboros wrote it."""
    data = json.loads(read_regular(run_dir / MANIFEST_FILE, MAX_MANIFEST_BYTES))
    version = data.get("format_version") if isinstance(data, dict) else None
    if isinstance(version, int) and version > MANIFEST_FORMAT:
        raise StateError(
            f"{run_dir / MANIFEST_FILE} was written by a newer Ouroboros (format "
            f"{data['format_version']}, this one reads {MANIFEST_FORMAT}); "
            "upgrade to read it"
        )
    check(ManifestShape, data)
    numbers = [s["number"] for s in data["segments"]]
    if numbers != sorted(set(numbers)):
        raise ValueError("the segments are not listed in order, each once")
    return Manifest(data["segments"], data.get("state") or {}, data.get("pruned") or {})


def read_totals(run_dir: Path) -> dict[str, Any] | None:
    """totals.json (see shapes.TotalsShape), or None when it is missing or damaged."""
    try:
        data = json.loads(read_regular(run_dir / TOTALS_FILE, MAX_MANIFEST_BYTES))
        check(TotalsShape, data)
    except (OSError, ValueError):
        return None
    return data


def segment_files(run_dir: Path) -> dict[int, Path]:
    """The closed segments on disk by number (the compressed one, where both are there)."""
    found: dict[int, Path] = {}
    try:
        names = sorted(os.listdir(run_dir / SEGMENTS_DIR))
    except OSError:
        return found
    for name in names:
        if (m := SEGMENT_NAME.match(name)) and (m.group(2) or int(m.group(1)) not in found):
            found[int(m.group(1))] = run_dir / SEGMENTS_DIR / name
    return found


def load_manifest(run_dir: Path) -> Manifest:
    """The manifest, with any closed segment it does not list yet (a rollover cut short)
    added; rebuilt from the segments when it is missing or damaged (`problem` says so)."""
    path = run_dir / MANIFEST_FILE
    files = segment_files(run_dir)
    try:
        manifest = read_manifest_file(run_dir)
    except FileNotFoundError:
        manifest = Manifest()
        if files:
            manifest.problem = f"{path} is missing; rebuilt from {len(files)} segments"
    except (OSError, ValueError, KeyError, TypeError) as error:
        why = why_not(error) if isinstance(error, ValidationError) else None
        manifest = Manifest(
            problem=f"{path} is damaged{f' ({why})' if why else ''}; rebuilt "
            f"from {len(files)} segments"
        )
    assert manifest is not None
    if manifest.problem is not None:
        return rebuilt(run_dir, manifest, files)
    unlisted = manifest.next_number  # once: it goes through every segment listed
    for number in sorted(n for n in files if n >= unlisted):
        add_unlisted(run_dir, manifest, number, files[number])
    return manifest


def rebuilt(run_dir: Path, manifest: Manifest, files: dict[int, Path]) -> Manifest:
    """The manifest rebuilt from the segments on disk, from what totals.json says retention
    removed and the run's summary as of then: a pruned run keeps its totals."""
    totals = read_totals(run_dir)
    manifest.pruned = totals["pruned"] if totals else {}
    for number in sorted(n for n in files if n > manifest.pruned.get("number", 0)):
        add_unlisted(run_dir, manifest, number, files[number])
    if totals is None or not manifest.pruned:
        return manifest  # every record is in the segments scanned
    summary = RunSummary.from_dict(totals["state"])
    for entry in manifest.segments:
        if entry["number"] > totals["number"]:
            for record in segment_records(segment_path(run_dir, entry["file"])):
                summary.add_record(record)
    manifest.state = summary.to_dict()
    return manifest


def add_unlisted(run_dir: Path, manifest: Manifest, number: int, path: Path) -> None:
    """scan_unlisted, or the manifest's `problem` saying the segment is left out."""
    try:
        scan_unlisted(run_dir, manifest, number, path)
    except StateError as error:  # the others are listed; this one is said to be left out
        said = f"{error}; left out of the manifest"
        manifest.problem = f"{manifest.problem}; {said}" if manifest.problem else said


def scan_unlisted(run_dir: Path, manifest: Manifest, number: int, path: Path) -> None:
    """add_scanned, once more under the segment's other name when the running process
    compressed it while this one read it (a reader racing a rollover)."""
    try:
        add_scanned(manifest, number, path)
    except StateError:
        again = segment_files(run_dir).get(number)
        if again is None or again == path:
            raise
        add_scanned(manifest, number, again)


def add_scanned(manifest: Manifest, number: int, path: Path) -> None:
    """List a segment the manifest did not, by reading it through."""
    summary = manifest.summary()
    before = summary.assistants
    first: JsonObject | None = None
    for record in segment_records(path):
        first = first or envelope(record)
        summary.add_record(record)
    if first is None:
        return
    try:
        size = path.stat().st_size
    except OSError as error:  # gone since it was read
        raise StateError(f"cannot read {path}: {error.strerror or error}") from None
    manifest.segments.append(segment_entry(number, path.name, first, summary, size, before))
    manifest.state = summary.to_dict()


def complete_summary(run_dir: Path, manifest: Manifest) -> RunSummary:
    """The manifest's summary, with the sessions' figures a manifest written before they were
    kept lacks folded once from its closed segments (streamed); without them if one cannot be
    read."""
    summary = manifest.summary()
    if not summary.complete:
        again = RunSummary()
        try:
            for record in closed_records(run_dir, manifest):
                again.add_record(record)
        except StateError:
            return summary
        summary.with_sessions_of(again)
    return summary


def parse_record(raw: bytes) -> JsonObject | None:
    """One line of the log as an event, or None if it is not one."""
    try:
        record = json.loads(raw)
    except ValueError:
        return None
    if (
        not isinstance(record, dict)
        or not isinstance(record.get("type"), str)
        or not isinstance(record.get("seq"), int)
    ):
        return None
    return record


def segment_records(path: Path) -> Iterator[JsonObject]:
    """The records of a closed segment, streamed; StateError naming the file when it is
    missing or damaged."""
    opener: Callable[..., Any] = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            for number, raw in enumerate(f, 1):
                record = parse_record(raw)
                if record is None:
                    raise StateError(
                        f"{path} is damaged at line {number} (not a whole "
                        "event); the segments before it are intact"
                    )
                yield record
    except (OSError, EOFError, gzip.BadGzipFile) as error:
        why = getattr(error, "strerror", None) or error
        raise StateError(f"cannot read {path}: {why}") from None


def closed_records(run_dir: Path, manifest: Manifest, after_seq: int = 0) -> Iterator[JsonObject]:
    """The records of the closed segments after `after_seq`, oldest first."""
    for segment in manifest.segments:
        if segment["last_seq"] <= after_seq:
            continue
        for record in segment_records(segment_path(run_dir, segment["file"])):
            if record["seq"] > after_seq:
                yield record


# Called with the name of each step of a rollover, a compression or a pruning once it is
# done: none in a run; the crash tests (tests/faults/test_rollover_steps.py) kill there.
STEP_HOOKS: list[Callable[[str], None]] = []


def reached(step: str) -> None:
    for hook in STEP_HOOKS:
        hook(step)


def close_segment(
    run_dir: Path, current: Path, first: JsonObject, summary: RunSummary, turns_before: int
) -> Manifest:
    """Make the current segment the next closed one: a manifest written first where there is
    none yet (the run stays listed while events.jsonl is away), renamed into segments/
    (atomic), then listed in the manifest (atomic). The caller starts a new current
    segment."""
    manifest = load_manifest(run_dir)
    if not (run_dir / MANIFEST_FILE).exists():
        write_manifest(run_dir, manifest)
        reached("rollover: first manifest written")
    number = manifest.next_number
    (run_dir / SEGMENTS_DIR).mkdir(exist_ok=True)
    reached("rollover: segments/ made")
    target = run_dir / SEGMENTS_DIR / f"{number:06d}.jsonl"
    size = current.stat().st_size
    os.replace(current, target)
    reached("rollover: segment moved")
    sync_directory(run_dir / SEGMENTS_DIR)
    sync_directory(run_dir)
    reached("rollover: moved durably")
    manifest.segments.append(segment_entry(number, target.name, first, summary, size, turns_before))
    manifest.state = summary.to_dict()
    write_manifest(run_dir, manifest)
    reached("rollover: segment listed")
    return manifest


def compress_closed(run_dir: Path, manifest: Manifest) -> None:
    """gzip the closed segments not compressed yet (the newest; and any a killed process
    left plain): the .gz is whole before the manifest names it, and the plain file goes
    only after that. Failing (a full disk) leaves a segment uncompressed."""
    for entry in manifest.segments:
        if not entry["file"].endswith(".gz"):
            compress(run_dir, manifest, entry)
        else:  # the plain file a compression killed after listing the .gz left behind
            (run_dir / SEGMENTS_DIR / entry["file"][:-3]).unlink(missing_ok=True)


NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def compress(run_dir: Path, manifest: Manifest, entry: dict[str, Any]) -> None:
    """gzip one closed segment (see compress_closed); neither file is opened through a
    link."""
    plain = run_dir / SEGMENTS_DIR / entry["file"]
    packed = plain.with_name(plain.name + ".gz")
    partial = plain.with_name(plain.name + ".gz.tmp")
    try:
        partial.unlink(missing_ok=True)  # one a killed compression left
        with (
            os.fdopen(open_regular(plain), "rb") as source,
            os.fdopen(os.open(partial, NEW_FILE, 0o666), "wb") as written,
        ):
            with gzip.GzipFile(fileobj=written, mode="wb", compresslevel=6) as target:
                while chunk := source.read(1 << 16):
                    target.write(chunk)
            written.flush()
            os.fsync(written.fileno())
        reached("compression: .gz.tmp written")
        os.replace(partial, packed)
        reached("compression: .gz in place")
        entry["file"], entry["bytes"] = packed.name, packed.stat().st_size
        write_manifest(run_dir, manifest)
        reached("compression: .gz listed")
    except OSError:
        partial.unlink(missing_ok=True)
        return
    plain.unlink(missing_ok=True)


def sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
