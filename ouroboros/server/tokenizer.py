"""Exact token counts from the server's own tokenizer, where it has one.

    async with TokenCounter("http://127.0.0.1:8080", "qwen3-8b") as counter:
        tokens = await counter.count("How many tokens is this?")  # 7, or None

The first call probes each family's tokenize endpoints (`ouroboros.server.kinds`), in order:
llama-cpp-python (`POST /extras/tokenize/count`), llama.cpp's own server (`POST /tokenize` with
`content`) and vLLM (`POST /tokenize` with `model` and `prompt`, tried only when the server
refuses the llama.cpp body with a 4xx other than 404/405: a path that is missing is not asked
again with another body).
The endpoint that answers is kept and the others are never asked again. When none answers
(Ollama has no tokenizer endpoint) the counter returns None from then on without a request,
so callers fall back to their estimate. A later failure of the kept endpoint is taken as
transient: that call returns None and the next one asks again.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from ouroboros.config.urls import normalize_base_url
from ouroboros.server.connection import http_client
from ouroboros.server.kinds import Endpoint, tokenize_endpoints
from ouroboros.server.kinds.family import natural
from ouroboros.server.kinds.llamacpp import LLAMA_CPP_TOKENIZE


class _NoCount(Exception):
    """The server answered, but not with a count (`status` is its HTTP status)."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


class TokenCounter:
    """Counts tokens with the server's tokenizer; `count()` returns None where there is none."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        http: httpx.AsyncClient | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout_secs: float = 10,
    ) -> None:
        self.base_url = normalize_base_url(base_url)
        self.model = model
        self._owns_http = http is None
        self._http = http if http is not None else http_client(transport=transport)
        self._timeout = httpx.Timeout(timeout_secs)
        self._whole_secs = timeout_secs  # for a whole answer: a byte every few seconds is slow
        self._probed = False
        self._probing = asyncio.Lock()
        self._endpoint: Endpoint | None = None
        self._window: int | None = None

    @property
    def available(self) -> bool | None:
        """Whether the server counts tokens; None until the first `count()` has probed."""
        return self._endpoint is not None if self._probed else None

    @property
    def endpoint(self) -> Endpoint | None:
        """The tokenizer endpoint in use, once found."""
        return self._endpoint

    @property
    def window(self) -> int | None:
        """The model's context length if the tokenizer said so (vLLM's `max_model_len`)."""
        return self._window

    async def count(self, text: str) -> int | None:
        """The number of tokens in `text`, or None if the server cannot tell right now."""
        if not self._probed:
            async with self._probing:
                if not self._probed:
                    return await self._probe(text)
        if self._endpoint is None:
            return None
        try:
            return await self._ask(self._endpoint, text)
        except (httpx.HTTPError, _NoCount, TimeoutError):
            return None

    async def _probe(self, text: str) -> int | None:
        """Ask each family in turn; remember the first that answers, or that none did."""
        try:
            found = await self._find(text)
        except (httpx.HTTPError, TimeoutError):  # unreachable or too slow: so would the others be
            found = None
        self._probed = True
        if found is None:
            return None
        self._endpoint, count = found
        return count

    async def _find(self, text: str) -> tuple[Endpoint, int] | None:
        missing: set[str] = set()  # paths that are missing or broken: no body fares better
        for endpoint in tokenize_endpoints():
            if endpoint.path in missing:
                continue
            try:
                return endpoint, await self._ask(endpoint, text)
            except _NoCount as refused:
                if not _wrong_body(refused.status):
                    missing.add(endpoint.path)
        return None

    async def _ask(self, endpoint: Endpoint, text: str) -> int:
        response = await asyncio.wait_for(
            self._http.post(
                self.base_url + endpoint.path,
                json=endpoint.body(text, self.model),
                timeout=self._timeout,
            ),
            self._whole_secs,
        )
        try:
            answer = response.json() if response.is_success else None
        except ValueError:
            answer = None
        if (count := endpoint.read(answer)) is None:
            raise _NoCount(response.status_code)
        window = answer.get("max_model_len") if isinstance(answer, dict) else None
        if natural(window) and window > 0:
            self._window = window
        return count

    async def prompt(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> int | None:
        """The tokens of the whole prompt these messages and tools make, the chat template
        included, where the server can render it without running the model (llama.cpp's
        `/apply-template`, then `/tokenize`); None elsewhere."""
        try:
            rendered = await asyncio.wait_for(
                self._http.post(
                    self.base_url + "/apply-template",
                    json={"messages": messages, "tools": tools},
                    timeout=self._timeout,
                ),
                self._whole_secs,
            )
            prompt = rendered.json().get("prompt") if rendered.is_success else None
            if not isinstance(prompt, str):
                return None
            return await self._ask(LLAMA_CPP_TOKENIZE, prompt)
        except (httpx.HTTPError, ValueError, AttributeError, _NoCount, TimeoutError):
            return None

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> TokenCounter:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def _wrong_body(status: int) -> bool:
    """A 4xx that means "not this body" rather than "no such endpoint"."""
    return 400 <= status < 500 and status not in (404, 405)
