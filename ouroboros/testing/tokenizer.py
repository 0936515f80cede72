"""How the scripted server counts tokens: pluggable, and unlike the harness's estimate.

A real server's count depends on its vocabulary (prose, JSON and hex digests differ in
density), its chat template (tokens per message, reasoning stripped from the history) and
whether it counts the tool schemas. A `ServerTokenizer` names one such combination;
`TOKENIZERS` is the matrix tests and benchmarks iterate over.

    tokenizer = TOKENIZERS["by-content"]
    tokenizer.count(messages, tools)     # the prompt_tokens a server would report
    tokenizer.count_text("some text")    # what a /tokenize endpoint answers
    tokenizer.common_tokens(tokenizer.pieces(messages, tools), before)   # a prefix cache's hit
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
from dataclasses import dataclass
from typing import Any, Callable

from ouroboros.protocols import Message

TextCounter = Callable[[str], int]
Pieces = list[tuple[str, int]]  # a prompt as a template lays it out: (text, its tokens)

LONGEST_WORD = 12
"""words_and_punctuation: a longer run of word characters (a digest, base64, "xxxx...")
counts as several tokens, since no vocabulary holds it whole."""
_WORD_OR_PUNCTUATION = re.compile(rf"\w{{1,{LONGEST_WORD}}}|[^\w\s]")
_HEX_RUN = re.compile(r"[0-9a-fA-F]{8,}")
_PIECE = re.compile(r"(?P<punct>[^\w\s]+)|(?P<prose>[\w\s]+)")
_THINK = re.compile(r"<think>.*?</think>\s*", re.DOTALL)

PROSE_CHARS_PER_TOKEN = 5.0
"""by_content: English words with their spaces."""
PUNCTUATION_CHARS_PER_TOKEN = 2.0
"""by_content: runs of punctuation such as `":"` or `"},{"`."""
HEX_CHARS_PER_TOKEN = 2.0
"""by_content: digests and ids, which a BPE vocabulary barely compresses."""


# ---- Text counters -----------------------------------------------------------------------


def words_and_punctuation(text: str) -> int:
    """One token per run of word characters (per LONGEST_WORD of a longer run) and one per
    punctuation character: the default, and no characters-per-token ratio."""
    return len(_WORD_OR_PUNCTUATION.findall(text))


def ratio(chars_per_token: float) -> TextCounter:
    """A counter of ceil(characters / chars_per_token), the harness's own kind of estimate."""

    def count(text: str) -> int:
        return math.ceil(len(text) / chars_per_token)

    count.__name__ = count.__qualname__ = f"ratio({chars_per_token:g})"
    return count


def by_content(text: str) -> int:
    """Density by content, like a BPE vocabulary.

    Hex-ish runs (8 or more hex characters, at least one a digit) cost a token per 2
    characters; each run of punctuation a token per 2 characters; each stretch of words and
    spaces between them a token per 5 characters. Plain prose comes out at 4.5 to 5
    characters per token, JSON near 3, digests near 2.
    """
    tokens = 0
    for is_hex, piece in _split_hex(text):
        if is_hex:
            tokens += math.ceil(len(piece) / HEX_CHARS_PER_TOKEN)
            continue
        for match in _PIECE.finditer(piece):
            if match.lastgroup == "punct":
                tokens += math.ceil(len(match.group()) / PUNCTUATION_CHARS_PER_TOKEN)
            elif match.group().strip():  # whitespace alone merges into its neighbours
                tokens += math.ceil(len(match.group()) / PROSE_CHARS_PER_TOKEN)
    return tokens


_NON_ASCII = re.compile(r"[^\x00-\x7f]+")


def bpe_bytes(text: str) -> int:
    """`by_content` for ASCII, and a byte-level vocabulary's fallback for everything else:
    a token per two UTF-8 bytes of a run of non-ASCII characters (CJK 1.5 tokens a
    character, emoji 2), as a vocabulary trained on English text splits them."""
    if text.isascii():
        return by_content(text)
    tokens, start = 0, 0
    for match in _NON_ASCII.finditer(text):
        tokens += by_content(text[start : match.start()])
        tokens += math.ceil(len(match.group().encode()) / 2)
        start = match.end()
    return tokens + by_content(text[start:])


def _split_hex(text: str) -> list[tuple[bool, str]]:
    """The text cut around its hex-ish runs: (is_hex, piece) in order."""
    pieces, start = [], 0
    for match in _HEX_RUN.finditer(text):
        if any(c.isdigit() for c in match.group()):
            pieces += [(False, text[start : match.start()]), (True, match.group())]
            start = match.end()
    return pieces + [(False, text[start:])]


