"""Streaming chat completions from an OpenAI-compatible server (Ollama's `/v1`).

    async with ChatClient("http://127.0.0.1:11434", "llama3.2") as client:
        result = await client.complete(messages, tools, on_text=print)

One call is one attempt: failures become the ModelError subclasses of `ouroboros.errors`,
each in one family (transient, overflow, permanent) and retrying is the caller's business
(see `ouroboros.server.retry`). Every reply is bounded in time and size (`ouroboros.server.limits`);
breaking a bound is a transient failure. The rooms around it: `reply_reader` reads a reply,
`model_server` names the server and words its failures, `server_errors` classifies them,
`server_kind` tells servers apart.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any, Callable

import httpx

from ouroboros.config import ModelConfig
from ouroboros.config.urls import normalize_base_url
from ouroboros.errors import (
    ContextOverflowError,
    ModelError,
    PermanentModelError,
    TransientModelError,
)
from ouroboros.protocols import Message, StreamResult, TextSink, WireMessages
from ouroboros.server.chunks import assign_call_ids, parse_usage
from ouroboros.server.connection import http_client
from ouroboros.server.errors import answered_for_good, parse_retry_after
from ouroboros.server.identity import (
    CHAT_PATH,
    ERROR_BODY_BYTES,
    ModelServer,
    described,
    is_html,
    read_capped,
)
from ouroboros.server.kinds import ServerKind
from ouroboros.server.limits import ReplyLimits, ReplyWatch
from ouroboros.server.limits import max_reply_bytes as reply_byte_limit
from ouroboros.server.reader import ReplyReader
from ouroboros.window.sizes import encode_json, wire_messages

JSON_CONTENT = {"Content-Type": "application/json"}


def client_settings(model: ModelConfig) -> dict[str, Any]:
    """The `[model]` settings a ChatClient takes (and `configure` takes again at a session
    start): sampling and the reply limits."""
    return {
        "temperature": model.temperature,
        "max_output_tokens": model.max_output_tokens,
        "timeout_secs": model.request_timeout_secs,
        "first_token_secs": model.first_token_timeout_secs,
        "idle_secs": model.idle_timeout_secs,
        "max_reply_bytes": model.max_reply_bytes,
    }


class ChatClient(ModelServer):
    """A `ModelClient` for `/v1/chat/completions` with streaming and usage reporting.

    Every reply is bounded (see `ouroboros.server.limits`): the first data within
    `first_token_secs`, no gap longer than `idle_secs`, all of it within `timeout_secs` and
    `max_reply_bytes` (0: derived from `max_output_tokens`). Breaking one is a transient
    failure, retried like a dropped stream.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        temperature: float = 0.7,
        max_output_tokens: int = 2048,
        timeout_secs: float = 600,
        first_token_secs: float = 300,
        idle_secs: float = 60,
        max_reply_bytes: int = 0,
        transport: httpx.AsyncBaseTransport | None = None,
        server_kind: ServerKind | None = None,
    ) -> None:
        base_url = normalize_base_url(base_url)
        # the last server error: (digest of the request body, status, body), see same_again
        self._last_failure: tuple[bytes, int, str] | None = None
        self.reply_room: Callable[[], int] | None = None  # what the window leaves for a reply
        super().__init__(
            base_url,
            model,
            http_client(base_url, api_key=api_key, transport=transport),
            server_kind,
        )
        self.configure(
            temperature=temperature,
            max_output_tokens=max_output_tokens,
            timeout_secs=timeout_secs,
            first_token_secs=first_token_secs,
            idle_secs=idle_secs,
            max_reply_bytes=max_reply_bytes,
        )

    async def __aenter__(self) -> ChatClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    def configure(
        self,
        *,
        temperature: float,
        max_output_tokens: int,
        timeout_secs: float,
        first_token_secs: float = 300,
        idle_secs: float = 60,
        max_reply_bytes: int = 0,
    ) -> None:
        """New sampling settings and reply limits, from the next request on."""
        self.temperature = temperature
        self.max_output_tokens = max_output_tokens
        self.limits = ReplyLimits(
            first_token_secs,
            idle_secs,
            timeout_secs,
            reply_byte_limit(max_output_tokens, max_reply_bytes),
        )
        self._http.timeout = httpx.Timeout(timeout_secs)

    def request_body(self, messages: WireMessages, tools: list[dict[str, Any]]) -> bytes:
        return encode_body(
            self.model,
            messages,
            tools,
            {
                "stream": True,
                "stream_options": {"include_usage": True},
                "temperature": self.temperature,
                "max_tokens": self.reply_tokens(),
            },
        )

    def reply_tokens(self) -> int:
        """max_tokens for a reply: model.max_output_tokens, and never more than the window
        leaves beside the prompt budget (`reply_room`, set by the run)."""
        room = self.reply_room() if self.reply_room is not None else self.max_output_tokens
        return max(1, min(self.max_output_tokens, room))

    async def complete(
        self,
        messages: list[Message] | WireMessages,
        tools: list[dict[str, Any]],
        on_text: TextSink | None = None,
    ) -> StreamResult:
        """Stream one completion; `on_text` gets each piece of text as it arrives. Tool calls
        come back with ids unique in `messages` (made up where the server sent none).

        Raises a ModelError subclass for every failure (one attempt, no retries).
        """
        wire = messages if isinstance(messages, WireMessages) else wire_messages(messages)
        body = self.request_body(wire, tools)
        watch = ReplyWatch(self.limits, asyncio.get_running_loop().time())
        timer = asyncio.timeout_at(watch.deadline)
        reader = ReplyReader(self, watch, timer, on_text, max_output_tokens=self.max_output_tokens)
        try:
            async with timer:
                result = await self._exchange(body, reader)
        except TimeoutError:
            raise TransientModelError(
                f"{self.server} was too slow: {watch.broken_bound()}"
            ) from None
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise self.unreachable() from exc
        except httpx.TimeoutException as exc:
            raise TransientModelError(
                f"{self.server} sent nothing in time ({type(exc).__name__})"
            ) from exc
        except httpx.TransportError as exc:
            raise TransientModelError(
                f"the connection to {self.server} broke: "
                f"{type(exc).__name__}: {exc or 'no details'}"
            ) from exc
        calls = assign_call_ids(result.tool_calls, wire.call_ids)
        served = result.served_model if result.served_model != self.model else ""
        return replace(result, tool_calls=calls, served_model=served)

    async def _exchange(self, body: bytes, reader: ReplyReader) -> StreamResult:
        headers = {**JSON_CONTENT, "Content-Length": str(len(body))}
        async with self._http.stream(
            "POST", CHAT_PATH, content=_once(body), headers=headers, timeout=None
        ) as response:
            if not response.is_success:
                text = await read_capped(response, ERROR_BODY_BYTES)
                reader.timer.reschedule(None)  # the reply is over; naming the error may ask
                retry_after = parse_retry_after(response.headers.get("retry-after"))
                error = await self.status_error(response.status_code, text, retry_after=retry_after)
                raise self.same_again(body, response.status_code, text, error)
            if is_html(response):
                page = await read_capped(response, ERROR_BODY_BYTES)
                raise self.not_an_llm_server(
                    f"POST {CHAT_PATH} answered {described(response, page)}"
                )
            if response.headers.get("content-type", "").startswith("application/json"):
                return await reader.whole(response)
            return await reader.stream(response)

    def same_again(self, body: bytes, status: int, text: str, error: ModelError) -> ModelError:
        """`error`, or a permanent one when the same request got the same server error the
        time before (errors.answered_for_good): asked a third time it would answer the same."""
        seen = (hashlib.sha256(body).digest(), status, text)
        repeated, self._last_failure = seen == self._last_failure, seen
        if not isinstance(error, TransientModelError) or not answered_for_good(status, repeated):
            return error
        return PermanentModelError(
            f"{error.message}, twice to the same request: it answers "
            "so every time, so it is not asked again"
        )

    async def prompt_tokens(
        self, messages: list[Message] | WireMessages, tools: list[dict[str, Any]]
    ) -> int | None:
        """The server's count of a prompt, from a non-streaming request for one token (servers
        that send no usage in streams, like llama.cpp, send it here). None when it does not
        say; ContextOverflowError, with the server's words, when the prompt does not fit."""
        wire = messages if isinstance(messages, WireMessages) else wire_messages(messages)
        body = encode_body(
            self.model,
            wire,
            tools,
            {"stream": False, "temperature": self.temperature, "max_tokens": 1},
        )
        answer = None
        for attempt in range(2):  # llama.cpp drops the kept-alive connection after a failure
            try:
                async with asyncio.timeout(self.limits.total_secs):
                    answer = await self._post_capped(body)
                break
            except httpx.TransportError:
                if attempt:
                    return None
            except (httpx.HTTPError, TimeoutError):
                return None
        if answer is None:
            return None
        status, text = answer
        if not 200 <= status < 300:
            error = await self.status_error(status, text)
            if isinstance(error, ContextOverflowError):
                raise error
            return None
        try:
            usage = json.loads(text).get("usage")
        except (ValueError, AttributeError):
            return None
        return parse_usage(usage).prompt_tokens if isinstance(usage, dict) else None

    async def _post_capped(self, body: bytes) -> tuple[int, str]:
        async with self._http.stream(
            "POST", CHAT_PATH, content=body, headers=JSON_CONTENT
        ) as response:
            return response.status_code, await read_capped(response, self.limits.max_bytes)


def encode_body(
    model: str, messages: WireMessages, tools: list[dict[str, Any]], settings: dict[str, Any]
) -> bytes:
    """One chat request as JSON: the messages, encoded when they entered the conversation, are
    joined as they are, into the one buffer sent (a large body is costly to copy)."""
    head = b'{"model":' + encode_json(model) + b',"messages":['
    tail = b"]" + (b',"tools":' + encode_json(tools) if tools else b"")
    tail += b"," + encode_json(settings)[1:]
    if not messages.json:
        return head + tail
    pieces = list(messages.json)
    pieces[0] = head + pieces[0]
    pieces[-1] += tail
    return b",".join(pieces)


async def _once(body: bytes) -> AsyncIterator[bytes]:
    """The request body as a one-shot stream: httpx then keeps no reference to it once sent
    (a bytes body stays on the Request, held by a reference cycle until a full collection,
    which at 10,000 messages is megabytes per turn)."""
    yield body
