"""Streaming chat completions from an OpenAI-compatible server (Ollama's `/v1`).

    async with ChatClient("http://127.0.0.1:11434", "llama3.2") as client:
        result = await client.complete(messages, tools, on_text=print)

One call is one attempt: failures become the ModelError subclasses of `ouroboros.errors`
and retrying is the caller's business (see `ouroboros.retry`).
"""

from __future__ import annotations

import json
from typing import Any, Literal

import httpx

from ouroboros.errors import (
    AuthError,
    ContextOverflowError,
    EmptyStreamError,
    ModelError,
    ModelNotFoundError,
    PermanentModelError,
    ServerUnreachableError,
    ToolsNotSupportedError,
    TransientModelError,
)
from ouroboros.protocols import Message, StreamResult, TextSink
from ouroboros.sse import SSEDecoder, StreamAccumulator, parse_data, parse_usage

DEFAULT_PORT = 11434

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


def normalize_base_url(url: str) -> str:
    """The server's root URL, as Ollama reads OLLAMA_HOST.

    `localhost:11434` -> `http://localhost:11434`; `0.0.0.0` -> `http://127.0.0.1:11434`
    (no scheme means Ollama's default port); `http://host:8080/v1/` -> `http://host:8080`.
    """
    url = url.strip()
    had_scheme = "://" in url
    parsed = httpx.URL(url if had_scheme else f"http://{url}")
    host = parsed.host or "127.0.0.1"
    if host in ("0.0.0.0", "::"):
        host = "127.0.0.1"
    port = parsed.port if parsed.port is not None or had_scheme else DEFAULT_PORT
    path = parsed.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    netloc = f"[{host}]" if ":" in host else host
    if port is not None:
        netloc = f"{netloc}:{port}"
    return f"{parsed.scheme}://{netloc}{path.rstrip('/')}"


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


def error_details(body: str) -> tuple[str, str | None]:
    """(message, code) from an error body: `{"error":{"message":..,"code":..}}`,
    `{"error":"..."}`, `{"message":..}`/`{"detail":..}`, or plain text. One line."""
    message, code = body.strip(), None
    try:
        parsed = json.loads(body)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        error = parsed.get("error", parsed)
        if isinstance(error, dict):
            message = str(error.get("message") or error.get("detail") or json.dumps(error))
            code = str(error["code"]) if error.get("code") is not None else None
        else:
            message = str(error)
    message = " ".join(message.split())
    if len(message) > 300:
        message = message[:297] + "..."
    return message or "(no message)", code


