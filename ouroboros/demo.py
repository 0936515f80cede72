"""The demo task and the scripted agent that does it.

The task: record the KEY line of every file in `data/` into `results.txt`, keeping a
`progress.md` so that a restarted session knows where to pick up. It is long enough to fill a
small window many times over, so it exercises masking, wind-down, restart and recall, and its
outcome is checkable: `results.txt` must list every part exactly once, in order.

`RecordingAgent` is the brain behind the scripted model server: like a real model it sees only
the messages of each request and answers with tool calls. `ouroboros demo` runs `DemoAgent`,
which replies at a pace a person can follow, and captions each event as it happens
(`show_demo`).
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import re
import shlex
import shutil
import threading
from dataclasses import dataclass, replace
from pathlib import Path

import tomli_w

from ouroboros.config import load_config
from ouroboros.errors import UsageError, signal_exit_code
from ouroboros.loop.handoff import REREAD_NOTES
from ouroboros.loop.runner import run_agent
from ouroboros.protocols import Message, RunHooks
from ouroboros.store.events import EventBase, RunEnd
from ouroboros.testing import Reply, ScriptedServer
from ouroboros.ui.captions import Voice, caption, closing, opening
from ouroboros.ui.status import with_config

DEMO_PROMPT = """\
You are a meticulous records clerk working alone in a workspace.

Mission: for every file in data/ (part_001.txt, part_002.txt, ...), read it and append its
KEY line to results.txt as `part_NNN: <key>`, exactly once per part, in order.

