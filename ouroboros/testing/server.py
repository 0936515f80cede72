"""The scripted model served over HTTP on 127.0.0.1, on a background thread, with outages.

An `outage` fault takes effect as soon as it reaches the front of the queue, before any
request consumes it: the server closes its listening socket and its idle connections, so
clients see connection refused, and comes back on the same port after `seconds`.

    with ScriptedServer([Reply("Done.")], context_length=4096) as server:
        server.inject(Fault("outage", seconds=2))
        ...                                        # talk to server.base_url
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterable

from ouroboros.testing.model import ScriptedModel
from ouroboros.testing.script import Brain, Fault, Reply
from ouroboros.testing.settings import ModelSettings
from ouroboros.testing.wire import error_body


class ScriptedServer(ScriptedModel):
    """A scripted Ollama on 127.0.0.1 (a background thread). Use as a context manager, or
    call start() and stop(). `settings` are the fields of ModelSettings, by name; `port` 0
    takes a free one."""

    def __init__(
        self, script: Brain | Iterable[Reply | Fault], *, port: int = 0, **settings: Any
    ) -> None:
        super().__init__(script, ModelSettings(**settings))
        self.port = port
        self.base_url = ""
        self.connections_opened = 0
        self._outage_starting = False
        self._stopping = threading.Event()
        self._down = threading.Event()  # the listening socket is closed (an outage)
        self._wake = threading.Event()  # an outage ends early: stop() or end_outage()
        self._connections: dict[_Handler, bool] = {}  # handler -> busy
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle

    def start(self) -> ScriptedServer:
        """Bind and serve on a background thread; returns the server, with its base_url."""
        if self._thread is not None:
            return self
        self._httpd = self._bind(self.port)
        self.port = self._httpd.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._serve, name="scripted-server", daemon=True)
        self._thread.start()
        self._await_outage_start()
        return self

    def stop(self) -> None:
        """Stop serving: joins the server thread, closes the socket and every connection."""
        if self._thread is None:
            return
        self._stopping.set()
        self._wake.set()
        self._thread.join()
        self._thread = None
        self._close_connections(idle_only=False)

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def inject(self, *faults: Fault) -> None:
        """Apply these faults to the next requests, in order, before the script; returns once
        an outage among them that is due has closed the socket."""
        super().inject(*faults)
        self._await_outage_start()

    def end_outage(self) -> None:
        """End the outage going on now before its time is up: the port is bound again."""
        self._wake.set()

    # -- the network

    def _bind(self, port: int) -> _HTTPServer:
        for _ in range(50):
            try:
                httpd = _HTTPServer(("127.0.0.1", port), _Handler)
            except OSError:
                if port == 0:
                    raise
                time.sleep(0.1)  # the port was taken for a moment; it comes back
                continue
            httpd.owner = self
            httpd.timeout = 0.05  # how often the serve loop looks at its flags
            return httpd
        raise OSError(f"cannot rebind 127.0.0.1:{port} after an outage")

    def _serve(self) -> None:
        try:
            while not self._stopping.is_set():
                outage = self._start_outage_if_due()
                if outage is None:
                    assert self._httpd is not None
                    self._httpd.handle_request()
                    continue
                self._wake.wait(outage.seconds)
                if self._stopping.is_set():
                    break
                self._httpd = self._bind(self.port)
                self._down.clear()
        finally:
            if self._httpd is not None:
                self._httpd.server_close()

    def _start_outage_if_due(self) -> Fault | None:
        with self._lock:
            outage = self._script.outage_due()
            if outage is None:
                return None
            self._script.take_outage()
            self._outage_starting = True
            self._wake.clear()
        assert self._httpd is not None
        self._httpd.server_close()
        self._down.set()
        self._close_connections(idle_only=True)
        with self._lock:
            self._outage_starting = False
            self._lock.notify_all()
        return outage

    def _await_outage_start(self) -> None:
        """Block until an outage at the front of the queue has closed the socket."""
        with self._lock:
            self._lock.wait_for(
                lambda: (
                    self._stopping.is_set()
                    or self._thread is None
                    or not (self._outage_starting or self._script.outage_due())
                ),
                timeout=10,
            )

    def _close_connections(self, *, idle_only: bool) -> None:
        with self._lock:
            handlers = [h for h, busy in self._connections.items() if not (busy and idle_only)]
        for handler in handlers:
            handler.hang_up()

    def _connection_state(self, handler: _Handler, busy: bool | None) -> None:
        with self._lock:
            if busy is None:
                self._connections.pop(handler, None)
            else:
                self.connections_opened += handler not in self._connections
                self._connections[handler] = busy


class _HTTPServer(ThreadingHTTPServer):
    owner: ScriptedServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], OSError):  # clients hanging up are no news
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    """Thin: parse, ask the ScriptedServer, write the bytes."""

    protocol_version = "HTTP/1.1"  # keep-alive and chunked streams, as Go's net/http
    server: _HTTPServer

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as Go does
        self.server.owner._connection_state(self, busy=False)

    def finish(self) -> None:
        self.server.owner._connection_state(self, busy=None)
        try:
            super().finish()
        except OSError:
            pass

    def hang_up(self) -> None:
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        """Answered whole once the connection counts as idle again: a client that has read
        the answer finds its connection among those an outage closes, never still busy."""
        owner = self.server.owner
        answer: list[Any] = []
        self._busy(lambda: answer.extend(owner.answer_get(self.path.split("?")[0])))
        if answer:
            self._send_json(*answer)

    def do_POST(self) -> None:
        self._busy(self._post)

    def _busy(self, work: Callable[[], None]) -> None:
        owner = self.server.owner
        owner._connection_state(self, busy=True)
        try:
            work()
        finally:
            owner._connection_state(self, busy=False)
            if owner._down.is_set() or owner._stopping.is_set():
                self.close_connection = True

    def _post(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        data = self.rfile.read(length)
        if len(data) < length:  # the client went away mid-request (a killed harness)
            return
        try:
            body = json.loads(data or b"{}")
        except ValueError:
            body = None
        if not isinstance(body, dict):
            self._send_json(400, error_body("invalid request body", 400))
            return
        path = self.path.split("?")[0]
        tokenized = self.server.owner.answer_tokenize(path, body)
        if tokenized is not None:
            self._send_json(*tokenized)
        elif path == "/api/show":
            self._send_json(*self.server.owner.answer_show(body))
        elif path == "/api/create":
            self._create(body)
        elif path == "/v1/chat/completions":
            self._chat(body)
        else:
            self._send_json(404, "404 page not found")

    def _create(self, body: dict[str, Any]) -> None:
        """Ollama's progress: one JSON object a line, each line a chunk, as it streams them."""
        status, answer = self.server.owner.answer_create(body)
        if not isinstance(answer, list):
            self._send_json(status, answer)
            return
        lines = [json.dumps(line, separators=(",", ":")).encode() + b"\n" for line in answer]
        self._send_stream(lines, abort=False, content_type="application/x-ndjson")

    def _chat(self, body: dict[str, Any]) -> None:
        owner = self.server.owner
        answer = owner.answer_chat(body)
        owner._await_outage_start()  # an outage due after this request closes the door first
        if answer.delay and owner._stopping.wait(answer.delay):
            self.hang_up()
            return
        if answer.json is not None:
            self._send_json(answer.status, answer.json)
        elif answer.raw is not None:
            self._send(answer.status, "application/json", answer.raw)
        elif answer.frames is not None:
            self._send_stream(answer.frames, abort=answer.abort)
        else:
            self.hang_up()
            self.close_connection = True

    def _send_json(self, status: int, body: Any) -> None:
        if isinstance(body, str):
            self._send(status, "text/plain; charset=utf-8", body.encode())
        else:
            self._send(status, "application/json; charset=utf-8", json.dumps(body).encode())

    def _send(self, status: int, content_type: str, data: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self._end_headers()
        self.wfile.write(data)

    def _send_stream(
        self, frames: list[bytes], *, abort: bool, content_type: str = "text/event-stream"
    ) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self._end_headers()
        for data in frames:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        if abort:  # no terminating chunk: the client sees the body cut off
            self.hang_up()
            self.close_connection = True
        else:
            self.wfile.write(b"0\r\n\r\n")

    def _end_headers(self) -> None:
        if self.server.owner._down.is_set():
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
