"""vLLM (`vllm serve`): `max_model_len` in its model listing (`/v1/models`) and in the answers of
its tokenizer (`/tokenize`, which takes the model's name).
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
    same_model,
)

VLLM_TOKENIZE = Endpoint(
    "vLLM", "/tokenize", lambda text, model: {"model": model, "prompt": text}, count_field
)


class Vllm(BaseFamily):
    """The `ServerFamily` of vLLM's OpenAI-compatible server."""

    name = "vllm"
    title = "vLLM"
    default_port = 8000
    tokenizers = (VLLM_TOKENIZE,)

    def identifies(self, path: str, body: Any) -> bool:
        entries = body.get("data") if path == "/v1/models" and isinstance(body, dict) else None
        return isinstance(entries, list) and any(
            isinstance(entry, dict) and "max_model_len" in entry for entry in entries
        )

    async def window(self, http: httpx.AsyncClient, model: str) -> Told | None:
        models = await get_json(http, "GET", "/v1/models")
        length = context_from_models(models, model) if models is not None else None
        return (length, "max_model_len of the vLLM server (/v1/models)") if length else None

    def hint(self, situation: Situation, model: str) -> str:
        elsewhere = "set model.base_url to point elsewhere"
        if situation == "unreachable":
            return f"is `vllm serve {model}` running there? ({elsewhere})"
        if situation == "model_not_found":
            return f"set model.name to one of them, or start `vllm serve {model}`"
        return (
            "start `vllm serve --enable-auto-tool-choice --tool-call-parser <parser>`, "
            "or choose a model with tool support"
        )

    def bigger_window(self, tokens: int) -> str:
        return "`--max-model-len %d`" % tokens  # whole, as the message check reads it


def context_from_models(body: dict[str, Any], model: str) -> int | None:
    """vLLM's `max_model_len` for `model`, from a `/v1/models` body; when the server lists a
    single model under another name, that one is taken to be it."""
    data = body.get("data")
    entries = [entry for entry in data if isinstance(entry, dict)] if isinstance(data, list) else []
    named = [entry for entry in entries if same_model(str(entry.get("id") or ""), model)]
    for entry in named or (entries if len(entries) == 1 else []):
        if positive(length := entry.get("max_model_len")):
            return int(length)
    return None
