"""The guards that keep an unattended run from spinning: idle turns, stuck loops, and
sessions that end without progress.

Idle: a reply without a tool call gets the continue message, after a pause that grows with
each such turn in a row (up to `agent.idle_pause_max_secs`); after `agent.max_idle_turns` of
them the run pauses (stop reason `idle`). A reply with new text (an agent writing a story)
is not idle: only empty replies and ones that repeat a recent reply count.

Stuck loops (after OpenHands' stuck detector): each turn is a `Step`; `find_loop` looks at
the newest steps for

    repeat  the same call, the same arguments, the same failing result N times in a row
    cycle   two different steps taking turns: A B A B A B (N pairs)
    echo    the same reply (text, calls and results) N times in a row: nothing new comes

`StuckGuard` tells the agent the first time (a note naming the loop); if the loop goes on,
the run pauses with reason `stuck`, resumable.

Sessions without progress: `barren_cause` says why sessions in a row ended without one
successful tool call, so the brake names the real cause (not always the window).

Work done again: the run's digest (handoff.py) knows every write and command that succeeded
in an earlier session; `redoing` tells the agent once when a session repeats them
(`agent.redo_notice_repeats`), and pauses the run (reason `redoing`) when a session is
mostly repeats (`agent.redo_pause_repeats`): a model that lost its notes can redo finished
work for hours, and nothing else would notice.

    guard = StuckGuard(lambda: config.agent)   # stuck_repeats, stuck_cycles as they are now
    match guard.observe(step_of(reply, outcomes)):
        case Alarm(loop, pause=False): ...  # tell the agent
        case Alarm(loop, pause=True): ...   # pause the run
"""

from __future__ import annotations

import hashlib
import json
from collections import deque
from dataclasses import dataclass
from typing import Callable, Literal, Sequence

from ouroboros.config import AgentConfig
from ouroboros.protocols import ToolCall, ToolResult

# The pause before the continue message, after the 2nd idle turn in a row (the 1st gets
# none); it doubles with each more, up to `agent.idle_pause_max_secs`.
IDLE_FIRST_PAUSE_SECS = 2.0
IDLE_MAX_PAUSE_SECS = 60.0
# How many recent replies a reply is compared with to tell new text from repeated text.
RECENT_REPLIES = 6
SHOWN_CHARS = 120  # of a call or a result, in a note

LoopKind = Literal["repeat", "cycle", "echo"]


def idle_pause(idle_turns: int, max_secs: float = IDLE_MAX_PAUSE_SECS) -> float:
    """Seconds to wait before the continue message after the `idle_turns`-th idle turn in a
    row: 0, 2, 4, 8, ... at most `max_secs` (0: never wait)."""
    if idle_turns <= 1 or max_secs <= 0:
        return 0.0
    return min(IDLE_FIRST_PAUSE_SECS * 2.0 ** min(idle_turns - 2, 30), max_secs)


# --- steps ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One turn as the stuck-loop guard sees it: the reply's text, its calls (name and
    arguments, normalised) and a digest of each result; bounded in size whatever the turn."""

    text: str
    calls: tuple[str, ...] = ()
    results: tuple[str, ...] = ()
    failed: tuple[bool, ...] = ()
    first_failure: str = ""  # the first line of the first failing result

    @property
    def action(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The calls and what they gave: the part of a step a loop repeats."""
        return self.calls, self.results

    @property
    def all_failed(self) -> bool:
        return bool(self.failed) and all(self.failed)


def call_signature(call: ToolCall) -> str:
    """`name(arguments)`, the arguments as sorted JSON, so key order and spaces do not
    make two equal calls differ."""
    try:
        arguments = json.dumps(json.loads(call.arguments or "{}"), sort_keys=True)
    except ValueError:
        arguments = call.arguments
    return f"{call.name}({arguments})"


