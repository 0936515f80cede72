"""Streaming chat completions from an OpenAI-compatible server (Ollama's `/v1`).

    async with ChatClient("http://127.0.0.1:11434", "llama3.2") as client:
        result = await client.complete(messages, tools, on_text=print)

One call is one attempt: failures become the ModelError subclasses of `ouroboros.errors`
(which are transient is decided in `ouroboros.server_errors`) and retrying is the caller's
business (see `ouroboros.retry`). Every reply is bounded in time and size
(`ouroboros.reply_limits`); breaking a bound is a transient failure.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any, Literal

import httpx

from ouroboros.config import ModelConfig
from ouroboros.errors import (
    AuthError,
    ContextOverflowError,
    EmptyStreamError,
    ModelError,
    ModelNotFoundError,
    NotAnLLMServerError,
    PermanentModelError,
    ServerUnreachableError,
    ToolsNotSupportedError,
    TransientModelError,
)
from ouroboros.protocols import Message, StreamResult, TextSink, WireMessages
from ouroboros.reply_limits import ReplyLimits, ReplyWatch
from ouroboros.reply_limits import max_reply_bytes as reply_byte_limit
from ouroboros.server_errors import (
    NOT_AN_API,
    body_line,
    error_details,
    is_transient_status,
    parse_retry_after,
)
from ouroboros.sse import (
    MalformedChunk,
    SSEDecoder,
    StreamAccumulator,
    assign_call_ids,
    parse_data,
    parse_usage,
)
from ouroboros.tally import encode_json, wire_messages
from ouroboros.urls import normalize_base_url

CHAT_PATH = "/v1/chat/completions"
JSON_CONTENT = {"Content-Type": "application/json"}
DRAIN_SECS = 1.0  # after [DONE]: how long to wait for the body's end, to reuse the connection
ERROR_BODY_BYTES = 64_000  # of an error body or a web page: one line of it is quoted

ServerKind = Literal["ollama", "llama.cpp", "vllm", "other"]
# Each server's default port, for a guess before (or without) asking it.
DEFAULT_PORTS: dict[int, ServerKind] = {11434: "ollama", 8080: "llama.cpp", 8000: "vllm"}
Situation = Literal["unreachable", "model_not_found", "no_tools"]

_OVERFLOW_PHRASES = (
    "context length",
    "context_length",
    "context size",
    "context window",
    "prompt is too long",
    "too many tokens",
    "exceeds the available context",
)


def client_settings(model: ModelConfig) -> dict[str, Any]:
    """The `[model]` settings a ChatClient takes (and `configure` takes again at a session
    start): sampling and the reply limits."""
    return {
        "temperature": model.temperature,
        "max_output_tokens": model.max_output_tokens,
        "timeout_secs": model.request_timeout_secs,
        "first_token_secs": model.first_token_timeout_secs,
        "idle_secs": model.idle_timeout_secs,
        "max_reply_bytes": model.max_reply_bytes,
    }


def kind_from_url(base_url: str) -> ServerKind:
    """The server a URL suggests by its port: Ollama's 11434, llama-server's 8080, vLLM's
    8000; "other" for anything else."""
    return DEFAULT_PORTS.get(httpx.URL(normalize_base_url(base_url)).port or 0, "other")


def kind_from_answers(version: Any, props: Any, models: Any) -> ServerKind | None:
    """The server that gave these JSON bodies (None for an endpoint that failed): Ollama
    answers `/api/version`, llama.cpp `/props`, vLLM lists `max_model_len` in `/v1/models`."""
    if isinstance(version, dict) and "version" in version:
        return "ollama"
    if isinstance(props, dict) and ("default_generation_settings" in props or "n_ctx" in props):
        return "llama.cpp"
    entries = models.get("data") if isinstance(models, dict) else None
    if isinstance(entries, list) and any(isinstance(e, dict) and "max_model_len" in e
                                         for e in entries):
        return "vllm"
    return None


def hint(kind: ServerKind, situation: Situation, model: str = "<model>") -> str:
    """What to do about a failure, in the words of the server it happened on.

        hint("ollama", "model_not_found", "llama3.2")  # "run `ollama pull llama3.2` or ..."
    """
    elsewhere = "set model.base_url to point elsewhere"
    if situation == "unreachable":
        return {
            "ollama": "is `ollama serve` running there? (set model.base_url or OLLAMA_HOST to "
                      "point elsewhere)",
            "llama.cpp": f"is `llama-server -m <file.gguf>` running there? ({elsewhere})",
            "vllm": f"is `vllm serve {model}` running there? ({elsewhere})",
        }.get(kind, "is the model server running there (`ollama serve`, `llama-server` or "
                    f"`vllm serve`)? ({elsewhere})")
    if situation == "model_not_found":
        return {
            "ollama": f"run `ollama pull {model}` or set model.name to one of them",
            "llama.cpp": "set model.name to one of them (llama-server serves the model it was "
                         "started with)",
            "vllm": f"set model.name to one of them, or start `vllm serve {model}`",
        }.get(kind, "set model.name to one of them")
    return {
        "ollama": "choose a model with tool support, e.g. qwen3, qwen2.5 or llama3.1 "
                  "(`ollama show <name>` lists capabilities)",
        "llama.cpp": "start `llama-server --jinja` so it uses the model's tool-calling "
                     "template, or choose a model with tool support",
        "vllm": "start `vllm serve --enable-auto-tool-choice --tool-call-parser <parser>`, "
                "or choose a model with tool support",
    }.get(kind, "choose a model with tool support, e.g. qwen3, qwen2.5 or llama3.1")


class ChatClient:
    """A `ModelClient` for `/v1/chat/completions` with streaming and usage reporting.

    Every reply is bounded (see `ouroboros.reply_limits`): the first data within
    `first_token_secs`, no gap longer than `idle_secs`, all of it within `timeout_secs` and
    `max_reply_bytes` (0: derived from `max_output_tokens`). Breaking one is a transient
    failure, retried like a dropped stream.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        temperature: float = 0.7,
        max_output_tokens: int = 2048,
        timeout_secs: float = 600,
        first_token_secs: float = 300,
        idle_secs: float = 60,
        max_reply_bytes: int = 0,
        transport: httpx.AsyncBaseTransport | None = None,
        server_kind: ServerKind | None = None,
    ) -> None:
        self.base_url = normalize_base_url(base_url)
        self.server_kind = server_kind  # None: guessed from the URL, or asked when it answers
        self.model = model
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.AsyncClient(base_url=self.base_url, headers=headers,
                                       transport=transport)
        self.configure(temperature=temperature, max_output_tokens=max_output_tokens,
                       timeout_secs=timeout_secs, first_token_secs=first_token_secs,
                       idle_secs=idle_secs, max_reply_bytes=max_reply_bytes)

    async def __aenter__(self) -> ChatClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    @property
    def http(self) -> httpx.AsyncClient:
        """The connection pool (with the API key), for other requests to the same server."""
        return self._http

    async def aclose(self) -> None:
        await self._http.aclose()

    def configure(self, *, temperature: float, max_output_tokens: int, timeout_secs: float,
                  first_token_secs: float = 300, idle_secs: float = 60,
                  max_reply_bytes: int = 0) -> None:
        """New sampling settings and reply limits, from the next request on."""
        self.temperature = temperature
        self.max_output_tokens = max_output_tokens
        self.timeout_secs = timeout_secs
        self.limits = ReplyLimits(first_token_secs, idle_secs, timeout_secs,
                                  reply_byte_limit(max_output_tokens, max_reply_bytes))
        self._http.timeout = httpx.Timeout(timeout_secs)

    def request_body(self, messages: WireMessages, tools: list[dict[str, Any]]) -> bytes:
        return encode_body(self.model, messages, tools, {
            "stream": True,
            "stream_options": {"include_usage": True},
            "temperature": self.temperature,
            "max_tokens": self.max_output_tokens,
        })

    async def complete(
        self,
        messages: list[Message] | WireMessages,
        tools: list[dict[str, Any]],
        on_text: TextSink | None = None,
    ) -> StreamResult:
        """Stream one completion; `on_text` gets each piece of text as it arrives. Tool calls
        come back with ids unique in `messages` (made up where the server sent none).

        Raises a ModelError subclass for every failure (one attempt, no retries).
        """
        wire = messages if isinstance(messages, WireMessages) else wire_messages(messages)
        body = self.request_body(wire, tools)
        watch = ReplyWatch(self.limits, asyncio.get_running_loop().time())
        timer = asyncio.timeout_at(watch.deadline)
        try:
            async with timer:
                result = await self._exchange(body, on_text, watch, timer)
        except TimeoutError:
            raise TransientModelError(
                f"{self.server} was too slow: {watch.broken_bound()}"
            ) from None
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise self.unreachable() from exc
        except httpx.TimeoutException as exc:
            raise TransientModelError(f"{self.server} sent nothing in "
                                      f"time ({type(exc).__name__})") from exc
        except httpx.TransportError as exc:
            raise TransientModelError(
                f"the connection to {self.server} broke: "
                f"{type(exc).__name__}: {exc or 'no details'}"
            ) from exc
        calls = assign_call_ids(result.tool_calls, set(wire.call_ids))
        return replace(result, tool_calls=calls)

    async def _exchange(self, body: bytes, on_text: TextSink | None,
                        watch: ReplyWatch, timer: asyncio.Timeout) -> StreamResult:
        headers = {**JSON_CONTENT, "Content-Length": str(len(body))}
        async with self._http.stream("POST", CHAT_PATH, content=_once(body), headers=headers,
                                     timeout=None) as response:
            if not response.is_success:
                text = await read_capped(response, ERROR_BODY_BYTES)
                timer.reschedule(None)  # the reply is over; naming the error may ask the server
                retry_after = parse_retry_after(response.headers.get("retry-after"))
                raise await self._status_error(response.status_code, text,
                                               retry_after=retry_after)
            if _is_html(response):
                page = await read_capped(response, ERROR_BODY_BYTES)
                raise self.not_an_llm_server(f"POST {CHAT_PATH} answered "
                                             f"{_described(response, page)}")
            if response.headers.get("content-type", "").startswith("application/json"):
                watch.whole_body = True
                timer.reschedule(watch.deadline)
                return await self._whole_completion(await self._read_whole(response, watch))
            return await self._read_stream(response, on_text, watch, timer)

    async def _read_stream(self, response: httpx.Response, on_text: TextSink | None,
                           watch: ReplyWatch, timer: asyncio.Timeout) -> StreamResult:
        loop = asyncio.get_running_loop()
        decoder = SSEDecoder()
        accumulator = StreamAccumulator()
        payloads = 0
        received = response.aiter_bytes()
        async for data in received:
            if not watch.received(len(data)):
                raise self._oversize(watch)
            for payload in decoder.feed(data):
                payloads += 1
                chunk = self._parse_chunk(payload)
                if chunk is None:
                    if accumulator.chunks == 0:
                        raise self._empty_stream("only [DONE]")
                    await _drain(received, watch)
                    return accumulator.result()
                progress = accumulator.progress
                text = await self._take(accumulator, chunk, payload)
                if accumulator.progress != progress:
                    watch.progressed(loop.time())
                    timer.reschedule(watch.deadline)
                if text and on_text is not None:
                    on_text(text)
        trailing = decoder.close()  # a last line with no line ending
        if trailing == ["[DONE]"] and accumulator.chunks:
            return accumulator.result()
        if payloads == 0 and not trailing:
            raise self._empty_stream("no data")
        raise TransientModelError(
            f"the stream from {self.base_url} ended without [DONE] after {accumulator.chunks} "
            "chunks: the server failed mid-answer"
        )

    async def _read_whole(self, response: httpx.Response, watch: ReplyWatch) -> str:
        parts = []
        async for data in response.aiter_bytes():
            if not watch.received(len(data)):
                raise self._oversize(watch)
            parts.append(data)
        return b"".join(parts).decode("utf-8", errors="replace")

    async def _take(self, accumulator: StreamAccumulator, chunk: dict[str, Any],
                    payload: str) -> str:
        """Feed one chunk to the accumulator: an error event raises its ModelError, a chunk
        of the wrong shape a TransientModelError naming the field."""
        if "error" in chunk and not chunk.get("choices"):
            raise await self._stream_error(chunk)
        try:
            return accumulator.feed(chunk)
        except MalformedChunk as exc:
            raise self._malformed(str(exc), payload) from None

    def _parse_chunk(self, payload: str) -> dict[str, Any] | None:
        try:
            return parse_data(payload)
        except MalformedChunk as exc:
            raise self._malformed(str(exc), payload) from None
        except (ValueError, RecursionError):  # RecursionError: nested too deep to read
            raise self._malformed("not JSON", payload) from None

    def _malformed(self, reason: str, payload: str) -> TransientModelError:
        return TransientModelError(
            f"{self.server} sent a malformed chunk ({reason}): "
            f"{payload[:120]!r}"
        )

    def _oversize(self, watch: ReplyWatch) -> TransientModelError:
        return TransientModelError(
            f"{self.server} sent too much: {watch.oversize()}; "
            f"a server that honours max_tokens ({self.max_output_tokens}) stays far below it"
        )

    async def _whole_completion(self, body: str) -> StreamResult:
        """A server that ignored `stream: true` and answered one chat.completion object."""
        chunk = self._parse_chunk(body) or {}
        choices = chunk.get("choices")
        if "error" in chunk and not choices:
            raise await self._stream_error(chunk)
        if isinstance(choices, list):
            chunk["choices"] = [{**choice, "delta": choice.get("message") or {}}
                                if isinstance(choice, dict) else choice for choice in choices]
        accumulator = StreamAccumulator()
        await self._take(accumulator, chunk, body)
        return accumulator.result()

    async def _stream_error(self, chunk: dict[str, Any]) -> ModelError:
        """An error object sent as a stream event (llama.cpp, vLLM)."""
        message, code = error_details(json.dumps(chunk))
        error = chunk["error"]
        status = error.get("code") if isinstance(error, dict) else None
        if not isinstance(status, int) or status < 400:
            status = 500
        return await self._status_error(status, json.dumps(chunk), message=message, code=code)

    async def _status_error(
        self, status: int, body: str, *, message: str | None = None, code: str | None = None,
        retry_after: float | None = None,
    ) -> ModelError:
        """The error a status means, quoting one line of the server's words (see
        `server_errors` for which statuses are retried)."""
        if message is None:
            message, code = error_details(body)
        lowered = message.lower()
        said = f"{status}: {message}"
        overflow = _is_overflow(lowered, code)
        if status in (401, 403):
            return AuthError(
                f"{self.server} refused the request ({said}); put the API "
                "key in an environment variable and name it in model.api_key_env"
            )
        if is_transient_status(status) and not overflow:
            reason = "is rate limiting us" if status == 429 else "failed"
            wait = "" if retry_after is None else f"; it asked to wait {retry_after:g} s"
            return TransientModelError(
                f"{self.server} {reason} ({said}){wait}",
                retry_after=retry_after)
        if status in (405, 501):
            return self.not_an_llm_server(f"POST {CHAT_PATH} answered {status} ({message})")
        if "does not support tools" in lowered:
            return ToolsNotSupportedError(
                f"{self.model} does not support tools ({said}); "
                f"{hint(await self.detect_kind(), 'no_tools', self.model)}"
            )
        if overflow:
            return ContextOverflowError(f"the prompt did not fit the model's context ({said})")
        if status == 404 or ("not found" in lowered and "model" in lowered):
            return await self.missing_model(f" ({said})")
        return PermanentModelError(
            f"{self.server} rejected the request ({said})"
        )

    def not_an_llm_server(self, evidence: str) -> NotAnLLMServerError:
        return NotAnLLMServerError(
            f"{self.base_url} answers HTTP but is not an OpenAI-compatible LLM server: "
            f"{evidence}; set model.base_url to the model server's address (Ollama listens "
            "on port 11434, llama-server on 8080, vLLM on 8000)"
        )

    async def prompt_tokens(self, messages: list[Message] | WireMessages,
                            tools: list[dict[str, Any]]) -> int | None:
        """The server's count of a prompt, from a non-streaming request for one token (servers
        that send no usage in streams, like llama.cpp, send it here). None when it does not
        say; ContextOverflowError, with the server's words, when the prompt does not fit."""
        wire = messages if isinstance(messages, WireMessages) else wire_messages(messages)
        body = encode_body(self.model, wire, tools,
                           {"stream": False, "temperature": self.temperature, "max_tokens": 1})
        answer = None
        for attempt in range(2):  # llama.cpp drops the kept-alive connection after a failure
            try:
                async with asyncio.timeout(self.limits.total_secs):
                    answer = await self._post_capped(body)
                break
            except httpx.TransportError:
                if attempt:
                    return None
            except (httpx.HTTPError, TimeoutError):
                return None
        if answer is None:
            return None
        status, text = answer
        if not 200 <= status < 300:
            error = await self._status_error(status, text)
            if isinstance(error, ContextOverflowError):
                raise error
            return None
        try:
            usage = json.loads(text).get("usage")
        except (ValueError, AttributeError):
            return None
        return parse_usage(usage).prompt_tokens if isinstance(usage, dict) else None

    async def _post_capped(self, body: bytes) -> tuple[int, str]:
        async with self._http.stream("POST", CHAT_PATH, content=body,
                                     headers=JSON_CONTENT) as response:
            return response.status_code, await read_capped(response, self.limits.max_bytes)

    async def listed_models(self) -> list[str] | None:
        """At start: the models the server lists (`/v1/models`, else Ollama's `/api/tags`), or
        None when it does not say. ServerUnreachableError when nothing listens there;
        NotAnLLMServerError when a web server answers that has neither list nor the chat
        endpoint (asked with an empty request, which an LLM server refuses at no cost)."""
        evidence = []
        for path in ("/v1/models", "/api/tags"):
            try:
                response = await self._http.get(path, timeout=10)
            except httpx.ConnectError:
                raise self.unreachable() from None
            except httpx.HTTPError:
                return None
            names = model_names(path, response)
            if names is not None:
                return names
            if not lacks_endpoint(response):
                return None
            evidence.append(f"GET {path} answered {_described(response, response.text)}")
        try:
            async with self._http.stream("POST", CHAT_PATH, json={}, timeout=10) as response:
                body = await read_capped(response, ERROR_BODY_BYTES)
        except httpx.HTTPError:
            return None
        if not lacks_endpoint(response):
            return None
        evidence.append(f"POST {CHAT_PATH} answered {_described(response, body)}")
        raise self.not_an_llm_server(", ".join(evidence))

    async def list_models(self) -> list[str]:
        """Model names from `GET /v1/models`, or Ollama's `GET /api/tags` when that fails."""
        for path in ("/v1/models", "/api/tags"):
            try:
                names = model_names(path, await self._http.get(path, timeout=10))
            except httpx.HTTPError:
                names = None
            if names is not None:
                return names
        raise TransientModelError(f"could not list the models on {self.base_url}")

    async def _available_models(self) -> str:
        try:
            models = await self.list_models()
        except TransientModelError:
            return "could not list the models the server has"
        if not models:
            return "the server has no models"
        return "the server has: " + ", ".join(models)

    async def missing_model(self, said: str = "") -> ModelNotFoundError:
        """The error for a model the server does not have, with the ones it has."""
        return ModelNotFoundError(
            f"{self.server} has no model {self.model!r}{said}; "
            f"{await self._available_models()}; "
            f"{hint(await self.detect_kind(), 'model_not_found', self.model)}"
        )

    async def detect_kind(self) -> ServerKind:
        """The kind the caller gave; else Ollama on its port; else what the server's answers
        say; else the URL's guess."""
        if self.server_kind is None:
            guess = kind_from_url(self.base_url)
            if guess != "ollama":
                paths = ("/api/version", "/props", "/v1/models")
                guess = kind_from_answers(*[await self._json(path) for path in paths]) or guess
            self.server_kind = guess
        return self.server_kind

    async def _json(self, path: str) -> Any:
        try:
            response = await self._http.get(path, timeout=10)
            return response.json() if response.is_success else None
        except (httpx.HTTPError, ValueError):
            return None

    @property
    def server(self) -> str:
        """How errors name the server."""
        return f"the model server at {self.base_url}"

    def unreachable(self) -> ServerUnreachableError:
        kind = self.server_kind or kind_from_url(self.base_url)
        return ServerUnreachableError(
            f"cannot reach {self.server}: "
            f"{hint(kind, 'unreachable', self.model)}"
        )

    def _empty_stream(self, what: str) -> EmptyStreamError:
        return EmptyStreamError(
            f"{self.server} answered 200 with an empty stream ({what}); "
            "llama.cpp does this when the prompt is longer than its context"
        )


