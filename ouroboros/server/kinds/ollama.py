"""Ollama: the window it allocated (`/api/ps`), the Modelfile's `num_ctx` and the trained length
(`/api/show`), the tools capability (`/api/show`); no tokenize endpoint.

The trained length can be far above what Ollama allocates for a model that is not loaded yet
(its default `num_ctx` is 4096 on small GPUs): ask again after the first request, when
`/api/ps` lists the model.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import deque
from dataclasses import dataclass
from typing import Any

import httpx

from ouroboros.server.errors import error_details
from ouroboros.server.kinds.family import (
    BaseFamily,
    Endpoint,
    Situation,
    Told,
    get_json,
    positive,
    same_model,
)

ALLOCATED = "allocated by Ollama (/api/ps)"
_NUM_CTX = re.compile(r"^\s*num_ctx\s+(\d+)\s*$", re.MULTILINE)


class Ollama(BaseFamily):
    """The `ServerFamily` of Ollama (`ollama serve`)."""

    name = "ollama"
    title = "Ollama"
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
            return (
                "is `ollama serve` running there? (set model.base_url or OLLAMA_HOST to "
                "point elsewhere)"
            )
        if situation == "model_not_found":
            return f"run `ollama pull {model}` or set model.name to one of them"
        return (
            "choose a model with tool support, e.g. qwen3, qwen2.5 or llama3.1 "
            "(`ollama show <name>` lists capabilities)"
        )

    def bigger_window(self, tokens: int) -> str:
        return (
            f"`OLLAMA_CONTEXT_LENGTH={tokens} ollama serve`, or `PARAMETER num_ctx "
            f"{tokens}` in a Modelfile"
        )


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


# -- a window made real: a model derived with the num_ctx the config asks for

CREATE_SECS = 120.0  # a derived model shares its layers: Ollama writes a manifest, not weights
CREATE_LINES_KEPT = 16  # of its progress: the verdict is in the last line


@dataclass(frozen=True)
class SizedModel:
    """The model a run uses so that Ollama gives it the window asked for."""

    name: str
    tokens: int
    created: bool  # False: a model of that name and num_ctx was there from an earlier run

    @property
    def source(self) -> str:
        """How the window's source names it, at start and in the event log."""
        made = "created by /api/create" if self.created else "from an earlier run"
        return f"Ollama model {self.name} with num_ctx {self.tokens}, {made}"


class WindowNotMade(Exception):
    """Ollama could not make the model: `what` failed, in the server's words."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


def sized_name(model: str, tokens: int) -> str:
    """The derived model's name: `qwen3:8b` at 32768 -> `qwen3:8b-ctx32768`."""
    return f"{model}-ctx{tokens}"


def needs_sizing(reported: int | None, tokens: int) -> bool:
    """Whether a model Ollama reports `reported` tokens for (None: it does not say) needs a
    derived model to hold `tokens`."""
    return reported is None or reported < tokens


def create_failure(lines: list[str]) -> str | None:
    """What went wrong in the JSON lines `/api/create` streamed, or None when the last status
    is `success`."""
    status = None
    for line in filter(None, (line.strip() for line in lines)):
        try:
            said = json.loads(line)
        except ValueError:
            return f"an answer that is not JSON ({line[:80]})"
        if isinstance(said, dict) and said.get("error"):
            return str(said["error"])
        status = said.get("status") if isinstance(said, dict) else None
    return None if status == "success" else f"no success at the end (last status: {status})"


async def sized_model(http: httpx.AsyncClient, model: str, tokens: int) -> SizedModel | None:
    """A model like `model` that Ollama gives `tokens` of window, for a server that reports
    less for `model` (`/api/ps` when loaded, else the Modelfile's `num_ctx` in `/api/show`)
    or nothing: `<model>-ctx<tokens>`, created from it with `num_ctx` (`/api/create` with
    `from` and `parameters`), or reused when a model of that name has that `num_ctx`. None
    when there is nothing to do: not Ollama, or the window is big enough. WindowNotMade when
    the server cannot make it."""
    if not OLLAMA.identifies("/api/version", await get_json(http, "GET", "/api/version")):
        return None
    reported = await OLLAMA.allocated(http, model)
    if reported is None and (show := await get_json(http, "POST", "/api/show", {"model": model})):
        reported = num_ctx_from_show(show)
    if not needs_sizing(reported, tokens):
        return None
    name = sized_name(model, tokens)
    existing = await get_json(http, "POST", "/api/show", {"model": name})
    if existing is not None and num_ctx_from_show(existing) == tokens:
        return SizedModel(name, tokens, created=False)
    await create(http, {"model": name, "from": model, "parameters": {"num_ctx": tokens}})
    return SizedModel(name, tokens, created=True)


async def create(http: httpx.AsyncClient, body: dict[str, Any]) -> None:
    """POST /api/create, its JSON lines read to the end; WindowNotMade naming what failed."""
    lines: deque[str] = deque(maxlen=CREATE_LINES_KEPT)
    try:
        async with asyncio.timeout(CREATE_SECS):
            async with http.stream(
                "POST", "/api/create", json=body, timeout=CREATE_SECS
            ) as response:
                if not response.is_success:
                    said, _ = error_details((await response.aread()).decode(errors="replace"))
                    raise WindowNotMade(
                        f"POST /api/create answered {response.status_code} ({said})"
                    )
                async for line in response.aiter_lines():
                    lines.append(line)
    except (httpx.HTTPError, TimeoutError) as error:
        raise WindowNotMade(f"POST /api/create failed ({error or type(error).__name__})") from None
    if (failure := create_failure(list(lines))) is not None:
        raise WindowNotMade(f"POST /api/create said: {failure}")


OLLAMA = Ollama()
