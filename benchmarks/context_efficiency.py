"""Context efficiency: the demo task at scale, managed in an 8k window vs unmanaged.

The workload: an agent reads dozens of multi-thousand-token files and records each one's key.
Files are sized in tokens, the unit the window is measured in: for each row the characters
per file are chosen so that one file counts about --tokens-per-file tokens on that row's
server tokenizer, so every row does the same token workload (--chars fixes characters instead).
Run once with Ouroboros managing an 8192-token window, once on an unlimited window with
nothing masked or restarted. Prints the figures the README quotes.

Then the same task on every server tokenizer of the scripted server (and on the default one
with each broken way of reporting usage): one managed run per row, each compared with an
unmanaged run on the same tokenizer, and the floors every row must meet.

    python benchmarks/context_efficiency.py [--parts 40] [--tokens-per-file 2300 | --chars N]
                                            [--quick] [--keep DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from ouroboros.config import load_config
from ouroboros.demo import (
    RecordingAgent,
    expected_results,
    make_workspace,
    write_demo_project,
)
from ouroboros.store.log import list_runs, read_events
from ouroboros.loop.runner import RunHooks, run_agent
from ouroboros.testing import Reply, ScriptedServer
from ouroboros.testing.tokenizer import TOKENIZERS

UNLIMITED = 10_000_000
DEFAULT_TOKENIZER = "words"
DEFAULT_TOKENS_PER_FILE = 2300
USAGE_MODES = ["zero", "null", "uncached"]  # rows on the default tokenizer

# The floors every row of the matrix must meet.
MAX_REQUESTS_OVER_FEWEST = 1.3
MAX_COST_VS_UNMANAGED = 0.12


class ThinkingAgent(RecordingAgent):
    """Thinks aloud in `<think>` blocks inside its text, as some models do on /v1: the
    strip-reasoning server drops them from the history it counts, the harness from what it
    keeps."""

    def __call__(self, messages):
        reply = super().__call__(messages)
        thought = "<think>" + "Let me consider what the next step should be. " * 12 + "</think>"
        return Reply(f"{thought}{reply.text}", reply.tool_calls)


@dataclass
class Figures:
    turns: int
    prompt_tokens: int
    peak_pct: float
    largest_prompt: int
    over_limit: int
    restarts: int
    masked: int
    completed: bool
    files_done: int
    parts_read_twice: int
    false_alarms: int
    seconds: float


def parts_read(events: list[dict]) -> Counter:
    """How many times file_read read each data part."""
    return Counter(m.group(1) for e in events
                   if e["type"] == "tool_call" and e["name"] == "file_read"
                   and (m := re.search(r"part_(\d+)", e.get("arguments", ""))))


def run_once(parts: int, chars: int, window: int | None, *, tokenizer: str = DEFAULT_TOKENIZER,
             usage: str = "whole", keep: Path | None = None) -> Figures:
    """One run of the task; `window` None is the unmanaged run. `keep` copies the project
    (events.jsonl included) there afterwards."""
    agent = ThinkingAgent(parts) if tokenizer == "strip-reasoning" else RecordingAgent(parts)
    with tempfile.TemporaryDirectory() as tmp, ScriptedServer(
            agent, model="scripted-demo", context_length=window,
            tokenizer=TOKENIZERS[tokenizer], usage=usage) as server:
        root = Path(tmp)
        write_demo_project(root, server.base_url, 0)
        keys = make_workspace(root / "workspace", parts, chars_per_part=chars)
        flags = {"model.context_limit": window or UNLIMITED, "model.max_output_tokens": 2048,
                 "agent.max_turns": 20 * parts + 50}  # a cap, should a row run away
        loaded = load_config(root / "ouroboros.toml", flags, env={}, user_file=None)
        started = time.perf_counter()
        asyncio.run(run_agent(loaded, RunHooks()))
        seconds = time.perf_counter() - started
        state_dir = root / ".ouroboros"
        events = read_events(state_dir / "runs" / list_runs(state_dir)[-1] / "events.jsonl").events
        results = root / "workspace/results.txt"
        written = results.read_text().splitlines() if results.is_file() else []
        expected = expected_results(keys)
        if keep is not None:
            shutil.rmtree(keep, ignore_errors=True)
            shutil.copytree(root, keep)
        return Figures(
            turns=len(server.requests),
            prompt_tokens=sum(server.prompt_tokens),
            peak_pct=100 * max(server.prompt_tokens) / window if window else float("nan"),
            largest_prompt=max(server.prompt_tokens),
            over_limit=server.over_limit,
            restarts=sum(e["type"] == "session_restart" for e in events),
            masked=max((e["total_masked"] for e in events if e["type"] == "context_mask"),
                       default=0),
            completed=results.is_file() and results.read_text() == expected,
            files_done=len(set(expected.splitlines()) & set(written)),
            parts_read_twice=sum(1 for n in parts_read(events).values() if n > 1),
            false_alarms=sum(e["type"] == "context_truncation_detected" for e in events),
            seconds=seconds,
        )


def tokens_per_file(chars: int, tokenizer: str) -> int:
    """What one data file of `chars` characters costs on this server tokenizer."""
    with tempfile.TemporaryDirectory() as tmp:
        make_workspace(Path(tmp), 1, chars_per_part=chars)
        return TOKENIZERS[tokenizer].count_text((Path(tmp) / "data/part_001.txt").read_text())


def chars_for_tokens(tokens: int, tokenizer: str) -> tuple[int, int]:
    """The characters per file at which one data file counts about `tokens` tokens on this
    server tokenizer, and what it then counts: measure at 8000 characters, scale, re-check."""
    chars = 8000
    best = (chars, tokens_per_file(chars, tokenizer))
    for _ in range(8):
        got = best[1] if chars == best[0] else tokens_per_file(chars, tokenizer)
        if abs(got - tokens) < abs(best[1] - tokens):
            best = (chars, got)
        if abs(got - tokens) <= max(1, tokens // 200):  # within 0.5%
            break
        chars = max(1, round(chars * tokens / got))
    return best


@dataclass(frozen=True)
class Sizing:
    """One row's data files: characters each and what each counts on its tokenizer."""

    chars: int
    tokens: int