def encode_body(model: str, messages: WireMessages, tools: list[dict[str, Any]],
                settings: dict[str, Any]) -> bytes:
    """One chat request as JSON: the messages, encoded when they entered the conversation, are
    joined as they are, into the one buffer sent (a large body is costly to copy)."""
    head = b'{"model":' + encode_json(model) + b',"messages":['
    tail = b"]" + (b',"tools":' + encode_json(tools) if tools else b"")
    tail += b"," + encode_json(settings)[1:]
    if not messages.json:
        return head + tail
    pieces = list(messages.json)
    pieces[0] = head + pieces[0]
    pieces[-1] += tail
    return b",".join(pieces)


async def read_capped(response: httpx.Response, limit: int) -> str:
    """At most `limit` bytes of a streamed response's body, as text; the rest is not read."""
    parts, size = [], 0
    async for data in response.aiter_bytes():
        parts.append(data[: limit - size])
        size += len(parts[-1])
        if size >= limit:
            break
    return b"".join(parts).decode(response.encoding or "utf-8", errors="replace")


def model_names(path: str, response: httpx.Response) -> list[str] | None:
    """The model names in a `/v1/models` (`data[].id`) or `/api/tags` (`models[].name`)
    answer; None when it is not such a list."""
    key, field = ("data", "id") if path == "/v1/models" else ("models", "name")
    if not response.is_success:
        return None
    try:
        return [str(entry[field]) for entry in response.json()[key]]
    except (ValueError, KeyError, TypeError, IndexError):
        return None


