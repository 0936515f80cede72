"""Model servers that misbehave, on 127.0.0.1, writing exact bytes: for the tests in
tests/faults/ and for benchmarks/faults.py.

    server = start("trickle")                    # one of FAULTS, misbehaving once
    run with FAULTS["trickle"].model in [model], against server.base_url
    server.requests                              # every request: method, path, body, time
    server.stop()

    server = start_server([Status(status=429, headers={"Retry-After": "2"})])  # a script

A FaultServer answers like an OpenAI-compatible LLM server serving the model "scripted":
`GET /v1/models` lists it, a non-streamed chat request (a prompt count) gets a one-token
completion with usage, and each streamed chat request gets the next act of its script; once
the script is used up (or at once, when it is empty) a good reply: some text and one
`list_dir` call, with usage. `repeat=True` makes the last act answer every request from then
on (a server that never gets better). Any other path is a 404. `start_web_server()` is not
an LLM server at all: Python's own http.server, which answers 404 to every GET and 501 to
every POST, as a static file server does.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import socketserver
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Awaitable, Callable, Literal

from ouroboros.testing import DONE_FRAME as DONE
from ouroboros.testing import Reply, frame, render_stream
from ouroboros.testing.tokenizer import TOKENIZERS
from tests.helpers import make_project, ouroboros_here

MODEL = "scripted"
Writer = Callable[[bytes], Awaitable[None]]
HOLD_SECS = 60  # the longest any act keeps a reply going: far past every test's timeouts


# ---- the acts: what one streamed chat request gets -------------------------------------


def chunk(
    delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any
) -> dict[str, Any]:
    """One chat.completion.chunk with one choice."""
    return {
        "id": "chatcmpl-f",
        "object": "chat.completion.chunk",
        "model": MODEL,
        "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}],
        **extra,
    }


@dataclass(frozen=True)
class Turn:
    """One streamed chat request as an act sees it: its number (1, 2, ...) and the true
    prompt size (by the scripted server's tokenizer, so the harness's counts add up)."""

    number: int
    prompt_tokens: int

    @property
    def usage(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": 10,
            "total_tokens": self.prompt_tokens + 10,
        }

    def usage_chunk(self) -> dict[str, Any]:
        return {
            "id": "chatcmpl-f",
            "object": "chat.completion.chunk",
            "model": MODEL,
            "choices": [],
            "usage": self.usage,
        }


def good_frames(turn: Turn, reply: Reply | None = None) -> list[bytes]:
    """A whole, well-formed streamed reply (Ollama's bytes), usage included."""
    reply = reply or Reply("Looking around.", [("list_dir", {"path": "."})])
    return render_stream(reply, model=MODEL, request_number=turn.number, usage=turn.usage)


@dataclass
class Act:
    """Answers one streamed chat request by writing SSE frames (after a 200 head)."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "text/event-stream"

    async def body(self, write: Writer, turn: Turn) -> None:
        raise NotImplementedError


@dataclass(kw_only=True)
class Good(Act):
    """A well-formed reply; `reply` (ScriptedServer's Reply) to say what."""

    reply: Reply | None = None

    async def body(self, write: Writer, turn: Turn) -> None:
        for data in good_frames(turn, self.reply):
            await write(data)


@dataclass(kw_only=True)
class Frames(Act):
    """These exact SSE frames (bytes each), then [DONE] unless `done` is False."""

    frames: list[bytes] = field(default_factory=list)
    done: bool = True

    async def body(self, write: Writer, turn: Turn) -> None:
        for data in self.frames:
            await write(data)
        if self.done:
            await write(DONE)


@dataclass(kw_only=True)
class Malformed(Act):
    """A reply that starts well, then sends `payload` as one `data:` line (raw JSON text)."""

    payload: str = "null"

    async def body(self, write: Writer, turn: Turn) -> None:
        await write(frame(chunk({"role": "assistant", "content": "Hel"})))
        await write(b"data: " + self.payload.encode() + b"\n\n")
        await write(frame(chunk({"content": "lo"}, "stop")))
        await write(DONE)


@dataclass(kw_only=True)
class CallsWithoutIds(Act):
    """Tool calls streamed in fragments, by index, with no id (or `same_id` on every one),
    as some OpenAI-compatible servers send them."""

    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    same_id: str | None = None

    async def body(self, write: Writer, turn: Turn) -> None:
        await write(frame(chunk({"role": "assistant", "content": "Working."})))
        for index, (name, arguments) in enumerate(self.calls):
            head: dict[str, Any] = {
                "index": index,
                "type": "function",
                "function": {"name": name, "arguments": ""},
            }
            if self.same_id is not None:
                head["id"] = self.same_id
            await write(frame(chunk({"tool_calls": [head]})))
            text = json.dumps(arguments)
            for start in range(0, len(text), 5):
                piece = {"index": index, "function": {"arguments": text[start : start + 5]}}
                await write(frame(chunk({"tool_calls": [piece]})))
        await write(frame(chunk({}, "tool_calls")))
        await write(frame(turn.usage_chunk()))
        await write(DONE)


@dataclass(kw_only=True)
class Trickle(Act):
    """One token every `interval` seconds, never finishing (for HOLD_SECS at most)."""

    interval: float = 0.2

    async def body(self, write: Writer, turn: Turn) -> None:
        await write(frame(chunk({"role": "assistant", "content": ""})))
        for _ in range(int(HOLD_SECS / self.interval)):
            await write(frame(chunk({"content": " word"})))
            await asyncio.sleep(self.interval)


@dataclass(kw_only=True)
class KeepAlive(Act):
    """`tokens` tokens, then only SSE comments and blank lines every `interval` seconds (the
    keep-alives of vLLM, llama.cpp and proxies), never finishing (for HOLD_SECS at most)."""

    tokens: int = 0
    interval: float = 0.1

    async def body(self, write: Writer, turn: Turn) -> None:
        for n in range(self.tokens):
            await write(
                frame(chunk({"content": f" t{n}", **({"role": "assistant"} if n == 0 else {})}))
            )
        for n in range(int(HOLD_SECS / self.interval)):
            await write(b": ping\n\n" if n % 2 == 0 else b"\n")
            await asyncio.sleep(self.interval)


@dataclass(kw_only=True)
class Huge(Act):
    """`total` bytes of text as fast as the socket takes them, then a proper end: a server
    that ignores max_tokens."""

    total: int = 8_000_000
    piece: int = 60_000

    async def body(self, write: Writer, turn: Turn) -> None:
        text = "x" * self.piece
        sent = 0
        while sent < self.total:
            data = frame(chunk({"content": text}))
            await write(data)
            sent += len(data)
        await write(frame(chunk({}, "stop")))
        await write(DONE)


@dataclass(kw_only=True)
class Status(Act):
    """An HTTP error: `status` with `text` as the body (HTML or JSON, per `content_type`)."""

    status: int = 500
    text: str = '{"error": {"message": "internal error"}}'
    content_type: str = "application/json"

    async def body(self, write: Writer, turn: Turn) -> None:
        await write(self.text.encode())


# ---- the server ------------------------------------------------------------------------


@dataclass
class FaultServer:
    """A running fault server: `base_url`, what it was asked, and `stop()` (or use it as a
    context manager)."""

    base_url: str
    stop: Callable[[], None]
    requests: list[dict[str, Any]]

    def __enter__(self) -> FaultServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def chat_requests(self, *, streamed: bool = True) -> list[dict[str, Any]]:
        return [
            r
            for r in self.requests
            if r["path"] == "/v1/chat/completions"
            and bool((r["body"] or {}).get("stream")) == streamed
        ]


class _Script:
    def __init__(self, acts: list[Act], repeat: bool) -> None:
        self.acts, self.repeat, self.streamed = list(acts), repeat, 0

    def next(self) -> Act:
        self.streamed += 1
        if not self.acts:
            return Good()
        return self.acts[0] if self.repeat and len(self.acts) == 1 else self.acts.pop(0)


def start_server(acts: list[Act], *, repeat: bool = False) -> FaultServer:
    """A fault server answering streamed chat requests with `acts` in turn, then good replies
    (or, with `repeat`, the last act for ever)."""
    script = _Script(acts, repeat)
    requests: list[dict[str, Any]] = []
    ready = threading.Event()
    box: dict[str, Any] = {}

    async def main() -> None:
        server = await asyncio.start_server(partial(_serve, script, requests), "127.0.0.1", 0)
        box["port"] = server.sockets[0].getsockname()[1]
        box["stop"] = asyncio.Event()
        box["loop"] = asyncio.get_running_loop()
        ready.set()
        async with server:
            await box["stop"].wait()

    thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
    thread.start()
    ready.wait(10)

    def stop() -> None:
        box["loop"].call_soon_threadsafe(box["stop"].set)
        thread.join(5)

    return FaultServer(f"http://127.0.0.1:{box['port']}", stop, requests)


async def _serve(
    script: _Script,
    requests: list[dict[str, Any]],
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
) -> None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        method, path, _ = head.split(b"\r\n", 1)[0].decode().split(" ", 2)
        headers = {
            line.split(b":", 1)[0].strip().lower(): line.split(b":", 1)[1].strip()
            for line in head.split(b"\r\n")[1:]
            if b":" in line
        }
        raw = await reader.readexactly(int(headers.get(b"content-length", b"0")))
        body = json.loads(raw) if raw else None
        requests.append({"method": method, "path": path, "body": body, "time": time.monotonic()})
        await _answer(script, method, path.split("?")[0], body, reader, writer)
    except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
        pass  # the client hung up: what a misbehaving reply often ends with
    except asyncio.CancelledError:
        pass  # the server is stopping
    finally:
        writer.close()


async def _answer(
    script: _Script,
    method: str,
    path: str,
    body: Any,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
) -> None:
    if method == "GET" and path == "/v1/models":
        listing = {"object": "list", "data": [{"id": MODEL, "object": "model"}]}
        return await _whole(writer, 200, json.dumps(listing))
    if method != "POST" or path != "/v1/chat/completions" or not isinstance(body, dict):
        return await _whole(writer, 404, '{"error": "not found"}')
    prompt = TOKENIZERS["words"].count(body.get("messages") or [], body.get("tools"))
    if not body.get("stream"):  # a prompt count: one token, with usage
        answer = {
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "a"},
                    "finish_reason": "length",
                }
            ],
            "usage": Turn(0, prompt).usage,
        }
        return await _whole(writer, 200, json.dumps(answer))
    act = script.next()
    writer.write(_head(act.status, act.content_type, act.headers))

    async def write(data: bytes) -> None:  # one HTTP chunk each
        if reader.at_eof() or writer.is_closing():
            raise ConnectionResetError("the client hung up")
        writer.write(b"%x\r\n%s\r\n" % (len(data), data))
        await writer.drain()

    await act.body(write, Turn(script.streamed, prompt))
    writer.write(b"0\r\n\r\n")
    await writer.drain()


