"""Ollama: the window it allocated (`/api/ps`), the Modelfile's `num_ctx` and the trained length
(`/api/show`), the tools capability (`/api/show`); no tokenize endpoint.

The trained length can be far above what Ollama allocates for a model that is not loaded yet
(its default `num_ctx` is 4096 on small GPUs): ask again after the first request, when
`/api/ps` lists the model.
"""

from __future__ import annotations

import re
from typing import Any

import httpx

from ouroboros.server.kinds.family import BaseFamily, Endpoint, Situation, Told, get_json, positive, \
    same_model

ALLOCATED = "allocated by Ollama (/api/ps)"
_NUM_CTX = re.compile(r"^\s*num_ctx\s+(\d+)\s*$", re.MULTILINE)


class Ollama(BaseFamily):
    """The `ServerFamily` of Ollama (`ollama serve`)."""

    name = "ollama"
    default_port = 11434
    tokenizers: tuple[Endpoint, ...] = ()

    def identifies(self, path: str, body: Any) -> bool:
        return path == "/api/version" and isinstance(body, dict) and "version" in body

    async def window(self, http: httpx.AsyncClient, model: str) -> Told | None:
        allocated = await self.allocated(http, model)
        return (allocated, ALLOCATED) if allocated else None

    async def window_at_start(self, http: httpx.AsyncClient, model: str) -> Told | None:
        if told := await self.window(http, model):
            return told
        show = await get_json(http, "POST", "/api/show", {"model": model})
        if show is None:
            return None
        if length := num_ctx_from_show(show):
            return length, "num_ctx in the model's Modelfile (/api/show)"
        if length := trained_context_from_show(show):
            return length, "trained context length (/api/show)"
        return None

    async def allocated(self, http: httpx.AsyncClient, model: str) -> int | None:
        ps = await get_json(http, "GET", "/api/ps")
        return context_from_ps(ps, model) if ps is not None else None

    async def takes_tools(self, http: httpx.AsyncClient, model: str) -> bool | None:
        show = await get_json(http, "POST", "/api/show", {"model": model})
        return tools_from_show(show) if show is not None else None

    def hint(self, situation: Situation, model: str) -> str:
        if situation == "unreachable":
            return ("is `ollama serve` running there? (set model.base_url or OLLAMA_HOST to "
                    "point elsewhere)")
        if situation == "model_not_found":
            return f"run `ollama pull {model}` or set model.name to one of them"
        return ("choose a model with tool support, e.g. qwen3, qwen2.5 or llama3.1 "
                "(`ollama show <name>` lists capabilities)")

    def bigger_window(self, tokens: int) -> str:
        return (f"`OLLAMA_CONTEXT_LENGTH={tokens} ollama serve`, or `PARAMETER num_ctx "
                f"{tokens}` in a Modelfile")


def context_from_ps(body: dict[str, Any], model: str) -> int | None:
    """The context Ollama allocated for `model`, from a `/api/ps` body."""
    for entry in body.get("models") or []:
        if not isinstance(entry, dict):
            continue
        names = (entry.get("name") or "", entry.get("model") or "")
        length = entry.get("context_length")
        if any(same_model(name, model) for name in names if name) and positive(length):
            return int(length)
    return None


def num_ctx_from_show(body: dict[str, Any]) -> int | None:
    """The Modelfile's `num_ctx` from a `/api/show` body."""
    parameters = body.get("parameters")
    match = _NUM_CTX.search(parameters) if isinstance(parameters, str) else None
    return int(match.group(1)) if match else None


def trained_context_from_show(body: dict[str, Any]) -> int | None:
    """`model_info["<general.architecture>.context_length"]` from a `/api/show` body."""
    info = body.get("model_info")
    if not isinstance(info, dict):
        return None
    length = info.get(f"{info.get('general.architecture')}.context_length")
    return int(length) if positive(length) else None


def tools_from_show(body: dict[str, Any]) -> bool | None:
    """Whether an Ollama model lists the `tools` capability, from a `/api/show` body; None
    when it lists none."""
    capabilities = body.get("capabilities")
    return "tools" in capabilities if isinstance(capabilities, list) else None
