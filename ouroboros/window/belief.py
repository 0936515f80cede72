"""How big the server's window really is, judged from evidence.

The configured or discovered limit is a claim. A server may hold a smaller window and cut the
front of longer prompts without a word (Ollama), or refuse them (a 400, or llama.cpp's empty
200 stream). An estimate can be off by 2x either way, so a count below the estimate proves
nothing. What counts can prove:

- the conversation only grew since the last count, yet the new count fell below it or barely
  moved while a good deal was added (a *stall*), and the next count stalls again: the server
  is cutting prompts near the size it reports. One stall alone is only a suspicion (a template
  that strips earlier reasoning makes a count fall once);
- a count that fell to about the size of just the newest messages is Ollama's "uncached
  tokens only" bug (ollama#16414), not truncation;
- a refusal that names the window ("maximum context length is N tokens") gives it exactly;
- counts that keep falling while the prompt grows, far inside the window the server says it
  holds (or a prompt it has already counted whole), are nonsense: nothing was cut, so from
  then on the server's counts are not believed.

The belief is a frozen value; every function here returns a new one. It never goes below
what the server has already counted whole, it rises again when later counts show more room,
and a ceiling guessed from a single refusal lasts only until the next session.

    window = Window(8192, "model.context_limit in config", accepted=2100)
    verdict, window = judge(window, Count(reported=2038, estimate=2900, previous=2100,
                                          added=800))   # "suspect": once proves nothing
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Literal

Verdict = Literal["unknown", "whole", "uncached", "suspect", "truncated", "nonsense"]
CeilingKind = Literal["", "truncation", "refused", "named", "allocated"]

# A count may dip this much below the previous one without meaning anything (BPE merges at a
# message boundary, templates that render the last turn differently).
FALL_TOLERANCE = 0.02
FALL_TOLERANCE_TOKENS = 8
# Growth is judged only when at least this much was added, and a count "stalls" when it grew
# by less than this fraction of the estimated growth: below anything a 2x-off estimate allows.
MIN_JUDGED_GROWTH = 48
STALL_FRACTION = 0.25
# Suspect counts in a row, since the last whole one, that prove truncation.
CONFIRMATIONS = 2
# A count this far below the estimate of the messages of a prompt it cannot be compared with
# is suspect.
UNRELATED_SHORTFALL = 3.0
# Ollama's uncached-only bug: a count that fell to at most this multiple of what was added.
UNCACHED_MULTIPLE = 2.5
# A count this many times above both the claimed window and the ledger's figure is nonsense.
NONSENSE_MULTIPLE = 8
# A prompt whose ledger figure, times this, is within a window the server is known to hold
# was not cut (estimates can be 2x off either way).
UNCUT_MULTIPLE = 2
# Once uncached-only counts were seen, a count with nothing to compare it with is believed
# when it reaches this share of the ledger's figure (mostly counted sizes by then).
UNCACHED_BELIEVED = 0.9
# A refused prompt without a named window: believe the window this much smaller than it.
REFUSAL_SHRINK = 0.85
# Refusals without a named window that make their ceiling outlive the session.
STICKY_REFUSALS = 2

_NAMED_WINDOW = re.compile(
    r"(?:maximum context length|context length|context window|context size|n_ctx)"
    r"(?: of| is|:|=)?\s*(?:is\s+)?(\d{3,9})\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Count:
    """What a request's usage says, beside what the harness knows of the request."""

    reported: int | None  # the server's prompt_tokens (None: unknown)
    estimate: int  # the harness's ledger figure for the request's messages
    previous: int | None = None  # the last whole count this request only extends, if any
    added: int = 0  # the harness's estimate of what was added since that count
    suspects: int = 0  # counts since that one that looked cut
    largest_suspect: int = 0
    cached: int | None = None  # the part the server says it served from its cache, if it says


