"""Chat completion chunks in, one finished model turn out. Pure: no I/O.

    accumulator = StreamAccumulator()
    for data in events:                 # the data of each SSE event (`ouroboros.server.sse`)
        chunk = parse_data(data)        # None for [DONE]
        if chunk is not None:
            accumulator.feed(chunk)
    result = accumulator.result()

A chunk of the wrong shape (`choices` not a list, `delta` a string, ...) raises MalformedChunk
naming the field; lone UTF-16 surrogates (`\\ud800`) in any string become U+FFFD, so text
stays encodable. Calls the server sent without an id (or with a repeated one) get a fresh
one from `assign_call_ids`.
"""

from __future__ import annotations

import json
import math
import re
import uuid
from dataclasses import dataclass, field, replace
from typing import AbstractSet, Any, Callable

from ouroboros.protocols import StreamResult, ToolCall, Usage, is_json_object

DONE = "[DONE]"
_SURROGATE = re.compile("[\ud800-\udfff]")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_JSON_TYPES = {
    dict: "an object",
    list: "an array",
    str: "a string",
    bool: "a boolean",
    int: "a number",
    float: "a number",
    type(None): "null",
}


class MalformedChunk(ValueError):
    """A chunk that is JSON but not the shape of a chat completion chunk."""


def parse_data(payload: str) -> dict[str, Any] | None:
    """The data of one event as a chunk dict, lone surrogates replaced; None for `[DONE]`;
    ValueError if it is not JSON, MalformedChunk if it is JSON but not an object."""
    text = payload.strip()
    if text == DONE:
        return None
    chunk = json.loads(text)  # json.JSONDecodeError is a ValueError
    if not isinstance(chunk, dict):
        raise MalformedChunk(f"the chunk is {json_type(chunk)}, not an object")
    return without_surrogates(chunk) if _SURROGATE_ESCAPE.search(text) else chunk


def without_surrogates(value: Any) -> Any:
    """`value` (parsed JSON) with every lone UTF-16 surrogate in its strings replaced by U+FFFD:
    `json.loads('"\\ud800"')` gives a str that cannot be encoded as UTF-8 or logged."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [without_surrogates(item) for item in value]
    if isinstance(value, dict):
        return {without_surrogates(k): without_surrogates(v) for k, v in value.items()}
    return value


def json_type(value: Any) -> str:
    """The JSON name of a parsed value's type, with its article: "an array", "null"."""
    return _JSON_TYPES.get(type(value), type(value).__name__)


def _typed(value: Any, kind: type | tuple[type, ...], where: str) -> Any:
    """`value` if it is None or of `kind`; else MalformedChunk naming `where` it was."""
    if value is None or (isinstance(value, kind) and not isinstance(value, bool)):
        return value
    kinds = kind if isinstance(kind, tuple) else (kind,)
    expected = " or ".join(_JSON_TYPES[k] for k in kinds)
    raise MalformedChunk(f"{where} is {json_type(value)}, not {expected}")


