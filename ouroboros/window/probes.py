"""When a count gives cause to doubt the window believed, when a probe tests it, and what
the probe holds: pure decisions. The window keeps a session's cadence and asks them
(ContextManager.doubts, probe_due); loop/evidence.py does the asking of the server.

A probe is a count-only request: the system prompt and filler in pieces, sized just under
the window tested (belief.hypothesis), asked for one token. Filler only: a server that cuts
whole messages from the front cuts pieces of filler, so a cut probe counts about the window,
not what was left after a long tool result went.

    signs = signs_of(Count(reported, estimate), verdict, window, measured, budget)
    size = probe_size(window, doubted(signs, window, short_doubted), force=False, since_last=n)
    messages, expected = probe_messages(system, have, size, rate)
    probe = counted_probe(expected, counted, whole)           # the server's count of it
"""

from __future__ import annotations

from dataclasses import dataclass

from ouroboros.protocols import Message
from ouroboros.window.belief import (
    EVIDENCE,
    FALL_TOLERANCE,
    FALL_TOLERANCE_TOKENS,
    PROBE_SHARE,
    Count,
    Probe,
    Verdict,
    Window,
    hypothesis,
    needs_retest,
    uncut,
)

# Filler for a probe: a word that takes about one token on most vocabularies, in pieces of
# this many words (a server that cuts the front of long prompts drops whole pieces).
RETEST_FILLER = "ledger "
FILLER_PIECE_WORDS = 100
FILLER_RATE_PIECES = 4  # pieces in the request that measures the server's rate
# The tokens per filler word (with its share of the template) a real vocabulary counts.
MIN_FILLER_RATE, MAX_FILLER_RATE = 0.5, 4.0
# A count short of the ledger's figure for a prompt this big (a share of the budget) is
# doubted even where no earlier count can be compared with (right after masking).
DOUBTED_FILL = 0.5
# Requests of a session between probes that doubt alone asks for.
DOUBT_EVERY = 4
# A count under this share of the ledger's figure is doubted again in the same session: a
# server reloaded smaller that drops whole messages from the front counts about half.
FAR_SHORT = 0.55


@dataclass(frozen=True)
class Signs:
    """What one count says against the window believed. `cut`: it looked cut (suspect or
    truncated) where the window is not known to hold the prompt; `below`: it is under what
    the ledger had already measured of the prompt; `short`: short of the ledger's figure for
    a large prompt (right after masking no earlier count compares with it); `far`: far
    short."""

    cut: bool = False
    below: bool = False
    short: bool = False
    far: bool = False

    def __bool__(self) -> bool:
        return self.cut or self.below or self.short


def signs_of(count: Count, verdict: Verdict, window: Window, measured: int, budget: int) -> Signs:
    """What a count (the server's, and the ledger's estimate) and its verdict say against
    the belief (`measured`: what the ledger had measured of the prompt)."""
    reported, estimated = count.reported, count.estimate
    if reported is None:
        return Signs()
    fell = not uncut(count, max(window.told, window.accepted))
    short = (
        verdict == "whole"
        and estimated >= DOUBTED_FILL * budget
        and reported < estimated * (1 - FALL_TOLERANCE) - FALL_TOLERANCE_TOKENS
    )
    return Signs(
        cut=fell and verdict in ("suspect", "truncated"),
        below=(
            fell
            and verdict in ("whole", "suspect", "truncated")
            and reported < measured * (1 - FALL_TOLERANCE) - FALL_TOLERANCE_TOKENS
        ),
        short=short,
        far=short and reported < FAR_SHORT * estimated,
    )


def doubted(signs: Signs, window: Window, short_doubted: bool) -> bool:
    """Whether the signs are worth a probe: a cut count, or one below the ledger's, always; a
    count a little short once a session (`short_doubted`: it had its probe), one far short
    each time, unless a probe has found where the server cuts, or the server's word and a
    probe lately agreed."""
    return (
        signs.cut
        or signs.below
        or (
            signs.short
            and window.ceiling_kind not in EVIDENCE
            and not (window.told and window.quiet)
            and (signs.far or not short_doubted)
        )
    )


def probe_size(window: Window, doubt: bool, *, force: bool, since_last: int) -> int:
    """The tokens a probe should hold now (0: none): the belief due its re-test
    (belief.needs_retest), or doubted by a count, at most once every DOUBT_EVERY requests
    (`since_last`: requests since the last probe) unless `force` (a ceiling just inferred is
    tested before it can stop the run)."""
    size = needs_retest(window)
    if not size and doubt and not window.distrusted and (force or since_last >= DOUBT_EVERY):
        size = int(PROBE_SHARE * hypothesis(window))
    return size


def probe_messages(system: Message, have: int, size: int, rate: float) -> tuple[list[Message], int]:
    """A probe of about `size` tokens: the system prompt (`have` tokens with the tools, by the
    estimate) and pieces of filler at `rate` tokens a word; and the tokens it is expected
    to count."""
    words = max(int((size - have) / rate), 0)
    pieces = max(round(words / FILLER_PIECE_WORDS), 1)
    piece: Message = {"role": "user", "content": RETEST_FILLER * (words // pieces)}
    expected = have + round(pieces * (words // pieces) * rate)
    return [system, *[piece] * pieces], expected


def counted_probe(expected: int, counted: int | None, whole: int) -> Probe:
    """What a probe's count proves. One below `whole` (what the server had just counted of
    the conversation, whole) is no evidence: a window that held the conversation cuts a
    longer prompt to about its size, not below."""
    if counted is not None and counted < whole * (1 - FALL_TOLERANCE):
        return Probe(expected)
    return Probe(expected, counted)


def filler_rate(counted: int | None) -> float:
    """The tokens a word of filler takes, from the server's count of the rate request
    (rate_messages); -1 when no vocabulary gives that count: its counts cannot size a probe."""
    rate = (counted or 0) / (FILLER_PIECE_WORDS * FILLER_RATE_PIECES)
    return rate if MIN_FILLER_RATE <= rate <= MAX_FILLER_RATE else -1.0


def rate_messages() -> list[Message]:
    """The request that measures the server's tokens per word of filler."""
    return [{"role": "user", "content": RETEST_FILLER * FILLER_PIECE_WORDS}] * FILLER_RATE_PIECES
