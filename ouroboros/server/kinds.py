"""Which server a base URL points at (Ollama, llama.cpp's llama-server, vLLM), and what to
tell a person about a failure in that server's own words. Pure: no I/O.

    kind_from_url("http://127.0.0.1:11434")             # "ollama", by its default port
    hint("ollama", "model_not_found", "llama3.2")       # "run `ollama pull llama3.2` or ..."
"""

from __future__ import annotations

from typing import Any, Literal

import httpx

from ouroboros.config.urls import normalize_base_url

ServerKind = Literal["ollama", "llama.cpp", "vllm", "other"]
DEFAULT_PORTS: dict[int, ServerKind] = {11434: "ollama", 8080: "llama.cpp", 8000: "vllm"}
"""Each server's default port, for a guess before (or without) asking it."""
Situation = Literal["unreachable", "model_not_found", "no_tools"]


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