def sizing(args: argparse.Namespace, tokenizer: str) -> Sizing:
    if args.chars is not None:
        return Sizing(args.chars, tokens_per_file(args.chars, tokenizer))
    return Sizing(*chars_for_tokens(args.tokens_per_file, tokenizer))


def print_intro(args: argparse.Namespace) -> None:
    if args.chars is None:
        print(f"Files are sized in tokens, per row: each row's data files hold as many "
              f"characters as make one file count about {args.tokens_per_file:,} tokens on "
              f"that row's server tokenizer, so every row does the same token workload "
              f"({args.parts} files x ~{args.tokens_per_file:,} tokens).\n")
    else:
        print(f"Files are sized in characters (--chars {args.chars}): every row reads the "
              f"same text, so the token workload differs from row to row with the tokenizer, "
              f"and so does the unmanaged baseline the cost is measured against.\n")


def print_comparison(args: argparse.Namespace, size: Sizing, managed: Figures,
                     unmanaged: Figures) -> None:
    print(f"workload: {args.parts} files of {size.chars:,} characters "
          f"({size.tokens:,} tokens each on the '{DEFAULT_TOKENIZER}' tokenizer)\n")
    print(f"{'':28}{'managed (' + str(args.window) + ')':>18}{'unmanaged':>14}")
    rows = [
        ("turns", "turns", "{:d}"),
        ("prompt tokens, total", "prompt_tokens", "{:,d}"),
        ("peak prompt % of window", "peak_pct", "{:.1f}"),
        ("largest prompt, tokens", "largest_prompt", "{:,d}"),
        ("requests over the limit", "over_limit", "{:d}"),
        ("restarts", "restarts", "{:d}"),
        ("observations masked", "masked", "{:d}"),
        ("task completed", "completed", "{}"),
        ("parts read more than once", "parts_read_twice", "{:d}"),
        ("wall time, s", "seconds", "{:.1f}"),
    ]
    for label, field, fmt in rows:
        print(f"{label:28}{fmt.format(getattr(managed, field)):>18}"
              f"{fmt.format(getattr(unmanaged, field)):>14}")
    per_turn_m = managed.prompt_tokens / managed.turns
    per_turn_u = unmanaged.prompt_tokens / unmanaged.turns
    print(f"{'prompt tokens per turn':28}{per_turn_m:>18,.0f}{per_turn_u:>14,.0f}")
    print(f"\nmanaged total prompt tokens = "
          f"{100 * managed.prompt_tokens / unmanaged.prompt_tokens:.1f}% of unmanaged")


