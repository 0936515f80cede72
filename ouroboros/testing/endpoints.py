"""Ollama's API besides chat, as pure functions of the settings: the endpoints a client asks
before it chats (is it Ollama, which models, which window, does it take tools) and the
tokenize endpoints of llama.cpp, llama-cpp-python and vLLM.

    get("/api/version", settings, loaded=False)      # (200, {"version": "0.13.0"})
    show({"model": "scripted"}, settings)            # (200, {"parameters": "num_ctx ...", ...})
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable, Iterable

from ouroboros.protocols import Message
from ouroboros.testing.settings import ModelSettings, TokenizeFamily
from ouroboros.testing.wire import error_body

OLLAMA_VERSION = "0.13.0"
TRAINED_CONTEXT = 131072
TOKENIZE_PATHS: dict[str, str] = {
    "llama.cpp": "/tokenize",
    "llama-cpp-python": "/extras/tokenize/count",
    "vllm": "/tokenize",
}
_TOKENIZE_FIELD = {"llama.cpp": "content", "llama-cpp-python": "input", "vllm": "prompt"}
PromptCounter = Callable[[list[Message], Any], int]


def listed_name(name: str) -> str:
    """How Ollama lists a model: with its tag, `:latest` where none was given
    (`hf.co/org/model` -> `hf.co/org/model:latest`; a registry's `host:port/` stays)."""
    *path, last = name.split("/")
    return "/".join([*path, last if ":" in last else f"{last}:latest"])


def serves(name: str, known: Iterable[str]) -> bool:
    """Whether a request for `name` reaches one of the `known` models: Ollama compares the
    tagged names without regard to case."""
    wanted = listed_name(name).casefold()
    return any(listed_name(model).casefold() == wanted for model in known)


def tags(settings: ModelSettings) -> list[dict[str, Any]]:
    """/api/tags: one entry per model name."""
    return [
        {
            "name": listed_name(name),
            "model": listed_name(name),
            "modified_at": "2025-01-01T00:00:00Z",
            "size": 2019393189,
            "digest": hashlib.sha256(name.encode()).hexdigest(),
            "details": {"format": "gguf", "family": "llama", "parameter_size": "3.2B"},
        }
        for name in settings.models
    ]


def get(
    path: str, settings: ModelSettings, *, loaded: bool, loaded_as: str | None = None
) -> tuple[int, Any]:
    """Status and body of a GET; `loaded` once a chat request was served, `loaded_as` the
    name it was asked for when that is another of its models (/api/ps)."""
    if settings.serves_any_name:  # llama.cpp: /props and /v1/models, none of Ollama's own
        if path == "/props":
            return 200, {
                "default_generation_settings": {"n_ctx": settings.window},
                "total_slots": 1,
                "model_path": f"/models/{settings.model}",
            }
        if path != "/v1/models":
            return 404, {"error": {"code": 404, "message": "File Not Found"}}
    if path == "/":
        return 200, "Ollama is running"
    if path == "/api/version":
        return 200, {"version": OLLAMA_VERSION}
    if path == "/api/tags":
        return 200, {"models": tags(settings)}
    if path == "/v1/models":
        data = [
            {"id": listed_name(name), "object": "model", "created": 0, "owned_by": "library"}
            for name in settings.models
        ]
        return 200, {"object": "list", "data": data}
    if path == "/api/ps":
        models = []
        if loaded and settings.api_ps == "honest":
            entry = {**tags(settings)[0], "expires_at": "2099-01-01T00:00:00Z", "size_vram": 1}
            if loaded_as is not None:
                entry["name"] = entry["model"] = listed_name(loaded_as)
            if settings.window is not None:
                entry["context_length"] = settings.window
            models.append(entry)
        return 200, {"models": models}
    if path == "/props" and settings.template_tools is not None:
        caps = {
            "supports_tools": settings.template_tools,
            "supports_tool_calls": settings.template_tools,
            "supports_system_role": True,
        }
        return 200, {
            "default_generation_settings": {"n_ctx": settings.window or TRAINED_CONTEXT},
            "total_slots": 1,
            "chat_template_caps": caps,
        }
    return 404, "404 page not found"


def show(body: dict[str, Any], settings: ModelSettings) -> tuple[int, Any]:
    """/api/show: the Modelfile's parameters (num_ctx), the trained window, capabilities."""
    name = str(body.get("model") or body.get("name") or "")
    if settings.serves_any_name:  # llama.cpp has no /api/show
        return 404, {"error": {"code": 404, "message": "File Not Found"}}
    if not serves(name, settings.models):
        return 404, {"error": f"model '{name}' not found"}
    parameters = 'stop                           "<|eot_id|>"'
    if settings.context_length is not None:
        parameters = f"num_ctx                        {settings.context_length}\n{parameters}"
    return 200, {
        "modelfile": f"FROM {name}\n",
        "parameters": parameters,
        "template": "{{ .Prompt }}",
        "details": {"format": "gguf", "family": "llama", "parameter_size": "3.2B"},
        "model_info": {
            "general.architecture": "llama",
            "general.parameter_count": 3212749888,
            "llama.context_length": TRAINED_CONTEXT,
        },
        "capabilities": ["completion", "tools"] if settings.tools_supported else ["completion"],
    }


CREATE_FAILURE = (
    "open /usr/share/ollama/.ollama/models/manifests/registry.ollama.ai/library: permission denied"
)


def create(body: dict[str, Any], settings: ModelSettings) -> tuple[int, Any]:
    """/api/create of a model `from` one it has, with `parameters`: (status, the JSON lines
    Ollama streams, or an error body)."""
    if settings.create == "missing" or settings.serves_any_name:
        return 404, "404 page not found"
    name, base, parameters = body.get("model"), body.get("from"), body.get("parameters")
    if not isinstance(name, str) or not name:
        return 400, {"error": "invalid model name"}
    if not isinstance(base, str) or not serves(base, settings.models):
        return 404, {"error": f"model '{base}' not found"}
    if not isinstance(parameters, dict) or not isinstance(parameters.get("num_ctx", 0), int):
        return 400, {"error": "invalid parameters"}
    layer = hashlib.sha256(base.encode()).hexdigest()
    lines = [
        {"status": f"using existing layer sha256:{layer}"},
        {"status": "creating new layer sha256:" + hashlib.sha256(name.encode()).hexdigest()},
    ]
    if settings.create == "fails":
        return 200, [*lines, {"error": CREATE_FAILURE}]
    return 200, [*lines, {"status": "writing manifest"}, {"status": "success"}]


def tokenize_family(path: str, settings: ModelSettings) -> TokenizeFamily | None:
    """The family whose tokenize endpoint `path` is, if the server serves it."""
    family = settings.tokenize
    return family if family is not None and path == TOKENIZE_PATHS[family] else None


def tokenize(
    family: TokenizeFamily,
    body: dict[str, Any],
    settings: ModelSettings,
    count_prompt: PromptCounter,
) -> tuple[int, Any]:
    """The tokenize endpoint's answer: the text's tokens as that family reports them; vLLM
    also counts a chat prompt (`messages`), with `count_prompt`."""
    if family == "vllm" and isinstance(body.get("messages"), list):  # chat form
        count = count_prompt(body["messages"], body.get("tools"))
    else:
        text = body.get(_TOKENIZE_FIELD[family])
        if not isinstance(text, str):
            message = f"'{_TOKENIZE_FIELD[family]}' must be a string"
            return 400, error_body(message, 400)
        count = settings.tokenizer.count_text(text)
    if family == "llama.cpp":
        return 200, {"tokens": list(range(count))}
    if family == "llama-cpp-python":
        return 200, {"count": count}
    max_model_len = settings.window or TRAINED_CONTEXT
    return 200, {"count": count, "max_model_len": max_model_len, "tokens": list(range(count))}