async def _whole(writer: asyncio.StreamWriter, status: int, text: str) -> None:
    data = text.encode()
    writer.write(_head(status, "application/json", {"Content-Length": str(len(data))}) + data)
    await writer.drain()


def _head(status: int, content_type: str, headers: dict[str, str]) -> bytes:
    lines = [
        f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}",
        f"Content-Type: {content_type}",
        "Connection: close",
        *(f"{k}: {v}" for k, v in headers.items()),
    ]
    if "Content-Length" not in headers:
        lines.append("Transfer-Encoding: chunked")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def start_web_server() -> FaultServer:
    """Python's http.server on an empty directory: HTTP, but not an LLM server."""
    directory = tempfile.mkdtemp(prefix="not-an-llm-")
    handler = partial(_QuietHandler, directory=directory)
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()

    def stop() -> None:
        server.shutdown()
        server.server_close()

    return FaultServer(f"http://127.0.0.1:{server.server_address[1]}", stop, [])


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


# ---- the catalogue, for benchmarks/faults.py ---------------------------------------------

FAST_LIMITS = {
    "first_token_timeout_secs": 0.5,
    "idle_timeout_secs": 0.5,
    "request_timeout_secs": 1.0,
    "context_limit": 8192,
}
"""[model] settings that make every bound fire within a second."""

