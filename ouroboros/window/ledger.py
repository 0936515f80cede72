"""Token counts without the server's tokenizer: estimates, and a ledger of measured sizes.

Only the server knows how many tokens a prompt takes, and its density varies with the content
(English prose near 5 characters per token, JSON 3.5, hex digests near 2), so one ratio can be
off by 2x either way. What the server counts is better: each whole count, less what is already
known, is shared among the messages that were never counted, in proportion to their
estimates, and kept beside each message by the conversation that holds it (sizes.Entry; saved
with the conversation, never in the message, which is its wire form). A prompt's size is then
its messages' measured tokens plus a `base` (tool schemas and template tokens the server
adds), and only what was added since the last count is estimated.

    cpt = Calibration().chars_per_token
    size = base + conversation.tally.tokens(cpt)   # measured where counted, else estimated
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ouroboros.protocols import Message

# Before any count: denser than English prose, so the first estimates err on the high side.
DEFAULT_CHARS_PER_TOKEN = 3.0
# Learned ratios are kept within what real vocabularies show (hex digests to long words).
MIN_CHARS_PER_TOKEN, MAX_CHARS_PER_TOKEN = 1.5, 8.0
# Chat templates add role markers and separators around each message: at least this many
# tokens; what a template really adds is learned (learned_overhead), up to the most.
MESSAGE_OVERHEAD_TOKENS = 4
MAX_MESSAGE_OVERHEAD_TOKENS = 64
# How much the previous calibration still weighs after each new count: recent content counts
# most, since the next tool result will likely look like the last ones.
CALIBRATION_DECAY = 0.7
# Scripts a vocabulary trained mostly on Latin text splits finely (Greek and Cyrillic on, CJK,
# emoji): a character of these costs about a token or more, whatever ratio Latin text taught.
# They are estimated per character, at a rate learned apart, starting with a margin.
_DENSE = re.compile("[^\x00-\u036f]")  # U+0370 and up, written so it compiles in 0.4 ms, not 10
DEFAULT_TOKENS_PER_DENSE_CHAR = 2.0
MIN_TOKENS_PER_DENSE_CHAR, MAX_TOKENS_PER_DENSE_CHAR = 0.5, 4.0


def dense_chars(text: str) -> int:
    """How many characters of `text` are of a densely tokenized script."""
    return 0 if text.isascii() else len(_DENSE.findall(text))


def message_dense(message: Message) -> int:
    """Characters of a densely tokenized script in what a message carries."""
    content = message.get("content")
    dense = dense_chars(content) if isinstance(content, str) else 0
    for call in message.get("tool_calls") or ():
        dense += dense_chars(call.get("function", {}).get("arguments", ""))
    return dense


def message_chars(message: Message) -> int:
    """Characters of what a message carries: its content, tool-call names and arguments."""
    content = message.get("content")
    chars = len(content) if isinstance(content, str) else 0
    for call in message.get("tool_calls") or ():
        function = call.get("function", {})
        chars += len(function.get("name", "")) + len(function.get("arguments", ""))
    return chars


def message_text(message: Message) -> str:
    """The text a tokenizer endpoint should count for one message."""
    parts = [message.get("content") or ""]
    for call in message.get("tool_calls") or ():
        function = call.get("function", {})
        parts += [function.get("name", ""), function.get("arguments", "")]
    return "\n".join(part for part in parts if part)


def tools_chars(tools: list[dict[str, Any]]) -> int:
    return len(json.dumps(tools)) if tools else 0


def estimate_chars(
    chars: int,
    chars_per_token: float,
    dense: int = 0,
    per_dense: float = DEFAULT_TOKENS_PER_DENSE_CHAR,
) -> int:
    """Tokens of `chars` characters, `dense` of them of a densely tokenized script."""
    return math.ceil((chars - dense) / chars_per_token + dense * per_dense)


def estimate_text(
    text: str, chars_per_token: float, per_dense: float = DEFAULT_TOKENS_PER_DENSE_CHAR
) -> int:
    return estimate_chars(len(text), chars_per_token, dense_chars(text), per_dense)


def estimate_message(
    message: Message, chars_per_token: float, per_dense: float = DEFAULT_TOKENS_PER_DENSE_CHAR
) -> int:
    return (
        estimate_chars(message_chars(message), chars_per_token, message_dense(message), per_dense)
        + MESSAGE_OVERHEAD_TOKENS
    )


def message_tokens(
    message: Message,
    chars_per_token: float,
    per_dense: float = DEFAULT_TOKENS_PER_DENSE_CHAR,
    measured: int | None = None,
) -> int:
    """The message's `measured` size if a count has been attributed to it, else an
    estimate."""
    if measured is not None:
        return measured
    return estimate_message(message, chars_per_token, per_dense)


@dataclass
class Calibration:
    """This run's characters per token (for text in Latin script) and tokens per character of
    densely tokenized scripts, learned from the counts attributed to messages, the most recent
    weighing most."""

    chars: float = 0.0
    tokens: float = 0.0
    dense_chars: float = 0.0
    dense_tokens: float = 0.0

    @property
    def chars_per_token(self) -> float:
        if self.tokens <= 0:
            return DEFAULT_CHARS_PER_TOKEN
        ratio = self.chars / self.tokens
        return min(max(ratio, MIN_CHARS_PER_TOKEN), MAX_CHARS_PER_TOKEN)

    @property
    def tokens_per_dense_char(self) -> float:
        if self.dense_chars <= 0:
            return DEFAULT_TOKENS_PER_DENSE_CHAR
        ratio = self.dense_tokens / self.dense_chars
        return min(max(ratio, MIN_TOKENS_PER_DENSE_CHAR), MAX_TOKENS_PER_DENSE_CHAR)

    def observe(self, chars: int, tokens: int, dense: int = 0) -> None:
        """Counted: `tokens` for `chars` characters, `dense` of them of a dense script. The
        part that dominates is learned, the other taken at the rate known."""
        if chars <= 0 or tokens <= 0:
            return
        plain = chars - dense
        dense_share = dense * self.tokens_per_dense_char
        plain_share = plain / self.chars_per_token
        if dense and dense_share >= plain_share:
            learned = tokens - plain_share
            if learned > 0:
                self.dense_chars = self.dense_chars * CALIBRATION_DECAY + dense
                self.dense_tokens = self.dense_tokens * CALIBRATION_DECAY + learned
            return
        learned = tokens - dense_share
        if plain > 0 and learned > 0:
            self.chars = self.chars * CALIBRATION_DECAY + plain
            self.tokens = self.tokens * CALIBRATION_DECAY + learned


def share(total: int, weights: list[int]) -> list[int]:
    """Split `total` into integer parts proportional to the positive `weights`, rounding by
    largest remainders so the parts add up to `total`."""
    weight_sum = sum(weights)
    exact = [total * w / weight_sum for w in weights]
    parts = [math.floor(x) for x in exact]
    by_remainder = sorted(range(len(weights)), key=lambda i: exact[i] - parts[i], reverse=True)
    for i in by_remainder[: total - sum(parts)]:
        parts[i] += 1
    return parts


def attribute(
    fresh: list[Message],
    known: int,
    reported: int,
    base: int,
    chars_per_token: float,
    per_dense: float = DEFAULT_TOKENS_PER_DENSE_CHAR,
) -> tuple[int, list[int], int, int]:
    """Take in a whole count of a prompt whose measured messages add up to `known` tokens:
    share what it does not already explain among the messages never counted (`fresh`, to be
    kept as their measured sizes). Returns the base that makes the ledger add up to
    `reported`, each fresh message's share, and the characters and tokens attributed (for
    calibration).

    When the count leaves too little for the uncounted messages (the base was guessed high,
    or the template counts differently), nothing is attributed: the base absorbs the
    difference, so the ledger still adds up to what the server counted. The base is never
    negative: a count below what the ledger already explains leaves the ledger high (a
    prompt believed larger than it is costs a little room, never an overflow)."""
    residual = reported - base - known
    estimates = [estimate_message(m, chars_per_token, per_dense) for m in fresh]
    if not fresh or residual < MESSAGE_OVERHEAD_TOKENS * len(fresh):
        return max(reported - known - sum(estimates), 0), [], 0, 0
    return (
        base,
        share(residual, estimates),
        sum(message_chars(m) for m in fresh),
        residual - MESSAGE_OVERHEAD_TOKENS * len(fresh),
    )


def grown_shares(growth: int, sizes: list[int]) -> list[int] | None:
    """What each of the messages added to a prompt costs, when the server's count grew by
    `growth` with them: the growth shared in proportion to their `sizes` as believed. None
    when it is too little to give each the least a message costs (a count that did not come
    from these messages alone).

        grown_shares(80, [24, 16])   # [48, 32]: the template's wrapping shared too
    """
    if not sizes or growth < MESSAGE_OVERHEAD_TOKENS * len(sizes):
        return None
    return share(growth, [max(size, 1) for size in sizes])


def learned_overhead(believed: float, missed: int, messages: int) -> float:
    """The template's tokens around a message, after a count showed `messages` messages
    (counted by a tokenizer, each with `believed` added) cost `missed` tokens more than
    believed in all; half the way to what this count says, within [MESSAGE_OVERHEAD_TOKENS,
    MAX_MESSAGE_OVERHEAD_TOKENS].

        learned_overhead(4, 36, 2)   # 13.0: half way from 4 to 22
    """
    seen = believed + missed / messages if messages else believed
    learned = (believed + seen) / 2
    return min(max(learned, MESSAGE_OVERHEAD_TOKENS), MAX_MESSAGE_OVERHEAD_TOKENS)
