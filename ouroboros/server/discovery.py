"""How big the model's context window really is, and whether it takes tools.

    tokens, source = await discover_context_limit("http://127.0.0.1:11434", "llama3.2", 0)
    # (8192, "allocated by Ollama (/api/ps)")

Sources, best first: the config; what Ollama allocated for the loaded model (`/api/ps`); the
Modelfile's `num_ctx` and the trained length (`/api/show`); the `n_ctx` of llama.cpp's own
server (`/props`); vLLM's `max_model_len` (`/v1/models`); a guess from the model's name.
Servers answer 404 to the endpoints they do not have; any failure moves to the next source.

The trained length can be far above what Ollama allocates for a model that is not loaded yet
(its default `num_ctx` is 4096 on small GPUs): ask again after the first request, when
`/api/ps` lists the model.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from ouroboros.server.connection import http_client
from ouroboros.config.urls import normalize_base_url

UNKNOWN_SERVER_DEFAULT = 4096
WHOLE_ANSWER_SECS = 10.0  # for a whole answer: a server dripping a byte a second is too slow

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

_NUM_CTX = re.compile(r"^\s*num_ctx\s+(\d+)\s*$", re.MULTILINE)


def same_model(a: str, b: str) -> bool:
    """`llama3.2` and `llama3.2:latest` name the same model, and so does `Llama3.2`: Ollama
    matches names without regard to case."""
    return with_tag(a).casefold() == with_tag(b).casefold()


def with_tag(name: str) -> str:
    """A model name with its tag: `llama3.2` -> `llama3.2:latest`, as Ollama lists it."""
    return name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"


def context_from_ps(body: dict[str, Any], model: str) -> int | None:
    """The context Ollama allocated for `model`, from a `/api/ps` body."""
    for entry in body.get("models") or []:
        if not isinstance(entry, dict):
            continue
        names = (entry.get("name") or "", entry.get("model") or "")
        length = entry.get("context_length")
        if any(same_model(name, model) for name in names if name) and _positive(length):
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
    return int(length) if _positive(length) else None


def context_from_props(body: dict[str, Any]) -> int | None:
    """The context of each slot of a llama.cpp server, from a `/props` body."""
    settings = body.get("default_generation_settings")
    length = settings.get("n_ctx") if isinstance(settings, dict) else None
    return int(length) if _positive(length) else None


def context_from_models(body: dict[str, Any], model: str) -> int | None:
    """vLLM's `max_model_len` for `model`, from a `/v1/models` body; when the server lists a
    single model under another name, that one is taken to be it."""
    data = body.get("data")
    entries = [entry for entry in data if isinstance(entry, dict)] if isinstance(data, list) else []
    named = [entry for entry in entries if same_model(str(entry.get("id") or ""), model)]
    for entry in named or (entries if len(entries) == 1 else []):
        if _positive(length := entry.get("max_model_len")):
            return int(length)
    return None


def context_from_name(model: str) -> tuple[int, str]:
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
) -> tuple[int, str]:
    """(tokens, where that number came from, as a phrase for people). `configured_in` says
    where a configured limit was set ("in config", "from a command-line flag", ...)."""
    if configured > 0:
        return configured, f"model.context_limit {configured_in}"
    async with _http(base_url, api_key, transport) as http:
        ps = await _get_json(http, "GET", "/api/ps")
        if ps is not None and (length := context_from_ps(ps, model)):
            return length, "allocated by Ollama (/api/ps)"
        show = await _get_json(http, "POST", "/api/show", {"model": model})
        if show is not None:
            if length := num_ctx_from_show(show):
                return length, "num_ctx in the model's Modelfile (/api/show)"
            if length := trained_context_from_show(show):
                return length, "trained context length (/api/show)"
        props = await _get_json(http, "GET", "/props")
        if props is not None and (length := context_from_props(props)):
            return length, "n_ctx of the llama.cpp server (/props)"
        models = await _get_json(http, "GET", "/v1/models")
        if models is not None and (length := context_from_models(models, model)):
            return length, "max_model_len of the vLLM server (/v1/models)"
    return context_from_name(model)


async def allocated_context(
    base_url: str, model: str, *, api_key: str | None = None,
    transport: httpx.AsyncBaseTransport | None = None
) -> int | None:
    """The window Ollama has allocated for `model` now (`/api/ps`); None when the server is
    not Ollama or the model is not loaded."""
    async with _http(base_url, api_key, transport) as http:
        ps = await _get_json(http, "GET", "/api/ps")
    return context_from_ps(ps, model) if ps is not None else None


@dataclass(frozen=True)
class WindowQuestions:
    """The questions a run asks its server about the window, during the run: what Ollama
    allocated (after the first reply of each session, and after a refusal), and what any
    server says its window is now (at each session start).

        questions = WindowQuestions("http://127.0.0.1:11434", "llama3.2")
        await questions.allocated()   # 4096, or None
        await questions.told()        # (4096, "allocated by Ollama (/api/ps)"), or None
    """

    base_url: str
    model: str
    api_key: str | None = None
    transport: httpx.AsyncBaseTransport | None = None

    async def allocated(self) -> int | None:
        return await allocated_context(self.base_url, self.model, api_key=self.api_key,
                                       transport=self.transport)

    async def told(self) -> tuple[int, str] | None:
        """The window the server says it has now: Ollama's allocation (`/api/ps`), the `n_ctx`
        of llama.cpp's server (`/props`) or vLLM's `max_model_len` (`/v1/models`)."""
        async with _http(self.base_url, self.api_key, self.transport) as http:
            ps = await _get_json(http, "GET", "/api/ps")
            if ps is not None and (length := context_from_ps(ps, self.model)):
                return length, "allocated by Ollama (/api/ps)"
            props = await _get_json(http, "GET", "/props")
            if props is not None and (length := context_from_props(props)):
                return length, "n_ctx of the llama.cpp server (/props)"
            models = await _get_json(http, "GET", "/v1/models")
            if models is not None and (length := context_from_models(models, self.model)):
                return length, "max_model_len of the vLLM server (/v1/models)"
        return None


async def model_supports_tools(
    base_url: str, model: str, *, transport: httpx.AsyncBaseTransport | None = None
) -> bool | None:
    """Whether `/api/show` lists the `tools` capability; None when the server does not say."""
    async with _http(base_url, None, transport) as http:
        show = await _get_json(http, "POST", "/api/show", {"model": model})
    capabilities = show.get("capabilities") if show is not None else None
    if not isinstance(capabilities, list):
        return None
    return "tools" in capabilities


ToolsWord = tuple[bool, Literal["llama.cpp", "ollama"]]


def tools_from_props(body: dict[str, Any]) -> bool | None:
    """Whether a llama.cpp server's chat template takes tools, from a `/props` body
    (`chat_template_caps.supports_tools`); None when it does not say."""
    caps = body.get("chat_template_caps")
    supports = caps.get("supports_tools") if isinstance(caps, dict) else None
    return supports if isinstance(supports, bool) else None


def tools_from_show(body: dict[str, Any]) -> bool | None:
    """Whether an Ollama model lists the `tools` capability, from a `/api/show` body; None
    when it lists none."""
    capabilities = body.get("capabilities")
    return "tools" in capabilities if isinstance(capabilities, list) else None


async def tools_word(base_url: str, model: str, *, api_key: str | None = None,
                     transport: httpx.AsyncBaseTransport | None = None) -> ToolsWord | None:
    """What the server says of tools before any request: (takes them, which server said so),
    from llama.cpp's `/props` or Ollama's `/api/show`; None when neither says."""
    async with _http(base_url, api_key, transport) as http:
        props = await _get_json(http, "GET", "/props")
        if props is not None and (said := tools_from_props(props)) is not None:
            return said, "llama.cpp"
        show = await _get_json(http, "POST", "/api/show", {"model": model})
        if show is not None and (said := tools_from_show(show)) is not None:
            return said, "ollama"
    return None


def _http(base_url: str, api_key: str | None, transport: httpx.AsyncBaseTransport | None
          ) -> httpx.AsyncClient:
    """A client for the questions, with the key the chat requests carry (a server behind an
    authenticating proxy answers them only with it)."""
    return http_client(normalize_base_url(base_url), api_key=api_key, timeout=10,
                       transport=transport)


async def _get_json(
    http: httpx.AsyncClient, method: str, path: str, body: Any = None
) -> dict[str, Any] | None:
    """The JSON object at `path`, or None for any failure (an answer not whole within
    WHOLE_ANSWER_SECS too: the read timeout alone never ends one dripped byte by byte)."""
    try:
        response = await asyncio.wait_for(http.request(method, path, json=body),
                                          WHOLE_ANSWER_SECS)
        response.raise_for_status()
        parsed = response.json()
    except (httpx.HTTPError, ValueError, TimeoutError):
        return None
    return parsed if isinstance(parsed, dict) else None


def _positive(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