@dataclass
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class StreamAccumulator:
    """Builds a StreamResult from the chunks of one streamed completion.

    Tool calls are merged by `index`: Ollama sends each call whole, OpenAI-style servers send
    id and name first and argument fragments after. A fragment starts a new call at a used
    index (or, without an index, after the last call) when it carries a different id, or,
    without ids, a name after the call's arguments are already a whole JSON object (servers
    that number every chunk from 0).

    `progress` counts the chunks that carried something (text, reasoning, a call, a finish
    reason or usage): a stream of empty chunks is not a reply coming in.
    """

    def __init__(self) -> None:
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._calls: list[_PartialCall] = []
        self._position_of_index: dict[Any, int] = {}
        self.finish_reason: str | None = None
        self._usage: dict[str, Any] | None = None  # the last `usage` object sent
        self._timings: dict[str, Any] | None = None  # the last `timings` (llama.cpp)
        self.model = ""  # the name the server's chunks give the model that answers
        self.chunks = 0
        self.progress = 0

    def feed(self, chunk: dict[str, Any]) -> str:
        """Take one chunk; return the assistant text it added ("" if none). MalformedChunk
        (nothing taken) when a field has the wrong type."""
        choices = [
            _choice(choice, f"choices[{n}]")
            for n, choice in enumerate(_typed(chunk.get("choices"), list, "choices") or [])
        ]
        self.chunks += 1
        carried = False
        model = chunk.get("model")
        if isinstance(model, str) and model:
            self.model = model
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self._usage = usage
            carried = True
        timings = chunk.get("timings")
        if isinstance(timings, dict):
            self._timings = timings
        added = []
        for content, reasoning, fragments, finish_reason in choices:
            if content:
                self._text.append(content)
                added.append(content)
            if reasoning:
                self._reasoning.append(reasoning)
            for fragment in fragments:
                self._add_call_fragment(*fragment)
            if finish_reason:
                self.finish_reason = finish_reason
            carried = carried or bool(content or reasoning or fragments or finish_reason)
        self.progress += carried
        return "".join(added)

    def _add_call_fragment(self, index: Any, call_id: str, name: str, arguments: str) -> None:
        call = self._calls[self._position(index, call_id, name)]
        call.id = call.id or call_id
        call.name = call.name or name
        if arguments:
            call.arguments.append(arguments)

    def _position(self, index: Any, call_id: str, name: str) -> int:
        if index is None:  # servers that omit the index: a new id is a new call
            known = [i for i, call in enumerate(self._calls) if call_id and call.id == call_id]
            if known:
                return known[0]
            if call_id or not self._calls or _starts_another(self._calls[-1], call_id, name):
                return self._new_call(("no-index", len(self._calls)))
            return len(self._calls) - 1
        position = self._position_of_index.get(index)
        if position is None or _starts_another(self._calls[position], call_id, name):
            return self._new_call(index)
        return position

    def _new_call(self, index: Any) -> int:
        self._calls.append(_PartialCall())
        self._position_of_index[index] = len(self._calls) - 1
        return len(self._calls) - 1

    @property
    def usage(self) -> Usage | None:
        """What the server said the request cost: its last `usage` object, with llama.cpp's
        last `timings` (which may come in another chunk); None if it sent neither."""
        if self._usage is None and self._timings is None:
            return None
        return parse_usage(self._usage or {}, self._timings)

    def result(self) -> StreamResult:
        """The turn so far. A call the server sent without an id has id "" (see
        `assign_call_ids`); older Ollama's `stop` after tool calls is reported as
        `tool_calls`."""
        cut = self.finish_reason == "length"  # a call whose arguments do not parse was cut
        calls = [
            ToolCall(
                id=call.id,
                name=call.name,
                arguments=arguments,
                cut_off=cut and not is_json_object(arguments),
            )
            for call in self._calls
            if call.name or call.arguments
            for arguments in [_without_escaped_surrogates("".join(call.arguments))]
        ]
        finish_reason = self.finish_reason
        if calls and finish_reason == "stop":
            finish_reason = "tool_calls"
        return StreamResult(
            text="".join(self._text),
            tool_calls=calls,
            finish_reason=finish_reason,
            usage=self.usage,
            reasoning="".join(self._reasoning),
            served_model=self.model,
        )


Fragment = tuple[Any, str, str, str]  # index, id, name, arguments


def _choice(choice: Any, where: str) -> tuple[str, str, list[Fragment], str]:
    """(content, reasoning, call fragments, finish reason) of one choice, type-checked."""
    choice = _typed(choice, dict, where) or {}
    delta = _typed(choice.get("delta"), dict, f"{where}.delta") or {}
    content = _typed(delta.get("content"), str, f"{where}.delta.content") or ""
    reasoning = delta.get("reasoning") or delta.get("reasoning_content")
    reasoning = _typed(reasoning, str, f"{where}.delta.reasoning") or ""
    calls = _typed(delta.get("tool_calls"), list, f"{where}.delta.tool_calls") or []
    fragments = [_fragment(call, f"{where}.delta.tool_calls[{n}]") for n, call in enumerate(calls)]
    finish_reason = _typed(choice.get("finish_reason"), str, f"{where}.finish_reason") or ""
    return content, reasoning, fragments, finish_reason