class ChatClient:
    """A `ModelClient` for `/v1/chat/completions` with streaming and usage reporting."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        temperature: float = 0.7,
        max_output_tokens: int = 2048,
        timeout_secs: float = 300,
        transport: httpx.AsyncBaseTransport | None = None,
        server_kind: ServerKind | None = None,
    ) -> None:
        self.base_url = normalize_base_url(base_url)
        self.server_kind = server_kind  # None: guessed from the URL, or asked when it answers
        self.model = model
        self.temperature = temperature
        self.max_output_tokens = max_output_tokens
        self.timeout_secs = timeout_secs
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            headers=headers,
            timeout=httpx.Timeout(timeout_secs),
            transport=transport,
        )

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

    def configure(self, *, temperature: float, max_output_tokens: int,
                  timeout_secs: float) -> None:
        """New sampling settings and request timeout, from the next request on."""
        self.temperature = temperature
        self.max_output_tokens = max_output_tokens
        self.timeout_secs = timeout_secs
        self._http.timeout = httpx.Timeout(timeout_secs)

    def request_body(self, messages: list[Message], tools: list[dict[str, Any]]) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        if tools:
            body["tools"] = tools
        body.update(
            stream=True,
            stream_options={"include_usage": True},
            temperature=self.temperature,
            max_tokens=self.max_output_tokens,
        )
        return body

    async def complete(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]],
        on_text: TextSink | None = None,
    ) -> StreamResult:
        """Stream one completion; `on_text` gets each piece of text as it arrives.

        Raises a ModelError subclass for every failure (one attempt, no retries).
        """
        body = self.request_body(messages, tools)
        try:
            async with self._http.stream("POST", "/v1/chat/completions", json=body) as response:
                if not response.is_success:
                    await response.aread()
                    raise await self._status_error(response.status_code, response.text)
                if response.headers.get("content-type", "").startswith("application/json"):
                    await response.aread()
                    return await self._whole_completion(response.text)
                return await self._read_stream(response, on_text)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise self.unreachable() from exc
        except httpx.TimeoutException as exc:
            raise TransientModelError(
                f"the model server at {self.base_url} sent nothing for {self.timeout_secs:g}s "
                f"({type(exc).__name__}); raise model.request_timeout_secs if it is just slow"
            ) from exc
        except httpx.TransportError as exc:
            raise TransientModelError(
                f"the connection to the model server at {self.base_url} broke: "
                f"{type(exc).__name__}: {exc or 'no details'}"
            ) from exc

    async def _read_stream(
        self, response: httpx.Response, on_text: TextSink | None
    ) -> StreamResult:
        decoder = SSEDecoder()
        accumulator = StreamAccumulator()
        payloads = 0
        async for data in response.aiter_bytes():
            for payload in decoder.feed(data):
                payloads += 1
                chunk = self._parse_chunk(payload)
                if chunk is None:
                    if accumulator.chunks == 0:
                        raise self._empty_stream("only [DONE]")
                    return accumulator.result()
                if "error" in chunk and not chunk.get("choices"):
                    raise await self._stream_error(chunk)
                text = accumulator.feed(chunk)
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

    def _parse_chunk(self, payload: str) -> dict[str, Any] | None:
        try:
            return parse_data(payload)
        except ValueError as exc:
            raise TransientModelError(
                f"the model server at {self.base_url} sent a chunk that is not a JSON object: "
                f"{payload[:120]!r}"
            ) from exc

    async def _whole_completion(self, body: str) -> StreamResult:
        """A server that ignored `stream: true` and answered one chat.completion object."""
        chunk = self._parse_chunk(body) or {}
        if "error" in chunk and not chunk.get("choices"):
            raise await self._stream_error(chunk)
        for choice in chunk.get("choices") or []:
            choice["delta"] = choice.pop("message", None) or {}
        accumulator = StreamAccumulator()
        accumulator.feed(chunk)
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
        self, status: int, body: str, *, message: str | None = None, code: str | None = None
    ) -> ModelError:
        if message is None:
            message, code = error_details(body)
        lowered = message.lower()
        said = f"{status}: {message}"
        if status in (401, 403):
            return AuthError(
                f"the model server at {self.base_url} refused the request ({said}); put the API "
                "key in an environment variable and name it in model.api_key_env"
            )
        if status in (408, 429) or (status >= 500 and not _is_overflow(lowered, code)):
            reason = "is rate limiting us" if status == 429 else "failed"
            return TransientModelError(f"the model server at {self.base_url} {reason} ({said})")
        if "does not support tools" in lowered:
            return ToolsNotSupportedError(
                f"{self.model} does not support tools ({said}); "
                f"{hint(await self.detect_kind(), 'no_tools', self.model)}"
            )
        if _is_overflow(lowered, code):
            return ContextOverflowError(f"the prompt did not fit the model's context ({said})")
        if status == 404 or ("not found" in lowered and "model" in lowered):
            return await self.missing_model(f" ({said})")
        return PermanentModelError(
            f"the model server at {self.base_url} rejected the request ({said})"
        )

    async def prompt_tokens(self, messages: list[Message], tools: list[dict[str, Any]]) -> int | None:
        """The server's count of a prompt, from a non-streaming request for one token (servers
        that send no usage in streams, like llama.cpp, send it here). None when it does not
        say; ContextOverflowError, with the server's words, when the prompt does not fit."""
        body = {**self.request_body(messages, tools), "stream": False, "max_tokens": 1}
        del body["stream_options"]
        for attempt in range(2):  # llama.cpp drops the kept-alive connection after a failure
            try:
                response = await self._http.post("/v1/chat/completions", json=body)
                break
            except httpx.TransportError:
                if attempt:
                    return None
            except httpx.HTTPError:
                return None
        if not response.is_success:
            error = await self._status_error(response.status_code, response.text)
            if isinstance(error, ContextOverflowError):
                raise error
            return None
        try:
            usage = response.json().get("usage")
        except (ValueError, AttributeError):
            return None
        return parse_usage(usage).prompt_tokens if isinstance(usage, dict) else None

    async def list_models(self) -> list[str]:
        """Model names from `GET /v1/models`, or Ollama's `GET /api/tags` when that fails."""
        try:
            response = await self._http.get("/v1/models", timeout=10)
            response.raise_for_status()
            return [str(entry["id"]) for entry in response.json()["data"]]
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            pass
        try:
            response = await self._http.get("/api/tags", timeout=10)
            response.raise_for_status()
            return [str(entry["name"]) for entry in response.json()["models"]]
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            raise TransientModelError(
                f"could not list the models on {self.base_url}: {type(exc).__name__}: {exc}"
            ) from exc

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
            f"the model server at {self.base_url} has no model {self.model!r}{said}; "
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

    def unreachable(self) -> ServerUnreachableError:
        kind = self.server_kind or kind_from_url(self.base_url)
        return ServerUnreachableError(
            f"cannot reach the model server at {self.base_url}: "
            f"{hint(kind, 'unreachable', self.model)}"
        )

    def _empty_stream(self, what: str) -> EmptyStreamError:
        return EmptyStreamError(
            f"the model server at {self.base_url} answered 200 with an empty stream ({what}); "
            "llama.cpp does this when the prompt is longer than its context"
        )


def _is_overflow(lowered_message: str, code: str | None) -> bool:
    if code == "context_length_exceeded":
        return True
    return any(phrase in lowered_message for phrase in _OVERFLOW_PHRASES)