def print_matrix(args: argparse.Namespace, rows: dict[str, tuple[Figures, Figures]],
                 sizes: dict[str, Sizing]) -> bool:
    """The tokenizer matrix and the floors; True if every floor holds."""
    per_file = (f"files sized to ~{args.tokens_per_file:,} tokens on each row's tokenizer"
                if args.chars is None else f"files of {args.chars:,} characters on every row")
    print(f"\ntokenizer matrix: {args.parts} files, {per_file}, {args.window}-token window "
          f"(server and config); cost = true prompt tokens / unmanaged on the same tokenizer "
          f"and the same files\n")
    header = (f"{'row':26}{'chars/file':>11}{'tok/file':>9}{'files':>7}{'requests':>10}{'over':>6}{'redone':>8}"
              f"{'restarts':>10}{'false alarms':>14}{'cost':>7}{'s':>6}")
    print(header)
    print("-" * len(header))
    for name, (m, u) in rows.items():
        size = sizes[name]
        print(f"{name:26}{size.chars:>11,}{size.tokens:>9,}"
              f"{f'{m.files_done}/{args.parts}':>7}{m.turns:>10}{m.over_limit:>6}"
              f"{m.parts_read_twice:>8}{m.restarts:>10}{m.false_alarms:>14}"
              f"{m.prompt_tokens / u.prompt_tokens:>7.3f}{m.seconds:>6.1f}")

    fewest = min(m.turns for m, _ in rows.values())
    floors = [
        (f"every file done ({args.parts}/{args.parts})",
         lambda m, u: m.files_done == args.parts and m.completed),
        ("no request over the window", lambda m, u: m.over_limit == 0),
        ("no part redone", lambda m, u: m.parts_read_twice == 0),
        ("no false truncation alarm", lambda m, u: m.false_alarms == 0),
        (f"requests <= {MAX_REQUESTS_OVER_FEWEST}x the fewest ({fewest} -> "
         f"{int(MAX_REQUESTS_OVER_FEWEST * fewest)})",
         lambda m, u: m.turns <= MAX_REQUESTS_OVER_FEWEST * fewest),
        (f"cost <= {MAX_COST_VS_UNMANAGED} of unmanaged",
         lambda m, u: m.prompt_tokens <= MAX_COST_VS_UNMANAGED * u.prompt_tokens),
    ]
    print("\nfloors")
    every = True
    for label, holds in floors:
        failing = [name for name, (m, u) in rows.items() if not holds(m, u)]
        every &= not failing
        print(f"  {'PASS' if not failing else 'FAIL'}  {label}"
              + (f": {', '.join(failing)}" if failing else ""))
    if args.parts < 40:
        print("  (the cost floor is set for 40 files: unmanaged cost grows with the square of "
              "the task's length, so a shorter task cannot meet it)")
    print(f"\n{'all floors hold' if every else 'SOME FLOORS FAIL'}")
    return every


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", type=int, default=None, help="files to read (default 40)")
    parser.add_argument("--tokens-per-file", type=int, default=DEFAULT_TOKENS_PER_FILE,
                        help="size each data file to about this many tokens on each row's "
                             f"server tokenizer (default {DEFAULT_TOKENS_PER_FILE})")
    parser.add_argument("--chars", type=int, default=None,
                        help="fix the characters per file instead, the same on every row "
                             "(the token workload then varies with the tokenizer)")
    parser.add_argument("--window", type=int, default=8192)
    parser.add_argument("--quick", action="store_true", help="a fast look: 12 files")
    parser.add_argument("--keep", type=Path, default=None,
                        help="keep each managed run's project (events.jsonl) under DIR/<row>")
    args = parser.parse_args()
    args.parts = args.parts or (12 if args.quick else 40)

    def keep(name: str) -> Path | None:
        return args.keep / name if args.keep else None

    by_tokenizer = {name: sizing(args, name) for name in TOKENIZERS}
    print_intro(args)
    unmanaged = {name: run_once(args.parts, by_tokenizer[name].chars, None, tokenizer=name)
                 for name in TOKENIZERS}
    rows: dict[str, tuple[Figures, Figures]] = {}
    sizes: dict[str, Sizing] = {}
    for name in TOKENIZERS:
        managed = run_once(args.parts, by_tokenizer[name].chars, args.window, tokenizer=name,
                           keep=keep(name))
        rows[name], sizes[name] = (managed, unmanaged[name]), by_tokenizer[name]
    for usage in USAGE_MODES:
        size = by_tokenizer[DEFAULT_TOKENIZER]
        managed = run_once(args.parts, size.chars, args.window, usage=usage,
                           keep=keep(f"usage-{usage}"))
        row = f"usage={usage} ({DEFAULT_TOKENIZER})"
        rows[row], sizes[row] = (managed, unmanaged[DEFAULT_TOKENIZER]), size

    print_comparison(args, by_tokenizer[DEFAULT_TOKENIZER], *rows[DEFAULT_TOKENIZER])
    print_matrix(args, rows, sizes)


if __name__ == "__main__":
    main()
