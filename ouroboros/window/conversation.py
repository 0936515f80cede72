"""The conversation: its one owner (Conversation: the messages and their bookkeeping, which
carries out what the ContextManager in manager.py decides), and the data it is made of: the
notes the harness writes into it, tool results as observations (their placeholders and
caps), turns, masking and what a restart carries over, as pure functions. No I/O.

Vocabulary (see policy.py for the window's): a *turn* is an assistant message and everything
after it up to the next assistant message (its tool results and any notes); turns are never
split. An *observation* is a tool result; masking replaces its content with a placeholder
that says what was there, while the message itself (and the call it answers) stays; a call
whose own arguments are long keeps their head (a write replaced since: a stand-in for its
content), cut_arguments.

A message is its wire form, nothing else (what the system prompt is made of is kept beside
it too: loop/memory.py's SystemMarks); what the harness keeps beside it (its measured size,
and for a note the harness wrote, the note's kind) is kept by the Conversation that holds
it, and travels with it as a Record.
"""

from __future__ import annotations

import json
import re
from collections.abc import Container, Iterable, Iterator, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Callable, Literal, NamedTuple, cast, overload

from ouroboros.protocols import Message, ToolCall, ToolResult, argument_cut, replaced_content
from ouroboros.window import ledger
from ouroboros.window.sizes import Entry, Tally, WorthMasking, make_entry

_THINK = re.compile(r"<think>.*?(?:</think>|$)", re.DOTALL)

NoteKind = Literal["continue", "mask", "wind_down", "restart", "interrupted", "stuck", "redoing"]
Truncation = Literal["head", "tail", "both"]

INTERRUPTED_PREFIX = "[interrupted:"  # how the result of a call a stop cut short begins
INTERRUPTED_TEXT = (
    INTERRUPTED_PREFIX + " the harness stopped while this {name} call was running, so it may "
    "or may not have taken effect. Check before repeating it.]"
)


def interrupted_text(tool_name: str) -> str:
    """The result of a call a stop or a crash cut short (it is not run again)."""
    return INTERRUPTED_TEXT.format(name=tool_name)


def interrupted_note(calls: Sequence[tuple[str, str]]) -> str:
    """What the agent reads last after a resume when calls were cut short: each (tool, what
    it was about), and that it may not have run."""
    listed = "; ".join(f"{name} `{subject}`" if subject else name for name, subject in calls)
    return (
        f"[The run was stopped while this was running, so it may or may not have run: "
        f"{listed}. Check whether it took effect before you run it again.]"
    )


WIND_DOWN_TEXT = (
    "[Context nearly full: {pct:.0%} of the context budget is used. Save your progress and "
    "state to workspace files now (what is done, what is next, anything you would need to "
    "continue). "
    "The session will restart soon with a fresh context; only your files carry over.]"
)


# --- notes ----------------------------------------------------------------------------------


class Record(NamedTuple):
    """A message and what the harness keeps beside it: its measured size (None: never
    counted) and, for a note the harness wrote, the note's kind.

        Conversation([Record(system), note("continue", "Begin.")])
    """

    message: Message
    note: NoteKind | None = None
    tokens: int | None = None


def note(kind: NoteKind, text: str) -> Record:
    """A message the harness adds to the conversation (sent to the model as a user turn)."""
    return Record({"role": "user", "content": text}, kind)


def without_reasoning(text: str) -> str:
    """Assistant text without its `<think>` blocks. Kept out of the history: templates strip
    earlier reasoning anyway (so counts would shrink unpredictably), and it costs tokens."""
    return _THINK.sub("", text).lstrip()


def mask_notice(count: int, reclaimed_pct: float) -> Record:
    """The note that tells the agent observations were masked."""
    return note(
        "mask",
        f"[Context compressed: {count} observations masked, "
        f"~{reclaimed_pct:.0f}% of the context reclaimed]",
    )


# --- observations and placeholders ----------------------------------------------------------


