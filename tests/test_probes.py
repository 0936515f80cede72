"""window/probes.py: what a count says against the window believed, when a probe tests it,
what the probe holds and what its count proves, as pure decisions (loop/evidence.py asks)."""

from __future__ import annotations

from dataclasses import replace

from ouroboros.window.belief import Count, Window
from ouroboros.window.probes import (
    DOUBT_EVERY,
    FILLER_PIECE_WORDS,
    RETEST_FILLER,
    Signs,
    counted_probe,
    doubted,
    filler_rate,
    probe_messages,
    probe_size,
    rate_messages,
    signs_of,
)
from tests.conversations import manager

TESTED = Window(8192, "config", tested=True)  # a claim a probe has tested
BUDGET = 6144


def signs(reported: int | None, estimated: int, window: Window, measured: int = 0, verdict="whole"):
    """What a count of `reported` tokens of a prompt the ledger puts at `estimated` says."""
    return signs_of(Count(reported, estimated), verdict, window, measured, BUDGET)


def test_a_count_far_short_of_a_large_prompt_is_a_sign_and_a_small_one_is_not():
    assert signs(2500, 5000, TESTED) == Signs(short=True, far=True)
    assert signs(4000, 5000, TESTED) == Signs(short=True)
    assert not signs(500, 1000, TESTED)  # under half the budget
    assert not signs(None, 5000, TESTED, verdict="unknown")


def test_a_count_below_what_was_measured_of_the_prompt_is_a_sign_a_window_known_held_is_not():
    assert signs(1500, 2000, TESTED, 4000) == Signs(below=True)
    held = replace(TESTED, accepted=8000)  # the server counted 8,000 whole before
    assert not signs(1500, 2000, held, 4000)
    assert signs(1500, 2000, TESTED, verdict="suspect") == Signs(cut=True)


def test_a_short_count_is_worth_one_probe_a_session_a_far_short_one_each_time():
    short, far = Signs(short=True), Signs(short=True, far=True)
    assert doubted(short, TESTED, short_doubted=False)
    assert not doubted(short, TESTED, short_doubted=True)
    assert doubted(far, TESTED, short_doubted=True)
    found = replace(TESTED, ceiling=4000, ceiling_kind="truncation")  # a probe found the cut
    assert not doubted(far, found, short_doubted=False)
    assert doubted(Signs(cut=True), found, short_doubted=True)


def test_a_doubt_probes_once_every_few_requests_unless_forced_a_claim_untested_at_once():
    assert probe_size(TESTED, True, force=False, since_last=DOUBT_EVERY) == int(0.9 * 8192)
    assert probe_size(TESTED, True, force=False, since_last=DOUBT_EVERY - 1) == 0
    assert probe_size(TESTED, True, force=True, since_last=0) == int(0.9 * 8192)
    assert probe_size(TESTED, False, force=True, since_last=99) == 0
    untested = Window(8192, "config")
    assert probe_size(untested, False, force=False, since_last=0) == int(0.9 * 8192)
    distrusted = replace(TESTED, distrusted=True)
    assert probe_size(distrusted, True, force=True, since_last=99) == 0


def test_a_probe_is_the_system_prompt_and_pieces_of_filler_of_about_its_size():
    system = {"role": "system", "content": "Mission."}
    messages, expected = probe_messages(system, 900, 7000, 1.3)
    assert messages[0] is system
    pieces = messages[1:]
    assert len(pieces) > 1 and all(p == pieces[0] for p in pieces)
    words = pieces[0]["content"].count(RETEST_FILLER.strip())
    assert abs(words - FILLER_PIECE_WORDS) <= FILLER_PIECE_WORDS // 2
    in_all = sum(p["content"].count(RETEST_FILLER.strip()) for p in pieces)
    assert expected == 900 + round(in_all * 1.3)  # what the pieces sent hold, at the rate
    assert 6900 <= expected <= 7000  # under the size asked, and close to it


def test_a_probe_counted_below_the_conversation_just_counted_whole_proves_nothing():
    assert counted_probe(7000, 3000, whole=3500).reported is None
    assert counted_probe(7000, 3600, whole=3500).reported == 3600
    assert counted_probe(7000, None, whole=3500).reported is None


def test_a_filler_rate_no_vocabulary_gives_cannot_size_a_probe():
    words = sum(m["content"].count(RETEST_FILLER.strip()) for m in rate_messages())
    assert words == 400
    assert filler_rate(words * 1.25) == 1.25
    assert filler_rate(3) == -1.0
    assert filler_rate(None) == -1.0
    assert filler_rate(words * 9) == -1.0


def test_the_window_keeps_the_sessions_probe_cadence_and_a_new_session_starts_it_over():
    cm = manager(limit=8192)
    cm.window = TESTED
    assert cm.probe_due(True) == int(0.9 * 8192)
    assert cm.probe_due(True) == 0  # no count taken since
    for _ in range(DOUBT_EVERY):
        cm.observe_reply([{"role": "user", "content": "go"}], [], None, 0)
    assert cm.probe_due(True) == int(0.9 * 8192)
    assert cm.doubts(Signs(short=True)) and not cm.doubts(Signs(short=True))  # once a session
    cm.new_session()
    assert cm.probe_due(True) == int(0.9 * 8192)
    assert cm.doubts(Signs(short=True))