def digest(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8", "replace"), digest_size=12).hexdigest()


def normalised(text: str) -> str:
    return " ".join(text.split())


def step_of(text: str, outcomes: Sequence[tuple[ToolCall, ToolResult]]) -> Step:
    """The step a reply's `text` and its calls' outcomes make."""
    failures = [result for _, result in outcomes if not result.ok]
    first = next(
        (
            line.strip()
            for line in (failures[0].content.splitlines() if failures else ())
            if line.strip()
        ),
        "",
    )
    return Step(
        text=digest(normalised(text)) if text.strip() else "",
        calls=tuple(call_signature(call) for call, _ in outcomes),
        results=tuple(digest(result.content) for _, result in outcomes),
        failed=tuple(not result.ok for _, result in outcomes),
        first_failure=first[:SHOWN_CHARS],
    )


# --- loops ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Loop:
    """A loop found in the newest steps: its kind, how many steps it spans, and what it
    repeats, in words."""

    kind: LoopKind
    steps: int
    detail: str


def shown(calls: tuple[str, ...]) -> str:
    text = ", ".join(calls) or "no tool call"
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "..."


def repeated_failure(steps: Sequence[Step], repeats: int) -> Loop | None:
    """The same calls failing with the same results in the newest `repeats` steps."""
    if repeats < 2 or len(steps) < repeats:
        return None
    newest = steps[-repeats:]
    last = newest[-1]
    if not last.calls or not last.all_failed or any(s.action != last.action for s in newest):
        return None
    why = f': "{last.first_failure}"' if last.first_failure else ""
    return Loop(
        "repeat", repeats, f"{shown(last.calls)} failed the same way {repeats} times in a row{why}"
    )


def alternating(steps: Sequence[Step], cycles: int) -> Loop | None:
    """Two different actions taking turns for `cycles` pairs in the newest steps."""
    span = 2 * cycles
    if cycles < 2 or len(steps) < span:
        return None
    newest = steps[-span:]
    first, second = newest[0].action, newest[1].action
    if first == second or not (newest[0].calls or newest[1].calls):
        return None
    if any(step.action != (first, second)[i % 2] for i, step in enumerate(newest)):
        return None
    return Loop(
        "cycle",
        span,
        f"{shown(first[0])} then {shown(second[0])}, over and over "
        f"({cycles} times each, with the same results)",
    )


def echoed(steps: Sequence[Step], repeats: int) -> Loop | None:
    """The same reply, calls and results in the newest `repeats` steps: nothing new."""
    if repeats < 2 or len(steps) < repeats:
        return None
    newest = steps[-repeats:]
    if any(step != newest[-1] for step in newest):
        return None
    what = "the same reply" + (f" with {shown(newest[-1].calls)}" if newest[-1].calls else "")
    return Loop("echo", repeats, f"{what}, {repeats} times in a row, with nothing new coming back")


def find_loop(steps: Sequence[Step], *, repeats: int, cycles: int) -> Loop | None:
    """The loop the newest steps are in, if any (0 turns a check off)."""
    steps = list(steps)
    return repeated_failure(steps, repeats) or echoed(steps, repeats) or alternating(steps, cycles)


def loop_note(loop: Loop) -> str:
    """What the agent is told the first time: the loop, and that the run pauses if it goes
    on."""
    return (
        f"[Loop detected: {loop.detail}. Repeating it will not change the outcome. Stop "
        "and try something different: check your assumptions, read your notes, or take "
        "another approach. If this loop goes on, the run will be paused.]"
    )


@dataclass(frozen=True)
class Alarm:
    """What the guard asks for: a note to the agent, or (`pause`) the run paused."""

    loop: Loop
    pause: bool


class StuckGuard:
    """Watches the steps of a run (across its sessions) for loops: the first one found gets
    a note; found again before the agent makes progress, the run pauses."""

    def __init__(self, limits: Callable[[], AgentConfig] = AgentConfig) -> None:
        self.limits = limits  # read at every step: a reload may change the thresholds
        self.steps: deque[Step] = deque(maxlen=self.size())
        self.warned: Loop | None = None
        self.since = 0  # steps since the last alarm: a loop must be seen whole again

    def size(self) -> int:
        agent = self.limits()
        return max(agent.stuck_repeats, 2 * agent.stuck_cycles, RECENT_REPLIES)

    def new_text(self, text: str) -> bool:
        """Whether a reply's text says something: not empty, not one of the recent replies."""
        recent = list(self.steps)[-RECENT_REPLIES:]
        return bool(text.strip()) and digest(normalised(text)) not in {s.text for s in recent}

    def observe(self, step: Step) -> Alarm | None:
        """Take the turn's step; the alarm it raises, if any."""
        if self.warned is not None and self.progress(step):
            self.warned = None
        if self.steps.maxlen != self.size():
            self.steps = deque(self.steps, maxlen=self.size())
        self.steps.append(step)
        self.since += 1
        agent = self.limits()
        loop = find_loop(self.steps, repeats=agent.stuck_repeats, cycles=agent.stuck_cycles)
        if loop is None or loop.steps > self.since:
            return None
        pause = self.warned is not None
        self.warned, self.since = loop, 0
        return Alarm(loop, pause)

    def progress(self, step: Step) -> bool:
        """A step that got a call through with a result not seen in the recent steps, or a
        reply without calls that says something new (an agent writing)."""
        if not step.calls:
            return bool(step.text) and step.text not in {old.text for old in self.steps}
        seen = {result for old in self.steps for result in old.results}
        return any(
            not failed and result not in seen for result, failed in zip(step.results, step.failed)
        )


# --- sessions without progress --------------------------------------------------------------


def barren_cause(turns: int, calls: int, failed: int, top_failure: str) -> str | None:
    """Why a session ended without one successful tool call, when the window is not to
    blame (None when it is: a session of a turn or two that still filled the window)."""
    if calls and failed >= calls:
        what = f" (most often {top_failure})" if top_failure else ""
        return f"every tool call failed: {failed} of {calls}{what}"
    if not calls and turns > 2:
        return f"the agent made no tool call in {turns} turns"
    return None


# --- work done again ------------------------------------------------------------------------

Redo = Literal["note", "pause"]


def redoing(
    repeats: int,
    side_effects: int,
    told: bool,
    *,
    notice_after: int,
    pause_after: int,
    before: int = 0,
) -> Redo | None:
    """What to do about a session whose `repeats` of its `side_effects` (writes and commands)
    repeat ones that already succeeded in an earlier session: tell the agent once, at
    `notice_after`; pause the run at `pause_after` when they are most of the session's (0
    turns each off). `before`: the repeats of the sessions in a row before this one that
    were mostly repeats too, counted toward both: a window that holds one step a session
    restarts into the same step again and again, each session too short to count alone."""
    if pause_after and repeats + before >= pause_after and 2 * repeats > side_effects:
        return "pause"
    if notice_after and repeats and repeats + before >= notice_after and not told:
        return "note"
    return None


def redo_detail(
    repeats: int, side_effects: int, examples: Sequence[tuple[str, int]], before: int = 0
) -> str:
    """The figures, for the event and the note: how many, and the newest examples."""
    shown = "; ".join(f"`{what}` (already done in session {at})" for what, at in examples)
    earlier = f" (and {before} in the sessions just before it)" if before else ""
    return (
        f"{repeats} of this session's {side_effects} writes and commands{earlier} repeat ones "
        f"that succeeded in an earlier session: {shown}"
    )


def redo_note(detail: str) -> str:
    """What the agent is told the first time."""
    return (
        f"[Work done again: {detail}. Your notes may be behind your work: check the "
        "workspace (what those calls changed) before you do a step again. If this goes "
        "on, the run will be paused.]"
    )