@dataclass(frozen=True)
class Window:
    """The window the harness works within, and the evidence behind it."""

    claimed: int
    claimed_source: str
    accepted: int = 0  # most tokens the server has counted whole: its window is at least this
    ceiling: int = 0  # 0: none; else the evidence puts the window at about this
    ceiling_kind: CeilingKind = ""
    refusals: int = 0  # refusals that named no window, this run
    uncached_seen: bool = False  # the server has reported only the uncached part of a prompt
    told_by: str = ""  # for an "allocated" ceiling: which of the server's answers said it
    told: int = 0  # the window the server last said it holds (0: it has not said)
    distrusted: bool = False  # its counts kept falling inside a window it is known to hold

    @property
    def limit(self) -> int:
        if not self.ceiling:
            return self.claimed
        if self.ceiling_kind in ("named", "allocated"):
            return self.ceiling
        return max(min(self.claimed, self.ceiling), min(self.accepted, self.claimed), 1)

    @property
    def source(self) -> str:
        """Where `limit` came from, as a phrase for people."""
        claimed = self.claimed_source
        if not self.ceiling or self.limit == self.claimed:
            return claimed
        return {
            "truncation": "detected truncation: the server cut longer prompts to about this "
                          f"size (claimed {self.claimed}, {claimed})",
            "refused": f"the server refused a longer prompt (claimed {self.claimed}, {claimed})",
            "named": "the server's error message named this window",
            "allocated": self.told_by or "allocated by Ollama (/api/ps)",
        }.get(self.ceiling_kind, claimed)


def judge(window: Window, count: Count, *, guard: bool = True) -> tuple[Verdict, Window]:
    """What one count proves, and the belief after it."""
    if window.distrusted or nonsense(count, window.claimed):
        return "nonsense", window
    verdict = classify(count, window.accepted, window.uncached_seen) if guard else (
        "unknown" if count.reported is None else "whole")
    if verdict == "uncached":
        return verdict, replace(window, uncached_seen=True)
    if verdict == "whole":
        assert count.reported is not None
        return verdict, accept(window, count.reported)
    if verdict == "suspect" and count.suspects + 1 >= CONFIRMATIONS:
        assert count.reported is not None
        if uncut(count, max(window.told, window.accepted)):
            return "nonsense", replace(window, distrusted=True)
        cut_at = max(window.accepted, count.reported, count.largest_suspect)
        return "truncated", replace(window, ceiling=min(cut_at, window.claimed),
                                    ceiling_kind="truncation")
    return verdict, window


def nonsense(count: Count, claimed: int) -> bool:
    """A count no prompt can have: negative, or many times both the window claimed and the
    ledger's figure."""
    reported = count.reported
    if reported is None:
        return False
    return reported < 0 or reported > NONSENSE_MULTIPLE * max(claimed, count.estimate, 1)


def uncut(count: Count, held: int) -> bool:
    """The prompt was well inside a window the server is known to hold (one it says it
    holds, or a prompt it counted whole): even an estimate 2x low leaves it there, so no
    truncation made its count fall or stall."""
    return bool(held) and UNCUT_MULTIPLE * count.estimate <= held


def classify(count: Count, accepted: int, uncached_seen: bool = False) -> Verdict:
    """unknown, whole, uncached or suspect: what this count alone says.

    Ollama's uncached-only count needs a cache to leave out: the prompt must extend one the
    server counted before, and a server that reports its cached tokens counts whole prompts.
    Once a server has been seen counting only the uncached part, a count is weighed, never
    dismissed outright: one without an earlier count to compare with is believed when it
    comes near the ledger's figure or above it."""
    reported = count.reported
    if reported is None:
        return "unknown"
    if count.previous is None:
        if uncached_seen and count.cached is None:
            return "whole" if reported >= UNCACHED_BELIEVED * count.estimate else "uncached"
        return "whole" if reported * UNRELATED_SHORTFALL >= count.estimate else "suspect"
    fell = reported < count.previous * (1 - FALL_TOLERANCE) - FALL_TOLERANCE_TOKENS
    stalled = (count.added >= MIN_JUDGED_GROWTH
               and reported - count.previous < STALL_FRACTION * count.added)
    if not (fell or stalled):
        return "whole"
    looks_uncached = (count.cached is None
                      and reported <= UNCACHED_MULTIPLE * count.added + FALL_TOLERANCE_TOKENS)
    if looks_uncached and (uncached_seen or (fell and reported < accepted / 2)):
        return "uncached"
    return "suspect"