@dataclass
class Observation:
    """What a placeholder needs to say about one tool result."""

    id: str
    tool_call_id: str
    tool: str
    target: str
    chars: int
    lines: int
    first_line: str
    exit_code: int | None = None
    truncated: bool = False
    masked: bool = False
    call_cut: int = 0  # the characters masking takes out of its call's arguments (cut_arguments)


def describe(call: ToolCall, subject: str, result: ToolResult, obs_id: str) -> Observation:
    """What a placeholder for this result of `call` will say; `subject` is what the call was
    about, as the tool names it (Toolbox.subject)."""
    meta = result.meta
    target = str(meta.get("path") or meta.get("command") or subject)
    text = result.content
    first_line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    cut = cut_arguments(call.name, call.arguments, target)  # worth it at MASK_MIN_GAIN times
    worth_cutting = len(call.arguments) >= MASK_MIN_GAIN * len(cut)
    return Observation(
        id=obs_id,
        tool_call_id=call.id,
        tool=call.name,
        target=target,
        chars=len(text),
        lines=text.count("\n") + (1 if text and not text.endswith("\n") else 0),
        first_line=first_line,
        exit_code=meta.get("exit_code"),
        call_cut=len(call.arguments) - len(cut) if worth_cutting else 0,
    )


WHOLE_WRITE_TOOL = "file_write"  # its call holds the file's whole content
ARGUMENT_HEAD_CHARS = 200  # what masking keeps of a long argument (not a write's content)


def cut_arguments(tool: str, arguments: str, path: str) -> str:
    """A call's arguments (JSON text) as masking leaves them: a file_write's content made the
    stand-in a later write of `path` leaves (protocols.replaced_content), any other string
    over twice ARGUMENT_HEAD_CHARS its head and what was cut (protocols.argument_cut);
    `arguments` as they are when nothing is cut or they are no JSON object."""
    try:
        parsed = json.loads(arguments or "{}")
    except ValueError:
        return arguments
    if not isinstance(parsed, dict):
        return arguments
    kept = dict(parsed)
    for name, value in parsed.items():
        if not isinstance(value, str):
            continue
        if tool == WHOLE_WRITE_TOOL and name == "content":
            kept[name] = replaced_content(len(value), path)
        elif len(value) > 2 * ARGUMENT_HEAD_CHARS:
            head = value[:ARGUMENT_HEAD_CHARS]
            kept[name] = head + argument_cut(len(value) - len(head))
    return json.dumps(kept, ensure_ascii=False) if kept != parsed else arguments


def with_arguments_cut(message: Message, tool_call_id: str, path: str) -> Message:
    """The assistant `message` with the arguments of its call `tool_call_id` cut
    (cut_arguments)."""
    calls = []
    for call in message.get("tool_calls") or ():
        if call["id"] == tool_call_id:
            function = call["function"]
            arguments = cut_arguments(function["name"], function.get("arguments", ""), path)
            call = {**call, "function": {**function, "arguments": arguments}}
        calls.append(call)
    return {**message, "tool_calls": calls}


RECALL_TOOL = "recall"


def recalled_target(obs_id: str, observations: Iterable[Observation]) -> str:
    """What a recall of `obs_id` brought back, for its placeholder: the id and the call it
    came from ("obs-6 (file_read data/part_002.txt)"), or that call's own words for a recall
    of a recall; the id alone once the registry has let that observation go."""
    source = next((obs for obs in observations if obs.id == obs_id), None)
    if source is None:
        return obs_id
    if source.tool == RECALL_TOOL:
        return source.target
    return f"{obs_id} ({source.tool} {source.target})" if source.target else obs_id


def human_size(chars: int) -> str:
    """A size for a person: bytes below 1 KB, else KB with one decimal."""
    if chars < 1024:
        return f"{chars} B"
    return f"{chars / 1024:.1f} KB"


TARGET_SHOWN = 120  # of what a call was about (a long command): what its placeholder shows


