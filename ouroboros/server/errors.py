"""What a model server's failure means, decided once: which family of `ouroboros.errors` it
belongs to, how long the server asked us to wait, and the one line of its answer worth
quoting. Pure: no I/O.

    classify(400, "the prompt is too long")       # "overflow"
    is_transient_status(503)                      # True: 408, 429 and 5xx but 501 and 505
    parse_retry_after("7")                        # 7.0; an HTTP date works too
    error_details('{"error": {"message": "boom", "code": "c1"}}')   # ("boom", "c1")
    body_line("<html><body><h1>404 Not Found</h1>...")               # "404 Not Found"
"""

from __future__ import annotations

import email.utils
import html
import json
import math
import re
from datetime import datetime, timezone
from typing import Literal

from ouroboros.server.chunks import without_surrogates

MAX_QUOTE = 200
"""The most characters of a server's words quoted in an error line."""
NOT_AN_API = frozenset({404, 405, 501})
"""Statuses a plain web server gives for an endpoint it does not have."""

Failure = Literal[
    "transient", "overflow", "auth", "not_an_api", "no_tools", "model_not_found", "rejected"
]
"""What a failed request means: "transient" is retried, "overflow" (the prompt is too long)
goes to the context manager, the rest are permanent and stop the run."""

_OVERFLOW_PHRASES = (
    "context length",
    "context_length",
    "context size",
    "context window",
    "prompt is too long",
    "too many tokens",
    "exceeds the available context",
)
_PERMANENT_5XX = frozenset({501, 505})  # Not Implemented, HTTP Version Not Supported
_LOOKS_HTML = re.compile(r"<\s*(?:!doctype|html|head|body|title|p|h\d|div|center|pre)\b", re.I)
_HIDDEN = re.compile(r"<\s*(head|script|style)\b.*?<\s*/\s*\1\s*>", re.I | re.S)
_TITLE = re.compile(r"<\s*title\b[^>]*>(.*?)<\s*/\s*title\s*>", re.I | re.S)
_TAG = re.compile(r"<[^>]*>")


def classify(status: int, message: str, code: str | None = None) -> Failure:
    """What an HTTP error, or an error event in a stream, means: its status, its message and
    its `code` as `error_details` reads them from the body.

        classify(503, "busy")                                   # "transient"
        classify(500, "context size exceeded")                  # "overflow", never retried
        classify(404, "model 'x' not found")                    # "model_not_found"
    """
    lowered = message.lower()
    overflow = is_overflow(lowered, code)
    if status in (401, 403):
        return "auth"
    if is_transient_status(status) and not overflow:
        return "transient"
    if status in (405, 501):
        return "not_an_api"
    if "does not support tools" in lowered:
        return "no_tools"
    if overflow:
        return "overflow"
    if status == 404 or ("not found" in lowered and "model" in lowered):
        return "model_not_found"
    return "rejected"


def is_overflow(lowered_message: str, code: str | None) -> bool:
    """Whether an error's (lower-cased) message or its code says the prompt was too long."""
    if code == "context_length_exceeded":
        return True
    return any(phrase in lowered_message for phrase in _OVERFLOW_PHRASES)


def answered_for_good(status: int, repeated: bool) -> bool:
    """Whether a server error is the answer to every asking of the same request: a 5xx other
    than 503 (which says to come back later) that the same request body got the time before
    too, in the same words. llama.cpp answers 500 to a history it cannot parse, every time.

        answered_for_good(500, repeated=True)    # True: asked twice, answered the same
        answered_for_good(503, repeated=True)    # False: busy or loading; it will pass
    """
    return repeated and 500 <= status <= 599 and status != 503


def is_transient_status(status: int) -> bool:
    """Whether a request that got this status may succeed if asked again: 408 (timeout), 429
    (rate limit) and server errors, but not 501 or 505, which say the server will never do it."""
    return status in (408, 429) or (500 <= status <= 599 and status not in _PERMANENT_5XX)


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds to wait from a `Retry-After` header: delay-seconds ("7") or an HTTP date
    ("Wed, 21 Oct 2015 07:28:00 GMT", 0 once past). None when absent or unreadable."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        seconds = max(0.0, (when - (now or datetime.now(timezone.utc))).total_seconds())
    if not math.isfinite(seconds) or seconds < 0:
        return None
    return seconds


def error_details(body: str) -> tuple[str, str | None]:
    """(message, code) from an error body: `{"error":{"message":..,"code":..}}`,
    `{"error":"..."}`, `{"message":..}`/`{"detail":..}`; for anything else (an HTML page,
    plain text) its first line of text. One line, at most MAX_QUOTE characters."""
    message, code = None, None
    try:
        parsed = without_surrogates(json.loads(body))
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        error = parsed.get("error", parsed)
        if isinstance(error, dict):
            message = str(error.get("message") or error.get("detail") or json.dumps(error))
            code = str(error["code"]) if error.get("code") is not None else None
        else:
            message = str(error)
    line = _capped(" ".join(message.split())) if message is not None else body_line(body)
    return line or "(no message)", code


def body_line(body: str) -> str:
    """The first line of text of a body: of an HTML page, the first line of its visible text
    (its title when it has none), entities decoded; "" for an empty body."""
    text, title = body, ""
    if _LOOKS_HTML.search(text):
        found = _TITLE.search(text)
        title = html.unescape(_TAG.sub("", found.group(1))) if found else ""
        text = html.unescape(_TAG.sub("\n", _HIDDEN.sub("\n", text)))
    for line in [*text.splitlines(), title]:
        words = " ".join(line.split())
        if words:
            return _capped(words)
    return ""


def _capped(line: str) -> str:
    return line if len(line) <= MAX_QUOTE else line[: MAX_QUOTE - 3] + "..."