HTML_PAGE = (
    "<!DOCTYPE html>\n<html><head><title>400 Bad Request</title>\n<style>body {}</style>"
    "</head>\n<body>\n<h1>Bad Request</h1>\n<p>Your browser sent a request that this "
    "server could not understand.</p>\n" + "<p>filler line</p>\n" * 200 + "</body></html>\n"
)


@dataclass(frozen=True)
class Fault:
    """One way a server misbehaves, and what a run against it should do."""

    description: str
    acts: Callable[[], list[Act]]
    outcome: Literal["survived", "retried", "fails_fast"]
    """survived: the run goes on as if nothing happened; retried: the attempt fails (a retry
    event) and the next one succeeds; fails_fast: the run stops at once with one line and exit
    1, without retrying."""
    model: dict[str, Any] = field(default_factory=lambda: dict(FAST_LIMITS))
    """[model] settings for the run: small bounds where the fault needs them."""
    web_server: bool = False


FAULTS: dict[str, Fault] = {
    "trickle": Fault(
        "one token every 0.2 s, never finishing", lambda: [Trickle(interval=0.2)], "retried"
    ),
    "keepalive_first": Fault(
        "only keep-alive comments, no data at all", lambda: [KeepAlive(tokens=0)], "retried"
    ),
    "keepalive_idle": Fault(
        "two tokens, then only keep-alive comments", lambda: [KeepAlive(tokens=2)], "retried"
    ),
    "huge": Fault(
        "8 MB of text, ignoring max_tokens",
        lambda: [Huge()],
        "retried",
        model={**FAST_LIMITS, "max_output_tokens": 64},
    ),
    "retry_after": Fault(
        "429 with Retry-After: 2",
        lambda: [
            Status(
                status=429, text='{"error": {"message": "slow down"}}', headers={"Retry-After": "2"}
            )
        ],
        "retried",
        model={},
    ),
    "status_503": Fault(
        "503 while loading the model",
        lambda: [Status(status=503, text='{"error": {"message": "loading model"}}')],
        "retried",
        model={},
    ),
    "html_400": Fault(
        "400 with a long HTML page",
        lambda: [Status(status=400, text=HTML_PAGE, content_type="text/html")],
        "fails_fast",
        model={},
    ),
    "status_501": Fault(
        "501 on the chat endpoint",
        lambda: [Status(status=501, text='{"error": "not implemented"}')],
        "fails_fast",
        model={},
    ),
    "status_505": Fault(
        "505 HTTP version not supported",
        lambda: [Status(status=505, text="HTTP Version Not Supported", content_type="text/plain")],
        "fails_fast",
        model={},
    ),
    "web_server": Fault(
        "a plain web server (404 on GET, 501 on POST)",
        lambda: [],
        "fails_fast",
        model={},
        web_server=True,
    ),
    "choices_dict": Fault(
        "a chunk whose choices is an object",
        lambda: [Malformed(payload='{"choices": {"0": {}}}')],
        "retried",
        model={},
    ),
    "delta_string": Fault(
        "a chunk whose delta is a string",
        lambda: [Malformed(payload='{"choices": [{"delta": "hi"}]}')],
        "retried",
        model={},
    ),
    "lone_surrogate": Fault(
        "a lone UTF-16 surrogate in the text and a tool argument",
        lambda: [
            Good(
                reply=Reply(
                    "bad \ud800 text", [("file_write", {"path": "s.txt", "content": "x\udc00y"})]
                )
            )
        ],
        "survived",
        model={},
    ),
}
"""Every fault by name."""


def start(name: str, *, repeat: bool = False) -> FaultServer:
    """Start the server for `FAULTS[name]`: it misbehaves on the first streamed chat
    request (on every one with `repeat`), then answers well."""
    fault = FAULTS[name]
    return start_web_server() if fault.web_server else start_server(fault.acts(), repeat=repeat)


def run_against(
    project: Path, server: FaultServer, model: dict[str, Any], *args: str, max_turns: int = 1
) -> subprocess.CompletedProcess[str]:
    """`ouroboros run --headless` in a new project at `project` against `server`, with these
    [model] settings (and 10 s of retries): the real command, in this process
    (tests.helpers.ouroboros_here; a run that hangs fails at the suite's per-test timeout)."""
    config = make_project(
        project, server.base_url, model={"max_retry_secs": 10, "context_limit": 8192, **model}
    )
    return ouroboros_here(
        "run", "--config", str(config), "--headless", "--max-turns", str(max_turns), *args
    )