def placeholder(obs: Observation) -> str:
    """The line a masked result becomes: what it was, and how to see it again."""
    target = obs.target[:TARGET_SHOWN] + ("..." if len(obs.target) > TARGET_SHOWN else "")
    parts = [target] if target else []
    parts += [f"{obs.lines} lines", human_size(obs.chars)]
    if obs.exit_code is not None:
        parts.append(f"exit code {obs.exit_code}")
    if obs.first_line:
        began = obs.first_line[:40] + ("..." if len(obs.first_line) > 40 else "")
        parts.append(f'began "{began}"')
    return f'[{obs.tool} result masked: {", ".join(parts)}. recall(id="{obs.id}") shows it again]'


def cap_text(text: str, max_chars: int, keep: Truncation, obs_id: str) -> tuple[str, int]:
    """Cut an oversized tool result to max_chars, keeping the head, the tail or both, with a
    line saying what was cut and how to get it back. Returns the text and the chars cut."""
    if len(text) <= max_chars:
        return text, 0
    cut = len(text) - max_chars
    marker = (
        f"[... {cut:,} characters cut ({keep} kept); "
        f'recall(id="{obs_id}", offset=N) reads the full output ...]'
    )
    if keep == "head":
        return f"{text[:max_chars]}\n{marker}", cut
    if keep == "tail":
        return f"{marker}\n{text[-max_chars:]}", cut
    half = max_chars // 2
    return f"{text[:half]}\n{marker}\n{text[len(text) - (max_chars - half) :]}", cut


# --- turns, masking, carryover --------------------------------------------------------------


def turn_starts(messages: Sequence[Message]) -> list[int]:
    """Indexes of the assistant messages: each begins a turn that runs to the next one."""
    return [i for i, m in enumerate(messages) if m["role"] == "assistant"]


WRITING_TOOLS = ("file_write", "file_edit")
READING_TOOLS = ("file_read", RECALL_TOOL)  # a recall shows a result again: a read
MAX_NOTES = 16  # files the agent writes, newest kept, whose newest read is never hidden


def notes_written(notes: Sequence[str], obs: Observation) -> list[str]:
    """The files the agent keeps notes in, after the result `obs`: a file it writes is one
    it will read again to go on (its progress, its notes)."""
    if obs.tool not in WRITING_TOOLS or not obs.target:
        return list(notes)
    return [*(path for path in notes if path != obs.target), obs.target][-MAX_NOTES:]


def newest_reads(notes: Sequence[str], observations: dict[str, Observation]) -> set[str]:
    """The tool-call ids of the newest unmasked read of each file in `notes`: what the agent
    goes on, never masked or dropped while anything else can go."""
    if not notes:
        return set()
    wanted, newest = set(notes), {}
    for obs in observations.values():  # in the order the results came
        if obs.tool in READING_TOOLS and obs.target in wanted:
            newest[obs.target] = obs
    return {obs.tool_call_id for obs in newest.values() if not obs.masked}


def save_results(
    messages: Sequence[Message], notes: Sequence[str], observations: dict[str, Observation]
) -> set[str]:
    """The tool-call ids of the results a save needs besides the notes read: what the agent
    did since the newest read of a file in `notes`, or in all of `messages` when no notes
    read is there: the results of its commands (its records among them) and of its newest
    write of each file; not what it read, nor a write a newer one of the file replaced."""
    wanted = set(notes)
    ids = [m.get("tool_call_id", "") for m in messages if m["role"] == "tool"]
    since = 0
    for at in range(len(ids) - 1, -1, -1):
        obs = observations.get(ids[at])
        if obs is not None and obs.tool in READING_TOOLS and obs.target in wanted:
            since = at + 1
            break
    kept: set[str] = set()
    written: set[str] = set()
    for call_id in reversed(ids[since:]):
        done = observations.get(call_id)
        if done is None or done.tool in READING_TOOLS:
            continue
        if done.tool in WRITING_TOOLS:
            if done.target in written:
                continue
            written.add(done.target)
        kept.add(call_id)
    return kept


def result_of(message: Message, observations: dict[str, Observation]) -> Observation | None:
    """The observation a tool result message holds; None for any other message."""
    if message["role"] != "tool":
        return None
    return observations.get(message.get("tool_call_id", ""))


