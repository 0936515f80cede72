"""The window's evidence, gathered during a session: the I/O around `tokens` and `window`.

Before each request, what was never counted is measured with the server's tokenizer where it
has one. After each reply, the server's count is taken in (asking the server to count the
prompt once a session when its stream carried none), and what it proved is logged and, once
per kind, explained to the person. A refusal as too long makes the window smaller, with the
size the server names if it will name one.
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence

from ouroboros.store import events as ev
from ouroboros.window import ledger as tk
from ouroboros.window.policy import ContextManager, Reading
from ouroboros.errors import ContextOverflowError, EmptyStreamError, ModelError
from ouroboros.protocols import (
    Clear,
    EventSink,
    Message,
    ModelClient,
    StreamResult,
    TokenCounter,
    Usage,
    Warn,
)
from ouroboros.window.belief import after_retest, named_window, needs_retest, with_allocated
from ouroboros.window.conversation import to_wire
from ouroboros.tools import Toolbox
from ouroboros.server.kinds import bigger_window

# Filler for a re-test prompt: a word that takes about one token on any vocabulary.
RETEST_FILLER = "ledger "
RETEST_PIECES = 16


ALLOCATED = "allocated by Ollama (/api/ps)"


def believe_told(context: ContextManager, told: tuple[int, str] | None, warn: Warn) -> None:
    """Believe what the server says its window is (see belief.with_allocated); when that is
    less than the claim, say so once, with the fix."""
    if told is None:
        return
    tokens, told_by = told
    window = context.window
    context.window = with_allocated(window, tokens, told_by)
    if tokens < window.claimed:
        fix = bigger_window(window.claimed)
        warn("allocated", (
            f"the server's window is {tokens} tokens ({told_by}), but "
            f"{window.claimed_source} claims {window.claimed}: working within {tokens} "
            f"tokens. Fix: give the model the bigger window ({fix}), or set "
            f"model.context_limit = {tokens} to match"))


def choose_tools(context: ContextManager, system: Message, toolbox: Toolbox,
                 warn: Warn) -> list[dict[str, Any]]:
    """The tool definitions for a session (see ContextManager.session_tools); the first time
    they go short, the person is told why, with the figures."""
    full = toolbox.schemas()
    tools = context.session_tools(system, full, toolbox.brief_schemas())
    if context.brief:
        fixed, budget = context.fixed_tokens(system, full), context.budget
        warn("brief_tools", (
            f"the system prompt and the tool definitions take ~{fixed} tokens, "
            f"{fixed / budget:.0%} of the {budget}-token prompt budget of a {context.limit}-"
            f"token window: the tools are described in short (~"
            f"{context.fixed_tokens(system, tools)} tokens with the system prompt) while the "
            "window is this small"))
    return tools


class WindowAsker(Protocol):
    """The server's own word on its window (server.discovery.WindowQuestions)."""

    async def allocated(self) -> int | None: ...

    async def told(self) -> tuple[int, str] | None: ...


