"""What the run has done, folded from its log, and the note a restarted session's first
prompt ends with.

A `Digest` listens to the log and keeps a bounded summary: for the whole run, the files the
agent wrote, its last commands and their exit codes, the calls a stop cut short, and a
fingerprint of every side-effecting call that succeeded (to notice work done again); for the
session going on, its turns, calls and failures. It is part of the run's state: the snapshot
holds it, and a resume folds the events logged after the snapshot (store the fold, not the
history), so a crash does not make it forget what was done before.

At a restart, `restart_note` is the new session's last message, after the carried turns: the
facts (never an instruction of an earlier session's: no wind-down wording, no quoted reply)
and what to do first. Small models act on the last thing they read; that must be "re-read
your notes", not an old "save your state".

    digest = Digest()
    log.subscribe(digest.take)
    ...
    text = restart_note(digest, session=4, previous_turns=21, carried=True,
                        facts_chars=2000, memory="NOTES.md")
    # the `session_restart` event, folded in, begins the next session's counts
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter, OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

from ouroboros.store import events as ev
from ouroboros.window import ledger

MAX_FILES = 30
MAX_COMMANDS = 5
MAX_FAILURES = 20
MAX_INTERRUPTED = 5
MAX_DONE = 4096  # fingerprints of side-effecting calls that succeeded, newest kept
MAX_REPEATS_SHOWN = 3
# A session of at most this many turns that was mostly repeats counts toward the next one's
# (Digest.redone_before): a window that holds one step a session restarts that often. A
# longer session, mostly repeats or not, is an agent at work (a monitoring loop writes the
# same status again and again), and stands alone.
SHORT_SESSION_TURNS = 10
SHOWN_CHARS = 80
HANDOFF_SHARE = 20  # of the prompt's budget, at most
WRITING_TOOLS = ("file_write", "file_edit")
SIDE_EFFECTS = ("file_write", "file_edit", "shell_exec")


def plural(count: int, what: str) -> str:
    return f"{count} {what}" + ("" if count == 1 else "s")


def one_line(text: str, limit: int = SHOWN_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def fingerprint(name: str, arguments: str) -> str:
    """The same call, whatever the spacing or key order of its JSON arguments."""
    try:
        canonical = json.dumps(json.loads(arguments or "{}"), sort_keys=True)
    except ValueError:
        canonical = arguments
    return hashlib.blake2b(
        f"{name}\0{canonical}".encode("utf-8", "surrogatepass"), digest_size=8
    ).hexdigest()


@dataclass
class Digest:
    """What the run did, folded from its events; bounded whatever the run's length."""

    # -- the session going on
    turns: int = 0
    calls: int = 0
    failed: int = 0
    failures: Counter[str] = field(default_factory=Counter)  # "tool target" -> times
    last_failure: dict[str, str] = field(default_factory=dict)  # its latest first line
    side_effects: int = 0  # distinct calls of SIDE_EFFECTS answered (`seen`)
    repeats: int = 0  # of them, the same call as one that succeeded in an earlier session
    seen: dict[str, None] = field(default_factory=dict)  # their fingerprints, newest kept
    repeated: deque[tuple[str, int]] = field(  # the newest: what, and the session it was done
        default_factory=lambda: deque(maxlen=MAX_REPEATS_SHOWN)
    )
    told_redoing: bool = False
    # -- the whole run
    redone_before: int = 0  # repeats of the short sessions in a row before this one that
    # were mostly repeats: sessions too short to trip the guard alone still add up
    sessions_turns: int = 0  # turns in sessions before this one
    sessions_calls: int = 0
    files: OrderedDict[str, int] = field(default_factory=OrderedDict)  # path -> writes
    files_dropped: int = 0
    commands: deque[tuple[str, int | None]] = field(
        default_factory=lambda: deque(maxlen=MAX_COMMANDS)
    )
    interrupted: deque[tuple[str, int]] = field(  # what, in which session: cut short by a
        default_factory=lambda: deque(maxlen=MAX_INTERRUPTED)
    )  # stop (forget_interrupted)
    done: OrderedDict[str, int] = field(default_factory=OrderedDict)  # fingerprint -> session
    pending: dict[str, tuple[str, str, str]] = field(default_factory=dict)  # id -> name,
    # target, fingerprint

    def take(self, event: Any) -> None:
        """Fold one logged event in."""
        match event:
            case ev.Assistant():
                self.turns += 1
            case ev.ToolCallEvent(id=call_id, name=name, arguments=arguments, subject=subject):
                self.calls += 1  # named by what its tool says it is about (Toolbox.subject)
                self.pending[call_id] = (
                    name,
                    one_line(subject or arguments),
                    fingerprint(name, arguments),
                )
                while len(self.pending) > MAX_INTERRUPTED * 4:  # answered ones never linger
                    self.pending.pop(next(iter(self.pending)))
            case ev.ToolResultEvent():
                self.result(event)
            case ev.SessionRestart(session=session):
                self.new_session()
                self.forget_interrupted(before=session - 1)
            case ev.Stuck(kind="redoing", action="note"):
                self.told_redoing = True

    def result(self, event: ev.ToolResultEvent) -> None:
        name, target, print_ = self.pending.pop(event.id, (event.name, "", ""))
        what = f"{name} {target}".rstrip()
        if event.interrupted:
            self.interrupted.append((what, event.session))
            return
        if name in SIDE_EFFECTS and print_:
            self.side_effect(what, print_, event.session, ok=event.ok)
        if name == "shell_exec":
            self.commands.append((target, event.exit_code))
        if not event.ok:
            self.failed += 1
            self.count_failure(what, event.summary)
        elif name in WRITING_TOOLS and target:
            self.wrote(target)

    def side_effect(self, what: str, print_: str, session: int, *, ok: bool) -> None:
        """Count a side-effecting call, and whether an earlier session already did it. Each
        call counts once a session: an agent that runs its tests or `git status` again and
        again, as earlier sessions did, is not redoing their work."""
        first = self.done.get(print_)
        if print_ not in self.seen:
            self.seen[print_] = None
            if len(self.seen) > MAX_DONE:
                self.seen.pop(next(iter(self.seen)))
            self.side_effects += 1
            if first is not None and first < session:
                self.repeats += 1
                self.repeated.append((what, first))
        if ok:
            self.done[print_] = first if first is not None else session
            self.done.move_to_end(print_)
            if len(self.done) > MAX_DONE:
                self.done.popitem(last=False)

    def count_failure(self, what: str, summary: str) -> None:
        if what not in self.failures and len(self.failures) >= MAX_FAILURES:
            rarest = min(self.failures, key=lambda key: self.failures[key])
            del self.failures[rarest]
            self.last_failure.pop(rarest, None)
        self.failures[what] += 1
        self.last_failure[what] = one_line(summary)

    def wrote(self, path: str) -> None:
        self.files[path] = self.files.pop(path, 0) + 1
        if len(self.files) > MAX_FILES:
            self.files.popitem(last=False)
            self.files_dropped += 1

    def top_failure(self) -> str:
        """The call that failed most often, for the restart-storm brake's message."""
        if not self.failures:
            return ""
        what, times = self.failures.most_common(1)[0]
        return f"{what}, {times} times: {self.last_failure.get(what, '')}".rstrip(": ")

    def start_counting(self) -> None:
        """A person chose to go on (a resume): the session's repeats are counted afresh."""
        self.side_effects = self.repeats = self.redone_before = 0
        self.repeated.clear()
        self.seen.clear()
        self.told_redoing = False

    def forget_interrupted(self, before: int) -> None:
        """Calls cut short before session `before`: the restart note into the session after
        them named them once; after that they are old news, not something to check again."""
        kept = [entry for entry in self.interrupted if entry[1] >= before]
        self.interrupted.clear()
        self.interrupted.extend(kept)

    def new_session(self) -> None:
        """A restart: the session's counts begin again; what the run did is kept."""
        self.sessions_turns += self.turns
        self.sessions_calls += self.calls
        redoing = 2 * self.repeats > self.side_effects and self.turns <= SHORT_SESSION_TURNS
        self.redone_before = self.redone_before + self.repeats if redoing else 0
        fresh = Digest()
        for name in SESSION_FIELDS:
            setattr(self, name, getattr(fresh, name))

    # -- as the snapshot holds it

    def to_dict(self) -> dict[str, Any]:
        return {
            **{name: getattr(self, name) for name in COUNTS},
            "failures": dict(self.failures),
            "last_failure": dict(self.last_failure),
            "repeated": [list(item) for item in self.repeated],
            "files": list(self.files.items()),
            "commands": [list(item) for item in self.commands],
            "interrupted": [list(item) for item in self.interrupted],
            "done": list(self.done.items()),
            "seen": list(self.seen),
            "pending": {key: list(value) for key, value in self.pending.items()},
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Digest:
        """The digest a snapshot holds (an empty one for a snapshot from before digests were
        saved). Raises TypeError or ValueError for one of the wrong shape."""
        digest = cls()
        if not data:
            return digest
        for name in COUNTS:
            setattr(digest, name, type(getattr(digest, name))(data.get(name, 0)))
        digest.failures = Counter({str(k): int(v) for k, v in data["failures"].items()})
        digest.last_failure = {str(k): str(v) for k, v in data["last_failure"].items()}
        digest.repeated.extend((str(what), int(at)) for what, at in data["repeated"])
        digest.files = OrderedDict((str(path), int(n)) for path, n in data["files"])
        digest.commands.extend(
            (str(c), None if code is None else int(code)) for c, code in data["commands"]
        )
        digest.interrupted.extend((str(what), int(at)) for what, at in data["interrupted"])
        digest.done = OrderedDict((str(k), int(v)) for k, v in data["done"])
        digest.seen = dict.fromkeys(str(k) for k in data.get("seen", ()))
        digest.pending = {
            str(k): (str(n), str(t), str(f)) for k, (n, t, f) in data["pending"].items()
        }
        return digest


COUNTS = (
    "turns",
    "calls",
    "failed",
    "side_effects",
    "repeats",
    "told_redoing",
    "sessions_turns",
    "sessions_calls",
    "files_dropped",
    "redone_before",
)
SESSION_FIELDS = (
    "turns",
    "calls",
    "failed",
    "failures",
    "last_failure",
    "side_effects",
    "repeats",
    "repeated",
    "seen",
    "told_redoing",
)


# -- the restart note ------------------------------------------------------------------------


def facts(digest: Digest, files: int, commands: int, failures: int) -> list[str]:
    """The handoff's facts, one line each, showing at most so many of each list. No line
    holds words of the agent's or the harness's that read as an instruction. The calls a stop
    cut short come first: they are what the agent must look at before anything else."""
    lines = []
    if digest.interrupted:
        listed = "; ".join(f"{what} (session {at})" for what, at in digest.interrupted)
        lines.append(f"- cut short by a stop, so they may or may not have taken effect: {listed}")
    if digest.files and files:
        shown = list(digest.files.items())[-files:]
        more = len(digest.files) - len(shown) + digest.files_dropped
        listed = ", ".join(f"{path} ({n} writes)" if n > 1 else path for path, n in shown)
        lines.append(f"- files written: {listed}" + (f" and {more} more" if more else ""))
    if digest.commands and commands:
        listed = "; ".join(
            f"`{command}` -> {'timed out' if code is None else f'exit {code}'}"
            for command, code in list(digest.commands)[-commands:]
        )
        lines.append(f"- last commands: {listed}")
    repeated = [(what, n) for what, n in digest.failures.most_common(failures) if n > 1]
    if repeated:
        listed = "; ".join(
            f"{what} ({n} times): {digest.last_failure.get(what, '')}" for what, n in repeated
        )
        lines.append(f"- failing again and again: {listed}")
    return lines


def restart_note(
    digest: Digest,
    *,
    session: int,
    previous_turns: int,
    carried: bool,
    facts_chars: int,
    memory: str | None,
) -> str:
    """The last message of a restarted session's first prompt: that a new session begins,
    the facts of the run so far within `facts_chars` (none when 0), and what to do first.
    `memory`: the memory file's name when it is pinned in the system message."""
    above = "; its last turns are above, as they happened" if carried else ""
    head = (
        f"[Session {session} of this run begins with a fresh context. Session "
        f"{session - 1} ended after {previous_turns} turns{above}."
    )
    body: list[str] = []
    if facts_chars > 0:
        totals = (
            f"- so far: {plural(session - 1, 'session')}, "
            f"{plural(digest.sessions_turns + digest.turns, 'turn')}, "
            f"{plural(digest.sessions_calls + digest.calls, 'tool call')}"
        )
        for shown in ((MAX_FILES, MAX_COMMANDS, 5), (10, 3, 3), (5, 2, 2), (3, 1, 1), (0, 0, 0)):
            text = "\n".join([totals, *facts(digest, *shown)])
            if len(text) <= facts_chars:
                break
        if len(text) > facts_chars:
            text = text[: max(facts_chars - 3, 0)] + "..."
        body = ["What the harness logged of this run (facts, not instructions):", text]
    return "\n".join([head, *body, first_step(digest, memory)]) + "]"


REREAD_NOTES = "re-read your notes"  # what a restarted session is asked to do first


def first_step(digest: Digest, memory: str | None) -> str:
    """What to do before anything else: read the notes, wherever they are kept."""
    kept = [path for path, writes in digest.files.items() if writes > 1 and path != memory]
    where = []
    if memory:
        where.append(f"{memory}, pinned in the system message")
    if kept:
        where.append("the files you keep them in: " + ", ".join(kept[-3:]))
    named = f" ({'; '.join(where)})" if where else ""
    return (
        f"First, before you act: {REREAD_NOTES}{named}, then go on from where they "
        "say. Do not redo what they record as done."
    )


def handoff_budget(max_tokens: int, prompt_budget: int) -> int:
    """The handoff's budget: `context.handoff_max_tokens`, at most a twentieth of the
    prompt's budget (it is pinned after the turns carried over, so it takes their room)."""
    return min(max_tokens, prompt_budget // HANDOFF_SHARE)


def tokens_of(text: str, chars_per_token: float) -> int:
    return ledger.estimate_chars(len(text), chars_per_token)
