"""What every server family answers, and the small helpers the families share.

A family is a class with the attributes and methods of `ServerFamily`; each question takes the
run's one HTTP client (`http`, whose base URL is the server's root) and returns None where the
family has no answer, so a caller can ask the families in turn. See `ouroboros.server.kinds`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Callable, Literal, Protocol

import httpx

Situation = Literal["unreachable", "model_not_found", "no_tools"]
Told = tuple[int, str]  # a window in tokens, and where it was read, as a phrase for people
WHOLE_ANSWER_SECS = 10.0  # for a whole answer: a server dripping a byte a second is too slow


@dataclass(frozen=True)
class Endpoint:
    """One server's tokenizer: where to ask, what to send, how to read the count."""

    name: str
    path: str
    body: Callable[[str, str], dict[str, Any]]  # (text, model) -> request body
    read: Callable[[Any], int | None]  # parsed answer -> count, None if malformed


class ServerFamily(Protocol):
    """One family of model servers (Ollama, llama.cpp, vLLM, any other OpenAI-compatible one).

    family = OLLAMA
    await family.window(http, "llama3.2")       # (8192, "allocated by Ollama (/api/ps)")
    family.bigger_window(32768)  # "`OLLAMA_CONTEXT_LENGTH=32768 ollama serve` ..."
    """

    name: str
    """How the family is named in the code and in `server_kind` ("ollama", "llama.cpp")."""
    title: str
    """How messages name it ("Ollama", "vLLM")."""
    default_port: int | None
    """The port it listens on unless told otherwise, for a guess before asking."""
    tokenizers: tuple[Endpoint, ...]
    """Its tokenize endpoints, tried in this order."""

    def identifies(self, path: str, body: Any) -> bool:
        """Whether this answer of GET `path` (one of `IDENTIFYING_PATHS`) is this family's."""
        ...

    async def window(self, http: httpx.AsyncClient, model: str) -> Told | None:
        """The window the server says it holds for `model` now."""
        ...

    async def window_at_start(self, http: httpx.AsyncClient, model: str) -> Told | None:
        """Before the first request: the window now, else what the model's own files say."""
        ...

    async def allocated(self, http: httpx.AsyncClient, model: str) -> int | None:
        """The window the server allocated when it loaded `model` (servers that size it
        per model, at load time); None elsewhere."""
        ...

    async def takes_tools(self, http: httpx.AsyncClient, model: str) -> bool | None:
        """Whether the model will be shown tools (its chat template, its capabilities)."""
        ...

    def hint(self, situation: Situation, model: str) -> str:
        """What to do about a failure, in this server's words."""
        ...

    def bigger_window(self, tokens: int) -> str:
        """How to start this server with a window of `tokens`."""
        ...


class BaseFamily:
    """A family that says nothing of itself: subclass it and override what yours answers
    (`window` at least, `hint` and `bigger_window` in its own words)."""

    name = "other"
    title = "another server"
    default_port: int | None = None
    tokenizers: tuple[Endpoint, ...] = ()

    def identifies(self, path: str, body: Any) -> bool:
        return False

    async def window(self, http: httpx.AsyncClient, model: str) -> Told | None:
        return None

    async def window_at_start(self, http: httpx.AsyncClient, model: str) -> Told | None:
        return await self.window(http, model)

    async def allocated(self, http: httpx.AsyncClient, model: str) -> int | None:
        return None

    async def takes_tools(self, http: httpx.AsyncClient, model: str) -> bool | None:
        return None

    def hint(self, situation: Situation, model: str) -> str:
        elsewhere = "set model.base_url to point elsewhere"
        if situation == "unreachable":
            return (
                "is the model server running there (`ollama serve`, `llama-server` or "
                f"`vllm serve`)? ({elsewhere})"
            )
        if situation == "model_not_found":
            return "set model.name to one of them"
        return "choose a model with tool support, e.g. qwen3, qwen2.5 or llama3.1"

    def bigger_window(self, tokens: int) -> str:
        return f"start the server with a window of {tokens} tokens"


IDENTIFYING_PATHS = ("/api/version", "/props", "/v1/models")
"""What a server is asked to tell which family it is, in this order."""


async def get_json(
    http: httpx.AsyncClient, method: str, path: str, body: Any = None
) -> dict[str, Any] | None:
    """The JSON object at `path`, or None for any failure (an answer not whole within
    WHOLE_ANSWER_SECS too: the read timeout alone never ends one dripped byte by byte)."""
    try:
        response = await asyncio.wait_for(
            http.request(method, path, json=body, timeout=WHOLE_ANSWER_SECS), WHOLE_ANSWER_SECS
        )
        response.raise_for_status()
        parsed = response.json()
    except (httpx.HTTPError, ValueError, TimeoutError):
        return None
    return parsed if isinstance(parsed, dict) else None


def positive(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def natural(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def count_field(answer: Any) -> int | None:
    """The `count` of a tokenize endpoint's answer (llama-cpp-python's, vLLM's)."""
    count = answer.get("count") if isinstance(answer, dict) else None
    return count if natural(count) else None


def same_model(a: str, b: str) -> bool:
    """`llama3.2` and `llama3.2:latest` name the same model, and so does `Llama3.2`: Ollama
    matches names without regard to case."""
    return with_tag(a).casefold() == with_tag(b).casefold()


def with_tag(name: str) -> str:
    """A model name with its tag: `llama3.2` -> `llama3.2:latest`, as Ollama lists it."""
    return name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"
