"""llama.cpp's `llama-server`: the `n_ctx` of each slot and whether the chat template takes
tools (`/props`), its tokenizer (`/tokenize`), and that of the llama-cpp-python server
(`/extras/tokenize/count`), which serves the same models.
"""

from __future__ import annotations

from typing import Any

import httpx

from ouroboros.server.kinds.family import (
    BaseFamily,
    Endpoint,
    Situation,
    Told,
    count_field,
    get_json,
    positive,
)


def _tokens_length(answer: Any) -> int | None:
    tokens = answer.get("tokens") if isinstance(answer, dict) else None
    return len(tokens) if isinstance(tokens, list) else None


LLAMA_CPP_PYTHON_TOKENIZE = Endpoint(
    "llama-cpp-python", "/extras/tokenize/count", lambda text, model: {"input": text}, count_field
)
LLAMA_CPP_TOKENIZE = Endpoint(
    "llama.cpp", "/tokenize", lambda text, model: {"content": text}, _tokens_length
)


class LlamaCpp(BaseFamily):
    """The `ServerFamily` of llama.cpp (`llama-server -m <file.gguf>`)."""

    name = "llama.cpp"
    title = "llama.cpp"
    default_port = 8080
    tokenizers = (LLAMA_CPP_PYTHON_TOKENIZE, LLAMA_CPP_TOKENIZE)

    def identifies(self, path: str, body: Any) -> bool:
        return (
            path == "/props"
            and isinstance(body, dict)
            and ("default_generation_settings" in body or "n_ctx" in body)
        )

    async def window(self, http: httpx.AsyncClient, model: str) -> Told | None:
        props = await get_json(http, "GET", "/props")
        length = context_from_props(props) if props is not None else None
        return (length, "n_ctx of the llama.cpp server (/props)") if length else None

    async def takes_tools(self, http: httpx.AsyncClient, model: str) -> bool | None:
        props = await get_json(http, "GET", "/props")
        return tools_from_props(props) if props is not None else None

    def hint(self, situation: Situation, model: str) -> str:
        elsewhere = "set model.base_url to point elsewhere"
        if situation == "unreachable":
            return f"is `llama-server -m <file.gguf>` running there? ({elsewhere})"
        if situation == "model_not_found":
            return (
                "set model.name to one of them (llama-server serves the model it was started with)"
            )
        return (
            "start `llama-server --jinja` so it uses the model's tool-calling template, "
            "or choose a model with tool support"
        )

    def bigger_window(self, tokens: int) -> str:
        return f"`-c {tokens}`"


def context_from_props(body: dict[str, Any]) -> int | None:
    """The context of each slot of a llama.cpp server, from a `/props` body."""
    settings = body.get("default_generation_settings")
    length = settings.get("n_ctx") if isinstance(settings, dict) else None
    return int(length) if positive(length) else None


def tools_from_props(body: dict[str, Any]) -> bool | None:
    """Whether a llama.cpp server's chat template takes tools, from a `/props` body
    (`chat_template_caps.supports_tools`); None when it does not say."""
    caps = body.get("chat_template_caps")
    supports = caps.get("supports_tools") if isinstance(caps, dict) else None
    return supports if isinstance(supports, bool) else None