# ---- The server's view of a whole prompt -------------------------------------------------


@dataclass(frozen=True)
class ServerTokenizer:
    """How one server counts a prompt: a vocabulary and a chat template."""

    name: str
    text: TextCounter = words_and_punctuation
    """Tokens of a piece of text."""
    per_message: int = 3
    """Template tokens around each message (role markers, separators)."""
    count_tools: bool = True
    """Whether the JSON of the `tools` list is part of the prompt."""
    strip_reasoning: bool = False
    """Drop `<think>...</think>` from assistant messages before the last user message, as
    Qwen3-style templates do."""

    def count(self, messages: list[Message], tools: list[dict[str, Any]] | None) -> int:
        """The whole prompt: every message's text, the tools if counted, the template."""
        texts = _message_texts(messages, strip_reasoning=self.strip_reasoning)
        if tools and self.count_tools:
            texts.append(json.dumps(tools))
        return sum(_tokens(self.text, text) for text in texts) + self.per_message * len(messages)

    def count_text(self, text: str) -> int:
        """Tokens of bare text, as a tokenize endpoint answers: no template."""
        return _tokens(self.text, text)

    def pieces(self, messages: list[Message], tools: list[dict[str, Any]] | None) -> Pieces:
        """The prompt in the order a template lays it out, as (piece, tokens): the tools'
        JSON first where counted, then each message's template tokens and texts. Their tokens
        add up to `count`; a prefix cache compares them (`common_tokens`)."""
        pieces: Pieces = []
        if tools and self.count_tools:
            text = json.dumps(tools)
            pieces.append((text, _tokens(self.text, text)))
        last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
        for index, message in enumerate(messages):
            strip = self.strip_reasoning and index < last_user
            pieces.append((f"<|{message.get('role')}|>", self.per_message))
            pieces += [
                (text, _tokens(self.text, text))
                for text in _texts_of(message, strip_reasoning=strip)
            ]
        return pieces

    def common_tokens(self, pieces: Pieces, before: Pieces) -> int:
        """The tokens at the start of `pieces` that `before` has too, as a one-slot prefix
        cache finds them: every piece alike, then of the first that differs, the tokens of the
        text both begin with but its last (where a word may have been cut)."""
        common = 0
        for (piece, tokens), (old, _) in zip(pieces, before):
            if piece != old:
                shared = os.path.commonprefix([piece, old])
                return common + max(0, min(self.count_text(shared) - 1, tokens))
            common += tokens
        return common


@functools.lru_cache(maxsize=4096)
def _tokens(counter: TextCounter, text: str) -> int:
    """`counter`'s tokens in `text`, remembered: every request resends the conversation."""
    return counter(text)


def _message_texts(messages: list[Message], *, strip_reasoning: bool = False) -> list[str]:
    """The pieces of text a template renders: contents, tool-call names and arguments."""
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    return [
        text
        for index, message in enumerate(messages)
        for text in _texts_of(message, strip_reasoning=strip_reasoning and index < last_user)
    ]


def _texts_of(message: Message, *, strip_reasoning: bool = False) -> list[str]:
    """One message's texts: its content (reasoning stripped from an assistant's, if asked),
    then each tool call's name and arguments."""
    content = _content_text(message.get("content"))
    if strip_reasoning and message.get("role") == "assistant":
        content = _THINK.sub("", content)
    texts = [content]
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        texts += [str(function.get("name") or ""), _as_text(function.get("arguments"))]
    return texts


def _content_text(content: Any) -> str:
    """A message's content as text; a list of content parts joins their texts."""
    if isinstance(content, list):
        return "".join(str(part.get("text") or "") for part in content if isinstance(part, dict))
    return _as_text(content)


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value)


TOKENIZERS: dict[str, ServerTokenizer] = {
    tokenizer.name: tokenizer
    for tokenizer in [
        ServerTokenizer("words"),
        ServerTokenizer("cpt-2.5", ratio(2.5)),
        ServerTokenizer("cpt-4", ratio(4)),
        ServerTokenizer("cpt-6.5", ratio(6.5)),
        ServerTokenizer("by-content", by_content),
        ServerTokenizer("bpe-bytes", bpe_bytes, per_message=5),
        ServerTokenizer("template-heavy", per_message=12),
        ServerTokenizer("no-tools", count_tools=False),
        ServerTokenizer("strip-reasoning", strip_reasoning=True),
    ]
}
"""Named server tokenizers; "words" is the scripted server's default."""
