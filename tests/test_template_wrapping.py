"""A chat template that wraps every message in many tokens (llama.cpp with a template of tool
tags and nudges, as tests/real/tools.jinja is): the server's tokenizer counts each message's
text, the prompt costs far more. What each turn costs beyond its text belongs to the turn, not
to the prompt's fixed part: a fixed part that took it in would count every turn of a session
again in the next session's first prompt, and a run would stop with "a fresh session would
start N% full" while the server counts far less."""

from __future__ import annotations

import pytest

from ouroboros.testing import Reply
from ouroboros.testing.tokenizer import ServerTokenizer
from ouroboros.window import ledger
from tests.helpers import make_project, of_type, ouroboros_here, run_events

WRAPPED = ServerTokenizer("wrapped", per_message=30)
WINDOW = 1536


def writes(n: int) -> list[Reply]:
    return [
        Reply("", [("file_write", {"path": f"notes/{i}.txt", "content": f"note {i}"})])
        for i in range(n)
    ]


def test_a_wrapping_template_restarts_instead_of_stopping_as_too_small(tmp_path, scripted_server):
    server = scripted_server(
        writes(40), context_length=2048, tokenizer=WRAPPED, tokenize="llama.cpp"
    )
    config = make_project(
        tmp_path,
        server.base_url,
        model={"context_limit": WINDOW, "max_output_tokens": 96},
        context={"max_restarts": 2, "carryover_turns": 1},
        agent={"max_turns": 40},
    )
    ran = ouroboros_here("run", "-c", str(config), "--headless")

    events = run_events(tmp_path)
    assert ran.returncode == 3, ran.stdout[-1500:]
    assert events[-1]["reason"] == "max_restarts"
    assert len(of_type(events, "session_restart")) == 2
    assert server.over_limit == 0


def test_each_estimate_after_the_first_count_is_within_a_tenth_of_the_servers(
    tmp_path, scripted_server
):
    server = scripted_server(
        writes(12), context_length=4096, tokenizer=WRAPPED, tokenize="llama.cpp"
    )
    config = make_project(tmp_path, server.base_url, agent={"max_turns": 12})
    ran = ouroboros_here("run", "-c", str(config), "--headless")

    assert ran.returncode == 3, ran.stdout[-1500:]
    usage = of_type(run_events(tmp_path), "token_usage")
    off = [abs(u["estimated"] - u["reported"]) / u["reported"] for u in usage[2:]]
    assert max(off) <= 0.10, [(u["estimated"], u["reported"]) for u in usage]


def test_what_a_prompt_grew_by_is_shared_among_the_messages_that_grew_it():
    assert ledger.grown_shares(80, [24, 16]) == [48, 32]
    assert ledger.grown_shares(6, [24, 16]) is None  # less than two messages can cost
    assert ledger.grown_shares(10, []) is None


@pytest.mark.parametrize(
    "believed,missed,messages,learned",
    [(4, 36, 2, 13.0), (4, 0, 2, 4.0), (13, 18, 2, 17.5), (4, -20, 2, 4.0), (60, 400, 2, 64.0)],
)
def test_the_template_overhead_is_learned_half_way_within_bounds(
    believed, missed, messages, learned
):
    assert ledger.learned_overhead(believed, missed, messages) == learned
