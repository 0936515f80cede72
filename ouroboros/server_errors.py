"""What a model server's failure means, decided once: retry it or not, how long the server
asked us to wait, and the one line of its answer worth quoting. Pure: no I/O.

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

from ouroboros.sse import without_surrogates

MAX_QUOTE = 200
"""The most characters of a server's words quoted in an error line."""
NOT_AN_API = frozenset({404, 405, 501})
"""Statuses a plain web server gives for an endpoint it does not have."""

_PERMANENT_5XX = frozenset({501, 505})  # Not Implemented, HTTP Version Not Supported
_LOOKS_HTML = re.compile(r"<\s*(?:!doctype|html|head|body|title|p|h\d|div|center|pre)\b", re.I)
_HIDDEN = re.compile(r"<\s*(head|script|style)\b.*?<\s*/\s*\1\s*>", re.I | re.S)
_TITLE = re.compile(r"<\s*title\b[^>]*>(.*?)<\s*/\s*title\s*>", re.I | re.S)
_TAG = re.compile(r"<[^>]*>")


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
