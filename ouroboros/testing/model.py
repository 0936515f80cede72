"""The scripted model behind the server: what it records of each request and how it answers,
with no sockets. `ScriptedServer` serves it over HTTP.

For each chat request it counts the prompt with its tokenizer (the true count goes to
`prompt_tokens`), then answers with the first that applies: an injected or scripted fault;
a refusal (unknown model, tools it does not take, a prompt over its window when `overflow`
is not "truncate"); or the script's next reply to the messages it kept, with usage
reported the way its `usage` mode says.

    model = ScriptedModel([Reply("Hello.")], ModelSettings(context_length=60))
    model.answer_chat({"model": "scripted", "messages": [...], "stream": True}).frames
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, replace
from typing import Any, Iterable

from ouroboros.protocols import Message
from ouroboros.testing import endpoints
from ouroboros.testing.script import Brain, Fault, Reply, Script
from ouroboros.testing.settings import ModelSettings
from ouroboros.testing.tokenizer import Pieces
from ouroboros.testing.wire import (
    DONE_FRAME,
    GARBAGE_FRAME,
    OVERFLOW_MESSAGE,
    arguments_text,
    error_body,
    overflow_error_body,
    render_completion,
    render_stream,
    usage_wire,
)

_PARTIAL = Reply("This answer will not arrive whole, sorry about that.")


@dataclass
class Answer:
    """What the server writes for one chat request."""

    status: int = 200
    json: dict[str, Any] | None = None
    frames: list[bytes] | None = None  # an event stream, one HTTP chunk per frame
    raw: bytes | None = None  # a body that is not what it claims (garbage, empty)
    abort: bool = False  # close the connection after the frames, without finishing
    delay: float = 0.0


class ScriptedModel:
    """A model that answers from a script, with the records tests read back: `requests`
    (every chat body), `prompt_tokens` (the true count of each), `over_limit`,
    `count_requests`, `tokenize_requests`, `create_requests` (every /api/create body) and
    `made` (the models those made). Thread-safe."""

    def __init__(
        self, script: Brain | Iterable[Reply | Fault], settings: ModelSettings | None = None
    ) -> None:
        self.settings = settings or ModelSettings()
        self.requests: list[dict[str, Any]] = []
        self.count_requests: list[dict[str, Any]] = []  # one-token requests asking for a count
        self.prompt_tokens: list[int] = []  # the true count of every chat request
        self.over_limit = 0
        self.tokenize_requests = 0
        self._script = Script(script)
        self._cached: tuple[list[Message], Any] = ([], None)  # the last prompt the model read
        self._pieces: Pieces = []  # and its tokens, as its one cache slot holds them
        self._served_chat = False
        self._last_reported = 0  # usage "decreasing": the last prompt count it sent
        self.create_requests: list[dict[str, Any]] = []  # every /api/create body
        self.made: dict[str, int] = {}  # models /api/create made: listed name -> num_ctx
        self._loaded_as: str | None = None  # a made model a request loaded, by its name
        self._own_allocated: int | None = None  # the window of its own model, meanwhile
        self._lock = threading.Condition()  # guards the script, the records and the outage state

    def inject(self, *faults: Fault) -> None:
        """Apply these faults to the next requests, in order, before the script."""
        with self._lock:
            self._script.inject(faults)

    def count_tokens(self, messages: list[Message], tools: list[dict[str, Any]] | None) -> int:
        """The whole prompt's tokens, as this server's tokenizer counts them."""
        return self.settings.tokenizer.count(messages, tools)

    def truncate(
        self, messages: list[Message], tools: list[dict[str, Any]] | None
    ) -> list[Message]:
        """What Ollama keeps of an oversized prompt: whole messages dropped from the front,
        system messages and the last message kept."""
        kept = list(messages)
        window = self.settings.window
        assert window is not None
        while self.count_tokens(kept, tools) > window:
            droppable = [i for i, m in enumerate(kept[:-1]) if m.get("role") != "system"]
            if not droppable:
                break
            del kept[droppable[0]]
        return kept

    # -- the endpoints besides chat

    def answer_get(self, path: str) -> tuple[int, Any]:
        """Status and body of a GET request for `path`."""
        loaded = False
        if path == "/api/ps":  # the only answer that waits for a chat request being decided
            with self._lock:
                loaded = self._served_chat
        return endpoints.get(path, self.settings, loaded=loaded, loaded_as=self._loaded_as)

    def answer_show(self, body: dict[str, Any]) -> tuple[int, Any]:
        """Status and body of /api/show; a model /api/create made shows its own num_ctx."""
        with self._lock:
            made = self.made.get(self._made_key(body.get("model") or body.get("name")))
            settings = self.settings
        if made is not None:
            settings = replace(settings, context_length=made)
        return endpoints.show(body, settings)

    def answer_create(self, body: dict[str, Any]) -> tuple[int, Any]:
        """Status and answer of /api/create: the JSON lines Ollama streams (a list), or an
        error body. A model made is listed and served from then on."""
        with self._lock:
            self.create_requests.append(body)
            status, answer = endpoints.create(body, self.settings)
            if isinstance(answer, list) and answer[-1] == {"status": "success"}:
                name = str(body["model"])
                self.made[self._made_key(name)] = int(body["parameters"].get("num_ctx") or 0)
                if not endpoints.serves(name, self.settings.models):
                    self.settings = replace(
                        self.settings, extra_models=(*self.settings.extra_models, name)
                    )
            return status, answer

    def _made_key(self, name: Any) -> str:
        return endpoints.listed_name(str(name or "")).casefold()

    def _load(self, name: str) -> None:
        """What Ollama does for a request naming another model: load it, with its window (a
        model /api/create made holds its num_ctx). Call with the lock held."""
        key = self._made_key(name)
        made = self.made.get(key)
        if made is not None and self._loaded_as != key:
            if self._loaded_as is None:
                self._own_allocated = self.settings.allocated
            self.settings = replace(self.settings, allocated=made)
            self._loaded_as = key
        elif made is None and self._loaded_as is not None:
            self.settings = replace(self.settings, allocated=self._own_allocated)
            self._loaded_as = None

    def answer_tokenize(self, path: str, body: dict[str, Any]) -> tuple[int, Any] | None:
        """The tokenizer endpoint of the `tokenize` family, or None if `path` is not it."""
        family = endpoints.tokenize_family(path, self.settings)
        if family is None:
            return None
        with self._lock:
            self.tokenize_requests += 1
        return endpoints.tokenize(family, body, self.settings, self.count_tokens)

    # -- chat

    def answer_chat(self, body: dict[str, Any]) -> Answer:
        """Record the request and decide its answer: a fault, or what the model does."""
        with self._lock:
            self._load(str(body.get("model", "")))
            if body.get("max_tokens") == 1 and not body.get("stream"):
                return self._count_answer(body)
            self.requests.append(body)
            self._maybe_grow()
            prompt = self.count_tokens(body.get("messages") or [], body.get("tools"))
            self.prompt_tokens.append(prompt)
            over = self._over(prompt)
            self.over_limit += int(over)
            if self._script.outage_due() is not None:  # accepted just before the outage began
                return Answer(abort=True)
            fault = self._script.next_fault()
            if fault is None or fault.kind == "slow":
                answer = self._model_answer(body, prompt, over)
                answer.delay += fault.seconds if fault else 0.0
                return answer
            return self._fault_answer(fault, body)

    def _maybe_grow(self) -> None:
        """The restart `grows` asks for, once its request has come (this one is served by the
        restarted server)."""
        grows = self.settings.grows
        if grows is not None and len(self.requests) > grows[0]:
            self.settings = replace(
                self.settings, context_length=grows[1], allocated=None, grows=None
            )

    def _over(self, prompt: int) -> bool:
        return self.settings.window is not None and prompt > self.settings.window

    def _count_answer(self, body: dict[str, Any]) -> Answer:
        """A one-token, non-streaming request, the way clients ask a server that sends no
        usage in streams to count a prompt: answered with its usage, the script untouched."""
        self.count_requests.append(body)
        messages, tools = body.get("messages") or [], body.get("tools")
        prompt = self.count_tokens(messages, tools)
        over = self._over(prompt)
        refusal = self._refusal(body, over, prompt)
        if refusal is not None:
            return refusal
        if over:
            prompt = min(
                self.count_tokens(self.truncate(messages, tools), tools),
                prompt,
                self.settings.window or prompt,
            )
        prompt = self._miscounted(prompt, ahead=1)
        mode = self.settings.usage
        if mode == "decreasing":
            prompt = self._decreasing(prompt)
        usage = usage_wire(prompt, 1, "whole" if mode == "uncached" else mode)
        return Answer(json=render_completion(Reply(""), model=str(body.get("model")), usage=usage))

    def _model_answer(self, body: dict[str, Any], prompt: int, over: bool) -> Answer:
        refusal = self._refusal(body, over, prompt)
        if refusal is not None:
            return refusal
        messages, tools = body.get("messages") or [], body.get("tools")
        if over:
            messages = self.truncate(messages, tools)
            prompt = min(self.count_tokens(messages, tools), self.settings.window or prompt)
        common = self._read_prompt(messages, tools)
        cache = self._read_tokens(messages, tools)
        delay = 0.0
        item = self._script.next_item(messages)
        while isinstance(item, Fault) and item.kind == "slow":
            delay += item.seconds
            item = self._script.next_item(messages)
        if isinstance(item, Fault):
            answer = self._fault_answer(item, body)
        else:
            usage = self._usage(item, prompt, messages, tools, common, cache)
            answer = self._reply_answer(item, body, usage, self._timings(*cache))
        answer.delay = delay
        return answer

    def _refusal(self, body: dict[str, Any], over: bool, prompt: int) -> Answer | None:
        """Ollama's 404 and 400 answers, and the overflow modes other than truncation."""
        name = str(body.get("model", ""))
        if not self.settings.serves_any_name and not endpoints.serves(name, self.settings.models):
            return Answer(404, error_body(f"model '{name}' not found", 404))
        if body.get("tools") and not self.settings.tools_supported:
            return Answer(400, error_body(f"{name} does not support tools", 400))
        if self.settings.rejects_unparsed_arguments and unparsed_arguments(body):
            return Answer(500, error_body("Failed to parse tool call arguments as JSON", 500))
        self._served_chat = True
        if not over or self.settings.overflow == "truncate":
            return None
        if self.settings.overflow == "error":
            return Answer(400, error_body(OVERFLOW_MESSAGE, 400))
        # llama.cpp: a 200 with nothing in it
        if body.get("stream") and self.settings.overflow == "empty":
            return Answer(frames=[])
        return Answer(400, overflow_error_body(self.settings.window, prompt))

    def _read_prompt(self, messages: list[Message], tools: Any) -> int:
        """Put this prompt in the cache; return how many leading messages it shares with the
        previous one (none if the tools changed)."""
        cached_messages, cached_tools = self._cached
        self._cached = (list(messages), tools)
        if tools != cached_tools:
            return 0
        common = 0
        for new, old in zip(messages, cached_messages):
            if new != old:
                break
            common += 1
        return common

    def _read_tokens(self, messages: list[Message], tools: Any) -> tuple[int, int]:
        """Put this prompt's tokens in the one cache slot; return (the tokens it shares with
        the previous prompt's, all its tokens), as llama.cpp's server finds them."""
        pieces = self.settings.tokenizer.pieces(messages, tools)
        common = self.settings.tokenizer.common_tokens(pieces, self._pieces)
        self._pieces = pieces
        return common, sum(tokens for _, tokens in pieces)

    def _timings(self, common: int, whole: int) -> dict[str, Any] | None:
        """llama.cpp's `timings` for a prompt of `whole` tokens `common` of which its cache
        holds (it evaluates the last token again, however much is cached); None unless
        `settings.timings`. `bad_timings` replaces the counts with what it names."""
        if not self.settings.timings:
            return None
        cache_n = min(common, whole - 1) if whole else 0
        timings: dict[str, Any] = {
            "cache_n": cache_n,
            "prompt_n": whole - cache_n,
            "prompt_ms": 1.0,
            "predicted_n": 1,
            "predicted_ms": 1.0,
        }
        return {**timings, **(self.settings.bad_timings or {})}

    def _usage(
        self,
        reply: Reply,
        prompt: int,
        messages: list[Message],
        tools: Any,
        common: int,
        cache: tuple[int, int],
    ) -> dict[str, Any]:
        """The usage object to send: `prompt` (the count of what the model read) as the
        usage mode reports it, and the completion counted by the tokenizer; with
        `report_cached`, the tokens its cache held as `prompt_tokens_details.cached_tokens`."""
        mode = self.settings.usage
        texts = [reply.text]
        for name, arguments in reply.tool_calls:
            texts += [name, arguments_text(arguments)]
        completion = max(1, sum(self.settings.tokenizer.count_text(text) for text in texts))
        cached = cache[0]
        if mode == "uncached" and common:  # Ollama evaluates at least one token
            prompt = min(prompt, max(1, self.count_tokens(messages[common:], None)))
        if mode == "decreasing":
            prompt = self._decreasing(prompt)
        prompt = self._miscounted(prompt)
        report_cached = self.settings.report_cached and mode == "whole"
        cached_tokens = min(cached, prompt) if report_cached else None
        return usage_wire(prompt, completion, mode, cached_tokens)

    def _miscounted(self, prompt: int, ahead: int = 0) -> int:
        """The count as a server whose counts are off reports it (ModelSettings.miscount); a
        count asked for between chat requests is counted as the next one would be (`ahead`)."""
        miscount = self.settings.miscount
        if miscount is None or len(self.requests) + ahead < miscount[1]:
            return prompt
        return max(1, round(prompt * miscount[0]))

    def _decreasing(self, prompt: int) -> int:
        """Usage "decreasing": the first count true, each later one a twentieth below the last
        it sent, whatever the prompt holds."""
        if self._last_reported:
            prompt = max(1, self._last_reported * 19 // 20)
        self._last_reported = prompt
        return prompt

    def _reply_answer(
        self,
        reply: Reply,
        body: dict[str, Any],
        usage: dict[str, Any],
        timings: dict[str, Any] | None = None,
    ) -> Answer:
        model = self.settings.model if self.settings.serves_any_name else str(body.get("model"))
        number, created = len(self.requests), int(time.time())
        if not body.get("stream"):
            return Answer(
                json=render_completion(
                    reply,
                    model=model,
                    usage=usage,
                    request_number=number,
                    created=created,
                    timings=timings,
                )
            )
        wants_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        frames = render_stream(
            reply,
            model=model,
            wire=self.settings.wire,
            fragment_tool_calls=self.settings.fragment_tool_calls,
            usage=usage if self.settings.send_usage and wants_usage else None,
            request_number=number,
            created=created,
            timings=timings,
        )
        return Answer(frames=frames)

    def _fault_answer(self, fault: Fault, body: dict[str, Any]) -> Answer:
        streaming = bool(body.get("stream"))
        if fault.kind == "status":
            return Answer(fault.status, error_body(fault.message, fault.status))
        if fault.kind == "empty":
            return Answer(frames=[]) if streaming else Answer(raw=b"")
        if fault.kind == "outage":  # from a Brain or after a slow: start it, drop this request
            self._script.put_back(fault)
            return Answer(abort=True)
        model, number = str(body.get("model")), len(self.requests)
        frames = render_stream(
            _PARTIAL, model=model, wire=self.settings.wire, request_number=number, done=False
        )
        if fault.kind == "drop":
            return Answer(frames=frames[:3] if streaming else None, abort=True)
        if fault.kind == "garbage":
            if not streaming:
                return Answer(raw=b"{not json")
            return Answer(frames=frames[:2] + [GARBAGE_FRAME] + frames[2:] + [DONE_FRAME])
        if fault.kind == "no_done":
            if not streaming:  # nothing to leave out: a whole answer
                usage = usage_wire(self.prompt_tokens[-1], 1)
                return Answer(json=render_completion(_PARTIAL, model=model, usage=usage))
            return Answer(frames=frames)
        raise ValueError(f"unknown fault kind {fault.kind!r}")


def unparsed_arguments(body: dict[str, Any]) -> bool:
    """Whether a request's history holds a tool call whose arguments are not a JSON object."""
    for message in body.get("messages") or []:
        for call in message.get("tool_calls") or [] if isinstance(message, dict) else []:
            arguments = (call.get("function") or {}).get("arguments")
            try:
                if isinstance(arguments, str) and isinstance(json.loads(arguments), dict):
                    continue
            except ValueError:
                pass
            return True
    return False
