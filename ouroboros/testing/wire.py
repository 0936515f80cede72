"""The bytes the scripted model server sends, as pure functions: SSE frames of a streamed
answer, the non-streamed completion, error bodies and usage objects, the way Ollama's `/v1`
API writes them.

    frames = render_stream(Reply("Hi there"), model="m", usage=usage_wire(7, 2))
    frames[0]     # b'data: {"id":"chatcmpl-1",...,"delta":{"role":"assistant",...}\n\n'
    frames[-1]    # DONE_FRAME
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from ouroboros.testing.script import Reply

DONE_FRAME = b"data: [DONE]\n\n"
GARBAGE_FRAME = b"data: {not json\n\n"
OVERFLOW_MESSAGE = "the prompt is longer than the context length currently available to the model"
_ARGUMENT_FRAGMENT = 6  # characters per streamed argument piece in fragmented mode

Wire = Literal["current", "legacy"]
"""current: role only in the first delta, finish_reason in a last chunk of its own.
legacy (Ollama before v0.32.6): role and content in every delta, finish_reason `stop` on the
last delta even after tool calls."""
UsageMode = Literal["whole", "zero", "null", "absent", "uncached", "negative", "huge", "decreasing"]
"""How `prompt_tokens` is reported: the whole prompt; 0; null; no key at all; only the
part not in the prompt cache (ollama#16414); or nonsense no prompt can have: the count made
negative, a million times the count, or a count below the last one reported while the prompt
grows (the caller passes that count)."""
HUGE = 1_000_000


def frame(payload: dict[str, Any]) -> bytes:
    """One SSE frame the way Ollama writes it."""
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def split_text(text: str) -> list[str]:
    """Text as streamed deltas: a word each, whitespace leading ("Hello", " world")."""
    return re.findall(r"\s*\S+|\s+$", text)


def arguments_text(arguments: dict[str, Any] | str) -> str:
    """A tool call's arguments as sent: compact JSON, or the string itself."""
    return arguments if isinstance(arguments, str) else json.dumps(arguments, separators=(",", ":"))


def tool_call_id(request_number: int, index: int) -> str:
    """The id of the `index`th tool call in the answer to request `request_number`."""
    return f"call_{request_number:05d}{index:03d}"


def error_body(message: str, status: int) -> dict[str, Any]:
    """Ollama's `/v1` error body."""
    kind = {400: "invalid_request_error", 404: "not_found_error"}.get(status, "api_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


def overflow_error_body(context_length: int | None, prompt: int) -> dict[str, Any]:
    """The 400 an OpenAI-style server (llama.cpp without streaming) sends for a prompt over
    its window."""
    message = (
        f"This model's maximum context length is {context_length} tokens. However, you "
        f"requested {prompt} tokens. Please reduce the length of the messages."
    )
    error = {
        "message": message,
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
    return {"error": error}


def usage_wire(
    prompt_tokens: int,
    completion_tokens: int,
    mode: UsageMode = "whole",
    cached_tokens: int | None = None,
) -> dict[str, Any]:
    """The `usage` object as a server in this mode sends it. For "uncached" the caller passes
    the uncached count as `prompt_tokens`; `cached_tokens` adds prompt_tokens_details."""
    prompt = prompt_tokens if mode in ("whole", "uncached", "decreasing") else 0
    prompt = {"negative": -prompt_tokens, "huge": HUGE * prompt_tokens}.get(mode, prompt)
    wire: dict[str, Any] = {
        "prompt_tokens": None if mode == "null" else prompt,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt + completion_tokens,
    }
    if mode == "absent":
        del wire["prompt_tokens"]
    if cached_tokens is not None:
        wire["prompt_tokens_details"] = {"cached_tokens": cached_tokens}
    return wire


def render_deltas(
    reply: Reply, *, request_number: int = 1, fragment_tool_calls: bool = False
) -> list[dict[str, Any]]:
    """The reply's deltas without role or finish: reasoning, text, then tool calls."""
    deltas: list[dict[str, Any]] = [{"reasoning": piece} for piece in split_text(reply.reasoning)]
    deltas += [{"content": piece} for piece in split_text(reply.text)]
    calls = [
        (index, tool_call_id(request_number, index), name, arguments_text(arguments))
        for index, (name, arguments) in enumerate(reply.tool_calls)
    ]
    if calls and not fragment_tool_calls:  # Ollama: every call whole, in one chunk
        deltas.append({"tool_calls": [_whole_call(*call) for call in calls]})
    for index, call_id, name, arguments in calls if fragment_tool_calls else []:
        head = {"index": index, "id": call_id, "type": "function"}
        deltas.append({"tool_calls": [{**head, "function": {"name": name, "arguments": ""}}]})
        for start in range(0, len(arguments), _ARGUMENT_FRAGMENT):
            piece = arguments[start : start + _ARGUMENT_FRAGMENT]
            deltas.append({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    return deltas


def _whole_call(index: int, call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {
        "id": call_id,
        "index": index,
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


def render_stream(
    reply: Reply,
    *,
    model: str,
    wire: Wire = "current",
    fragment_tool_calls: bool = False,
    usage: dict[str, Any] | None = None,
    request_number: int = 1,
    created: int = 0,
    done: bool = True,
    timings: dict[str, Any] | None = None,
) -> list[bytes]:
    """Every SSE frame of one streamed answer in the `wire` dialect, `[DONE]` last unless
    `done` is False; a chunk with `usage` (a usage_wire object) before `[DONE]` if given;
    llama.cpp's `timings`, if given, in the usage chunk, else in the finish chunk."""
    deltas = render_deltas(
        reply, request_number=request_number, fragment_tool_calls=fragment_tool_calls
    )
    if not deltas:
        deltas = [{"content": ""}]
    if wire == "legacy":
        deltas = [{"role": "assistant", "content": "", **delta} for delta in deltas]
        finishes: list[str | None] = [None] * (len(deltas) - 1) + [reply.finish_reason or "stop"]
    else:
        deltas[0] = {"role": "assistant", **deltas[0]}
        deltas.append({})
        finishes = [None] * (len(deltas) - 1) + [finish_reason(reply)]
    head = {
        "id": f"chatcmpl-{request_number}",
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "system_fingerprint": "fp_ollama",
    }
    chunks = [
        {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        for delta, finish in zip(deltas, finishes)
    ]
    if usage is not None:
        chunks.append({**head, "choices": [], "usage": usage})
    if timings is not None:
        chunks[-1]["timings"] = timings
    frames = [frame(chunk) for chunk in chunks]
    return frames + [DONE_FRAME] if done else frames


def finish_reason(reply: Reply) -> str:
    """What the reply's last chunk says: the script's choice, else `tool_calls` or `stop`."""
    return reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")


def render_completion(
    reply: Reply,
    *,
    model: str,
    usage: dict[str, Any],
    request_number: int = 1,
    created: int = 0,
    timings: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The non-streaming `chat.completion` object; `usage` is a usage_wire object, `timings`
    llama.cpp's, if given."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.text}
    if reply.reasoning:
        message["reasoning"] = reply.reasoning
    if reply.tool_calls:
        message["tool_calls"] = [
            _whole_call(index, tool_call_id(request_number, index), name, arguments_text(arguments))
            for index, (name, arguments) in enumerate(reply.tool_calls)
        ]
    return {
        "id": f"chatcmpl-{request_number}",
        "object": "chat.completion",
        "created": created,
        "model": model,
        "system_fingerprint": "fp_ollama",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": finish_reason(reply),
            }
        ],
        "usage": usage,
        **({"timings": timings} if timings is not None else {}),
    }
