"""How big the model's context window really is, and whether it takes tools: the questions a
run asks its server, each family answering in its own way (`ouroboros.server.kinds`).

    tokens, source = await discover_context_limit("http://127.0.0.1:11434", "llama3.2", 0)
    # (8192, "allocated by Ollama (/api/ps)")

Sources, best first: the config; what Ollama allocated for the loaded model (`/api/ps`); the
Modelfile's `num_ctx` and the trained length (`/api/show`); the `n_ctx` of llama.cpp's own
server (`/props`); vLLM's `max_model_len` (`/v1/models`); a guess from the model's name.
Servers answer 404 to the endpoints they do not have; any failure moves to the next source.

Each question takes the run's one HTTP client (`http`); without one (a test, a one-off
question) it opens its own for that question.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass

import httpx

from ouroboros.config.urls import normalize_base_url
from ouroboros.server import kinds
from ouroboros.server.connection import http_client
from ouroboros.server.kinds import OLLAMA, Told

UNKNOWN_SERVER_DEFAULT = 4096

# Trained context lengths by name prefix; longest prefixes first so "llama3.1" beats "llama3".
FAMILY_CONTEXT = {
    "llama3.1": 131072,
    "llama3.2": 131072,
    "llama3.3": 131072,
    "llama3": 8192,
    "llama2": 4096,
    "qwen3": 40960,
    "qwen2.5": 32768,
    "mistral": 32768,
    "gemma3": 131072,
    "gemma2": 8192,
    "phi4": 16384,
    "deepseek-r1": 131072,
}


def context_from_name(model: str) -> Told:
    """A guess by model family, or a conservative default when the family is unknown."""
    base = model.rsplit("/", 1)[-1].split(":", 1)[0].lower()
    for family in sorted(FAMILY_CONTEXT, key=len, reverse=True):
        if base.startswith(family):
            return FAMILY_CONTEXT[family], (
                f"typical for the {family} family (the server did not say); "
                "set model.context_limit to be sure"
            )
    return UNKNOWN_SERVER_DEFAULT, "default for an unknown server; set model.context_limit"


async def discover_context_limit(
    base_url: str,
    model: str,
    configured: int,
    *,
    configured_in: str = "in config",
    api_key: str | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    http: httpx.AsyncClient | None = None,
) -> Told:
    """(tokens, where that number came from, as a phrase for people). `configured_in` says
    where a configured limit was set ("in config", "from a command-line flag", ...)."""
    if configured > 0:
        return configured, f"model.context_limit {configured_in}"
    async with _client(http, base_url, api_key, transport) as asking:
        told = await kinds.window_at_start(asking, model)
    return told or context_from_name(model)


async def allocated_context(
    base_url: str,
    model: str,
    *,
    api_key: str | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    http: httpx.AsyncClient | None = None,
) -> int | None:
    """The window Ollama has allocated for `model` now (`/api/ps`); None when the server is
    not Ollama or the model is not loaded."""
    async with _client(http, base_url, api_key, transport) as asking:
        return await OLLAMA.allocated(asking, model)


@dataclass
class WindowQuestions:
    """The questions a run asks its server about the window, during the run: what Ollama
    allocated (after the first reply of each session, and after a refusal), and what any
    server says its window is now (at each session start). `model` is the name the chat
    requests use.

        questions = WindowQuestions("http://127.0.0.1:11434", "llama3.2", http=client.http)
        await questions.allocated()   # 4096, or None
        await questions.told()        # (4096, "allocated by Ollama (/api/ps)"), or None
    """

    base_url: str
    model: str
    api_key: str | None = None
    transport: httpx.AsyncBaseTransport | None = None
    http: httpx.AsyncClient | None = None

    async def allocated(self) -> int | None:
        async with self._asking() as asking:
            for family in kinds.FAMILIES:
                if allocated := await family.allocated(asking, self.model):
                    return allocated
        return None

    async def told(self) -> Told | None:
        """The window the server says it has now: Ollama's allocation (`/api/ps`), the `n_ctx`
        of llama.cpp's server (`/props`) or vLLM's `max_model_len` (`/v1/models`)."""
        async with self._asking() as asking:
            return await kinds.window(asking, self.model)

    def _asking(self) -> AbstractAsyncContextManager[httpx.AsyncClient]:
        return _client(self.http, self.base_url, self.api_key, self.transport)


async def model_supports_tools(
    base_url: str, model: str, *, transport: httpx.AsyncBaseTransport | None = None
) -> bool | None:
    """Whether `/api/show` lists the `tools` capability; None when the server does not say."""
    async with _client(None, base_url, None, transport) as asking:
        return await OLLAMA.takes_tools(asking, model)


async def tools_word(
    base_url: str,
    model: str,
    *,
    api_key: str | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    http: httpx.AsyncClient | None = None,
) -> tuple[bool, str] | None:
    """What the server says of tools before any request: (takes them, which family said so),
    from llama.cpp's `/props` or Ollama's `/api/show`; None when neither says."""
    async with _client(http, base_url, api_key, transport) as asking:
        return await kinds.takes_tools(asking, model)


@asynccontextmanager
async def _client(
    http: httpx.AsyncClient | None,
    base_url: str,
    api_key: str | None,
    transport: httpx.AsyncBaseTransport | None,
) -> AsyncIterator[httpx.AsyncClient]:
    """`http` as it is, or a client of its own for one question, with the key the chat
    requests carry (a server behind an authenticating proxy answers them only with it)."""
    if http is not None:
        yield http
        return
    async with http_client(
        normalize_base_url(base_url), api_key=api_key, timeout=10, transport=transport
    ) as own:
        yield own