FAILED_PREFIXES = ("error", INTERRUPTED_PREFIX)  # how the result of a call that failed begins


def saved(message: Message, obs: Observation) -> bool:
    """Whether this result is a write of a file that succeeded (the agent saving)."""
    content = str(message.get("content") or "")
    return obs.tool in WRITING_TOOLS and not content.startswith(FAILED_PREFIXES)


def standing_writes(observations: dict[str, Observation]) -> set[str]:
    """The tool-call ids of the file_writes no later write of the same file that succeeded
    replaced: what each wrote may be all the agent has of it, so the content its call holds
    stays. The content of a write replaced since is masked like any result (the file no
    longer holds it)."""
    standing: dict[str, list[str]] = {}
    for obs in observations.values():  # in the order the results came
        if obs.tool != WHOLE_WRITE_TOOL:
            continue
        if obs.first_line.startswith(FAILED_PREFIXES):
            standing.setdefault(obs.target, []).append(obs.tool_call_id)
        else:
            standing[obs.target] = [obs.tool_call_id]
    return {tool_call_id for ids in standing.values() for tool_call_id in ids}


def read_after_save(turn: Sequence[Message], observations: dict[str, Observation]) -> bool:
    """Whether this turn (its reply and results) both saved (a write that succeeded) and
    read (the agent has not seen what yet)."""
    done = [(m, obs) for m in turn if (obs := result_of(m, observations)) is not None]
    return any(saved(m, obs) for m, obs in done) and any(
        obs.tool in READING_TOOLS for _, obs in done
    )


def worked(obs: Observation) -> bool:
    """Whether this result is of a command that succeeded (reading is not work)."""
    return obs.tool not in READING_TOOLS and obs.exit_code == 0


def saved_after_work(messages: Sequence[Message], observations: dict[str, Observation]) -> bool:
    """Whether the agent's newest save (a write of a file that succeeded) follows all the
    work it did (commands that succeeded): a restart now loses nothing it did."""
    for message in reversed(messages):
        if (obs := result_of(message, observations)) is None:
            continue
        if saved(message, obs):
            return True
        if worked(obs):
            return False
    return False


def unsaved_work(
    messages: Sequence[Message],
    notes: Sequence[NoteKind | None],
    observations: dict[str, Observation],
) -> bool:
    """Whether the agent did work (a command that succeeded) after its newest save (a write
    of a file) with no wind-down note since that save: a restart now would lose it, so it
    is asked to save once more. False when no save is in `messages` (`notes`: each one's
    note kind, Conversation.notes)."""
    since = False
    for at in range(len(messages) - 1, -1, -1):
        if notes[at] == "wind_down":
            return False
        message = messages[at]
        if (obs := result_of(message, observations)) is None:
            continue
        if saved(message, obs):
            return since
        since = since or worked(obs)
    return False


# How far back worked_this_session looks: a session further along than this is at work.
YOUNG_SESSION_MESSAGES = 40


def worked_this_session(
    messages: Sequence[Message],
    notes: Sequence[NoteKind | None],
    observations: dict[str, Observation],
) -> bool:
    """Whether the agent did work this session (since the restart note, or the start): a
    write of a file, or a command that succeeded. A session longer than
    YOUNG_SESSION_MESSAGES counts as at work (a turn reads no more than that). `notes`:
    each message's note kind (Conversation.notes)."""
    for at in range(len(messages) - 1, max(len(messages) - YOUNG_SESSION_MESSAGES, 0) - 1, -1):
        if notes[at] == "restart":
            return False
        message = messages[at]
        obs = result_of(message, observations)
        if obs is not None and (saved(message, obs) or worked(obs)):
            return True
    return len(messages) > YOUNG_SESSION_MESSAGES


# Masking is worth it only for a result at least this many times its placeholder's size: a
# short result (a progress file, a one-line answer) is what the agent goes on, and hiding it
# frees next to nothing.
MASK_MIN_GAIN = 2


