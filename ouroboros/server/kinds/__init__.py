"""The families of model servers, one class each behind one protocol (`ServerFamily`, in
`family`): Ollama (`ollama`), llama.cpp's llama-server (`llamacpp`), vLLM (`vllm`) and any
other OpenAI-compatible server (`generic`). Each answers the window questions, names its
tokenize endpoints, says whether the model takes tools and words hints and fixes its own way.

    kind_from_url("http://127.0.0.1:11434")             # "ollama", by its default port
    hint("ollama", "model_not_found", "llama3.2")       # "run `ollama pull llama3.2` or ..."
    await window_at_start(http, "llama3.2")             # (8192, "allocated by Ollama (/api/ps)")

A new family is a class with `ServerFamily`'s attributes and methods, listed in `FAMILIES`;
nothing else names the families one by one.
"""

from __future__ import annotations

from typing import Any

import httpx

from ouroboros.config.urls import normalize_base_url
from ouroboros.server.kinds.family import (
    IDENTIFYING_PATHS,
    Endpoint,
    ServerFamily,
    Situation,
    Told,
    same_model,
)
from ouroboros.server.kinds.generic import Generic
from ouroboros.server.kinds.llamacpp import LlamaCpp
from ouroboros.server.kinds.ollama import OLLAMA
from ouroboros.server.kinds.vllm import Vllm

LLAMA_CPP, VLLM, GENERIC = LlamaCpp(), Vllm(), Generic()
FAMILIES: tuple[ServerFamily, ...] = (OLLAMA, LLAMA_CPP, VLLM, GENERIC)
"""Every family, in the order the window questions ask them: the generic one last."""
TOOLS_ORDER: tuple[ServerFamily, ...] = (LLAMA_CPP, OLLAMA, VLLM, GENERIC)
"""The order the tools question asks them: a chat template's own word (llama.cpp's
`/props`) before a model's listed capabilities."""

ServerKind = str
"""The `name` of a family in FAMILIES: "ollama", "llama.cpp", "vllm" or "other"."""

__all__ = [
    "FAMILIES",
    "Endpoint",
    "ServerFamily",
    "ServerKind",
    "Situation",
    "Told",
    "bigger_window",
    "family_named",
    "hint",
    "kind_from_answers",
    "kind_from_url",
    "same_model",
    "takes_tools",
    "tokenize_endpoints",
    "window",
    "window_at_start",
]


def family_named(kind: ServerKind) -> ServerFamily:
    """The family of that name; the generic one for a name no family has."""
    return next((family for family in FAMILIES if family.name == kind), GENERIC)


def kind_from_url(base_url: str) -> ServerKind:
    """The server a URL suggests by its port: Ollama's 11434, llama-server's 8080, vLLM's
    8000; "other" for anything else."""
    port = httpx.URL(normalize_base_url(base_url)).port
    return next((f.name for f in FAMILIES if f.default_port == port), GENERIC.name)


def kind_from_answers(version: Any, props: Any, models: Any) -> ServerKind | None:
    """The server that gave these JSON bodies of `IDENTIFYING_PATHS` (None for an endpoint
    that failed): Ollama answers `/api/version`, llama.cpp `/props`, vLLM lists
    `max_model_len` in `/v1/models`."""
    answers = list(zip(IDENTIFYING_PATHS, (version, props, models)))
    for family in FAMILIES:
        if any(family.identifies(path, body) for path, body in answers):
            return family.name
    return None


def hint(kind: ServerKind, situation: Situation, model: str = "<model>") -> str:
    """What to do about a failure, in the words of the server it happened on.

    hint("ollama", "model_not_found", "llama3.2")  # "run `ollama pull llama3.2` or ..."
    """
    return family_named(kind).hint(situation, model)


def bigger_window(tokens: int) -> str:
    """How each server the harness knows is given a window of `tokens`, for a message that
    names the fix without knowing which one it is talking to.

        bigger_window(8192)  # "Ollama: `OLLAMA_CONTEXT_LENGTH=8192 ollama serve`, ...; vLLM: ..."
    """
    return "; ".join(
        f"{family.title}: {family.bigger_window(tokens)}"
        for family in FAMILIES
        if family is not GENERIC
    )


def tokenize_endpoints() -> tuple[Endpoint, ...]:
    """Every family's tokenize endpoints, in the order of FAMILIES."""
    return tuple(endpoint for family in FAMILIES for endpoint in family.tokenizers)


async def window(http: httpx.AsyncClient, model: str) -> Told | None:
    """The window the server says it holds now, from the first family that says."""
    for family in FAMILIES:
        if told := await family.window(http, model):
            return told
    return None


async def window_at_start(http: httpx.AsyncClient, model: str) -> Told | None:
    """Before the first request: the window the server holds, else the model's own."""
    for family in FAMILIES:
        if told := await family.window_at_start(http, model):
            return told
    return None


async def takes_tools(http: httpx.AsyncClient, model: str) -> tuple[bool, ServerKind] | None:
    """What the server says of tools before any request: (takes them, the family that said
    so); None when none says."""
    for family in TOOLS_ORDER:
        if (said := await family.takes_tools(http, model)) is not None:
            return said, family.name
    return None