def _fragment(fragment: Any, where: str) -> Fragment:
    fragment = _typed(fragment, dict, where) or {}
    index = _typed(fragment.get("index"), (int, str), f"{where}.index")
    call_id = _typed(fragment.get("id"), str, f"{where}.id") or ""
    function = _typed(fragment.get("function"), dict, f"{where}.function") or {}
    name = _typed(function.get("name"), str, f"{where}.function.name") or ""
    arguments = _typed(function.get("arguments"), (str, dict), f"{where}.function.arguments")
    if isinstance(arguments, dict):  # an object instead of a JSON string
        arguments = json.dumps(arguments)
    return index, call_id, name, arguments or ""


def _starts_another(call: _PartialCall, call_id: str, name: str) -> bool:
    """Whether a fragment is a new call rather than more of `call`: it has another id, or
    (without ids to go by) it brings a name when `call`'s arguments are a whole object."""
    if call_id and call.id:
        return call_id != call.id
    return bool(name and call.name and _whole_object("".join(call.arguments)))


def _whole_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def _without_escaped_surrogates(arguments: str) -> str:
    """Arguments (JSON text) whose strings hold a lone surrogate (`"\\ud800"`), written again
    with U+FFFD in its place; any other text as it came."""
    if not _SURROGATE_ESCAPE.search(arguments):
        return arguments
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return arguments
    cleaned = without_surrogates(parsed)
    return arguments if cleaned == parsed else json.dumps(cleaned, ensure_ascii=False)


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:16]}"


def assign_call_ids(
    calls: list[ToolCall], taken: AbstractSet[str], new_id: Callable[[], str] = new_call_id
) -> list[ToolCall]:
    """`calls` with every missing id, and every id already `taken` (by the conversation or an
    earlier call of the same reply), replaced by a fresh one, so that each result, mask and
    placeholder names one call.

        assign_call_ids([ToolCall("", "a", "{}"), ToolCall("c1", "b", "{}")], {"c1"})
        -> [ToolCall("call_<random>", "a", "{}"), ToolCall("call_<random>", "b", "{}")]
    """
    used: set[str] = set()  # by this reply; `taken` (the whole conversation) is not copied
    unique = []
    for call in calls:
        call_id = call.id
        while not call_id or call_id in used or call_id in taken:
            call_id = new_id()
        used.add(call_id)
        unique.append(call if call_id == call.id else replace(call, id=call_id))
    return unique


def parse_usage(usage: dict[str, Any], timings: dict[str, Any] | None = None) -> Usage:
    """A usage object as the server sent it, with llama.cpp's `timings` if it sent them.

    Counts that are missing, null, 0 or not numbers become None, and so do negative ones,
    except a negative prompt count: that is kept for the window's judge to call nonsense (and
    warn of) rather than take as unknown in silence. The prompt's cached part
    (`prompt_tokens_details.cached_tokens`, else `timings.cache_n`) and processed part
    (`timings.prompt_n`) are believed only as whole numbers from 0 to the prompt's count; 0
    cached is a count (the cache served nothing).

        parse_usage({"prompt_tokens": 90}, {"prompt_n": 12, "cache_n": 78})
        -> Usage(prompt_tokens=90, completion_tokens=None, cached_tokens=78,
                 processed_tokens=12)
    """
    prompt = _count(usage.get("prompt_tokens"), negative=True)
    timings = timings or {}
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    # llama.cpp: prompt_n + cache_n is the whole prompt, whatever `usage` says of it
    processed, cache_n = _part(timings.get("prompt_n")), _part(timings.get("cache_n"))
    whole = prompt if prompt and prompt > 0 else None
    if whole is None and processed is not None and cache_n is not None:
        whole = processed + cache_n
    cached = _part(cached, whole)
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=_count(usage.get("completion_tokens")),
        cached_tokens=cached if cached is not None else _part(cache_n, whole),
        processed_tokens=_part(processed, whole),
    )


def _count(value: Any, *, negative: bool = False) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return int(value) if value >= 1 or (negative and value <= -1) else None


def _part(value: Any, whole: int | None = None) -> int | None:
    """`value` if it is a whole number from 0 to `whole` (to any size without one), else
    None: a part of the prompt that is negative, fractional or larger than it is no count."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not value.is_integer():
        return None
    if value < 0 or (whole is not None and value > whole):
        return None
    return int(value)
