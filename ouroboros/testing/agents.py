"""Scripted agents that read the way small local models do: literally.

The task is the demo's "parts" task: record the `KEY:` line of every data/part_NNN.txt in
results.txt as `part_NNN: <key>`, once each, in order; keep progress in a notes file
(`notes.md` in the workspace, not the pinned memory file); call task_complete at the end.

Every agent knows only what the messages of each request hold, and trusts only what it can
see there: what it READ (an unmasked file_read of its notes, or notes pinned in the system
message) and what it DID (its own record or check commands whose results are visible and
succeeded). The arguments of its own earlier notes writes are not knowledge, and a masked
result holds nothing. When it saves, it rewrites the whole notes file from that knowledge
(`DONE: 1-8,10` / `NEXT: 11`), so a save made while it cannot see its notes destroys
progress, as the real models did. Its next part is the smallest it does not know to be done;
after each record it sees succeed, it writes its notes again in its next reply.

The words taken as orders (ORDERS; within one message the strongest counts): save, write
down, wind down, wrap up, record your progress (save the notes now); check, read, re-read,
look at ... notes, progress or workspace (read the notes now); continue, go on, keep going.
The words "interrupted" or "cut short" in the messages after its newest reply mean a call
may or may not have run: it checks results.txt for the part named there before redoing it.

All of them save when the newest message asks them to (the wind-down), and check results.txt
(`grep -q '^part_012: ' results.txt`) before redoing a call reported interrupted in the
newest messages. The variants differ in the words they obey:

- `LiteralAgent`: obeys the newest instruction-like text anywhere in the prompt, once.
- `WindowAgent`: the base; reads its notes at a session start only because the system
  prompt says so.
- `LastWordAgent`: ignores the system prompt's advice unless the last message repeats it.
- `WordyAgent`: as LiteralAgent, but says "All parts are done." instead of task_complete.

    with ScriptedServer(LiteralAgent(40), context_length=8192) as server: ...
    figures = run_figures(project_dir, keys)       # parts done, redone, requests
"""

from __future__ import annotations

import json
import re
import shlex
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Literal

from ouroboros.protocols import Message
from ouroboros.testing.content import write_keyed
from ouroboros.testing.script import Reply

NOTES = "notes.md"
DONE_WORDS = "All parts are done."

LITERAL_PROMPT = """\
You are a records clerk working alone in a workspace.

Mission: for every file in data/ (part_001.txt, part_002.txt, ...), read it and append its
KEY line to results.txt as `part_NNN: <key>`, exactly once per part, in order.

Keep {notes} with what is done (`DONE: 1-8`) and the next part (`NEXT: 9`). Your context is
managed: old tool output is masked, and the session restarts when the window fills. At the
start of a session, read {notes} before anything else. When you are told the context is
nearly full, save your progress to {notes}. When every part is recorded, call task_complete
with a one-line summary.
"""

# Neutral data: no word in it reads as an instruction (the demo's filler says "checked").
FILLER = (
    "Ships came in at dawn with timber, salt and grain; the harbour ledger lists each "
    "cargo by weight, berth and captain, with the tide and the hour of arrival. "
)

PART_PATH = re.compile(r"data/part_(\d+)\.txt")
KEY_LINE = re.compile(r"^KEY: ([0-9a-f]+)", re.MULTILINE)
RECORDED = re.compile(r"echo 'part_(\d+): [0-9a-f]+' >> results\.txt")
CHECKED = re.compile(r"^grep -q '\^part_(\d+): ' results\.txt$")
DONE_LINE = re.compile(r"^DONE: *([0-9, -]*)$", re.MULTILINE)
MASKED = re.compile(r"^\[\w+ result masked: ")
INTERRUPTED = re.compile(r"\b(interrupted|cut short)\b", re.IGNORECASE)
PART_NAMED = re.compile(r"part_(\d+)")
HELD_PID = "held.pid"  # in the workspace: the held shell's pid (its process group's)
HOLD = f"; echo $$ > {HELD_PID}; sleep 30"  # after the append: the held record took effect
# The task's size in the tests and the benchmark: 40 parts of 1,500 characters in an 8k
# window, each reply saying MUSING 3 times: sessions restart every 15-25 turns, and the
# handoff finds room at each restart.
CHARS_PER_PART = 1500
MUSINGS = 3
# What a chatty small model says around each step (neutral words: the handoff may quote it).
MUSING = (
    "Each part has one key line at the top and a long body after it; the body does not "
    "matter for the results file, only the key does, and the order of the parts. "
)
# What a model that thinks in its tool arguments says there (neutral words, like MUSING).
CHATTER = (
    "the ledger lists each cargo by weight and berth, and the key line sits at the top "
    "of the file, so the body after it can be left as it is for now"
)

