"""The bounds on one reply: the pure watch (reply_limits.py) and the client keeping to it
against streams that take their time (respx, in-process; tests/faults/ does it over
sockets through the real command)."""

import asyncio
import itertools

import httpx
import pytest
import respx

from ouroboros.errors import TransientModelError
from ouroboros.server.client import ChatClient
from ouroboros.server.limits import ReplyLimits, ReplyWatch, describe_bytes, max_reply_bytes
from ouroboros.testing import frame

BASE = "http://127.0.0.1:11434"
CHAT = f"{BASE}/v1/chat/completions"
LIMITS = ReplyLimits(first_token_secs=30, idle_secs=10, total_secs=100, max_bytes=1000)


# ---- the watch ------------------------------------------------------------------------------


def test_the_reply_size_limit_is_derived_from_max_output_tokens_unless_set():
    assert max_reply_bytes(2048) == 2048 * 512 + 1_000_000
    assert max_reply_bytes(64) == 1_032_768
    assert max_reply_bytes(2048, configured=5000) == 5000
    assert describe_bytes(2_048_576) == "2.05 MB"
    assert describe_bytes(200_000) == "200 kB"
    assert describe_bytes(512) == "512 bytes"


def test_before_any_data_the_first_token_bound_applies():
    watch = ReplyWatch(LIMITS, started=1000)
    assert watch.deadline == 1030
    assert (
        "no data for 30 s after the request (model.first_token_timeout_secs" in watch.broken_bound()
    )


def test_after_data_the_idle_bound_runs_from_the_last_progress():
    watch = ReplyWatch(LIMITS, started=1000)
    watch.progressed(1005)
    assert watch.deadline == 1015
    watch.progressed(1012)
    assert watch.deadline == 1022
    assert (
        "no data for 10 s in the middle of the reply (model.idle_timeout_secs"
        in watch.broken_bound()
    )


def test_the_total_bound_caps_every_other():
    watch = ReplyWatch(LIMITS, started=1000)
    watch.progressed(1095)
    assert watch.deadline == 1100
    assert watch.broken_bound() == ("the reply took longer than 100 s (model.request_timeout_secs)")
    short = ReplyWatch(ReplyLimits(first_token_secs=30, idle_secs=10, total_secs=5), 0)
    assert short.deadline == 5 and "took longer than 5 s" in short.broken_bound()


def test_a_whole_json_answer_has_only_the_total_bound():
    watch = ReplyWatch(LIMITS, started=1000)
    watch.whole_body = True
    assert watch.deadline == 1100


def test_bytes_count_up_to_the_limit():
    watch = ReplyWatch(LIMITS, started=0)
    assert watch.received(600)
    assert watch.received(400)
    assert not watch.received(1)
    assert watch.oversize() == "the reply exceeded 1 kB (model.max_reply_bytes)"


# ---- the client against slow streams ------------------------------------------------------


def text_chunk(text, finish=None):
    return {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}


class Paced(httpx.AsyncByteStream):
    """Yields each (delay, bytes) after its delay."""

    def __init__(self, steps):
        self.steps = steps

    async def __aiter__(self):
        for delay, data in self.steps:
            await asyncio.sleep(delay)
            yield data


def paced_complete(steps, **limits):
    """The reply the client makes of a stream paced by `steps`, or the error it gives: the
    error names the bound that cut the reply, so no test here needs a clock."""

    async def go():
        async with ChatClient(BASE, "m", **limits) as client:
            return await client.complete([{"role": "user", "content": "hi"}], [])

    with respx.mock() as router:
        router.post(CHAT).mock(
            return_value=httpx.Response(
                200, stream=Paced(steps), headers={"content-type": "text/event-stream"}
            )
        )
        try:
            return asyncio.run(go())
        except TransientModelError as error:
            return error


FAST = {"first_token_secs": 0.3, "idle_secs": 0.3, "timeout_secs": 5}


def test_keep_alives_and_blank_lines_do_not_reset_the_idle_bound():
    steps = [(0, frame(text_chunk("Hi")))] + [
        (0.05, b": ping\n\n" if n % 2 else b"\n") for n in range(60)
    ]
    error = paced_complete(steps, **FAST)
    assert isinstance(error, TransientModelError)
    assert "no data for 0.3 s in the middle of the reply" in error.message


def test_empty_chunks_do_not_reset_it_either():
    empty = frame({"choices": [{"index": 0, "delta": {}}]})
    steps = [(0, frame(text_chunk("Hi")))] + [(0.05, empty)] * 60
    error = paced_complete(steps, **FAST)
    assert "in the middle of the reply" in error.message


def test_pings_before_any_data_meet_the_first_token_bound():
    error = paced_complete([(0.05, b": ping\n\n")] * 60, **FAST)
    assert "no data for 0.3 s after the request" in error.message


def test_steady_slow_tokens_are_fine_until_the_total_bound():
    steps = [(0.1, frame(text_chunk("w"))) for _ in range(40)]
    error = paced_complete(steps, first_token_secs=1, idle_secs=1, timeout_secs=0.6)
    assert "took longer than 0.6 s (model.request_timeout_secs)" in error.message


def test_a_slow_reply_within_every_bound_comes_through():
    steps = [(0.1, frame(text_chunk("w"))) for _ in range(5)]
    steps += [(0, frame(text_chunk("", "stop"))), (0, b"data: [DONE]\n\n")]
    result = paced_complete(steps, **FAST)
    assert result.text == "wwwww"


def test_a_reply_over_the_size_limit_is_cut_off():
    big = frame(text_chunk("x" * 10_000))
    error = paced_complete([(0, big)] * 100, max_reply_bytes=50_000, **FAST)
    assert "sent too much: the reply exceeded 50 kB (model.max_reply_bytes)" in error.message


def test_one_endless_line_without_a_newline_is_cut_at_the_size_limit():
    start = (0, b'data: {"choices":[{"index":0,"delta":{"content":"')
    endless = itertools.chain([start], itertools.repeat((0.001, b"x" * 10_000)))
    error = paced_complete(
        endless, max_reply_bytes=50_000, first_token_secs=3, idle_secs=3, timeout_secs=5
    )
    assert "sent too much: the reply exceeded 50 kB (model.max_reply_bytes)" in error.message


@pytest.mark.parametrize("tokens, cut", [(64, True), (4096, False)])
def test_the_derived_size_limit_follows_max_output_tokens(tokens, cut):
    big = frame(text_chunk("x" * 100_000))
    steps = [(0, big)] * 20 + [(0, frame(text_chunk("", "stop"))), (0, b"data: [DONE]\n\n")]
    outcome = paced_complete(steps, max_output_tokens=tokens, **FAST)
    assert isinstance(outcome, TransientModelError) == cut
