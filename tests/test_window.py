"""What a count proves about the server's window: each rule as a table of cases."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ouroboros.window.belief import (
    Count,
    Probe,
    Window,
    after_probe,
    after_refusal,
    at_session_start,
    classify,
    judge,
    named_window,
    needs_retest,
    reclaimed,
    with_allocated,
)

W = Window(8192, "model.context_limit in config")


@pytest.mark.parametrize(
    "count,accepted,verdict",
    [
        # Unknown: no count, whatever else is known.
        (Count(None, 5000, 3000, 1000), 3000, "unknown"),
        # No earlier count to compare with: believed, unless absurdly below the estimate.
        (Count(2000, 5000), 0, "whole"),
        (Count(1000, 5000), 0, "suspect"),
        # Grew about as much as was added (the estimate may be 2x off either way).
        (Count(3500, 4000, 3000, 1000), 3000, "whole"),
        (Count(3300, 4000, 3000, 1000), 3000, "whole"),
        (Count(5000, 4000, 3000, 1000), 3000, "whole"),
        # Barely grew although much was added: a stall.
        (Count(3100, 4000, 3000, 1000), 3000, "suspect"),
        # Little was added: no judgment of growth, only of falls.
        (Count(3000, 3040, 3000, 40), 3000, "whole"),
        (Count(2990, 3040, 3000, 40), 3000, "whole"),  # within the tolerance
        # Fell although the conversation only grew.
        (Count(2500, 4000, 3000, 1000), 3000, "suspect"),
        # Fell to about the size of what was added: Ollama's uncached-only count.
        (Count(1050, 4000, 3000, 1000), 3000, "uncached"),
    ],
)
def test_classify(count, accepted, verdict):
    assert classify(count, accepted) == verdict


@pytest.mark.parametrize(
    "count,verdict",
    [
        (Count(1276, 2541, 902, 1640), "uncached"),  # one file read, no more: rose, but stalled
        (Count(None, 2541, 902, 1640), "unknown"),
        (Count(1276, 2541), "uncached"),  # nothing to compare with, and far below the ledger
        (Count(2300, 2541), "whole"),  # nothing to compare with, but near the ledger: weighed
        # after a mask the cache ends at the masked message, and what follows can be most of the
        # prompt: 83% of the ledger is no whole count (believed, it put a prompt over the window)
        (Count(2100, 2541), "uncached"),
        (Count(700, 2541, cached=900), "suspect"),  # a server that reports its cache counts whole
        (Count(1276, 2541, 902, 1640, cached=900), "suspect"),
        (Count(2500, 2541, 902, 1640), "whole"),
    ],
)
def test_once_a_server_has_counted_only_the_uncached_part(count, verdict):
    assert classify(count, 902, uncached_seen=True) == verdict


def test_one_suspect_count_changes_nothing_two_prove_truncation():
    window = Window(8192, "config", accepted=3000)
    verdict, after = judge(window, Count(3100, 4000, 3000, 1000))
    assert (verdict, after) == ("suspect", window)
    verdict, after = judge(window, Count(3150, 5000, 3000, 2000, suspects=1, largest_suspect=3100))
    assert verdict == "truncated"
    assert after.limit == 3150 and after.ceiling_kind == "truncation"


@pytest.mark.parametrize(
    "told,verdict,limit",
    [
        (0, "truncated", 3150),  # the server said nothing of its window: cut, as above
        (8192, "truncated", 3150),  # a prompt it may hold: cut
        (16384, "nonsense", 8192),  # falls far inside the window it says it holds: not cut
    ],
)
def test_counts_that_keep_falling_inside_the_window_the_server_told_are_nonsense(
    told, verdict, limit
):
    window = Window(8192, "config", accepted=3000, told=told)
    got, after = judge(window, Count(3150, 5000, 3000, 2000, suspects=1, largest_suspect=3100))
    assert (got, after.limit, after.distrusted) == (verdict, limit, verdict == "nonsense")
    if after.distrusted:  # from then on no count is believed, however plausible
        assert judge(after, Count(6000, 6000))[0] == "nonsense"


def test_counts_that_keep_falling_far_below_a_prompt_counted_whole_are_nonsense():
    """A server that says nothing of its window, but counted 3000 tokens whole: a prompt of
    about 1400 is not cut, however its counts fall."""
    window = Window(8192, "config", accepted=3000)
    verdict, after = judge(window, Count(900, 1400, 1000, 100, suspects=1, largest_suspect=950))
    assert (verdict, after.limit, after.distrusted) == ("nonsense", 8192, True)


@pytest.mark.parametrize("guard,verdict", [(True, "suspect"), (False, "whole")])
def test_the_guard_off_believes_every_count(guard, verdict):
    assert judge(W, Count(3100, 4000, 3000, 1000), guard=guard)[0] == verdict


@pytest.mark.parametrize(
    "window,reported,limit",
    [
        (Window(8192, "c"), 3000, 8192),  # a whole count under the claim: nothing to change
        (Window(8192, "c", ceiling=2000, ceiling_kind="truncation"), 2500, 2500),  # more room
        (Window(8192, "c", ceiling=2000, ceiling_kind="refused", refusals=1), 2600, 2600),
        (Window(8192, "c", ceiling=2000, ceiling_kind="named"), 2500, 2000),  # the server said so
    ],
)
def test_whole_counts_raise_inferred_ceilings(window, reported, limit):
    verdict, after = judge(window, Count(reported, reported))
    assert verdict == "whole" and after.limit == limit and after.accepted >= reported


@pytest.mark.parametrize(
    "window,rejected,named,limit",
    [
        (W, 5000, 2048, 2048),  # named in the error message: exact
        (W, 10000, None, 6963),  # 85% of the window it was sent into
        (W, 6000, None, 5100),  # 85% of what was refused
        (Window(8192, "c", accepted=5500), 6000, None, 5500),  # never below what was taken whole
        (Window(8192, "c", accepted=5500), 3000, None, 5500),
    ],
)
def test_after_refusal(window, rejected, named, limit):
    assert after_refusal(window, rejected, named).limit == limit


def test_a_single_refusal_is_forgotten_at_the_next_session_two_are_kept():
    once = after_refusal(W, 6000, None)
    assert at_session_start(once).limit == 8192
    twice = after_refusal(once, 5000, None)
    assert at_session_start(twice).limit == twice.limit < 8192


@pytest.mark.parametrize(
    "allocated,limit,kind",
    [
        (None, 3000, "truncation"),  # not Ollama, or not loaded: evidence stands
        (2048, 2048, "allocated"),  # Ollama says it allocated less: that is the window
        (4096, 3000, "truncation"),  # more: evidence of truncation stands until a probe
        (16384, 3000, "truncation"),
    ],
)
def test_evidence_of_truncation_outranks_what_the_server_says_until_re_tested(
    allocated, limit, kind
):
    window = Window(8192, "c", accepted=2000, ceiling=3000, ceiling_kind="truncation")
    after = with_allocated(window, allocated)
    assert (after.limit, after.ceiling_kind) == (limit, kind)


@pytest.mark.parametrize("claimed", [8192, 32768])
def test_resume_derives_the_window_again(claimed):
    """The server may have been restarted with another window while the run was stopped."""
    window = Window(
        8192, "c", accepted=2000, ceiling=3000, ceiling_kind="truncation", uncached_seen=True
    )
    assert reclaimed(window, claimed, "model.context_limit in config") == Window(
        claimed, "model.context_limit in config"
    )


@pytest.mark.parametrize(
    "message,window",
    [
        ("This model's maximum context length is 2048 tokens. However, you requested 5000", 2048),
        ("requested tokens (5000) exceed context window of 4096", 4096),
        ("the request exceeds the available context size (n_ctx: 8192)", 8192),
        ("the prompt is longer than the context length currently available to the model", None),
        ("internal error", None),
    ],
)
def test_named_window(message, window):
    assert named_window(message) == window


# --- counts that no prompt can have -----------------------------------------------------------


@pytest.mark.parametrize("reported", [-5, -1, 8192 * 9, 10**9])
def test_nonsense_counts_change_nothing(reported):
    window = Window(8192, "c", accepted=3000)
    verdict, after = judge(window, Count(reported, 4000, 3000, 1000))
    assert verdict == "nonsense" and after == window


def test_a_count_above_the_claim_but_within_reason_is_not_nonsense():
    verdict, after = judge(W, Count(9000, 8500))
    assert verdict == "whole" and after.accepted == 9000


# --- what the server says of its window: believed at once, both ways -------------------------


def test_the_servers_window_caps_the_claim_and_says_where_it_came_from():
    after = with_allocated(W, 4096, "n_ctx of the llama.cpp server (/props)")
    assert after.limit == 4096 and after.source == "n_ctx of the llama.cpp server (/props)"


def test_a_server_restarted_bigger_raises_the_belief():
    lowered = with_allocated(W, 4096)
    assert with_allocated(lowered, 8192).limit == 8192
    assert with_allocated(lowered, 6000).limit == 6000


def test_a_refusal_within_the_allocated_window_is_kept():
    """The server refused a prompt below what it holds: the ledger fell short, and an
    allocation as big as the claim must not wipe that out (it would refuse again)."""
    refused = after_refusal(W, 6000, None)
    after = with_allocated(refused, 8192)
    assert (after.limit, after.ceiling_kind) == (refused.limit, "refused")


# --- every ceiling is re-tested by a probe -----------------------------------------------------


CUT = Window(8192, "c", accepted=3000, ceiling=4000, ceiling_kind="truncation")


@pytest.mark.parametrize(
    "window,size",
    [
        (CUT, 7372),  # inferred: tested under the claim
        (Window(8192, "c", ceiling=4096, ceiling_kind="named"), 7372),  # named by a refusal too
        (Window(8192, "c", ceiling=3000, ceiling_kind="refused", refusals=1), 7372),
        (with_allocated(CUT, 6000), 5400),  # under what the server says, when that is less
        (W, 7372),  # a claim nobody vouched for is tested once
        (with_allocated(W, 4096), 0),  # the server said so, and nothing contradicts it
        (with_allocated(W, 8192), 0),
        (Window(8192, "c", tested=True), 0),
        (Window(8192, "c", ceiling=4000, ceiling_kind="truncation", tested=True, quiet=1), 0),
        (Window(8192, "c", tested=True, distrusted=True), 0),  # its counts mean nothing
    ],
)
def test_what_a_probe_tests_and_how_big_it_is(window, size):
    """Sized under the window tested, never at it: what it holds is partly estimated, and
    a probe over a window that grew would be refused again."""
    assert needs_retest(window) == size


@pytest.mark.parametrize(
    "probe,limit,kind",
    [
        (Probe(7372), 4000, "truncation"),  # no count: nothing learned
        (Probe(7372, 4010), 4010, "truncation"),  # still cut at the ceiling
        (Probe(7372, 5200), 5200, "truncation"),  # cut higher up: the window grew that far
        (Probe(7372, 7000), 8192, ""),  # counted about whole: the claim holds
        (Probe(7372, refused=True, named=6000), 6000, "named"),
        (Probe(7372, refused=True), 4000, "truncation"),
    ],
)
def test_a_probe_proves_or_moves_the_ceiling(probe, limit, kind):
    after = after_probe(CUT, probe)
    assert (after.limit, after.ceiling_kind, after.tested) == (limit, kind, True)


def test_a_ceiling_the_probes_confirm_is_re_tested_less_and_less_often():
    window, waits = CUT, []
    for _ in range(5):
        window = after_probe(window, Probe(7372, 4000))
        waits.append(window.quiet)
        while window.quiet:
            window = at_session_start(window)
        assert needs_retest(window)
    assert waits == sorted(waits) and waits[0] < waits[-1]


def test_a_ceiling_inferred_from_counts_gone_low_is_lifted_by_a_probe():
    """Issue 36, item 3: a server whose counts go 40 % low from the second request looks
    like one that cuts at the first count; a probe under the claim is counted far above it,
    so the run goes on instead of stopping as if the window were 1,243 tokens."""
    first = judge(W, Count(1243, 1300))[1]
    low = Count(1000, 2500, previous=1243, added=1200)
    _, once = judge(first, low)
    verdict, cut = judge(once, replace(low, suspects=1, largest_suspect=1000))
    assert verdict == "truncated" and cut.limit < 1300
    after = after_probe(cut, Probe(7372, 4400))
    assert after.limit >= 4400


def test_a_server_reloaded_smaller_is_believed_at_where_it_cuts_now():
    """Issue 36, item 5: counts taken whole before a reload to a smaller window do not hold
    the belief up at the largest of them."""
    before = Window(8192, "c", accepted=5758)
    count = Count(3900, 4500, previous=4000, added=500, suspects=1, largest_suspect=3950)
    verdict, after = judge(before, count)
    assert verdict == "truncated" and after.limit == 3950


def test_a_probe_over_the_window_the_server_names_is_cut_by_it():
    """A probe sized for the claim, sent as the server says (/api/ps) it holds half: the
    count of what was left after the cut is no window; the server's word still explains
    it (a belief of the count made a 4,096 window work as if it were 2,701)."""
    told = with_allocated(Window(8192, "c"), 4096)
    after = after_probe(told, Probe(5041, 2701))
    assert after.limit == 4096
    silent = after_probe(Window(8192, "c"), Probe(5041, 2701))
    assert silent.limit == 2701  # nobody says otherwise: the count is all there is
