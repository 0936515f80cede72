"""The full text of every tool result, for `recall` and for resume: packed, one file per
session (and per process, and per PACK_BYTES), not one file per call.

Layout of `<run_dir>/observations/`:
    s000012-000000345.pack   the results of session 12 from obs-345 on, each a header line
                             `obs-345 <bytes>` then its UTF-8 text and a newline
    obs-12.txt               one result per file, as runs written before packs kept them
    pruned.json              {"below": 300, "after_session": 40}: retention removed the
                             packs of every observation numbered below 300 after session 40

    store = ObservationStore(run_dir / "observations")
    store.save("obs-345", text, session=12)
    store.read("obs-345")        # the text; None when it is not (or no longer) on disk
    store.pruned_after("obs-3")  # 40: pruned by retention after session 40; else None
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from ouroboros.store.files import no_follow, open_regular, read_regular

PACK = re.compile(r"s(\d+)-(\d+)\.pack$")
OBS_ID = re.compile(r"obs-(\d+)$")
PRUNED_FILE = "pruned.json"
MAX_PRUNED_BYTES = 64 * 1024  # a few numbers
OBSERVATIONS_DIR = "observations"
PACK_BYTES = 4 << 20  # a pack this big is full: the next result begins a new one


@dataclass(frozen=True)
class Pack:
    path: Path
    session: int
    first: int  # the number of the first observation in it

    @property
    def size(self) -> int:
        try:
            return self.path.stat().st_size
        except OSError:
            return 0


def obs_number(obs_id: str) -> int | None:
    match = OBS_ID.match(obs_id)
    return int(match.group(1)) if match else None


class ObservationStore:
    """Appends results to the pack of the session writing them; reads any back by id."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._pack: Path | None = None
        self._session = 0
        self._size = 0

    def save(self, obs_id: str, text: str, session: int, *, durable: bool = False) -> None:
        """Append a result to this session's pack (begun by this process at its first
        result, and again once it is full): a record the disk had no room for is cut off
        again."""
        number = obs_number(obs_id)
        if self._pack is None or session != self._session or self._size >= PACK_BYTES:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._pack = self.directory / f"s{session:06d}-{number or 0:09d}.pack"
            self._session = session
        data = text.encode("utf-8")
        record = f"{obs_id} {len(data)}\n".encode() + data + b"\n"
        with open(self._pack, "ab", opener=no_follow) as f:
            size = f.tell()
            try:
                f.write(record)
                f.flush()
                if durable:
                    os.fsync(f.fileno())
            except OSError:
                f.truncate(size)
                raise
            self._size = f.tell()

    def read(self, obs_id: str) -> str | None:
        number = obs_number(obs_id)
        if number is None:
            return None
        pack = pack_holding(packs(self.directory), number)
        if pack is not None and (text := read_from_pack(pack.path, obs_id)) is not None:
            return text
        try:  # a run written before packs: one file per result
            fd = open_regular(self.directory / f"{obs_id}.txt")
            with os.fdopen(fd, encoding="utf-8", newline="") as f:
                return f.read()
        except (OSError, ValueError):
            return None

    def pruned_after(self, obs_id: str) -> int | None:
        """The session after which retention removed this observation, if it did."""
        number = obs_number(obs_id)
        marker = read_pruned(self.directory)
        if number is None or marker is None or number >= marker.get("below", 0):
            return None
        return int(marker.get("after_session", 0))


def packs(directory: Path) -> list[Pack]:
    """The packs in a directory, by their first observation."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    found = [
        Pack(directory / name, int(m.group(1)), int(m.group(2)))
        for name in names
        if (m := PACK.match(name))
    ]
    return sorted(found, key=lambda p: (p.first, p.session))


def pack_holding(found: list[Pack], number: int) -> Pack | None:
    """The pack an observation was written to: the last that begins at or before it."""
    holding = None
    for pack in found:
        if pack.first > number:
            break
        holding = pack
    return holding


def read_from_pack(path: Path, obs_id: str) -> str | None:
    """One record of a pack; None when it is not there, torn by a crash, or not a pack (a
    link or a FIFO is never read through)."""
    try:
        with os.fdopen(open_regular(path), "rb") as f:
            while header := f.readline():
                name, _, length = header.decode("utf-8", "replace").strip().partition(" ")
                if not length.isdigit() or not header.endswith(b"\n"):
                    return None
                size = int(length)
                if name != obs_id:
                    f.seek(size + 1, os.SEEK_CUR)
                    continue
                data = f.read(size + 1)
                if len(data) != size + 1:
                    return None
                return data[:-1].decode("utf-8")
    except (OSError, ValueError):
        return None
    return None


def read_pruned(directory: Path) -> dict[str, int] | None:
    try:
        marker = json.loads(read_regular(directory / PRUNED_FILE, MAX_PRUNED_BYTES))
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) else None