def worth_masking(message: Message, observations: dict[str, Observation]) -> str | None:
    """The tool-call id of a result whose observation is unmasked and, by the estimate (dense
    scripts counted as such), at least MASK_MIN_GAIN times as big as its placeholder, or
    whose call's arguments masking would cut (Observation.call_cut; a write's only once a
    later write replaced it: standing_writes); None for any other message."""
    if message["role"] != "tool":
        return None
    obs = observations.get(message.get("tool_call_id", ""))
    if obs is None or obs.masked:
        return None
    size = ledger.estimate_text(message.get("content") or "", ledger.DEFAULT_CHARS_PER_TOKEN)
    replaced_by = ledger.estimate_text(placeholder(obs), ledger.DEFAULT_CHARS_PER_TOKEN)
    if size < MASK_MIN_GAIN * replaced_by and not obs.call_cut:
        return None
    return obs.tool_call_id


def replaces_result(obs: Observation) -> bool:
    """Whether masking `obs` puts its placeholder in place of its result: always, but for a
    result shorter than MASK_MIN_GAIN placeholders when its call was what was worth it."""
    return not obs.call_cut or obs.chars >= MASK_MIN_GAIN * len(placeholder(obs))


def unacted_turns(
    messages: Sequence[Message],
    notes: Sequence[NoteKind | None],
    starts: list[int] | None = None,
) -> int:
    """How many turns at the end hold results the agent has not acted on yet: the newest
    (its results are not seen yet), and the one before it when a wind-down note came right
    after that one (the reply to the note saved state; the work on what that turn read is
    still to be done). `notes`: each message's note kind (Conversation.notes); `starts`:
    turn_starts(messages), if known."""
    starts = turn_starts(messages) if starts is None else starts
    if len(starts) < 2:
        return len(starts)
    return 2 if "wind_down" in notes[starts[-2] + 1 : starts[-1]] else 1


def pending_calls(messages: Sequence[Message]) -> list[ToolCall]:
    """Tool calls of the last assistant message that have no result yet."""
    last = next(
        (i for i in range(len(messages) - 1, -1, -1) if messages[i]["role"] == "assistant"), None
    )
    if last is None:
        return []
    answered = {m.get("tool_call_id") for m in messages[last + 1 :] if m["role"] == "tool"}
    return [
        ToolCall(c["id"], c["function"]["name"], c["function"].get("arguments", ""))
        for c in messages[last].get("tool_calls") or ()
        if c["id"] not in answered
    ]


def cut_short(messages: Sequence[Message]) -> list[ToolCall]:
    """The calls of the newest turn that a stop cut short, when nothing but their results
    follows them (the agent has been told nothing since)."""
    last = len(messages) - 1
    while last >= 0 and messages[last]["role"] == "tool":
        last -= 1
    if last < 0 or messages[last]["role"] != "assistant" or last == len(messages) - 1:
        return []
    interrupted = {
        m.get("tool_call_id")
        for m in messages[last + 1 :]
        if str(m.get("content") or "").startswith(INTERRUPTED_PREFIX)
    }
    return [
        ToolCall(c["id"], c["function"]["name"], c["function"].get("arguments", ""))
        for c in messages[last].get("tool_calls") or ()
        if c["id"] in interrupted
    ]


def carryover(
    records: Sequence[Record], turns: int, starts: list[int] | None = None
) -> list[Record]:
    """The last `turns` complete turns, minus the harness's notes: they spoke to the old
    session, and an instruction in one would read as if it still applied. Each message
    keeps its measured size. `starts`: the turns' (turn_starts), if known."""
    if turns <= 0:
        return []
    if starts is None:
        starts = turn_starts([record.message for record in records])
    if not starts:
        return []
    kept = records[starts[-turns] if len(starts) >= turns else starts[0] :]
    return [record for record in kept if record.note is None]


