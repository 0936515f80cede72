"""Ollama's window made what model.context_limit says (model.ensure_window): a model derived
with that num_ctx through /api/create, used for the run, said at start, reused by later runs,
and a clean refusal when the server cannot make it. Against the scripted Ollama, which streams
/api/create's JSON lines as Ollama does and holds a made model's num_ctx once it is loaded."""

from __future__ import annotations

import json

import pytest

from ouroboros.server.kinds.ollama import create_failure, needs_sizing, sized_name
from ouroboros.testing import Reply
from tests.helpers import make_project, of_type, ouroboros_here, run_events

SCRIPT = [Reply("", [("list_dir", {"path": "."})]), Reply("Looked.")]
MADE = {"model": "scripted-ctx8192", "from": "scripted", "parameters": {"num_ctx": 8192}}


def run(tmp_path, server, **model):
    config = make_project(tmp_path, server.base_url, model={"context_limit": 8192, **model})
    return ouroboros_here("run", "-c", str(config), "--headless", "--max-turns", "2")


def test_a_window_ollama_does_not_give_is_made_and_used(tmp_path, scripted_server):
    server = scripted_server(SCRIPT, context_length=2048)  # num_ctx 2048 in /api/show

    ran = run(tmp_path, server)

    assert ran.returncode == 3, ran.stderr
    assert server.create_requests == [MADE]
    assert {request["model"] for request in server.requests} == {"scripted-ctx8192"}
    events = run_events(tmp_path)
    [start] = of_type(events, "session_start")
    assert start["context_limit"] == 8192
    assert start["limit_source"] == (
        "model.context_limit in config; Ollama model "
        "scripted-ctx8192 with num_ctx 8192, created by /api/create"
    )
    said = [line for line in ran.stdout.splitlines() if "scripted-ctx8192" in line]
    assert len(said) == 1 and "window 8,192 tokens" in said[0]
    # /api/ps lists the made model with its window: believed, never cut
    assert [e["context_limit"] for e in of_type(events, "token_usage")] == [8192, 8192]
    assert server.over_limit == 0 and not of_type(events, "context_truncation_detected")


def test_the_made_model_is_reused_by_the_next_run(tmp_path, scripted_server):
    server = scripted_server(SCRIPT * 2, context_length=2048)
    run(tmp_path / "first", server)

    ran = run(tmp_path / "second", server)

    assert ran.returncode == 3, ran.stderr
    assert server.create_requests == [MADE]
    [start] = of_type(run_events(tmp_path / "second"), "session_start")
    assert start["limit_source"].endswith(
        "; Ollama model scripted-ctx8192 with num_ctx 8192, from an earlier run"
    )
    assert server.requests[-1]["model"] == "scripted-ctx8192"


@pytest.mark.parametrize(
    "create, said",
    [
        ("missing", "POST /api/create answered 404 (404 page not found)"),
        (
            "fails",
            "POST /api/create said: open /usr/share/ollama/.ollama/models/manifests/"
            "registry.ollama.ai/library: permission denied",
        ),
    ],
)
def test_a_server_that_cannot_make_it_stops_the_run_in_one_line(
    tmp_path, scripted_server, create, said
):
    server = scripted_server(SCRIPT, context_length=2048, create=create)

    ran = run(tmp_path, server)

    assert ran.returncode == 2
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in ran.stderr
    assert lines[0].startswith(
        "error: cannot give scripted the window of 8,192 tokens model.context_limit asks for: "
    )
    assert said in lines[0]
    assert "set model.ensure_window = false" in lines[0]
    assert "OLLAMA_CONTEXT_LENGTH=8192" in lines[0]
    assert server.requests == []


@pytest.mark.parametrize(
    "settings, model",
    [
        ({"context_length": 8192}, {}),  # Ollama gives the window already
        ({"context_length": 2048}, {"ensure_window": False}),  # the person said not to
        ({"context_length": 2048, "serves_any_name": True}, {}),  # not Ollama (llama.cpp)
    ],
)
def test_nothing_is_made_where_nothing_is_to_make(tmp_path, scripted_server, settings, model):
    server = scripted_server(SCRIPT, **settings)

    ran = run(tmp_path, server, **model)

    assert ran.returncode == 3, ran.stderr
    assert server.create_requests == []
    assert server.requests[0]["model"] == "scripted"
    assert "Ollama model" not in of_type(run_events(tmp_path), "session_start")[0]["limit_source"]


def test_the_decisions():
    assert needs_sizing(None, 8192) and needs_sizing(4096, 8192)
    assert not needs_sizing(8192, 8192) and not needs_sizing(32768, 8192)
    assert sized_name("qwen3:8b", 32768) == "qwen3:8b-ctx32768"
    assert sized_name("llama3.2", 8192) == "llama3.2-ctx8192"


def lines(*objects: object) -> list[str]:
    return [json.dumps(o, separators=(",", ":")) for o in objects]


def test_what_the_json_lines_of_api_create_say():
    progress = {"status": "using existing layer sha256:2af3b81862c6be03c769683af18efdadb2c33f6"}
    assert (
        create_failure(lines(progress, {"status": "writing manifest"}, {"status": "success"}))
        is None
    )
    assert create_failure(lines(progress, {"error": "permission denied"})) == "permission denied"
    assert create_failure(lines(progress)) == (
        f"no success at the end (last status: using existing layer {progress['status'][21:]})"
    )
    assert create_failure([]) == "no success at the end (last status: None)"
    assert create_failure(["<html>"]) == "an answer that is not JSON (<html>)"