class Accounting:
    def __init__(self, context: ContextManager, client: ModelClient,
                 counter: TokenCounter | None, tools: list[dict[str, Any]], log: EventSink,
                 warn_once: Warn, asker: WindowAsker | None = None,
                 clear: Clear | None = None) -> None:
        self.context = context
        self.clear = clear or (lambda keys, message: None)
        self.client = client
        self.counter = counter
        self.tools = tools
        self.log = log
        self.warn_once = warn_once
        self.asker = asker
        self.asked_allocated = False  # this session, after its first reply

    async def ask_allocated(self, *, again: bool = False) -> None:
        """After the first reply of a session (`again`: after a refusal too), ask what Ollama
        allocated: the model is loaded now, so `/api/ps` tells the truth, and the belief is
        min(claim, allocated) from the next request on. One GET; nothing for other servers."""
        if self.asker is None or (self.asked_allocated and not again):
            return
        self.asked_allocated = True
        allocated = await self.asker.allocated()
        if allocated:
            believe_told(self.context, (allocated, ALLOCATED), self.warn_once)

    async def retest(self, messages: Sequence[Message]) -> None:
        """At a session start, when the window believed is a ceiling inferred from truncation
        or refusals and the server said nothing of its window: ask it to count a prompt a
        little above that ceiling (the conversation and filler; one token asked for). A count
        above the ceiling proves the window grew."""
        window = self.context.window
        target = needs_retest(window)
        if not target:
            return
        have = self.context.current_tokens(messages, self.tools)
        words = max(target - have, 0)
        # The filler goes first, after the system prompt, in pieces: a server that cuts the
        # front of long prompts drops as many as it must, and counts about its window.
        wire = to_wire(messages)
        piece = {"role": "user", "content": RETEST_FILLER * (words // RETEST_PIECES + 1)}
        probe = [wire[0], *[piece] * RETEST_PIECES, *wire[1:]]
        try:
            counted = await self.client.prompt_tokens(probe, self.tools)
        except ModelError:
            return
        self.context.window = after_retest(window, counted)
        if self.context.window != window:
            self.clear(lambda key: key == "truncation", "the server counts past the window "
                       f"believed: {self.context.limit} tokens again")
            self.log.emit(ev.WarningEvent(message=(
                f"the server counted {counted} tokens of a prompt above the {window.limit} "
                f"believed: working within {self.context.limit} tokens again "
                f"({self.context.limit_source})")))

    async def measure(self, messages: list[Message]) -> None:
        """Count what was never counted with the server's tokenizer, where it has one."""
        counter = self.counter
        if counter is None:
            return
        conversation = self.context.held(messages)
        for index in conversation.tally.unmeasured():
            tokens = await counter.count(tk.message_text(conversation[index]))
            if tokens is None:
                return
            conversation.measure(index, tokens + round(self.context.message_overhead))

    async def take_in(self, messages: Sequence[Message], sent: int,
                      reply: StreamResult) -> Reading:
        """What the server said of the request of the first `sent` messages, into the
        ledger and the log."""
        usage = reply.usage
        streamed_count = usage is not None and bool(usage.prompt_tokens)
        if (usage is None or usage.prompt_tokens is None) and not self.context.probed:
            usage = await self.probe(messages, sent, usage)
        reading = self.context.observe_reply(messages, self.tools, usage, len(reply.text),
                                             sent)
        if streamed_count and reading.verdict == "whole":
            self.clear(lambda key: key == "estimate", "the server sends token usage again")
        self.log.emit(ev.TokenUsage(
            prompt_tokens=reading.prompt_tokens, completion_tokens=reading.completion_tokens,
            total_tokens=reading.prompt_tokens + reading.completion_tokens,
            context_limit=self.context.limit, budget=self.context.budget,
            context_used_pct=round(100 * self.context.used_pct(reading.prompt_tokens), 1),
            source=reading.source, reported=reading.reported, estimated=reading.estimated,
            cached_tokens=reading.cached_tokens, verdict=reading.verdict,
            served_model=reply.served_model))
        self.explain(reading)
        return reading

    async def probe(self, messages: Sequence[Message], sent: int,
                    usage: Usage | None) -> Usage | None:
        """Once a session, when the stream carried no count: ask the server to count the
        prompt (the first `sent` messages), so the ledger learns what only it knows (tool
        schemas, template tokens)."""
        self.context.probed = True
        try:
            counted = await self.client.prompt_tokens(self.context.wire(messages, sent),
                                                      self.tools)
        except ModelError:
            return usage
        if counted is None:
            return usage
        return Usage(counted, usage.completion_tokens if usage else None)

    def explain(self, reading: Reading) -> None:
        """Tell the person what a count proved, once per kind."""
        if reading.verdict == "unknown":
            measured = self.counter is not None and self.counter.available
            how = ("each message is counted with its tokenizer endpoint" if measured else
                   f"estimating at {self.context.chars_per_token:.1f} characters per token")
            self.warn_once("estimate", "the server sent no token usage (or a prompt count of 0); "
                           f"{how}, and the server is asked to count the whole prompt once a "
                           "session")
        elif reading.verdict == "nonsense":
            held = self.context.window
            why = (f"its counts kept falling while the prompt grew, far inside the "
                   f"{max(held.told, held.accepted)} tokens it is known to hold. Its counts are "
                   "ignored from now on, estimating at a rate that errs high"
                   if held.distrusted else "no prompt has that count. Such counts are ignored "
                   "(estimating instead); the ledger keeps what earlier counts taught")
            self.warn_once("nonsense", (
                f"the server reported {reading.reported} prompt tokens for a prompt of about "
                f"{reading.estimated} in a {self.context.limit}-token window: {why}"))
        elif reading.verdict == "uncached":
            self.warn_once("uncached", (
                f"the server counted {reading.reported} prompt tokens, about the size of only "
                "the newest messages (Ollama's uncached-tokens bug, ollama#16414; upgrade "
                "Ollama): estimating instead"))
        elif reading.verdict == "truncated":
            self.log.emit(ev.ContextTruncationDetected(
                reported=reading.reported, estimated=reading.estimated,
                new_limit=self.context.limit, limit_source=self.context.limit_source))
            self.warn_once("truncation", (
                f"the server cut the front of the conversation: its counts stayed near "
                f"{reading.reported} tokens while the conversation grew. Working within "
                f"{self.context.limit} tokens from now on. Fix: give the model a bigger window "
                "(OLLAMA_CONTEXT_LENGTH=32768 ollama serve, or PARAMETER num_ctx in a "
                "Modelfile) and set model.context_limit to match; if the server misreports "
                "its counts instead, set context.truncation_guard = false"))

    async def refused(self, error: ContextOverflowError, sent: Sequence[Message],
                      sent_tokens: int) -> None:
        """The server refused the prompt as too long: believe a smaller window and refit.

        An empty stream says nothing of sizes, so the prompt is asked again without streaming:
        llama.cpp then names its window, or counts the prompt (it fit: the empty stream was a
        glitch)."""
        message, named = str(error), named_window(str(error))
        if isinstance(error, EmptyStreamError):
            try:
                fits = await self.client.prompt_tokens(self.context.wire(sent), self.tools)
            except ContextOverflowError as refusal:
                fits, message, named = None, refusal.message, named_window(refusal.message)
            if fits is not None or sent_tokens <= self.context.window.accepted:
                self.log.emit(ev.Retry(attempt=1, delay_secs=0, error=message))
                return
        self.context.refused(sent_tokens, named)
        self.log.emit(ev.ContextOverflowRecovered(
            error=message, rejected_tokens=sent_tokens, new_limit=self.context.limit,
            limit_source=self.context.limit_source))
