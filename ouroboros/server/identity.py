"""The model server at an address, as a person needs it named: what kind of server it is,
which models it has, and the ModelError each of its failures becomes.

    server = ModelServer("http://127.0.0.1:11434", "llama3.2", httpx.AsyncClient(...))
    await server.listed_models()        # ["llama3.2:latest", ...]; None when it does not say
    raise await server.status_error(404, body)   # ModelNotFoundError naming the models it has

Which family a failure belongs to is decided in `ouroboros.server.errors.classify`; this
module only words it, asking the server what it has when that helps the person.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from ouroboros.config.urls import shown_url
from ouroboros.errors import (
    AuthError,
    ContextOverflowError,
    ModelError,
    ModelNotFoundError,
    NotAnLLMServerError,
    PermanentModelError,
    ServerUnreachableError,
    ToolsNotSupportedError,
    TransientModelError,
)
from ouroboros.server.errors import NOT_AN_API, body_line, classify, error_details
from ouroboros.server.kinds import ServerKind, hint, kind_from_answers, kind_from_url
from ouroboros.server.kinds.family import IDENTIFYING_PATHS

CHAT_PATH = "/v1/chat/completions"
ERROR_BODY_BYTES = 64_000  # of an error body or a web page: one line of it is quoted


class ModelServer:
    """The server at `base_url` serving `model`, reached through `http`.

    `server_kind` None: guessed from the URL, or asked when the server answers.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        http: httpx.AsyncClient,
        server_kind: ServerKind | None = None,
    ) -> None:
        self.base_url = base_url
        self.model = model
        self.server_kind = server_kind
        self._http = http

    @property
    def http(self) -> httpx.AsyncClient:
        """The connection pool (with the API key), for other requests to the same server."""
        return self._http

    @property
    def shown_url(self) -> str:
        """The base URL as messages show it: without its password."""
        return shown_url(self.base_url)

    @property
    def server(self) -> str:
        """How errors name the server."""
        return f"the model server at {self.shown_url}"

    async def status_error(
        self,
        status: int,
        body: str,
        *,
        message: str | None = None,
        code: str | None = None,
        retry_after: float | None = None,
    ) -> ModelError:
        """The error a failed request means, quoting one line of the server's words."""
        if message is None:
            message, code = error_details(body)
        said = f"{status}: {message}"
        failure = classify(status, message, code)
        if failure == "transient":
            reason = "is rate limiting us" if status == 429 else "failed"
            wait = "" if retry_after is None else f"; it asked to wait {retry_after:g} s"
            return TransientModelError(
                f"{self.server} {reason} ({said}){wait}", retry_after=retry_after
            )
        if failure == "overflow":
            return ContextOverflowError(f"the prompt did not fit the model's context ({said})")
        if failure == "auth":
            return AuthError(
                f"{self.server} refused the request ({said}); put the API key in "
                "an environment variable and name it in model.api_key_env"
            )
        if failure == "not_an_api":
            return self.not_an_llm_server(f"POST {CHAT_PATH} answered {status} ({message})")
        if failure == "no_tools":
            return ToolsNotSupportedError(
                f"{self.model} does not support tools ({said}); "
                f"{hint(await self.detect_kind(), 'no_tools', self.model)}"
            )
        if failure == "model_not_found":
            return await self.missing_model(f" ({said})")
        return PermanentModelError(f"{self.server} rejected the request ({said})")

    async def stream_error(self, chunk: dict[str, Any]) -> ModelError:
        """An error object sent as a stream event (llama.cpp, vLLM), or as the whole answer."""
        message, code = error_details(json.dumps(chunk))
        error = chunk["error"]
        status = error.get("code") if isinstance(error, dict) else None
        if not isinstance(status, int) or status < 400:
            status = 500
        return await self.status_error(status, json.dumps(chunk), message=message, code=code)

    def not_an_llm_server(self, evidence: str) -> NotAnLLMServerError:
        return NotAnLLMServerError(
            f"{self.shown_url} answers HTTP but is not an OpenAI-compatible LLM server: "
            f"{evidence}; set model.base_url to the model server's address (Ollama listens "
            "on port 11434, llama-server on 8080, vLLM on 8000)"
        )

    def unreachable(self) -> ServerUnreachableError:
        kind = self.server_kind or kind_from_url(self.base_url)
        return ServerUnreachableError(
            f"cannot reach {self.server}: {hint(kind, 'unreachable', self.model)}"
        )

    async def missing_model(self, said: str = "") -> ModelNotFoundError:
        """The error for a model the server does not have, with the ones it has."""
        return ModelNotFoundError(
            f"{self.server} has no model {self.model!r}{said}; "
            f"{await self._available_models()}; "
            f"{hint(await self.detect_kind(), 'model_not_found', self.model)}"
        )

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
            evidence.append(f"GET {path} answered {described(response, response.text)}")
        try:
            async with self._http.stream("POST", CHAT_PATH, json={}, timeout=10) as response:
                body = await read_capped(response, ERROR_BODY_BYTES)
        except httpx.HTTPError:
            return None
        if not lacks_endpoint(response):
            return None
        evidence.append(f"POST {CHAT_PATH} answered {described(response, body)}")
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
        raise TransientModelError(f"could not list the models on {self.shown_url}")

    async def _available_models(self) -> str:
        try:
            models = await self.list_models()
        except TransientModelError:
            return "could not list the models the server has"
        if not models:
            return "the server has no models"
        return "the server has: " + ", ".join(models)

    async def detect_kind(self) -> ServerKind:
        """The kind the caller gave; else Ollama on its port; else what the server's answers
        say; else the URL's guess."""
        if self.server_kind is None:
            guess = kind_from_url(self.base_url)
            if guess != "ollama":
                answers = [await self._json(path) for path in IDENTIFYING_PATHS]
                guess = kind_from_answers(*answers) or guess
            self.server_kind = guess
        return self.server_kind

    async def _json(self, path: str) -> Any:
        try:
            response = await self._http.get(path, timeout=10)
            return response.json() if response.is_success else None
        except (httpx.HTTPError, ValueError):
            return None


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
    return response.status_code in NOT_AN_API or (response.is_success and is_html(response))


def is_html(response: httpx.Response) -> bool:
    return response.headers.get("content-type", "").startswith("text/html")


def described(response: httpx.Response, body: str) -> str:
    """ "404 (Not Found)", or "200 with an HTML page (Welcome)"."""
    line = body_line(body) or "empty"
    if response.is_success and is_html(response):
        return f"{response.status_code} with an HTML page ({line})"
    return f"{response.status_code} ({line})"
