"""What the server says of its prompt cache, from the wire to every screen.

llama.cpp's server ends each stream with `timings` (`prompt_n`: the prompt tokens it processed
for this request, `cache_n`: those it took from its prefix cache); vLLM with prefix caching and
hosted APIs send `usage.prompt_tokens_details.cached_tokens`. Both reach the `token_usage`
event, the run's summary, the dashboard, `stats` and `status --json`; counts that cannot be
true are not believed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from ouroboros.cli import app
from ouroboros.demo import RecordingAgent
from ouroboros.protocols import Usage
from ouroboros.server.chunks import StreamAccumulator, parse_data
from ouroboros.server.sse import SSEDecoder
from ouroboros.store.summary import RunSummary
from ouroboros.testing import Reply, ScriptedModel, ScriptedServer
from ouroboros.testing.settings import ModelSettings
from ouroboros.testing.tokenizer import TOKENIZERS
from ouroboros.ui.dashboard import DashboardState
from ouroboros.ui.stats import RunStats, SessionStats, stats_view
from tests.helpers import of_type, run_events
from tests.test_e2e_accounting import WINDOW, run_task
from tests.test_ui_dashboard import rendered_at, replay, sample_events

# The last two events of a stream as llama.cpp's own server sent them here (llama-server with
# SmolLM2-135M, the second of two identical requests), `stream_options.include_usage` set.
LLAMA_CPP_END = (
    b'data: {"choices":[],"created":1795756867,"id":"chatcmpl-z4","model":"smollm2.gguf",'
    b'"system_fingerprint":"b0-unknown","object":"chat.completion.chunk","usage":'
    b'{"completion_tokens":8,"prompt_tokens":43,"total_tokens":51,"prompt_tokens_details":'
    b'{"cached_tokens":42}},"timings":{"cache_n":42,"prompt_n":1,"prompt_ms":33.399,'
    b'"prompt_per_token_ms":33.399,"prompt_per_second":29.94,"predicted_n":8,'
    b'"predicted_ms":218.956,"predicted_per_token_ms":31.27,"predicted_per_second":31.96}}\n\n'
    b"data: [DONE]\n\n"
)
# Without include_usage, the timings ride on the finish chunk and no usage comes.
LLAMA_CPP_NO_USAGE = (
    b'data: {"choices":[{"finish_reason":"length","index":0,"delta":{}}],"created":1,'
    b'"id":"chatcmpl-O","model":"smollm2.gguf","object":"chat.completion.chunk",'
    b'"timings":{"cache_n":22,"prompt_n":1,"prompt_ms":39.5,"predicted_n":4}}\n\n'
    b"data: [DONE]\n\n"
)
TEXT = b'data: {"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}\n\n'


def read(raw: bytes) -> Usage | None:
    """The usage of a stream of raw bytes, through the SSE decoder and the accumulator."""
    accumulator = StreamAccumulator()
    for data in SSEDecoder().feed(raw):
        chunk = parse_data(data)
        if chunk is not None:
            accumulator.feed(chunk)
    return accumulator.result().usage


def test_llama_cpp_timings_say_what_was_cached_and_what_processed():
    assert read(TEXT + LLAMA_CPP_END) == Usage(43, 8, cached_tokens=42, processed_tokens=1)


def test_timings_without_usage_still_say_the_cache():
    assert read(TEXT + LLAMA_CPP_NO_USAGE) == Usage(
        None, None, cached_tokens=22, processed_tokens=1
    )


def usage_stream(usage: dict, timings: dict | None = None) -> bytes:
    chunk = {"choices": [], "usage": usage, **({"timings": timings} if timings else {})}
    return TEXT + f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode()


def test_openai_cached_tokens_are_read_and_none_cached_is_a_count():
    details = {
        "prompt_tokens": 900,
        "completion_tokens": 5,
        "prompt_tokens_details": {"cached_tokens": 768},
    }
    assert read(usage_stream(details)) == Usage(900, 5, cached_tokens=768)
    none = {**details, "prompt_tokens_details": {"cached_tokens": 0}}
    assert read(usage_stream(none)).cached_tokens == 0


@pytest.mark.parametrize("bad", [-3, 2.5, "40", True, None, 901, float("nan")])
def test_a_cached_count_that_cannot_be_true_is_not_believed(bad):
    usage = {
        "prompt_tokens": 900,
        "completion_tokens": 5,
        "prompt_tokens_details": {"cached_tokens": bad},
    }
    raw = (
        TEXT
        + b"data: "
        + json.dumps({"choices": [], "usage": usage}, allow_nan=True).encode()
        + b"\n\ndata: [DONE]\n\n"
    )
    assert read(raw) == Usage(900, 5)


@pytest.mark.parametrize(
    "timings",
    [
        {"cache_n": -3, "prompt_n": 12},
        {"cache_n": 1.5, "prompt_n": 12},
        {"cache_n": 950, "prompt_n": 12},  # more than the whole prompt
        {"cache_n": "78", "prompt_n": 12},
    ],
)
def test_timings_that_cannot_be_true_are_not_believed(timings):
    usage = read(usage_stream({"prompt_tokens": 900, "completion_tokens": 5}, timings))
    assert usage == Usage(900, 5, cached_tokens=None, processed_tokens=12)


def test_a_processed_count_over_the_prompt_is_not_believed():
    usage = read(usage_stream({"prompt_tokens": 90}, {"cache_n": 40, "prompt_n": 91}))
    assert usage == Usage(90, None, cached_tokens=40, processed_tokens=None)


# ---- the scripted server's one-slot cache -------------------------------------------------

SYSTEM = {"role": "system", "content": "You are careful. Read the files, write the results."}
USER = {"role": "user", "content": "Process every part listed in task.txt, in order."}


def timings_of(model: ScriptedModel, messages: list[dict]) -> dict:
    body = {
        "model": "scripted",
        "messages": messages,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    frames = model.answer_chat(body).frames
    chunks = [json.loads(f.decode()[6:]) for f in frames if not f.startswith(b"data: [DONE]")]
    return chunks[-1]["timings"]


@pytest.mark.parametrize("name", ["words", "bpe-bytes", "cpt-4"])
def test_the_scripted_server_caches_the_longest_common_prefix_in_its_tokens(name):
    model = ScriptedModel(
        [Reply("ok")] * 4, ModelSettings(timings=True, tokenizer=TOKENIZERS[name])
    )
    first = timings_of(model, [SYSTEM, USER])
    whole = model.count_tokens([SYSTEM, USER], None)
    assert first == {**first, "cache_n": 0, "prompt_n": whole}
    again = timings_of(model, [SYSTEM, USER])  # like llama.cpp: the last token is evaluated
    assert (again["cache_n"], again["prompt_n"]) == (whole - 1, 1)
    grown = [SYSTEM, USER, {"role": "assistant", "content": "Reading part one now."}]
    longer = timings_of(model, grown)
    assert longer["cache_n"] == whole
    assert longer["cache_n"] + longer["prompt_n"] == model.count_tokens(grown, None)
    edited = [SYSTEM, {"role": "user", "content": "Process every part, in reverse."}, grown[2]]
    cut = timings_of(model, edited)
    assert model.count_tokens([SYSTEM], None) <= cut["cache_n"] < whole


# ---- from the wire to the screens ---------------------------------------------------------


def invoke(*args: str):
    clean: dict[str, str | None] = {
        name: None for name in os.environ if name.startswith("OUROBOROS_") or name == "OLLAMA_HOST"
    }
    clean.update(COLUMNS="80", XDG_CONFIG_HOME="/nonexistent-ouroboros-test")
    return CliRunner(env=clean).invoke(app, list(args))


def cache_run(tmp_path: Path, **settings) -> list[dict]:
    with ScriptedServer(
        RecordingAgent(3), model="scripted-demo", context_length=WINDOW, **settings
    ) as server:
        code, _ = run_task(tmp_path, server, parts=3)
    assert code == 0
    return of_type(run_events(tmp_path), "token_usage")


def screens(tmp_path: Path) -> tuple[str, dict]:
    config = str(tmp_path / "ouroboros.toml")
    stats = invoke("stats", "-c", config)
    assert stats.exit_code == 0, stats.output
    status = invoke("status", "--json", "-c", config)
    return stats.output, json.loads(status.output)


def test_llama_cpp_timings_reach_the_log_stats_and_status(tmp_path):
    usages = cache_run(tmp_path, timings=True)
    assert usages[0]["cached_tokens"] == 0
    assert all(u["cached_tokens"] > 0 for u in usages[1:])
    assert all(u["cached_tokens"] + u["processed_tokens"] == u["reported"] for u in usages)
    cached = sum(u["cached_tokens"] for u in usages)
    share = round(100 * cached / sum(u["reported"] for u in usages), 1)

    stats, health = screens(tmp_path)
    assert f"prompt cache: {share:.0f}% of" in stats
    assert all(len(line) <= 80 for line in stats.splitlines())
    assert health["cache_hit_pct"] == share and health["cached_tokens"] == cached


def test_openai_cached_tokens_reach_the_log_and_stats(tmp_path):
    usages = cache_run(tmp_path, report_cached=True)
    assert all("processed_tokens" not in u for u in usages)  # left out where not said
    cached = sum(u["cached_tokens"] for u in usages)
    assert cached > 0
    share = round(100 * cached / sum(u["reported"] for u in usages), 1)
    stats, health = screens(tmp_path)
    assert f"prompt cache: {share:.0f}% of" in stats
    assert health["cache_hit_pct"] == share


def test_nonsense_of_the_cache_is_left_out_everywhere(tmp_path):
    usages = cache_run(tmp_path, timings=True, bad_timings={"cache_n": -4})
    assert all(u["cached_tokens"] is None for u in usages)
    stats, health = screens(tmp_path)
    assert "prompt cache" not in stats
    assert health["cache_hit_pct"] is None and health["cached_tokens"] == 0


# ---- the summary and the dashboard --------------------------------------------------------


def usage_record(seq: int, **fields) -> dict:
    return {
        "type": "token_usage",
        "ts": "2025-03-01T10:00:00.000Z",
        "seq": seq,
        "session": 1,
        "turn": seq,
        "prompt_tokens": 1000,
        "completion_tokens": 10,
        "total_tokens": 1010,
        "context_limit": 8192,
        "budget": 6144,
        "context_used_pct": 16.3,
        "source": "server",
        "reported": 1000,
        **fields,
    }


def test_the_summary_weighs_the_cache_in_the_servers_tokens():
    summary = RunSummary()
    summary.add_record(usage_record(1, cached_tokens=0, processed_tokens=1000))
    summary.add_record(usage_record(2, cached_tokens=900, processed_tokens=300))  # 1,200
    summary.add_record(usage_record(3))  # says nothing of its cache: not weighed
    assert summary.cache_hit_pct == round(100 * 900 / 2200, 1)
    assert summary.totals()["cached_tokens"] == 900


def test_a_summary_kept_before_the_cache_figures_still_folds():
    old = RunSummary()
    old.add_record(usage_record(1))
    data = old.to_dict()
    for session in data["recent"]:
        del session["cached_tokens"], session["cache_prompt_tokens"]
    summary = RunSummary.from_dict(data)
    assert summary.cache_hit_pct is None
    summary.add_record(usage_record(2, cached_tokens=750))
    assert summary.cache_hit_pct == 75.0


def with_cache(tmp_path: Path, **fields) -> DashboardState:
    events = sample_events(tmp_path)
    last = events[-1]
    return replay(
        [
            *events,
            {
                **usage_record(last["seq"] + 1, **fields),
                "session": last["session"],
                "turn": last["turn"],
            },
        ]
    )


def test_the_dashboard_shows_the_cache_hit_beside_the_context_at_80_columns(tmp_path):
    frame = rendered_at(with_cache(tmp_path, cached_tokens=840, processed_tokens=160), 80, 24)
    line = next(row for row in frame if "context " in row and "%" in row)
    assert "cache 84%" in line
    assert all(len(row) <= 80 for row in frame)


def test_the_dashboard_says_nothing_of_a_cache_the_server_never_reported(tmp_path):
    frame = rendered_at(with_cache(tmp_path), 80, 24)
    assert not any("cache" in row for row in frame)


@pytest.mark.parametrize("width, column", [(100, True), (80, False)])
def test_stats_gives_each_sessions_hit_where_the_table_has_room(width, column):
    stats = RunStats(
        run_id="r",
        sessions=[
            SessionStats(
                1,
                turns=9,
                prompt_tokens=18_735,
                cached_tokens=600,
                cache_prompt_tokens=1000,
                end="restart: the window filled",
            ),
            SessionStats(
                2,
                turns=4,
                prompt_tokens=9_000,
                cached_tokens=900,
                cache_prompt_tokens=1000,
                end="task_complete",
            ),
        ],
    )
    console = Console(record=True, width=width)
    console.print(stats_view(stats))
    text = console.export_text()
    assert "prompt cache: 75% of 2,000 prompt tokens" in text
    assert ("60%" in text) is column  # session 1's hit
    assert "task_complete" in text and all(len(line) <= width for line in text.splitlines())