# The words a literal model takes as orders, strongest first within one message.
Order = Literal["save", "read", "continue"]
ORDERS: list[tuple[Order, re.Pattern[str]]] = [
    (
        "save",
        re.compile(r"\b(save|write down|wind down|wrap up|record your progress)\b", re.IGNORECASE),
    ),
    (
        "read",
        re.compile(
            r"\b(check|read|re-read|reread|look at)\b[^.\n]{0,40}?"
            r"\b(notes?|progress|workspace)\b",
            re.IGNORECASE,
        ),
    ),
    ("continue", re.compile(r"\b(continue|go on|keep going)\b", re.IGNORECASE)),
]


def part_path(index: int) -> str:
    return f"data/part_{index:03d}.txt"


def make_parts(
    workspace: Path, parts: int, chars_per_part: int = CHARS_PER_PART, seed: int = 7
) -> dict[int, str]:
    """Write the data files with neutral filler; return each part's key."""
    body = (FILLER * (chars_per_part // len(FILLER) + 1))[:chars_per_part]
    lines = "\n".join(body[i : i + 100] for i in range(0, len(body), 100))
    return write_keyed(workspace, parts, lambda rng: lines, seed)


def ranges(parts: Iterable[int]) -> str:
    """`1-8,10` for {1, ..., 8, 10}."""
    spans: list[list[int]] = []
    for n in sorted(set(parts)):
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ",".join(f"{a}-{b}" if a != b else f"{a}" for a, b in spans)


def parse_ranges(text: str) -> set[int]:
    done: set[int] = set()
    for span in re.findall(r"\d+(?:\s*-\s*\d+)?", text):
        a, _, b = span.partition("-")
        done.update(range(int(a), int(b or a) + 1))
    return done


def notes_done(text: str) -> set[int] | None:
    """The parts a notes text says are done; None when it holds no DONE line."""
    lines = DONE_LINE.findall(text)
    return set().union(*map(parse_ranges, lines)) if lines else None


def order_in(text: str) -> Order | None:
    """The strongest order in one message's text, if any."""
    return next((order for order, words in ORDERS if words.search(text)), None)


@dataclass
class Call:
    """One tool call the agent made, and its result as the window shows it (None: none)."""

    at: int  # index of the assistant message
    name: str
    args: dict[str, Any]
    result: str | None = None

    @property
    def seen(self) -> str | None:
        """The result's text if it is visible: not masked, not cut short."""
        if (
            self.result is None
            or MASKED.match(self.result)
            or self.result.startswith("[interrupted")
        ):
            return None
        return self.result

    def succeeded(self) -> bool:
        return self.seen is not None and "[exit code 0]" in self.seen


@dataclass
class View:
    """What one request's messages tell the agent."""

    messages: list[Message]
    notes: str
    calls: list[Call] = field(default_factory=list)

    @classmethod
    def of(cls, messages: list[Message], notes: str) -> View:
        view = cls(messages, notes)
        by_id: dict[str, Call] = {}
        for i, m in enumerate(messages):
            for call in m.get("tool_calls") or ():
                try:
                    args = json.loads(call["function"]["arguments"] or "{}")
                except ValueError:
                    args = {}
                by_id[call["id"]] = made = Call(i, call["function"]["name"], args)
                view.calls.append(made)
            if m["role"] == "tool" and m.get("tool_call_id") in by_id:
                by_id[m["tool_call_id"]].result = m.get("content") or ""
        return view

    @property
    def last_assistant(self) -> int:
        return max((i for i, m in enumerate(self.messages) if m["role"] == "assistant"), default=-1)

    def tail(self) -> list[Message]:
        """The messages after the agent's newest reply: what it has not acted on yet."""
        return self.messages[self.last_assistant + 1 :]

    def notes_reads(self) -> list[Call]:
        return [c for c in self.calls if c.name == "file_read" and self.is_notes(c)]

    def is_notes(self, call: Call) -> bool:
        return str(call.args.get("path", "")).lstrip("./") == self.notes

    def system_notes(self) -> set[int] | None:
        first = self.messages[0] if self.messages else {}
        return notes_done(first.get("content") or "") if first.get("role") == "system" else None

    def known_done(self) -> set[int]:
        """The parts it knows are done: read in its notes, or recorded or checked by itself
        with the result in sight."""
        done = set(self.system_notes() or ())
        for call in self.calls:
            if call.name == "file_read" and self.is_notes(call) and call.seen is not None:
                done |= notes_done(call.seen) or set()
            elif call.name == "shell_exec" and call.succeeded():
                command = str(call.args.get("command", ""))
                if found := RECORDED.search(command) or CHECKED.match(command):
                    done.add(int(found.group(1)))
        return done

    def visible_key(self, part: int) -> str | None:
        """The key of `part` if a read of its file is in sight."""
        for call in reversed(self.calls):
            if (
                call.name == "file_read"
                and call.seen is not None
                and (m := PART_PATH.search(str(call.args.get("path", ""))))
                and int(m.group(1)) == part
                and (key := KEY_LINE.search(call.seen))
            ):
                return key.group(1)
        return None

    def newest_order(self) -> tuple[int, Order] | None:
        """The newest instruction-like text anywhere (system, notes, tool results)."""
        for i in range(len(self.messages) - 1, -1, -1):
            m = self.messages[i]
            text = m.get("content") or ""
            if m["role"] == "assistant" or MASKED.match(text):
                continue
            if (order := order_in(text)) is not None:
                return i, order
        return None

    def answered(self, at: int, order: Order) -> bool:
        """Whether its own action answering the order at message `at` follows it."""
        for call in self.calls:
            if call.at <= at:
                continue
            if (
                order == "continue"
                or (order == "save" and call.name == "file_write" and self.is_notes(call))
                or (order == "read" and call.name == "file_read" and self.is_notes(call))
            ):
                return True
        return False

    def cut_short(self) -> bool:
        """Whether the newest messages report a call interrupted (cut short)."""
        return any(INTERRUPTED.search(m.get("content") or "") for m in self.tail())

    def cut_part(self) -> int | None:
        """The part of the call reported interrupted: named in the report, or in the
        arguments of a call whose result says it was interrupted; None if none is named."""
        for text in (m.get("content") or "" for m in self.tail()):
            if INTERRUPTED.search(text) and (m := PART_NAMED.search(text)):
                return int(m.group(1))
        for call in reversed(self.calls):
            if (
                call.result is not None
                and call.result.startswith("[interrupted")
                and (m := PART_NAMED.search(json.dumps(call.args)))
            ):
                return int(m.group(1))
        return None


class WindowAgent:
    """(b) The base: knows only its window and rewrites its notes from it; at a session start
    with no progress in sight it reads its notes, because the system prompt says to."""

    def __init__(
        self,
        parts: int,
        *,
        notes: str = NOTES,
        hold_part: int | None = None,
        musing: int = 0,
        chatter: int = 0,
    ) -> None:
        self.parts = parts
        # `chatter` words said in the arguments of each record command and notes write
        words = CHATTER.split()
        self.chatter = " ".join((words * (chatter // len(words) + 1))[:chatter])
        self.notes = notes
        self.hold_part = hold_part
        self.held = False
        self.musing = (MUSING * musing).strip()  # said before each step, `musing` times

    def __call__(self, messages: list[Message]) -> Reply:
        view = View.of(messages, self.notes)
        reply = self.react(view) or self.obey(view) or self.work(view)
        if self.musing and reply.tool_calls:
            return Reply(f"{self.musing} {reply.text}", reply.tool_calls)
        return reply

    def react(self, view: View) -> Reply | None:
        """What every variant does first: save when the newest message says to; check a call
        reported interrupted before doing it again."""
        last = view.messages[-1]
        if last["role"] != "assistant" and order_in(last.get("content") or "") == "save":
            return self.save(view, "Saving my progress.")
        if not view.cut_short():
            return None
        part = view.cut_part()
        if part is None or part in view.known_done():
            return self.read_notes("A step was cut short; looking at my notes.")
        check = ("shell_exec", {"command": f"grep -q '^part_{part:03d}: ' results.txt"})
        also = self.obey(view)  # told to read its notes as well: both at once
        reading = [(n, a) for n, a in also.tool_calls if n == "file_read"] if also else []
        return Reply(f"Part {part} was cut short; is it in results.txt?", [check, *reading])

    def obey(self, view: View) -> Reply | None:
        """The words this variant follows besides the wind-down: the system prompt's, to read
        its notes at a start (no read of them in sight, none pinned)."""
        first = view.messages[0]
        if (
            first["role"] == "system"
            and says_read(first.get("content") or "")
            and not view.notes_reads()
            and view.system_notes() is None
        ):
            return self.read_notes("Reading my notes first, as the prompt says.")
        return None

    def work(self, view: View) -> Reply:
        """The next part it does not know to be done: record it if its key is in sight, else
        read it; with its notes written again after a record it saw succeed."""
        done = view.known_done()
        todo = next((n for n in range(1, self.parts + 1) if n not in done), None)
        if todo is None:
            return self.finish()
        calls: list[tuple[str, dict[str, Any]]] = []
        if self.just_recorded(view):  # keep the notes current, from what it knows
            calls.append(self.notes_write(done))
        if (key := view.visible_key(todo)) is not None:
            return Reply(f"Recording part {todo}.", [*calls, self.record(todo, key)])
        return Reply(f"Reading part {todo}.", [*calls, ("file_read", {"path": part_path(todo)})])

    def just_recorded(self, view: View) -> bool:
        newest = [c for c in view.calls if c.at == view.last_assistant]
        return any(
            c.name == "shell_exec"
            and c.succeeded()
            and RECORDED.search(str(c.args.get("command", "")))
            for c in newest
        )

    def record(self, part: int, key: str) -> tuple[str, dict[str, Any]]:
        line = shlex.quote(f"part_{part:03d}: {key}")
        command = f"grep -qxF {line} results.txt 2>/dev/null || echo {line} >> results.txt"
        if self.chatter:
            command += f"  # {self.chatter}"
        if part == self.hold_part and not self.held:
            self.held = True
            command += HOLD
        return "shell_exec", {"command": command}

    def notes_write(self, done: set[int]) -> tuple[str, dict[str, Any]]:
        following = next(n for n in range(1, self.parts + 2) if n not in done)
        content = f"DONE: {ranges(done)}\nNEXT: {following}\n"
        if self.chatter:
            content += f"Thoughts: {self.chatter}\n"
        return "file_write", {"path": self.notes, "content": content}

    def save(self, view: View, saying: str) -> Reply:
        return Reply(saying, [self.notes_write(view.known_done())])

    def read_notes(self, saying: str) -> Reply:
        return Reply(saying, [("file_read", {"path": self.notes})])

    def finish(self) -> Reply:
        summary = f"all {self.parts} parts are recorded in results.txt"
        return Reply(f"{DONE_WORDS}", [("task_complete", {"summary": summary})])


def says_read(text: str) -> bool:
    """Whether `text` says, among anything else, to read the notes."""
    return any(order == "read" and words.search(text) for order, words in ORDERS)


class LiteralAgent(WindowAgent):
    """(a) Obeys the newest instruction-like text anywhere in the prompt (save, read or
    check your notes, continue), once: when its own answer already follows, it works on."""

    def obey(self, view: View) -> Reply | None:
        newest = view.newest_order()
        if newest is None or view.answered(*newest):
            return None
        order = newest[1]
        if order == "save":
            return self.save(view, "Saving my progress, as told.")
        if order == "read":
            return self.read_notes("Reading my notes, as told.")
        return None  # continue: the work


class LastWordAgent(WindowAgent):
    """(c) Ignores the system prompt's advice to read its notes unless the last message
    repeats it; otherwise starts from what it sees."""

    def obey(self, view: View) -> Reply | None:
        last = view.messages[-1]
        if last["role"] != "assistant" and order_in(last.get("content") or "") == "read":
            return self.read_notes("Reading my notes, as the last message says.")
        return None


class WordyAgent(LiteralAgent):
    """(d) As LiteralAgent, but says it is done in words instead of calling task_complete."""

    def finish(self) -> Reply:
        return Reply(DONE_WORDS)


LITERAL_AGENTS: dict[str, type[WindowAgent]] = {
    "a-newest-order": LiteralAgent,
    "b-window": WindowAgent,
    "c-last-word": LastWordAgent,
    "d-done-in-words": WordyAgent,
}


# --- figures of a finished run ----------------------------------------------------------------


@dataclass(frozen=True)
class RunFigures:
    """What a run of the parts task came to."""

    parts: int
    done: int  # parts whose line results.txt holds
    complete: bool  # results.txt is exactly the expected text
    redone: int  # parts recorded more than once, or read again after their first record
    requests: int
    restarts: int
    redone_parts: tuple[int, ...] = ()

    def line(self) -> str:
        return (
            f"{self.done}/{self.parts} parts, {self.redone} redone, {self.requests} "
            f"requests, {self.restarts} restarts"
        )


def expected_lines(keys: dict[int, str]) -> str:
    return "".join(f"part_{i:03d}: {keys[i]}\n" for i in sorted(keys))


def redone_parts(events: Iterable[dict[str, Any]]) -> list[int]:
    """Parts recorded more than once (a record call cut short counts: the tests hold a record
    after its append, so it took effect), or whose data file was read again after a record
    call of it."""
    records: Counter[int] = Counter()
    redone: set[int] = set()
    for event in events:
        if event["type"] != "tool_call":
            continue
        args = json.loads(event.get("arguments") or "{}")
        if event["name"] == "shell_exec" and (m := RECORDED.search(args.get("command", ""))):
            part = int(m.group(1))
            records[part] += 1
            if records[part] > 1:
                redone.add(part)
        elif (
            event["name"] == "file_read"
            and (m := PART_PATH.search(str(args.get("path", ""))))
            and records[int(m.group(1))]
        ):
            redone.add(int(m.group(1)))
    return sorted(redone)


def run_figures(
    project: Path, keys: dict[int, str], workspace: str = "workspace", state_dir: str = ".ouroboros"
) -> RunFigures:
    """The figures of the project's latest run, from its workspace and its event log."""
    from ouroboros.store.log import list_runs, run_records

    runs = project / state_dir
    events = list(run_records(runs / "runs" / list_runs(runs)[-1]))
    results = project / workspace / "results.txt"
    written = results.read_text().splitlines() if results.is_file() else []
    expected = expected_lines(keys)
    redone = redone_parts(events)
    return RunFigures(
        parts=len(keys),
        done=len(set(expected.splitlines()) & set(written)),
        complete=results.is_file() and results.read_text() == expected,
        redone=len(redone),
        requests=sum(e["type"] == "token_usage" for e in events),
        restarts=sum(e["type"] == "session_restart" for e in events),
        redone_parts=tuple(redone),
    )