Keep progress.md up to date with the next part to do (`next: N`). Your context is managed:
old tool output is masked, and the session restarts when the window fills, so progress.md is
how you pick up where you left off. When every part is recorded, call task_complete with a
one-line summary.
"""

COMPLETE = "TASK COMPLETE"
PROGRESS_LISTED = re.compile(r"^progress\.md ", re.MULTILINE)
PART_RE = re.compile(r"data/part_(\d+)\.txt")
KEY_RE = re.compile(r"^KEY: (\S+)", re.MULTILINE)
NEXT_RE = re.compile(r"next: (\d+)")
RECALL_RE = re.compile(r'recall\(id="(obs-\d+)"')  # how a placeholder says to see it again
FILLER = (
    "The archive holds ledgers, letters and inventories from the old harbour office; "
    "each record was copied by hand and checked twice before filing. "
)


def part_name(index: int) -> str:
    return f"data/part_{index:03d}.txt"


def make_workspace(
    workspace: Path, parts: int, chars_per_part: int = 6000, seed: int = 7
) -> dict[int, str]:
    """Write the data files; return each part's key (what results.txt must end up holding)."""
    rng = random.Random(seed)
    (workspace / "data").mkdir(parents=True, exist_ok=True)
    keys = {}
    for index in range(1, parts + 1):
        key = f"{rng.getrandbits(48):012x}"
        keys[index] = key
        body = (FILLER * (chars_per_part // len(FILLER) + 1))[:chars_per_part]
        lines = [body[i : i + 100] for i in range(0, len(body), 100)]
        (workspace / part_name(index)).write_text(f"KEY: {key}\n" + "\n".join(lines) + "\n")
    return keys


def expected_results(keys: dict[int, str]) -> str:
    return "".join(f"part_{i:03d}: {keys[i]}\n" for i in sorted(keys))


@dataclass(frozen=True)
class Action:
    """The last thing the agent did, read back from the conversation."""

    calls: list[tuple[str, dict]]
    results: list[str]


def last_action(messages: list[Message]) -> Action | None:
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if m["role"] == "assistant" and m.get("tool_calls"):
            calls = [
                (c["function"]["name"], json.loads(c["function"]["arguments"] or "{}"))
                for c in m["tool_calls"]
            ]
            results = [r.get("content") or "" for r in messages[i + 1 :] if r["role"] == "tool"]
            return Action(calls, results)
    return None


def known_next_part(messages: list[Message]) -> int | None:
    """The newest `next: N` the agent wrote or read in this conversation."""
    for m in reversed(messages):
        for call in m.get("tool_calls") or ():
            args = json.loads(call["function"]["arguments"] or "{}")
            if call["function"]["name"] == "file_write" and args.get("path") == "progress.md":
                return int(NEXT_RE.search(args["content"]).group(1))
        if m["role"] == "tool" and (match := NEXT_RE.search(m.get("content") or "")):
            return int(match.group(1))
    return None


def part_of_observation(messages: list[Message], obs_id: str) -> int | None:
    """The part observation `obs_id` holds: the file its placeholder names, or the one the
    call that made it read."""
    marker = f'"{obs_id}"'
    placeholder = next(
        (m for m in messages if m["role"] == "tool" and marker in (m.get("content") or "")),
        None,
    )
    if placeholder is None:
        return None
    if match := PART_RE.search(placeholder["content"]):
        return int(match.group(1))
    call_id = placeholder["tool_call_id"]
    for m in messages:
        for call in m.get("tool_calls") or ():
            if call["id"] == call_id and (match := PART_RE.search(call["function"]["arguments"])):
                return int(match.group(1))
    return None


def part_read(action: Action, messages: list[Message]) -> int | None:
    name, args = action.calls[0]
    if name == "file_read" and (match := PART_RE.search(args.get("path", ""))):
        return int(match.group(1))
    if name == "recall":  # the part it recalled, or the one its masked result names
        part = part_of_observation(messages, args.get("id", ""))
        if part is None and action.results and (named := PART_RE.search(action.results[0])):
            part = int(named.group(1))
        return part
    return None


def read_in_sight(messages: list[Message], part: int) -> str | None:
    """What the newest file_read of `part` in the conversation gave: its text, or the
    placeholder it became."""
    for i in range(len(messages) - 1, -1, -1):
        for call in messages[i].get("tool_calls") or ():
            match = PART_RE.search(call["function"]["arguments"])
            if call["function"]["name"] == "file_read" and match and int(match.group(1)) == part:
                return next(
                    (
                        r.get("content") or ""
                        for r in messages[i + 1 :]
                        if r.get("tool_call_id") == call["id"]
                    ),
                    None,
                )
    return None


def record(index: int, key: str) -> Reply:
    line = shlex.quote(f"part_{index:03d}: {key}")
    command = f"grep -qxF {line} results.txt 2>/dev/null || echo {line} >> results.txt"
    return Reply(
        f"Recording part {index}.",
        [
            ("shell_exec", {"command": command}),
            ("file_write", {"path": "progress.md", "content": f"next: {index + 1}\n"}),
        ],
    )


PROGRESS_READ = ("file_read", {"path": "progress.md"})
RESTART_ASKS = REREAD_NOTES  # what the restart note asks first


class RecordingAgent:
    """A deterministic agent for the demo task. Callable as the scripted server's brain.
    After a restart it goes on from the turns carried over when they show where it was (a
    part it read, a `next: N` it wrote or read), and re-reads its notes, as the restart note
    asks, when they do not. (The agents of ouroboros/testing/agents.py take every note
    literally.)"""

    def __init__(self, parts: int) -> None:
        self.parts = parts

    def __call__(self, messages: list[Message]) -> Reply:
        last = messages[-1]
        action = last_action(messages)
        reading = action is not None and part_read(action, messages) is not None
        if "Context nearly full" in (last.get("content") or "") and not reading:
            return self.save(messages)
        restarted = last["role"] == "user" and RESTART_ASKS in (last.get("content") or "")
        if restarted and not reading and known_next_part(messages) is None:  # lost
            return Reply("A new session: checking my notes first.", [PROGRESS_READ])
        if action is None:
            return Reply("Starting: let me look around.", [("list_dir", {"path": "."})])
        if any(r.startswith("[interrupted:") for r in action.results):
            return Reply(
                "The last step was interrupted; redoing it (it is idempotent).", list(action.calls)
            )
        name, _ = action.calls[0]
        result = action.results[0] if action.results else ""
        if name == "list_dir":
            return self.after_listing(result, messages)
        if name in ("file_read", "recall") and (part := part_read(action, messages)) is not None:
            if key := KEY_RE.search(result):
                return record(part, key.group(1))
            if obs := RECALL_RE.search(result):
                return Reply(
                    "That output was masked; recalling it.", [("recall", {"id": obs.group(1)})]
                )
            return Reply(f"Re-reading part {part}.", [("file_read", {"path": part_name(part)})])
        return self.read_next(messages)

    def after_listing(self, listing: str, messages: list[Message]) -> Reply:
        """What to do once the workspace is listed: read progress.md for where to start."""
        return Reply("Checking saved progress.", [PROGRESS_READ])

    def read_next(self, messages: list[Message]) -> Reply:
        next_part = known_next_part(messages) or 1
        if next_part > self.parts:
            summary = f"all {self.parts} parts are recorded in results.txt"
            return Reply(f"{COMPLETE}: {summary}.", [("task_complete", {"summary": summary})])
        seen = read_in_sight(messages, next_part) or ""  # read before the notes were
        if key := KEY_RE.search(seen):
            return record(next_part, key.group(1))
        if "result masked" in seen and (obs := RECALL_RE.search(seen)):
            return Reply("I read it before; recalling it.", [("recall", {"id": obs.group(1)})])
        return Reply(f"Reading part {next_part}.", [("file_read", {"path": part_name(next_part)})])

    def save(self, messages: list[Message]) -> Reply:
        next_part = known_next_part(messages) or 1
        return Reply(
            "Saving progress before the restart.",
            [("file_write", {"path": "progress.md", "content": f"next: {next_part}\n"})],
        )


STEP_SECS = 0.2  # each reply of the demo agent, at --speed 1
READING_WORDS_PER_SEC = 6.0  # the pause a caption earns (it stays on the screen after)
MAX_READING_SECS = 3.0


def reading_secs(text: str) -> float:
    """How long a person needs to take in `text`: six words a second, at most 3 s."""
    return min(len(text.split()) / READING_WORDS_PER_SEC, MAX_READING_SECS)


def parse_speed(text: str | None, *, interactive: bool) -> float:
    """`--speed`: a multiplier of the demo's reading pace, or "max" for no pause at all.
    Unset, the demo is paced on a terminal and instant anywhere else (--headless, pipes)."""
    if text is None:
        return 1.0 if interactive else math.inf
    if text.strip().lower() == "max":
        return math.inf
    try:
        speed = float(text)
    except ValueError:
        speed = math.nan
    if not speed > 0:
        raise UsageError(
            f"--speed takes a positive number (2 is twice as fast) or max, not {text!r}"
        )
    return speed


class Pacer:
    """The demo's pace: before each reply the agent waits a step plus the reading time of what
    was shown since its last reply, both divided by the speed. `hold` is called from the run's
    listener, `wait` from the server's thread; `stop` ends every wait, now and later."""

    def __init__(self, speed: float = math.inf) -> None:
        self.speed = speed
        self._held = 0.0
        self._lock = threading.Lock()
        self._stopped = threading.Event()

    def hold(self, secs: float) -> None:
        with self._lock:
            self._held += secs

    def wait(self) -> None:
        with self._lock:
            secs, self._held = STEP_SECS + self._held, 0.0
        self._stopped.wait(secs / self.speed)

    def stop(self) -> None:
        self._stopped.set()


class DemoAgent(RecordingAgent):
    """The agent `ouroboros demo` shows: it reads progress.md only when the listing has one,
    and takes its time before each reply, as the pacer says."""

    def __init__(self, parts: int, pacer: Pacer) -> None:
        super().__init__(parts)
        self.pacer = pacer

    def __call__(self, messages: list[Message]) -> Reply:
        reply = super().__call__(messages)
        self.pacer.wait()
        return reply

    def save(self, messages: list[Message]) -> Reply:
        """At a wind-down: progress.md, and a line in its memory file (NOTES.md), which the
        harness pins in the next session's system message."""
        saved = super().save(messages)
        note = "- Each part's key is its KEY line; results.txt takes `part_NNN: <key>` once.\n"
        return Reply(
            "Saving progress, and a note to my memory file, before the restart.",
            [*saved.tool_calls, ("file_write", {"path": "NOTES.md", "content": note})],
        )

    def after_listing(self, listing: str, messages: list[Message]) -> Reply:
        if PROGRESS_LISTED.search(listing):
            return super().after_listing(listing, messages)
        first = self.read_next(messages)
        return Reply(
            f"No progress.md yet, so this is a fresh start. {first.text}", first.tool_calls
        )


DEMO_WINDOW = 4096
DEMO_CONFIG = {
    "model": {
        "name": "scripted-demo",
        "context_limit": DEMO_WINDOW,
        "max_output_tokens": 512,
        "max_retry_secs": 10,
    },
    "agent": {"workspace": "workspace", "system_prompt": "SYSTEM_PROMPT.md"},
    "context": {"carryover_turns": 3},
}


def write_demo_project(directory: Path, base_url: str, parts: int) -> dict[int, str]:
    """A project directory like `ouroboros init` makes, set up for the demo task; a workspace
    an earlier demo left there (`--keep DIR` twice) starts afresh, so the task is there to do."""
    config = {**DEMO_CONFIG, "model": {**DEMO_CONFIG["model"], "base_url": base_url}}
    prompt = directory / "SYSTEM_PROMPT.md"
    if prompt.is_file() and prompt.read_text(encoding="utf-8") == DEMO_PROMPT:
        shutil.rmtree(directory / "workspace", ignore_errors=True)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "ouroboros.toml").write_text(tomli_w.dumps(config))
    (directory / "SYSTEM_PROMPT.md").write_text(DEMO_PROMPT)
    return make_workspace(directory / "workspace", parts)


def narrated(hooks: RunHooks, voice: Voice, pacer: Pacer) -> RunHooks:
    """The same hooks, plus: each event's caption, shown as it happens (each text once), with
    time to read it before the agent's next reply. A stop request ends the pacing."""
    shown = hooks.on_event
    said: set[str] = set()

    def on_event(event: EventBase) -> None:
        if shown is not None:
            shown(event)
        if event.type == "stop_requested":
            pacer.stop()
        text = caption(event)
        if text is not None and text not in said:
            said.add(text)
            voice.caption(text)
            pacer.hold(reading_secs(text))

    return replace(hooks, on_event=on_event)


def ended_here(hooks: RunHooks, directory: Path, keep: bool) -> RunHooks:
    """The same hooks, with the run's last line saying how to go on only where that works:
    not at all for a project about to be removed, and with its --config for a kept one (the
    demo's project is not the one the current directory finds)."""
    shown = hooks.on_event
    config = directory / "ouroboros.toml"

    def on_event(event: EventBase) -> None:
        if isinstance(event, RunEnd) and event.next:
            then = with_config(event.next, str(config))
            event = event.model_copy(update={"next": then if keep else ""})
        if shown is not None:
            shown(event)

    return replace(hooks, on_event=on_event)


async def run_demo(
    hooks: RunHooks, directory: Path, *, parts: int = 12, pacer: Pacer | None = None
) -> int:
    """Run the real harness on the demo task against the scripted model on loopback."""
    pacer = pacer or Pacer()
    with ScriptedServer(
        DemoAgent(parts, pacer), model="scripted-demo", context_length=DEMO_WINDOW
    ) as server:
        try:
            write_demo_project(directory, server.base_url, parts)
            loaded = load_config(directory / "ouroboros.toml", {}, env={}, user_file=None)
            return await run_agent(loaded, hooks)
        finally:
            pacer.stop()  # a reply still waiting must not hold the server up


def show_demo(
    hooks: RunHooks,
    directory: Path,
    voice: Voice,
    *,
    parts: int = 12,
    speed: float = math.inf,
    keep: bool = False,
) -> int:
    """The demo as `ouroboros demo` shows it: what it is about to show, the run at `speed`
    with a caption for each event, and where to go next. The project in `directory` is
    removed afterwards (on Ctrl+C and errors too) unless `keep`. Returns the exit code."""
    pacer = Pacer(speed)
    intro = opening(parts, DEMO_WINDOW, paced=speed < math.inf)
    voice.announce(intro)
    pacer.hold(reading_secs(intro))
    try:
        code = asyncio.run(
            run_demo(
                narrated(ended_here(hooks, directory, keep), voice, pacer),
                directory,
                parts=parts,
                pacer=pacer,
            )
        )
    except KeyboardInterrupt:  # outside the run's own Ctrl+C handling: starting or ending
        code = signal_exit_code("SIGINT")  # 130, as a run stopped by Ctrl+C exits
    finally:
        if not keep:
            shutil.rmtree(directory, ignore_errors=True)
    voice.announce(closing(directory, kept=keep))
    return code
