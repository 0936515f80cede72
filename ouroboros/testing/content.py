"""Data files of the kinds real workspaces hold, for the demo task at the tails: text whose
density in tokens differs by far from English prose.

Each part file begins with its `KEY: <hex>` line (what the demo agent records), then a body of
one kind, `chars` characters long:

    keys = write_parts(workspace, 40, 6000, "cjk")   # data/part_001.txt ... as make_workspace

Kinds: prose, code, json (minified, one line), hex (digests), base64, cjk, emoji, long-line
(prose with no line breaks at all).
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
from pathlib import Path
from typing import Callable

ContentMaker = Callable[[int, random.Random], str]

_PROSE = (
    "Ships came in at dawn and the clerks wrote down every crate, barrel and bale they "
    "unloaded, with the name of the captain and the weight of the cargo. "
)
_CODE = (
    "def reconcile(ledger, receipts):\n"
    "    total = sum(r.amount for r in receipts if r.day == ledger.day)\n"
    "    if abs(total - ledger.balance) > 0.01:\n"
    '        raise ValueError(f"off by {total - ledger.balance:.2f}")\n'
    "    return {'day': ledger.day, 'ok': True}\n\n"
)
_CJK = (
    "港口档案馆保存着旧海关的账簿、信件和清单；每一份记录都由人工抄写，并在归档之前核对两次。"
    "船只在黎明时分进港，书记员记下卸下的每一个箱子、木桶和包裹。"
)
_EMOJI = "📦🚢⚓🧾📜🔍✅🌊🐟🪝⛵🏷️📅🕯️🧭 "


def _repeat(unit: str, chars: int) -> str:
    return (unit * (chars // len(unit) + 1))[:chars]


def _lines(text: str, width: int = 100) -> str:
    return "\n".join(text[i : i + width] for i in range(0, len(text), width))


def _json(chars: int, rng: random.Random) -> str:
    records, size = [], 0
    while size < chars:
        record = {
            "id": rng.randrange(10**6),
            "crate": f"C-{rng.randrange(10**4):04d}",
            "kg": round(rng.uniform(1, 900), 2),
            "ok": rng.random() < 0.9,
        }
        records.append(record)
        size += len(json.dumps(record, separators=(",", ":"))) + 1
    return json.dumps(records, separators=(",", ":"))[:chars]


def _hex(chars: int, rng: random.Random) -> str:
    digests = (hashlib.sha256(rng.randbytes(16)).hexdigest() for _ in range(chars // 64 + 1))
    return _lines("".join(digests)[:chars], 64)


def _base64(chars: int, rng: random.Random) -> str:
    return _lines(base64.b64encode(rng.randbytes(chars)).decode()[:chars], 76)


CONTENT_KINDS: dict[str, ContentMaker] = {
    "prose": lambda chars, rng: _lines(_repeat(_PROSE, chars)),
    "code": lambda chars, rng: _repeat(_CODE, chars),
    "json": _json,
    "hex": _hex,
    "base64": _base64,
    "cjk": lambda chars, rng: _lines(_repeat(_CJK, chars), 40),
    "emoji": lambda chars, rng: _lines(_repeat(_EMOJI, chars), 40),
    "long-line": lambda chars, rng: _repeat(_PROSE, chars),
}


def write_parts(
    workspace: Path, parts: int, chars: int, kind: str, seed: int = 7
) -> dict[int, str]:
    """Write data/part_NNN.txt files of `kind`, each with its key first; return the keys."""
    return write_keyed(workspace, parts, lambda rng: CONTENT_KINDS[kind](chars, rng), seed)


def write_keyed(
    workspace: Path, parts: int, body: Callable[[random.Random], str], seed: int = 7
) -> dict[int, str]:
    """Write data/part_NNN.txt files, each `KEY: <hex>` then what `body` makes; return the
    keys (the same for the same seed, whatever the body)."""
    rng = random.Random(seed)
    (workspace / "data").mkdir(parents=True, exist_ok=True)
    keys = {}
    for index in range(1, parts + 1):
        keys[index] = key = f"{rng.getrandbits(48):012x}"
        path = workspace / "data" / f"part_{index:03d}.txt"
        path.write_text(f"KEY: {key}\n{body(rng)}\n", encoding="utf-8")
    return keys
