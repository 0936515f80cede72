"""One deadline for the start-up questions: past it, the run goes on with what it knows."""

from __future__ import annotations

import asyncio
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ouroboros.loop.deadline import Deadline, startup_secs
from ouroboros.testing import Reply
from tests.helpers import clean_env, make_project, of_type, ouroboros_here, run_events


def test_work_past_the_deadline_gives_the_fallback_and_is_named() -> None:
    now = [100.0]
    startup = Deadline.after(20, clock=lambda: now[0])

    async def ask() -> tuple[str, str]:
        first = await startup.within(asyncio.sleep(0, "answered"), lambda: "guess", "first")
        now[0] = 121.0  # the clock passed the deadline while the next question hangs
        second = await startup.within(asyncio.Event().wait(), lambda: "guess", "the window")
        return first, second

    assert asyncio.run(ask()) == ("answered", "guess")
    assert startup.missed == ["the window"]
    assert startup.remaining() == 0.0


DRIP_SECS = 2.0  # a byte this often: never idle long enough for a read timeout


class _Dripping(BaseHTTPRequestHandler):
    """Answers every start-up question (GETs, the tokenize and show POSTs) with a 200 and then
    a byte every DRIP_SECS, never the end; passes chat requests on to the scripted server."""

    protocol_version = "HTTP/1.1"
    server: _DripServer

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self._drip()

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path.split("?")[0] == "/v1/chat/completions":
            self._forward(body)
        else:
            self._drip()

    def _drip(self) -> None:
        self.server.dripped.append(self.path)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "1000000")
        self.end_headers()
        self.wfile.write(b"{")
        while not self.server.stopping.wait(DRIP_SECS):
            try:
                self.wfile.write(b" ")
                self.wfile.flush()
            except OSError:
                return

    def _forward(self, body: bytes) -> None:
        request = urllib.request.Request(
            self.server.upstream + self.path,
            data=body,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            status, kind, data = response.status, response.headers["Content-Type"], response.read()
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class _DripServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, upstream: str) -> None:
        super().__init__(("127.0.0.1", 0), _Dripping)
        self.upstream = upstream.rstrip("/").removesuffix("/v1")
        self.stopping = threading.Event()
        self.dripped: list[str] = []


@pytest.mark.slow  # the deadline is real time: a second, then the tokenizer's own cap
@pytest.mark.parametrize(
    "model",
    [{}, {"context_limit": 8192}],  # with a window set, Ollama's is made real (ensure_window)
    ids=["window-asked", "window-made"],
)
def test_a_server_that_drips_its_startup_answers_does_not_hold_the_first_turn(
    tmp_path, scripted_server, model
) -> None:
    upstream = scripted_server([Reply("the first turn")])
    drip = _DripServer(upstream.base_url)
    thread = threading.Thread(target=drip.serve_forever, daemon=True)
    thread.start()
    try:
        base_url = f"http://127.0.0.1:{drip.server_address[1]}/v1"
        config = make_project(tmp_path, base_url, model=model)
        result = ouroboros_here(
            "run",
            "--config",
            str(config),
            "--headless",
            "--max-turns",
            "1",
            env=clean_env(OUROBOROS_STARTUP_SECS="1"),
        )
    finally:
        drip.stopping.set()
        drip.shutdown()
    assert result.returncode == 3, result.stderr  # paused at its max_turns: the turn was taken
    assert drip.dripped, "no start-up question was asked"
    events = run_events(tmp_path)
    warnings = [e["message"] for e in of_type(events, "warning")]
    assert any(
        "within the start-up deadline (1 s): going on with what is known" in w for w in warnings
    ), warnings
    assert [e["text"] for e in of_type(events, "assistant")] == ["the first turn"]
    assert len(upstream.requests) == 1


def test_the_startup_deadline_is_twenty_seconds_unless_the_environment_says() -> None:
    assert startup_secs({}) == 20.0
    assert startup_secs({"OUROBOROS_STARTUP_SECS": "1.5"}) == 1.5
    assert startup_secs({"OUROBOROS_STARTUP_SECS": "soon"}) == 20.0
    assert startup_secs({"OUROBOROS_STARTUP_SECS": "-3"}) == 20.0
