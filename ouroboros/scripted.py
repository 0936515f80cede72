"""The scripted model server: a real HTTP server on 127.0.0.1 that speaks Ollama's API.

It answers from a script instead of a model, with the bytes Ollama sends (see
OLLAMA_WIRE.md), and can inject each failure a real server shows. `ouroboros demo`, the
tests and the benchmarks run against it.

    with ScriptedServer([Reply("Reading it.", [("file_read", {"path": "a.txt"})]),
                         Fault("status", 503),
                         Reply("Done.")]) as server:
        client = ChatClient(server.base_url, "scripted")
        ...
        server.requests[0]["messages"]      # what the client sent

A list script is consumed one item per chat request; a Brain is called with the messages the
model would see (after any truncation). Injected faults come before the script. An `outage`
takes effect as soon as it reaches the front of the queue, before any request consumes it:
the server closes its listening socket and its idle connections, so clients see connection
refused, and comes back on the same port after `seconds`.

Prompt tokens are counted by a `ServerTokenizer` (scripted_tokens.py), by default one token
per word or punctuation mark, not by any characters-per-token ratio; `usage` makes the server
report them the way a buggy server does, and `tokenize` serves a tokenizer endpoint.
`server.prompt_tokens` always records the true count of each chat request.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterable, Iterator, Literal, Sequence

from ouroboros.discovery import same_model, with_tag
from ouroboros.protocols import Message, Usage
from ouroboros.scripted_tokens import TOKENIZERS, ServerTokenizer

SCRIPT_FINISHED = "(script finished)"
OVERFLOW_MESSAGE = "the prompt is longer than the context length currently available to the model"
DONE_FRAME = b"data: [DONE]\n\n"
GARBAGE_FRAME = b"data: {not json\n\n"
OLLAMA_VERSION = "0.13.0"
TRAINED_CONTEXT = 131072
_ARGUMENT_FRAGMENT = 6  # characters per streamed argument piece in fragmented mode

UsageMode = Literal["whole", "zero", "null", "absent", "uncached"]
"""How `prompt_tokens` is reported: the whole prompt; 0; null; no key at all; or only the
part not in the prompt cache (ollama#16414)."""
TokenizeFamily = Literal["llama.cpp", "llama-cpp-python", "vllm"]
TOKENIZE_PATHS: dict[str, str] = {
    "llama.cpp": "/tokenize",
    "llama-cpp-python": "/extras/tokenize/count",
    "vllm": "/tokenize",
}
_TOKENIZE_FIELD = {"llama.cpp": "content", "llama-cpp-python": "input", "vllm": "prompt"}


@dataclass
class Reply:
    """One model turn."""

    text: str = ""
    tool_calls: list[tuple[str, dict[str, Any] | str]] = field(default_factory=list)
    """(name, arguments); a str is sent verbatim, which lets tests send broken JSON."""
    reasoning: str = ""
    """Sent as `delta.reasoning` before the text, as thinking models do."""


@dataclass
class Fault:
    """An injected failure for one request."""

    kind: Literal["status", "drop", "garbage", "no_done", "empty", "outage", "slow"]
    status: int = 500
    message: str = "internal error"
    seconds: float = 0.0
    """outage: refuse connections this long; slow: delay before the first byte."""


Brain = Callable[[list[Message]], Reply]


# ---- The wire format, as pure functions ------------------------------------------------


def frame(payload: dict[str, Any]) -> bytes:
    """One SSE frame the way Ollama writes it."""
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def split_text(text: str) -> list[str]:
    """Text as streamed deltas: a word each, whitespace leading ("Hello", " world")."""
    return re.findall(r"\s*\S+|\s+$", text)


def arguments_text(arguments: dict[str, Any] | str) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments, separators=(",", ":"))


def tool_call_id(request_number: int, index: int) -> str:
    return f"call_{request_number:05d}{index:03d}"


