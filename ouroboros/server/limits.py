"""How long and how large one reply may be, and which bound a reply broke. Pure: the client
gives it the time and the bytes as they come.

    watch = ReplyWatch(ReplyLimits(first_token_secs=300, idle_secs=60, total_secs=600,
                                   max_bytes=max_reply_bytes(2048)), started=now)
    watch.received(len(data))      # False once the reply is over max_bytes
    watch.progressed(now)          # data that makes progress: the idle clock starts again
    watch.deadline                 # when the reply fails if nothing more comes
    watch.broken_bound()           # "no data for 60 s in the middle of the reply (...)"

Only data that makes progress (text, reasoning, a tool call, a finish reason, usage) moves
the deadline: SSE keep-alive comments (`: ping`), blank lines and empty chunks do not.
"""

from __future__ import annotations

from dataclasses import dataclass

BYTES_PER_TOKEN = 512
"""Streamed bytes allowed per `max_output_tokens`: one token is one chunk object of 150 to
400 bytes on the wire (id, model, created, choices, ...)."""
BYTES_MARGIN = 1_000_000
"""Streamed bytes allowed on top, for usage, reasoning and tool-call framing."""


def max_reply_bytes(max_output_tokens: int, configured: int = 0) -> int:
    """The most bytes one reply may take: `configured` when set, else 512 per token of
    `max_output_tokens` plus 1 MB (2,048 tokens: 2.05 MB)."""
    return configured if configured > 0 else max_output_tokens * BYTES_PER_TOKEN + BYTES_MARGIN


def describe_bytes(count: int) -> str:
    """`count` bytes for people: "2.05 MB", "200 kB", "512 bytes"."""
    if count >= 1_000_000:
        return f"{count / 1e6:.3g} MB"
    if count >= 1_000:
        return f"{count / 1e3:.3g} kB"
    return f"{count} bytes"


@dataclass(frozen=True)
class ReplyLimits:
    """The bounds on one reply, from `[model]` in the config."""

    first_token_secs: float = 300.0
    """From sending the request to the first data (connecting and reading the prompt
    included)."""
    idle_secs: float = 60.0
    """The longest gap between two pieces of data once the reply has begun."""
    total_secs: float = 600.0
    """From sending the request to the last byte."""
    max_bytes: int = max_reply_bytes(2048)
    """The most bytes the reply may take."""


class ReplyWatch:
    """One reply against its limits. Times are any monotonic clock's seconds."""

    def __init__(self, limits: ReplyLimits, started: float) -> None:
        self.limits = limits
        self.started = started
        self.last_progress: float | None = None
        self.bytes = 0
        self.whole_body = False  # a plain JSON answer: only the total bound applies

    def received(self, size: int) -> bool:
        """Count `size` more bytes; False once the reply is over its size limit."""
        self.bytes += size
        return self.bytes <= self.limits.max_bytes

    def progressed(self, now: float) -> None:
        self.last_progress = now

    @property
    def deadline(self) -> float:
        total = self.started + self.limits.total_secs
        if self.whole_body:
            return total
        if self.last_progress is None:
            return min(total, self.started + self.limits.first_token_secs)
        return min(total, self.last_progress + self.limits.idle_secs)

    def broken_bound(self) -> str:
        """The bound the reply broke when its deadline passed, as a phrase naming its key."""
        limits = self.limits
        if self.deadline >= self.started + limits.total_secs:
            return (
                f"the reply took longer than {limits.total_secs:g} s (model.request_timeout_secs)"
            )
        if self.last_progress is None:
            return (
                f"no data for {limits.first_token_secs:g} s after the request "
                "(model.first_token_timeout_secs; keep-alive comments do not count)"
            )
        return (
            f"no data for {limits.idle_secs:g} s in the middle of the reply "
            "(model.idle_timeout_secs; keep-alive comments do not count)"
        )

    def oversize(self) -> str:
        """The size bound, as a phrase naming its key."""
        return f"the reply exceeded {describe_bytes(self.limits.max_bytes)} (model.max_reply_bytes)"
