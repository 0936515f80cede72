"""Transient or permanent, decided once: the real `ouroboros run` waits as long as a 429's
Retry-After asks, stops at once with one line (one line of the page, never the page) on a
status that retrying cannot mend, and names a web server that is not an LLM server before a
run starts (issue 10, item 3)."""

from __future__ import annotations

import pytest

from ouroboros.store.log import list_runs
from tests.faults.servers import FAULTS, run_against, start
from tests.helpers import of_type, run_events


def test_a_429_is_retried_after_the_wait_the_server_asked_for(tmp_path):
    with start("retry_after") as server:  # Retry-After: 2
        result = run_against(tmp_path, server, FAULTS["retry_after"].model)

    assert result.returncode == 3, result.stderr
    retry = of_type(run_events(tmp_path), "retry")[0]
    assert retry["delay_secs"] >= 2
    assert "is rate limiting us (429: slow down); it asked to wait 2 s" in retry["error"]
    first, second = server.chat_requests()[:2]
    assert second["time"] - first["time"] >= 2


@pytest.mark.parametrize(
    "fault, line, kind",
    [
        ("html_400", "rejected the request (400: Bad Request)", "PermanentModelError"),
        (
            "status_501",
            "answers HTTP but is not an OpenAI-compatible LLM server: POST "
            "/v1/chat/completions answered 501 (not implemented)",
            "NotAnLLMServerError",
        ),
    ],
    ids=["400-html-page", "501"],
)  # 505 and the rest of the table: test_client_errors.py
def test_a_permanent_error_stops_the_run_at_once_with_one_line(tmp_path, fault, line, kind):
    with start(fault) as server:
        result = run_against(tmp_path, server, FAULTS[fault].model)

    assert result.returncode == 2, result.stdout
    said = [row for row in result.stderr.splitlines() if row.strip()]
    assert len(said) == 1 and line in said[0], result.stderr
    assert "<" not in said[0] and len(said[0]) < 400
    assert len(server.chat_requests()) == 1  # asked once, not retried
    events = run_events(tmp_path)
    assert not of_type(events, "retry")
    assert of_type(events, "error")[0]["kind"] == kind


def test_a_plain_web_server_is_named_as_one_before_a_run_starts(tmp_path):
    with start("web_server") as server:  # Python's http.server: 404 on GET, 501 on POST
        result = run_against(tmp_path, server, FAULTS["web_server"].model)

    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"error: {server.base_url} answers HTTP but is not an OpenAI-compatible LLM server: "
        "GET /v1/models answered 404 (Error response), GET /api/tags answered 404 (Error "
        "response), POST /v1/chat/completions answered 501 (Error response); set "
        "model.base_url to the model server's address (Ollama listens on port 11434, "
        "llama-server on 8080, vLLM on 8000)"
    )
    assert not list_runs(tmp_path / ".ouroboros")