def accept(window: Window, reported: int) -> Window:
    """A whole count: the window holds at least this much. A ceiling the count passed was
    wrong (or the server grew), except a window the server itself named."""
    window = replace(window, accepted=max(window.accepted, reported))
    if window.ceiling and reported > window.ceiling and window.ceiling_kind != "named":
        window = replace(window, ceiling=reported)
    return window


def after_refusal(window: Window, rejected: int, named: int | None) -> Window:
    """The server refused a prompt of about `rejected` tokens as too long."""
    if named:
        return replace(window, ceiling=named, ceiling_kind="named")
    shrunk = max(int(min(rejected, window.limit) * REFUSAL_SHRINK), window.accepted, 1)
    return replace(window, ceiling=shrunk, ceiling_kind="refused",
                   refusals=window.refusals + 1)


def at_session_start(window: Window) -> Window:
    """A ceiling guessed from one refusal is given up: it may have been a stray error."""
    if window.ceiling_kind == "refused" and window.refusals < STICKY_REFUSALS:
        return replace(window, ceiling=0, ceiling_kind="")
    return window


def with_allocated(window: Window, allocated: int | None,
                   told_by: str = "allocated by Ollama (/api/ps)") -> Window:
    """What the server says its window is (Ollama's allocation in `/api/ps`, llama.cpp's
    `n_ctx`, vLLM's `max_model_len`) outranks inferred ceilings, both ways: the belief is
    min(claim, what it says) at once, and a ceiling inferred before is given up when the
    server says it has more room (it was restarted bigger). A ceiling from a refusal below
    what the server says stays: the prompt it refused was bigger than the ledger thought."""
    if not allocated:
        return window
    window = replace(window, told=allocated)
    if window.ceiling_kind == "refused" and window.ceiling <= min(allocated, window.claimed):
        return window  # a refusal within that window: the ledger fell short, not the window
    if allocated >= window.claimed:
        return replace(window, ceiling=0, ceiling_kind="", told_by="")
    return replace(window, ceiling=allocated, ceiling_kind="allocated", told_by=told_by)


def needs_retest(window: Window) -> int:
    """The size of prompt that re-tests an inferred ceiling: the claim (0: nothing to
    re-test). A ceiling from truncation or refusals is a hypothesis: the server may have been
    restarted with a bigger window, and says nothing of it."""
    if window.ceiling_kind not in ("truncation", "refused") or window.limit >= window.claimed:
        return 0
    return window.claimed


def after_retest(window: Window, reported: int | None) -> Window:
    """The server counted a prompt sent above the ceiling: a count above the ceiling is a
    window at least that big (a truncating server's count stays under its window)."""
    if reported is None or reported <= window.limit * (1 + FALL_TOLERANCE):
        return window
    if reported >= window.claimed * (1 - FALL_TOLERANCE):
        return replace(window, ceiling=0, ceiling_kind="", refusals=0,
                       accepted=max(window.accepted, min(reported, window.claimed)))
    return replace(window, ceiling=reported, accepted=max(window.accepted, reported),
                   refusals=0)


def reclaimed(window: Window, claimed: int, source: str) -> Window:
    """The belief for a resumed run: the claim as the config says now, and none of the old
    evidence. The server may have been restarted with another window since, so the belief
    is derived again (the server's answers at the session start, then its counts)."""
    del window
    return Window(claimed, source)


def named_window(message: str) -> int | None:
    """The window an overflow message names ("maximum context length is 2048 tokens")."""
    match = _NAMED_WINDOW.search(message)
    return int(match.group(1)) if match else None
