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
what the server has already counted whole unless the server now cuts below that (it was
reloaded smaller), it rises again when later counts show more room, and a ceiling guessed
from a single refusal lasts only until the next session.

Every ceiling is a belief with an expiry, whatever it came from (truncation, a refusal naming
the window or not, the server's own word): a *probe*, a count-only request sized just under
the window it tests (PROBE_SHARE of it), re-tests it when it is inferred, at session starts
(less often each time it is confirmed) and, when the server says nothing of its window, the
claim itself at the run's first reply. A truncating server counts a probe at most at its
window, a refusing one refuses it: so a probe counted about whole proves the window, one
counted short shows where the server cuts (after_probe).

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

EVIDENCE = ("truncation", "refused", "named")  # ceilings the server's own word does not lift
# A probe is sized this share of the window it tests: what it holds is partly estimated.
PROBE_SHARE = 0.9
# A probe counted at least this share of what the ledger expects of it was counted whole.
PROBE_WHOLE = 0.85
# A probe cut within this share of the ceiling it re-tests (either way) confirms it.
PROBE_AGAIN_WITHIN = 0.1
MAX_QUIET_SESSIONS = 7  # at most this many session starts between re-tests of a ceiling

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
    tested: bool = False  # a probe has tested the belief since the run (re)started
    confirmations: int = 0  # probes in a row that found the ceiling where it is
    quiet: int = 0  # session starts to let pass before the ceiling is re-tested
    filler_rate: float = 0.0  # the server's tokens per word of probe filler (0: not measured,
    # -1: its counts cannot size a probe)

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
    verdict = (
        classify(count, window.accepted, window.uncached_seen)
        if guard
        else ("unknown" if count.reported is None else "whole")
    )
    if verdict == "uncached":
        return verdict, replace(window, uncached_seen=True)
    if verdict == "whole":
        assert count.reported is not None
        return verdict, accept(window, count.reported)
    if verdict == "suspect" and count.suspects + 1 >= CONFIRMATIONS:
        assert count.reported is not None
        if uncut(count, max(window.told, window.accepted)):
            return "nonsense", replace(window, distrusted=True)
        # Where the counts stall: a window counted whole before may be gone (a reload).
        cut_at = min(max(count.reported, count.largest_suspect), window.claimed)
        return "truncated", replace(
            window, ceiling=cut_at, ceiling_kind="truncation", accepted=min(window.accepted, cut_at)
        )
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
    stalled = (
        count.added >= MIN_JUDGED_GROWTH
        and reported - count.previous < STALL_FRACTION * count.added
    )
    if not (fell or stalled):
        return "whole"
    looks_uncached = (
        count.cached is None and reported <= UNCACHED_MULTIPLE * count.added + FALL_TOLERANCE_TOKENS
    )
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
    return replace(window, ceiling=shrunk, ceiling_kind="refused", refusals=window.refusals + 1)


def at_session_start(window: Window) -> Window:
    """A ceiling guessed from one refusal is given up: it may have been a stray error. One
    session start less to wait before the ceiling is re-tested."""
    window = replace(window, quiet=max(window.quiet - 1, 0))
    if window.ceiling_kind == "refused" and window.refusals < STICKY_REFUSALS:
        return replace(window, ceiling=0, ceiling_kind="")
    return window


def with_allocated(
    window: Window, allocated: int | None, told_by: str = "allocated by Ollama (/api/ps)"
) -> Window:
    """What the server says its window is (Ollama's allocation in `/api/ps`, llama.cpp's
    `n_ctx`, vLLM's `max_model_len`): the belief is min(claim, what it says) at once. A
    ceiling from evidence (truncation, a refusal, named or not) below what it says stays
    until a probe re-tests it (needs_retest, due at once when the word is news): a server
    may count in other units than it allocates in, and a refusal within that window means
    the prompt was bigger than the ledger thought."""
    if not allocated:
        return window
    said_again = allocated == window.told
    window = replace(window, told=allocated, told_by=told_by)
    if window.ceiling_kind in EVIDENCE and window.ceiling <= min(allocated, window.claimed):
        return window if said_again else replace(window, quiet=0)
    if allocated >= window.claimed:
        return replace(window, ceiling=0, ceiling_kind="", told_by="")
    return replace(window, ceiling=allocated, ceiling_kind="allocated", told_by=told_by)


@dataclass(frozen=True)
class Probe:
    """What the server did with a probe: the ledger expected it to count `expected` tokens;
    it counted `reported` (None: it did not say), or refused it (naming its window or not)."""

    expected: int
    reported: int | None = None
    refused: bool = False
    named: int | None = None

    @property
    def held(self) -> bool:
        """Counted about whole: the window holds it."""
        return (
            not self.refused
            and self.reported is not None
            and self.reported >= PROBE_WHOLE * self.expected
        )


def hypothesis(window: Window) -> int:
    """The window a probe tests: the most the evidence could allow, the claim, or what the
    server says it holds when that is less."""
    return window.told if 0 < window.told < window.claimed else window.claimed


def needs_retest(window: Window) -> int:
    """How big a probe to send now (0: none). A claim nobody vouched for (the server said
    nothing of its window) is tested once; a ceiling below the hypothesis from truncation or a
    refusal (named or not) is re-tested when its quiet time is over: the server may have been
    restarted with a bigger window and says nothing of it. Not for a server whose counts
    are not believed."""
    if window.distrusted:
        return 0
    size = int(PROBE_SHARE * hypothesis(window))
    if not window.tested and not window.told:
        return size
    if window.ceiling_kind in EVIDENCE and window.limit < hypothesis(window) and not window.quiet:
        return size
    return 0


def after_probe(window: Window, probe: Probe) -> Window:
    """The belief after a probe sized under the hypothesis. Counted about whole: the window
    holds it, so the hypothesis is believed and any ceiling goes. Counted short: the server
    cut it, at about its window. Refused: the window is smaller than the probe (exactly the
    size named, if one is). What a probe confirms (a ceiling, or the window held whole) is
    doubted less and less often: `quiet` session starts pass before the next re-test."""
    if probe.refused or (probe.reported is not None and not probe.held):
        if probe.named:
            ceiling, kind = probe.named, "named"
        elif probe.refused:
            ceiling = min(window.limit, max(int(probe.expected * REFUSAL_SHRINK), 1))
            kind = window.ceiling_kind if window.ceiling_kind in EVIDENCE else "refused"
        else:
            assert probe.reported is not None
            ceiling, kind = min(probe.reported, window.claimed), "truncation"
            if 0 < window.told < probe.expected:  # cut by the window the server says it has
                ceiling = max(ceiling, window.told)  # (a cut count is no window)
        # Cut again about where it was (a probe is cut at a message's edge): the same window.
        again = (
            window.ceiling_kind in EVIDENCE
            and abs(ceiling - window.ceiling) <= PROBE_AGAIN_WITHIN * window.ceiling
        )
        if again and kind == "truncation":
            ceiling = max(ceiling, window.ceiling)
        confirmations = window.confirmations + 1 if again else 1
        return replace(
            window,
            ceiling=ceiling,
            ceiling_kind=kind,
            tested=True,
            accepted=min(window.accepted, ceiling),
            confirmations=confirmations,
            quiet=min(2**confirmations - 1, MAX_QUIET_SESSIONS),
            refusals=max(window.refusals, STICKY_REFUSALS)
            if kind == "refused"
            else window.refusals,
        )
    if probe.reported is None:
        return replace(window, tested=True)
    held = hypothesis(window)
    confirmations = 1 if window.ceiling_kind in EVIDENCE else window.confirmations + 1
    window = replace(
        window,
        ceiling=0,
        ceiling_kind="",
        refusals=0,
        tested=True,
        confirmations=confirmations,
        quiet=min(2**confirmations - 1, MAX_QUIET_SESSIONS),
        accepted=max(window.accepted, min(probe.reported, held)),
    )
    if held < window.claimed:
        return replace(window, ceiling=held, ceiling_kind="allocated")
    return window


def reclaimed(window: Window, claimed: int, source: str) -> Window:
    """The belief for a resumed run: the claim as the config says now, and none of the old
    evidence. The server may have been restarted with another window since, so the belief
    is derived again (the server's answers at the session start, then its counts)."""
    del window
    return Window(claimed, source)


def with_filler_rate(window: Window, rate: float) -> Window:
    """The server's tokens per word of probe filler, as measured."""
    return replace(window, filler_rate=rate)


def named_window(message: str) -> int | None:
    """The window an overflow message names ("maximum context length is 2048 tokens")."""
    match = _NAMED_WINDOW.search(message)
    return int(match.group(1)) if match else None