def oldest_turn(
    starts: list[int],
    keep: int = 1,
    held: Callable[[int, int], bool] | None = None,
    strict: bool = False,
) -> tuple[int, int] | None:
    """The positions [start, end) of the oldest complete turn that may go (`starts`: the
    assistant messages'), never the preamble before it nor the newest `keep` turns, nor one
    that `held(start, end)` says holds what must stay while another may go (`strict`: even
    when none other may); None when there is none."""
    if len(starts) <= max(keep, 1):
        return None
    for start, end in zip(starts, starts[1 : len(starts) - max(keep, 1) + 1]):
        if held is None or not held(start, end):
            return start, end
    return None if strict else (starts[0], starts[1])


# --- the owner ------------------------------------------------------------------------------


def never_worth_masking(message: Message) -> str | None:
    return None


class Notes(Sequence["NoteKind | None"]):
    """Each message's note kind, by position (None: not a note of the harness's): a view of
    a conversation's entries as they are (read it before the conversation changes)."""

    def __init__(self, entries: list[Entry]) -> None:
        self._entries = entries

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[NoteKind | None]:
        return (cast("NoteKind | None", e.note) for e in self._entries)

    @overload
    def __getitem__(self, index: int) -> NoteKind | None: ...

    @overload
    def __getitem__(self, index: slice) -> list[NoteKind | None]: ...

    def __getitem__(self, index: int | slice) -> NoteKind | None | list[NoteKind | None]:
        if isinstance(index, slice):
            return list(map(_NOTE, self._entries[index]))
        return cast("NoteKind | None", self._entries[index].note)


_NOTE, _TOKENS = attrgetter("note"), attrgetter("tokens")