def lacks_endpoint(response: httpx.Response) -> bool:
    """Whether an answer is a web server's for a path it does not have: 404, 405 or 501, or a
    web page."""
    return response.status_code in NOT_AN_API or (response.is_success and _is_html(response))


def _is_html(response: httpx.Response) -> bool:
    return response.headers.get("content-type", "").startswith("text/html")


def _described(response: httpx.Response, body: str) -> str:
    """"404 (Not Found)", or "200 with an HTML page (Welcome)"."""
    line = body_line(body) or "empty"
    if response.is_success and _is_html(response):
        return f"{response.status_code} with an HTML page ({line})"
    return f"{response.status_code} ({line})"


def _is_overflow(lowered_message: str, code: str | None) -> bool:
    if code == "context_length_exceeded":
        return True
    return any(phrase in lowered_message for phrase in _OVERFLOW_PHRASES)


async def _once(body: bytes) -> AsyncIterator[bytes]:
    """The request body as a one-shot stream: httpx then keeps no reference to it once sent
    (a bytes body stays on the Request, held by a reference cycle until a full collection,
    which at 10,000 messages is megabytes per turn)."""
    yield body


async def _drain(received: AsyncIterator[bytes], watch: ReplyWatch) -> None:
    """Read what follows [DONE] (normally only the end of the body) so the connection can be
    reused; a server that keeps talking, or stays silent, is left to close with it."""
    try:
        async with asyncio.timeout(DRAIN_SECS):
            async for data in received:
                if not watch.received(len(data)):
                    return
    except (TimeoutError, httpx.HTTPError):
        return
