"""One reply's body read into a StreamResult, within its bounds (`ouroboros.server.limits`).

    reader = ReplyReader(server, watch, timer, on_text, max_output_tokens=2048)
    result = await reader.stream(response)     # text/event-stream, up to [DONE]
    result = await reader.whole(response)      # a server that ignored `stream: true`

The raw bytes are counted before they are split into lines (`ouroboros.server.sse`), so a server
that sends one endless line still meets `max_reply_bytes`. The stream's own failures are
classified here: a reply cut off, too big, or not made of chunks is transient; an empty 200
(no event, or only [DONE]) is EmptyStreamError, of the overflow family (llama.cpp's answer to
an oversized prompt); an error event becomes what its status and message mean.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx

from ouroboros.errors import EmptyStreamError, TransientModelError
from ouroboros.protocols import StreamResult, TextSink
from ouroboros.server.chunks import DONE, MalformedChunk, StreamAccumulator, parse_data
from ouroboros.server.identity import ModelServer
from ouroboros.server.limits import ReplyWatch
from ouroboros.server.sse import SSEDecoder

DRAIN_SECS = 1.0  # after [DONE]: how long to wait for the body's end, to reuse the connection


class ReplyReader:
    """Reads one reply from `server`: `watch` counts its bytes and time, `timer` is moved to
    the watch's deadline at each piece of progress, `on_text` gets the text as it comes."""

    def __init__(
        self,
        server: ModelServer,
        watch: ReplyWatch,
        timer: asyncio.Timeout,
        on_text: TextSink | None,
        *,
        max_output_tokens: int,
    ) -> None:
        self.server = server
        self.watch = watch
        self.timer = timer
        self.on_text = on_text
        self.max_output_tokens = max_output_tokens
        self.accumulator = StreamAccumulator()
        self._now = asyncio.get_running_loop().time

    async def stream(self, response: httpx.Response) -> StreamResult:
        """The streamed reply up to [DONE]; a ModelError for every way it can fail."""
        decoder = SSEDecoder()
        received = response.aiter_bytes()
        events = 0
        async for data in received:
            if not self.watch.received(len(data)):
                raise self._oversize()
            for payload in decoder.feed(data):
                if payload.strip():  # an event of blank data is a keep-alive
                    events += 1
                    if await self._take(payload):
                        await _drain(received, self.watch)
                        return self.accumulator.result()
        ended = decoder.close()  # an event whose blank line never came
        tail = ended[-1].strip() if ended else ""
        if tail == DONE and await self._take(tail):
            return self.accumulator.result()
        if events == 0 and not tail:
            raise self._empty_stream("no data")
        raise TransientModelError(
            f"the stream from {self.server.shown_url} ended without [DONE] after "
            f"{self.accumulator.chunks} chunks: the server failed mid-answer"
        )

    async def whole(self, response: httpx.Response) -> StreamResult:
        """A server that ignored `stream: true` and answered one chat.completion object."""
        self.watch.whole_body = True
        self.timer.reschedule(self.watch.deadline)
        parts = []
        async for data in response.aiter_bytes():
            if not self.watch.received(len(data)):
                raise self._oversize()
            parts.append(data)
        body = b"".join(parts).decode("utf-8", errors="replace")
        chunk = self._parse(body) or {}
        choices = chunk.get("choices")
        if "error" in chunk and not choices:
            raise await self.server.stream_error(chunk)
        if isinstance(choices, list):
            chunk["choices"] = [
                {**choice, "delta": choice.get("message") or {}}
                if isinstance(choice, dict)
                else choice
                for choice in choices
            ]
        self._feed(chunk, body)
        return self.accumulator.result()

    async def _take(self, payload: str) -> bool:
        """Take one event's data; True at [DONE]. An error event raises its ModelError."""
        chunk = self._parse(payload)
        if chunk is None:
            if self.accumulator.chunks == 0:
                raise self._empty_stream("only [DONE]")
            return True
        if "error" in chunk and not chunk.get("choices"):
            raise await self.server.stream_error(chunk)
        progress = self.accumulator.progress
        text = self._feed(chunk, payload)
        if self.accumulator.progress != progress:
            self.watch.progressed(self._now())
            self.timer.reschedule(self.watch.deadline)
        if text and self.on_text is not None:
            self.on_text(text)
        return False

    def _parse(self, payload: str) -> dict[str, Any] | None:
        try:
            return parse_data(payload)
        except MalformedChunk as exc:
            raise self._malformed(str(exc), payload) from None
        except (ValueError, RecursionError):  # RecursionError: nested too deep to read
            raise self._malformed("not JSON", payload) from None

    def _feed(self, chunk: dict[str, Any], payload: str) -> str:
        try:
            return self.accumulator.feed(chunk)
        except MalformedChunk as exc:
            raise self._malformed(str(exc), payload) from None

    def _malformed(self, reason: str, payload: str) -> TransientModelError:
        return TransientModelError(
            f"{self.server.server} sent a malformed chunk ({reason}): {payload[:120]!r}"
        )

    def _oversize(self) -> TransientModelError:
        return TransientModelError(
            f"{self.server.server} sent too much: {self.watch.oversize()}; a server that "
            f"honours max_tokens ({self.max_output_tokens}) stays far below it"
        )

    def _empty_stream(self, what: str) -> EmptyStreamError:
        return EmptyStreamError(
            f"{self.server.server} answered 200 with an empty stream ({what}); "
            "llama.cpp does this when the prompt is longer than its context"
        )


async def _drain(received: AsyncIterator[bytes], watch: ReplyWatch) -> None:
    """Read what follows [DONE] (normally only the end of the body) so the connection can be
    reused; a server that keeps talking, or stays silent, is left to close with it."""
    try:
        async with asyncio.timeout(DRAIN_SECS):
            async for data in received:
                if not watch.received(len(data)):
                    return
    except (TimeoutError, httpx.HTTPError):
        return