def error_body(message: str, status: int) -> dict[str, Any]:
    """Ollama's `/v1` error body."""
    kind = {400: "invalid_request_error", 404: "not_found_error"}.get(status, "api_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


def usage_wire(
    usage: Usage, mode: UsageMode = "whole", cached_tokens: int | None = None
) -> dict[str, Any]:
    """The `usage` object as a server in this mode sends it. For "uncached" the caller passes
    the uncached count as `usage.prompt_tokens`; `cached_tokens` adds prompt_tokens_details."""
    prompt = usage.prompt_tokens if mode in ("whole", "uncached") else 0
    wire: dict[str, Any] = {
        "prompt_tokens": None if mode == "null" else prompt,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": prompt + usage.completion_tokens,
    }
    if mode == "absent":
        del wire["prompt_tokens"]
    if cached_tokens is not None:
        wire["prompt_tokens_details"] = {"cached_tokens": cached_tokens}
    return wire


def render_deltas(
    reply: Reply, *, request_number: int = 1, fragment_tool_calls: bool = False
) -> list[dict[str, Any]]:
    """The reply's deltas without role or finish: reasoning, text, then tool calls."""
    deltas: list[dict[str, Any]] = [{"reasoning": piece} for piece in split_text(reply.reasoning)]
    deltas += [{"content": piece} for piece in split_text(reply.text)]
    calls = [
        (index, tool_call_id(request_number, index), name, arguments_text(arguments))
        for index, (name, arguments) in enumerate(reply.tool_calls)
    ]
    if calls and not fragment_tool_calls:  # Ollama: every call whole, in one chunk
        deltas.append({"tool_calls": [_whole_call(*call) for call in calls]})
    for index, call_id, name, arguments in calls if fragment_tool_calls else []:
        head = {"index": index, "id": call_id, "type": "function"}
        deltas.append({"tool_calls": [{**head, "function": {"name": name, "arguments": ""}}]})
        for start in range(0, len(arguments), _ARGUMENT_FRAGMENT):
            piece = arguments[start : start + _ARGUMENT_FRAGMENT]
            deltas.append({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    return deltas


def _whole_call(index: int, call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {
        "id": call_id,
        "index": index,
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


def render_stream(
    reply: Reply,
    *,
    model: str,
    wire: Literal["current", "legacy"] = "current",
    fragment_tool_calls: bool = False,
    usage: dict[str, Any] | None = None,
    request_number: int = 1,
    created: int = 0,
    done: bool = True,
) -> list[bytes]:
    """Every SSE frame of one streamed answer, `[DONE]` last unless `done` is False; a chunk
    with `usage` (a usage_wire object) before `[DONE]` if given.

    current: role only in the first delta, finish_reason in a last chunk of its own.
    legacy (Ollama before v0.32.6): role and content in every delta, finish_reason `stop` on
    the last delta even after tool calls.
    """
    deltas = render_deltas(
        reply, request_number=request_number, fragment_tool_calls=fragment_tool_calls
    )
    if not deltas:
        deltas = [{"content": ""}]
    if wire == "legacy":
        deltas = [{"role": "assistant", "content": "", **delta} for delta in deltas]
        finishes: list[str | None] = [None] * (len(deltas) - 1) + ["stop"]
    else:
        deltas[0] = {"role": "assistant", **deltas[0]}
        deltas.append({})
        finishes = [None] * (len(deltas) - 1) + ["tool_calls" if reply.tool_calls else "stop"]
    head = {
        "id": f"chatcmpl-{request_number}",
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "system_fingerprint": "fp_ollama",
    }
    frames = [
        frame({**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        for delta, finish in zip(deltas, finishes)
    ]
    if usage is not None:
        frames.append(frame({**head, "choices": [], "usage": usage}))
    return frames + [DONE_FRAME] if done else frames


def render_completion(
    reply: Reply,
    *,
    model: str,
    usage: dict[str, Any],
    request_number: int = 1,
    created: int = 0,
) -> dict[str, Any]:
    """The non-streaming `chat.completion` object; `usage` is a usage_wire object."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.text}
    if reply.reasoning:
        message["reasoning"] = reply.reasoning
    if reply.tool_calls:
        message["tool_calls"] = [
            _whole_call(index, tool_call_id(request_number, index), name, arguments_text(arguments))
            for index, (name, arguments) in enumerate(reply.tool_calls)
        ]
    return {
        "id": f"chatcmpl-{request_number}",
        "object": "chat.completion",
        "created": created,
        "model": model,
        "system_fingerprint": "fp_ollama",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if reply.tool_calls else "stop",
            }
        ],
        "usage": usage,
    }


@dataclass
class _Answer:
    """What the handler writes for one chat request."""

    status: int = 200
    json: dict[str, Any] | None = None
    frames: list[bytes] | None = None  # an event stream, one HTTP chunk per frame
    raw: bytes | None = None  # a body that is not what it claims (garbage, empty)
    abort: bool = False  # close the connection after the frames, without finishing
    delay: float = 0.0


# ---- The server -------------------------------------------------------------------------


class ScriptedServer:
    """A scripted Ollama on 127.0.0.1 (a background thread). Use as a context manager, or
    call start() and stop()."""

    def __init__(
        self,
        script: Brain | Iterable[Reply | Fault],
        *,
        model: str = "scripted",
        wire: Literal["current", "legacy"] = "current",
        fragment_tool_calls: bool = False,
        send_usage: bool = True,
        context_length: int | None = 8192,
        overflow: Literal["truncate", "error", "empty"] = "truncate",
        tools_supported: bool = True,
        tokenizer: ServerTokenizer = TOKENIZERS["words"],
        usage: UsageMode = "whole",
        report_cached: bool = False,
        tokenize: TokenizeFamily | None = None,
        extra_models: Sequence[str] = (),
        port: int = 0,
    ) -> None:
        self._brain: Brain | None = script if callable(script) else None
        self._script: Iterator[Reply | Fault] = iter(() if callable(script) else script)
        self._script_head: deque[Reply | Fault] = deque()
        self._faults: deque[Fault] = deque()
        self.model = model
        self.wire = wire
        self.fragment_tool_calls = fragment_tool_calls
        self.send_usage = send_usage
        self.context_length = context_length
        self.overflow = overflow
        self.tools_supported = tools_supported
        self.tokenizer = tokenizer
        self.usage = usage
        self.report_cached = report_cached
        self.tokenize = tokenize
        self.models = [model, *extra_models]

        self.requests: list[dict[str, Any]] = []
        self.count_requests: list[dict[str, Any]] = []  # one-token requests asking for a count
        self.prompt_tokens: list[int] = []  # the true count of every chat request
        self.over_limit = 0
        self.tokenize_requests = 0
        self._cached: tuple[list[Message], Any] = ([], None)  # the last prompt the model read

        self.port = port
        self.base_url = ""
        self._lock = threading.Condition()  # guards the queues, the records and the outage state
        self._served_chat = False
        self._outage_starting = False
        self._stopping = threading.Event()
        self._down = threading.Event()  # the listening socket is closed (an outage)
        self._connections: dict[_Handler, bool] = {}  # handler -> busy
        self.connections_opened = 0
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle

    def start(self) -> ScriptedServer:
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
        self._thread.join()
        self._thread = None
        self._close_connections(idle_only=False)

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def inject(self, *faults: Fault) -> None:
        """Apply these faults to the next requests, in order, before the script."""
        with self._lock:
            self._faults.extend(faults)
        self._await_outage_start()

    # -- the model

    def count_tokens(self, messages: list[Message], tools: list[dict[str, Any]] | None) -> int:
        """The whole prompt's tokens, as this server's tokenizer counts them."""
        return self.tokenizer.count(messages, tools)

    def truncate(
        self, messages: list[Message], tools: list[dict[str, Any]] | None
    ) -> list[Message]:
        """What Ollama keeps of an oversized prompt: whole messages dropped from the front,
        system messages and the last message kept."""
        kept = list(messages)
        assert self.context_length is not None
        while self.count_tokens(kept, tools) > self.context_length:
            droppable = [i for i, m in enumerate(kept[:-1]) if m.get("role") != "system"]
            if not droppable:
                break
            del kept[droppable[0]]
        return kept

    def _answer_chat(self, body: dict[str, Any]) -> _Answer:
        """Record the request and decide its answer: a fault, or what the model does."""
        with self._lock:
            if body.get("max_tokens") == 1 and not body.get("stream"):
                return self._count_answer(body)
            self.requests.append(body)
            prompt = self.count_tokens(body.get("messages") or [], body.get("tools"))
            self.prompt_tokens.append(prompt)
            over = self.context_length is not None and prompt > self.context_length
            self.over_limit += int(over)
            if self._outage_due() is not None:  # accepted just before the outage closed the door
                return _Answer(abort=True)
            fault = self._next_fault()
            if fault is None or fault.kind == "slow":
                answer = self._model_answer(body, prompt, over)
                answer.delay += fault.seconds if fault else 0.0
                return answer
            return self._fault_answer(fault, body)

    def _count_answer(self, body: dict[str, Any]) -> _Answer:
        """A one-token, non-streaming request, the way clients ask a server that sends no
        usage in streams to count a prompt: answered with its usage, the script untouched."""
        self.count_requests.append(body)
        messages, tools = body.get("messages") or [], body.get("tools")
        prompt = self.count_tokens(messages, tools)
        over = self.context_length is not None and prompt > self.context_length
        refusal = self._refusal(body, over, prompt)
        if refusal is not None:
            return refusal
        if over:
            prompt = min(self.count_tokens(self.truncate(messages, tools), tools), prompt)
        usage = usage_wire(Usage(prompt, 1), "whole" if self.usage == "uncached" else self.usage)
        return _Answer(json=render_completion(Reply(""), model=str(body.get("model")),
                                              usage=usage))

    def _model_answer(self, body: dict[str, Any], prompt: int, over: bool) -> _Answer:
        refusal = self._refusal(body, over, prompt)
        if refusal is not None:
            return refusal
        messages, tools = body.get("messages") or [], body.get("tools")
        if over:
            messages = self.truncate(messages, tools)
            prompt = min(self.count_tokens(messages, tools), self.context_length or prompt)
        common = self._read_prompt(messages, tools)
        delay = 0.0
        item = self._next_item(messages)
        while isinstance(item, Fault) and item.kind == "slow":
            delay += item.seconds
            item = self._next_item(messages)
        if isinstance(item, Fault):
            answer = self._fault_answer(item, body)
        else:
            usage = self._usage(item, prompt, messages, tools, common)
            answer = self._reply_answer(item, body, usage)
        answer.delay = delay
        return answer

    def _refusal(self, body: dict[str, Any], over: bool, prompt: int) -> _Answer | None:
        """Ollama's 404 and 400 answers, and the overflow modes other than truncation."""
        name = str(body.get("model", ""))
        if not any(same_model(name, known) for known in self.models):
            return _Answer(404, error_body(f"model '{name}' not found", 404))
        if body.get("tools") and not self.tools_supported:
            return _Answer(400, error_body(f"{name} does not support tools", 400))
        self._served_chat = True
        if not over or self.overflow == "truncate":
            return None
        if self.overflow == "error":
            return _Answer(400, error_body(OVERFLOW_MESSAGE, 400))
        if body.get("stream"):  # llama.cpp: a 200 with nothing in it
            return _Answer(frames=[])
        message = (
            f"This model's maximum context length is {self.context_length} tokens. However, you "
            f"requested {prompt} tokens. Please reduce the length of the messages."
        )
        error = {
            "message": message,
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
        return _Answer(400, {"error": error})

    def _read_prompt(self, messages: list[Message], tools: Any) -> int:
        """Put this prompt in the cache; return how many leading messages it shares with the
        previous one (none if the tools changed)."""
        cached_messages, cached_tools = self._cached
        self._cached = (list(messages), tools)
        if tools != cached_tools:
            return 0
        common = 0
        for new, old in zip(messages, cached_messages):
            if new != old:
                break
            common += 1
        return common

    def _usage(
        self, reply: Reply, prompt: int, messages: list[Message], tools: Any, common: int
    ) -> dict[str, Any]:
        """The usage object to send: `prompt` (the count of what the model read) as the
        usage mode reports it, and the completion counted by the tokenizer."""
        texts = [reply.text]
        for name, arguments in reply.tool_calls:
            texts += [name, arguments_text(arguments)]
        completion = max(1, sum(self.tokenizer.count_text(text) for text in texts))
        cached = self.count_tokens(messages[:common], tools) if common else 0
        if self.usage == "uncached" and common:  # Ollama evaluates at least one token
            prompt = min(prompt, max(1, self.count_tokens(messages[common:], None)))
        report_cached = self.report_cached and self.usage == "whole"
        cached_tokens = min(cached, prompt) if report_cached else None
        return usage_wire(Usage(prompt, completion), self.usage, cached_tokens)

    def _reply_answer(self, reply: Reply, body: dict[str, Any], usage: dict[str, Any]) -> _Answer:
        model, number, created = str(body.get("model")), len(self.requests), int(time.time())
        if not body.get("stream"):
            return _Answer(
                json=render_completion(
                    reply, model=model, usage=usage, request_number=number, created=created
                )
            )
        wants_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        frames = render_stream(
            reply,
            model=model,
            wire=self.wire,
            fragment_tool_calls=self.fragment_tool_calls,
            usage=usage if self.send_usage and wants_usage else None,
            request_number=number,
            created=created,
        )
        return _Answer(frames=frames)

    def _fault_answer(self, fault: Fault, body: dict[str, Any]) -> _Answer:
        streaming = bool(body.get("stream"))
        if fault.kind == "status":
            return _Answer(fault.status, error_body(fault.message, fault.status))
        if fault.kind == "empty":
            return _Answer(frames=[]) if streaming else _Answer(raw=b"")
        if fault.kind == "outage":  # from a Brain or after a slow: start it, drop this request
            self._faults.appendleft(fault)
            return _Answer(abort=True)
        model, number = str(body.get("model")), len(self.requests)
        partial = Reply("This answer will not arrive whole, sorry about that.")
        frames = render_stream(
            partial, model=model, wire=self.wire, request_number=number, done=False
        )
        if fault.kind == "drop":
            return _Answer(frames=frames[:3] if streaming else None, abort=True)
        if fault.kind == "garbage":
            if not streaming:
                return _Answer(raw=b"{not json")
            return _Answer(frames=frames[:2] + [GARBAGE_FRAME] + frames[2:] + [DONE_FRAME])
        if fault.kind == "no_done":
            if not streaming:  # nothing to leave out: a whole answer
                usage = usage_wire(Usage(self.prompt_tokens[-1], 1))
                return _Answer(json=render_completion(partial, model=model, usage=usage))
            return _Answer(frames=frames)
        raise ValueError(f"unknown fault kind {fault.kind!r}")

    # -- the queues (called with the lock held)

    def _peek_script(self) -> Reply | Fault | None:
        if not self._script_head:
            item = next(self._script, None)
            if item is not None:
                self._script_head.append(item)
        return self._script_head[0] if self._script_head else None

    def _next_fault(self) -> Fault | None:
        """The injected fault for this request, or the script's when it is a Fault."""
        if self._faults:
            return self._faults.popleft()
        head = self._peek_script()
        if isinstance(head, Fault):
            self._script_head.popleft()
            return head
        return None

    def _next_item(self, messages: list[Message]) -> Reply | Fault:
        if self._brain is not None:
            return self._brain(messages)
        if self._peek_script() is None:
            return Reply(SCRIPT_FINISHED)
        return self._script_head.popleft()

    def _outage_due(self) -> Fault | None:
        head = self._faults[0] if self._faults else self._peek_script()
        return head if isinstance(head, Fault) and head.kind == "outage" else None

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
                if self._stopping.wait(outage.seconds):
                    break
                self._httpd = self._bind(self.port)
                self._down.clear()
        finally:
            if self._httpd is not None:
                self._httpd.server_close()

    def _start_outage_if_due(self) -> Fault | None:
        with self._lock:
            outage = self._outage_due()
            if outage is None:
                return None
            if self._faults:
                self._faults.popleft()
            else:
                self._script_head.popleft()
            self._outage_starting = True
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
                lambda: self._stopping.is_set()
                or self._thread is None
                or not (self._outage_starting or self._outage_due()),
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

    def _tags(self) -> list[dict[str, Any]]:
        return [
            {
                "name": with_tag(name),
                "model": with_tag(name),
                "modified_at": "2025-01-01T00:00:00Z",
                "size": 2019393189,
                "digest": hashlib.sha256(name.encode()).hexdigest(),
                "details": {"format": "gguf", "family": "llama", "parameter_size": "3.2B"},
            }
            for name in self.models
        ]

    def _get(self, path: str) -> tuple[int, Any]:
        if path == "/":
            return 200, "Ollama is running"
        if path == "/api/version":
            return 200, {"version": OLLAMA_VERSION}
        if path == "/api/tags":
            return 200, {"models": self._tags()}
        if path == "/v1/models":
            data = [
                {"id": with_tag(name), "object": "model", "created": 0, "owned_by": "library"}
                for name in self.models
            ]
            return 200, {"object": "list", "data": data}
        if path == "/api/ps":
            with self._lock:
                loaded = self._served_chat
            models = []
            if loaded:
                entry = {**self._tags()[0], "expires_at": "2099-01-01T00:00:00Z", "size_vram": 1}
                if self.context_length is not None:
                    entry["context_length"] = self.context_length
                models.append(entry)
            return 200, {"models": models}
        return 404, "404 page not found"

    def _show(self, body: dict[str, Any]) -> tuple[int, Any]:
        name = str(body.get("model") or body.get("name") or "")
        if not any(same_model(name, known) for known in self.models):
            return 404, {"error": f"model '{name}' not found"}
        parameters = 'stop                           "<|eot_id|>"'
        if self.context_length is not None:
            parameters = f"num_ctx                        {self.context_length}\n{parameters}"
        return 200, {
            "modelfile": f"FROM {name}\n",
            "parameters": parameters,
            "template": "{{ .Prompt }}",
            "details": {"format": "gguf", "family": "llama", "parameter_size": "3.2B"},
            "model_info": {
                "general.architecture": "llama",
                "general.parameter_count": 3212749888,
                "llama.context_length": TRAINED_CONTEXT,
            },
            "capabilities": ["completion", "tools"] if self.tools_supported else ["completion"],
        }

    def _tokenize(self, path: str, body: dict[str, Any]) -> tuple[int, Any] | None:
        """The tokenizer endpoint of the `tokenize` family, or None if `path` is not it."""
        if self.tokenize is None or path != TOKENIZE_PATHS[self.tokenize]:
            return None
        with self._lock:
            self.tokenize_requests += 1
        if self.tokenize == "vllm" and isinstance(body.get("messages"), list):  # chat form
            count = self.count_tokens(body["messages"], body.get("tools"))
        else:
            text = body.get(_TOKENIZE_FIELD[self.tokenize])
            if not isinstance(text, str):
                message = f"'{_TOKENIZE_FIELD[self.tokenize]}' must be a string"
                return 400, error_body(message, 400)
            count = self.tokenizer.count_text(text)
        if self.tokenize == "llama.cpp":
            return 200, {"tokens": list(range(count))}
        if self.tokenize == "llama-cpp-python":
            return 200, {"count": count}
        max_model_len = self.context_length or TRAINED_CONTEXT
        return 200, {"count": count, "max_model_len": max_model_len, "tokens": list(range(count))}


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
        self._busy(lambda: self._send_json(*self.server.owner._get(self.path.split("?")[0])))

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
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            body = None
        if not isinstance(body, dict):
            self._send_json(400, error_body("invalid request body", 400))
            return
        path = self.path.split("?")[0]
        tokenized = self.server.owner._tokenize(path, body)
        if tokenized is not None:
            self._send_json(*tokenized)
        elif path == "/api/show":
            self._send_json(*self.server.owner._show(body))
        elif path == "/v1/chat/completions":
            self._chat(body)
        else:
            self._send_json(404, "404 page not found")

    def _chat(self, body: dict[str, Any]) -> None:
        owner = self.server.owner
        answer = owner._answer_chat(body)
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

    def _send_stream(self, frames: list[bytes], *, abort: bool) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
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