class Conversation(Sequence[Message]):
    """The one owner of the messages and of what the harness keeps beside each (its
    measured size, its note kind): other code reads it as a sequence of wire messages and
    asks it to change (append, mask, drop, replace); it keeps in step what must follow every
    change, the running sums (sizes.Tally, by position, whose entries hold the rest).

        conversation.append(message)
        conversation.add_note("continue", text)
        conversation.mask({call_id: placeholder})
        conversation.drop_oldest_turn(keep=1)
    """

    def __init__(
        self,
        messages: Iterable[Message | Record] = (),
        worth_masking: WorthMasking = never_worth_masking,
    ) -> None:
        self._worth = worth_masking
        self._messages: list[Message] = []
        self.tally = Tally()
        # Changes other than at the end (replaced, dropped, begun anew), and the bytes of
        # wire form added at the end, counted: while the first stays, what a state written
        # earlier held is still here, as it was (store/state_file.py's may_wait).
        self.edits = 0
        self.appended = 0
        for item in messages:
            if isinstance(item, Record):
                self.append(*item)
            else:
                self.append(item)

    # -- reading --

    def __len__(self) -> int:
        return len(self._messages)

    @overload
    def __getitem__(self, index: int) -> Message: ...

    @overload
    def __getitem__(self, index: slice) -> list[Message]: ...

    def __getitem__(self, index: int | slice) -> Message | list[Message]:
        return self._messages[index]

    def __iter__(self) -> Iterator[Message]:
        return iter(self._messages)

    def __eq__(self, other: object) -> bool:
        """Equal to a conversation of the same records, or to a list of the same messages
        (a Record in the list compares what it says: the note, a measured size if any)."""
        if isinstance(other, Conversation):
            return self.records == other.records
        if not isinstance(other, list) or len(other) != len(self._messages):
            return False
        return all(
            entry.message == item
            if not isinstance(item, Record)
            else (
                entry.message == item.message
                and entry.note == item.note
                and (item.tokens is None or entry.tokens == item.tokens)
            )
            for entry, item in zip(self.tally.entries, other)
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Conversation({self._messages!r})"

    @property
    def messages(self) -> list[Message]:
        """The list held (not a copy: read it, never change it), as the state saves it."""
        return self._messages

    @property
    def notes(self) -> Notes:
        """Each message's note kind (None: not a note of the harness's), by position."""
        return Notes(self.tally.entries)

    @property
    def tokens(self) -> list[int | None]:
        """Each message's measured size (None: never counted), by position: a copy."""
        return list(map(_TOKENS, self.tally.entries))

    @property
    def records(self) -> list[Record]:
        """Each message with what is kept beside it, by position: a copy."""
        return [
            Record(e.message, cast("NoteKind | None", e.note), e.tokens) for e in self.tally.entries
        ]

    def measured_at(self, index: int) -> int | None:
        """The measured size of the message at `index`; None when it was never counted."""
        return self.tally.entries[index].tokens

    # -- changing --

    def append(
        self, message: Message, note: NoteKind | None = None, tokens: int | None = None
    ) -> None:
        """Add a message at the end (`note`: the kind, for one the harness wrote; `tokens`:
        its size, when measured before)."""
        entry = make_entry(message, self._worth, tokens, note)
        self._messages.append(message)
        self.tally.add(entry)
        self.appended += len(entry.wire)

    def add_note(self, kind: NoteKind, text: str) -> None:
        """Add a note of the harness's (see `note`)."""
        self.append(*note(kind, text))

    def add_result(self, tool_call_id: str, content: str) -> None:
        """Add the result of a tool call."""
        self.append({"role": "tool", "tool_call_id": tool_call_id, "content": content})

    def mask(self, placeholders: dict[str, str]) -> None:
        """Replace the content of the named tool results (by tool-call id) with these
        placeholders; nothing else changes. The tally knows where the results worth masking
        are; only for another is every message looked at."""
        at = self.tally.positions(placeholders)
        if len(at) < len(placeholders):
            at = [
                i
                for i, m in enumerate(self._messages)
                if m["role"] == "tool" and m.get("tool_call_id") in placeholders
            ]
        for index in at:
            message = self._messages[index]
            self.replace_at(index, {**message, "content": placeholders[message["tool_call_id"]]})

    def cut_calls(self, paths: dict[str, str]) -> None:
        """Cut the arguments of the named calls (by tool-call id, each with the path its
        result names: with_arguments_cut); their results are no longer worth masking."""
        for index in self.tally.positions(paths):
            call_id = self._messages[index]["tool_call_id"]
            turn = self.tally.turn_of(index)
            cut = with_arguments_cut(self._messages[turn], call_id, paths[call_id])
            self.replace_at(turn, cut)
            self.tally.settle(index)

    def replace_at(self, index: int, message: Message) -> None:
        """Put `message` in the place of the one at `index` (the system prompt as it is
        now, a placeholder): its measured size is unknown again, and it is no note."""
        self._messages[index] = message
        self.tally.replace(index, message, self._worth)
        self.edits += 1

    def replace_system(self, message: Message) -> None:
        """The system prompt as it is now."""
        self.replace_at(0, message)

    def drop_oldest_turn(
        self, keep: int = 1, spared: Container[str] = (), strict: bool = False
    ) -> bool:
        """Drop the oldest complete turn (see `oldest_turn`), one without a result named in
        `spared` (tool-call ids) if there is one (`strict`: only such a one); False if none
        may go."""

        def held(start: int, end: int) -> bool:
            return any(m.get("tool_call_id") in spared for m in self._messages[start:end])

        turn = oldest_turn(self.tally.starts, keep, held if spared else None, strict)
        if turn is None:
            return False
        self.drop(*turn)
        return True

    def drop(self, start: int, end: int | None = None) -> None:
        """Drop the messages at positions [start, end) (to the end by default)."""
        end = len(self) if end is None else end
        if end == len(self):
            self.tally.cut(start)
        else:
            entries = self.tally.entries
            self.tally.rebuild(entries[:start] + entries[end:], self._worth)
        del self._messages[start:end]
        self.edits += 1

    def adopt(self, other: Conversation) -> None:
        """Begin anew with the messages `other` holds (a fresh start fitted apart), and its
        running sums with what they keep beside each (measured sizes, notes): nothing is
        sized again."""
        self._messages, self.tally = list(other._messages), other.tally
        self.edits += 1

    def measure(self, index: int, tokens: int) -> None:
        """Keep what the server (or its tokenizer) counted for the message at `index`."""
        self.tally.measure(index, tokens)
