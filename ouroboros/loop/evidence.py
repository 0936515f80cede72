"""The window's evidence, gathered during a session: the I/O around `tokens` and `window`.

Before each request, what was never counted is measured with the server's tokenizer where it
has one. After each reply, the server's count is taken in (asking the server to count the
prompt once a session when its stream carried none), and what it proved is logged and, once
per kind, explained to the person. A refusal as too long makes the window smaller, with the
size the server names if it will name one.

The belief is tested by probes (belief.after_probe): a count-only request of the system
prompt with filler, sized just under the window tested. One is sent when the claim is
nobody's word but the config's (at the first reply), when a ceiling is inferred (before it
can stop the run), when a count looks cut or falls short of the ledger, and at session starts
while a ceiling is due its re-test (belief.needs_retest). What a count says against the
belief, when it is worth a probe and what the probe holds are window/probes.py's decisions;
this module asks the server, logs and explains.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Protocol, Sequence

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
from ouroboros.server.kinds import bigger_window
from ouroboros.server.kinds.ollama import ALLOCATED
from ouroboros.store import events as ev
from ouroboros.tools import Toolbox
from ouroboros.window import ledger
from ouroboros.window.belief import EVIDENCE, Count, Probe, Window, named_window
from ouroboros.window.manager import ContextManager, Reading
from ouroboros.window.probes import (
    counted_probe,
    filler_rate,
    probe_messages,
    rate_messages,
    signs_of,
)


def believe_told(context: ContextManager, told: tuple[int, str] | None, warn: Warn) -> None:
    """Believe what the server says its window is (see belief.with_allocated); when that is
    less than the claim, say so once, with the fix."""
    if told is None:
        return
    tokens, told_by = told
    window = context.window
    context.told(tokens, told_by)
    if tokens < window.claimed:
        fix = bigger_window(window.claimed)
        warn(
            "allocated",
            (
                f"the server's window is {tokens} tokens ({told_by}), but "
                f"{window.claimed_source} claims {window.claimed}: working within {tokens} "
                f"tokens. Fix: give the model the bigger window ({fix}), or set "
                f"model.context_limit = {tokens} to match"
            ),
        )


def choose_tools(
    context: ContextManager, system: Message, toolbox: Toolbox, warn: Warn
) -> list[dict[str, Any]]:
    """The tool definitions for a session (see ContextManager.session_tools); the first time
    they go short, the person is told why, with the figures."""
    full = toolbox.schemas()
    tools = context.session_tools(system, full, toolbox.brief_schemas())
    if context.brief:
        fixed, budget = context.fixed_tokens(system, full), context.budget
        warn(
            "brief_tools",
            (
                f"the system prompt and the tool definitions take ~{fixed} tokens, "
                f"{fixed / budget:.0%} of the {budget}-token prompt budget of a {context.limit}-"
                f"token window: the tools are described in short (~"
                f"{context.fixed_tokens(system, tools)} tokens with the system prompt) while the "
                "window is this small"
            ),
        )
    return tools


class WindowAsker(Protocol):
    """The server's own word on its window (server.discovery.WindowQuestions)."""

    async def allocated(self) -> int | None: ...

    async def told(self) -> tuple[int, str] | None: ...


class Evidence:
    def __init__(
        self,
        context: ContextManager,
        client: ModelClient,
        counter: TokenCounter | None,
        tools: list[dict[str, Any]],
        log: EventSink,
        warn_once: Warn,
        asker: WindowAsker | None = None,
        clear: Clear | None = None,
    ) -> None:
        self.context = context
        self.clear = clear or (lambda keys, message: None)
        self.client = client
        self.counter = counter
        self.tools = tools
        self.log = log
        self.warn_once = warn_once
        self.asker = asker
        self.asked_allocated = False  # by this process, after the session's first reply

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
        """At a session start: re-test a ceiling if it is due (belief.needs_retest). A claim
        nobody vouched for waits for the first count, which a probe's is weighed against."""
        if self.context.window.ceiling_kind in EVIDENCE:
            await self.test_window(messages)

    async def test_window(
        self,
        messages: Sequence[Message],
        *,
        doubt: bool = False,
        whole: int = 0,
        force: bool = False,
    ) -> Probe | None:
        """Send a probe when the belief is due one, or when a count gave cause to `doubt` it
        (window/probes.py decides when, what it holds and what its count proves; `force`: a
        ceiling just inferred is tested before it can stop the run; `whole`: what the server
        just counted of the conversation, whole). Returns the probe (None when none was
        sent)."""
        window = self.context.window
        size = self.context.probe_due(doubt, force=force)
        if not size:
            return None
        rate = window.filler_rate or await self.filler_rate()
        if rate <= 0:  # its counts cannot size a probe
            self.context.probed_with(Probe(expected=size))
            return None
        have = self.context.current_tokens(messages, self.tools, 1)
        probe_request, expected = probe_messages(messages[0], have, size, rate)
        try:
            counted = await self.client.prompt_tokens(probe_request, self.tools)
            probe, said = counted_probe(expected, counted, whole), ""
        except ContextOverflowError as refusal:
            probe = Probe(expected, refused=True, named=named_window(refusal.message))
            said = refusal.message
        except ModelError:
            return None
        self.context.probed_with(probe)
        self.said_probe(window, probe, said)
        return probe

    async def filler_rate(self) -> float:
        """Measure (once a run) how many tokens the server counts per word of probe filler;
        -1 when its count is none a vocabulary could give (or it gives none): no probe is
        sent to it this run."""
        try:
            counted = await self.client.prompt_tokens(rate_messages(), [])
        except ModelError:
            return 0.0  # a refusal or an error: asked again at the next probe
        rate = filler_rate(counted)
        self.context.filler_measured(rate)
        return rate

    def said_probe(self, before: Window, probe: Probe, refusal: str) -> None:
        """Log what a probe changed of the belief (`refusal`: the server's words, if it
        refused it), and tell the person once per kind."""
        after = self.context.window
        what = (
            f"refused ({probe.named} named)"
            if probe.refused and probe.named
            else "refused"
            if probe.refused
            else f"counted {probe.reported} tokens"
        )
        if after.limit > before.limit:
            self.clear(
                lambda key: key == "truncation",
                f"the server counts past the window believed: {self.context.limit} tokens again",
            )
            self.log.emit(
                ev.WarningEvent(
                    message=(
                        f"a probe of ~{probe.expected} tokens was {what}: working within "
                        f"{self.context.limit} tokens again ({self.context.limit_source})"
                    )
                )
            )
        elif after.limit < before.limit and probe.refused:
            self.log.emit(
                ev.ContextOverflowRecovered(
                    error=refusal,
                    rejected_tokens=probe.expected,
                    new_limit=self.context.limit,
                    limit_source=self.context.limit_source,
                )
            )
        elif after.limit < before.limit:
            self.truncation_found(
                probe.reported,
                probe.expected,
                (
                    f"a probe of ~{probe.expected} tokens was {what}: the server holds less than "
                    f"the {before.limit} tokens believed. Working within {self.context.limit} "
                    f"tokens from now on. Fix: give the model a bigger window "
                    f"({bigger_window(before.claimed)}) and set model.context_limit to "
                    "match"
                ),
            )

    def truncation_found(self, reported: int | None, estimated: int, warning: str) -> None:
        """Log that the server was found to cut prompts, and warn once."""
        self.log.emit(
            ev.ContextTruncationDetected(
                reported=reported,
                estimated=estimated,
                new_limit=self.context.limit,
                limit_source=self.context.limit_source,
            )
        )
        self.warn_once("truncation", warning)

    async def measure(self, messages: list[Message]) -> None:
        """Count what was never counted with the server's tokenizer, where it has one."""
        counter = self.counter
        if counter is None:
            return
        conversation = self.context.held(messages)
        for index in conversation.tally.unmeasured():
            tokens = await counter.count(ledger.message_text(conversation[index]))
            if tokens is None:
                return
            conversation.measure(index, tokens + round(self.context.message_overhead))

    async def take_in(self, messages: Sequence[Message], sent: int, reply: StreamResult) -> Reading:
        """What the server said of the request of the first `sent` messages, into the
        ledger and the log."""
        usage = reply.usage
        streamed_count = usage is not None and bool(usage.prompt_tokens)
        if (usage is None or usage.prompt_tokens is None) and not self.context.probed:
            usage = await self.probe(messages, sent, usage)
        reading = self.context.observe_reply(messages, self.tools, usage, len(reply.text), sent)
        reading = await self.weigh(messages, sent, reading)
        if streamed_count and reading.verdict == "whole":
            self.clear(lambda key: key == "estimate", "the server sends token usage again")
        self.log.emit(
            ev.TokenUsage(
                prompt_tokens=reading.prompt_tokens,
                completion_tokens=reading.completion_tokens,
                total_tokens=reading.prompt_tokens + reading.completion_tokens,
                context_limit=self.context.limit,
                budget=self.context.budget,
                context_used_pct=round(100 * self.context.used_pct(reading.prompt_tokens), 1),
                source=reading.source,
                reported=reading.reported,
                estimated=reading.estimated,
                cached_tokens=reading.cached_tokens,
                processed_tokens=reply.usage.processed_tokens if reply.usage else None,
                verdict=reading.verdict,
                served_model=reply.served_model,
            )
        )
        self.explain(reading)
        return reading

    async def weigh(self, messages: Sequence[Message], sent: int, reading: Reading) -> Reading:
        """Test the belief by a probe when it is due, or when this count gives cause to doubt
        it (Ollama's /api/ps is asked again too): it looked cut, or it fell short of what the
        ledger knows of a large prompt (right after masking no earlier count compares with
        it, and a server reloaded smaller cuts prompts a little over its window by a little),
        or below what the ledger had already measured of it. Truncation a probe disproves is
        no alarm; counts below the measured part of a prompt the window holds are in other
        units than before (rescale)."""
        measured = self.context.held(messages).tally.measured_sum(sent)
        count = Count(reading.reported, reading.estimated)
        signs = signs_of(count, reading.verdict, self.context.window, measured, self.context.budget)
        if signs:
            await self.ask_allocated(again=True)
        doubt = self.context.doubts(signs)
        floor = (reading.reported or 0) if reading.verdict == "whole" else 0
        probe = await self.test_window(
            messages, doubt=doubt, whole=floor, force=reading.verdict == "truncated" or signs.below
        )
        if (
            signs.below
            and probe is not None
            and probe.reported is not None
            and self.context.limit >= reading.estimated
        ):
            self.rescale(messages, sent, reading)
        if probe is not None and probe.held and reading.verdict == "truncated":
            return replace(reading, verdict="suspect")
        return reading

    def rescale(self, messages: Sequence[Message], sent: int, reading: Reading) -> None:
        """The server counted a prompt the window holds below what the ledger had measured
        of it: the ledger follows its units (ContextManager.rescale), and the person is
        told."""
        assert reading.reported is not None
        self.context.rescale(messages, sent, reading.reported, reading.estimated)
        self.log.emit(
            ev.WarningEvent(
                message=(
                    f"the server counted {reading.reported} tokens of a prompt the ledger knew as "
                    f"~{reading.estimated}, inside the {self.context.limit}-token window a probe "
                    "confirmed: it counts in other units than before, and the ledger follows it"
                )
            )
        )

    async def probe(
        self, messages: Sequence[Message], sent: int, usage: Usage | None
    ) -> Usage | None:
        """Once a session, when the stream carried no count: ask the server to count the
        prompt (the first `sent` messages), so the ledger learns what only it knows (tool
        schemas, template tokens)."""
        self.context.count_asked()
        try:
            counted = await self.client.prompt_tokens(self.context.wire(messages, sent), self.tools)
        except ModelError:
            return usage
        if counted is None:
            return usage
        return Usage(counted, usage.completion_tokens if usage else None)

    def explain(self, reading: Reading) -> None:
        """Tell the person what a count proved, once per kind."""
        if reading.verdict == "unknown":
            measured = self.counter is not None and self.counter.available
            how = (
                "each message is counted with its tokenizer endpoint"
                if measured
                else f"estimating at {self.context.chars_per_token:.1f} characters per token"
            )
            self.warn_once(
                "estimate",
                "the server sent no token usage (or a prompt count of 0); "
                f"{how}, and the server is asked to count the whole prompt once a "
                "session",
            )
        elif reading.verdict == "nonsense":
            held = self.context.window
            why = (
                f"its counts kept falling while the prompt grew, far inside the "
                f"{max(held.told, held.accepted)} tokens it is known to hold. Its counts are "
                "ignored from now on, estimating at a rate that errs high"
                if held.distrusted
                else "no prompt has that count. Such counts are ignored "
                "(estimating instead); the ledger keeps what earlier counts taught"
            )
            self.warn_once(
                "nonsense",
                (
                    f"the server reported {reading.reported} prompt tokens for a prompt of about "
                    f"{reading.estimated} in a {self.context.limit}-token window: {why}"
                ),
            )
        elif reading.verdict == "uncached":
            self.warn_once(
                "uncached",
                (
                    f"the server counted {reading.reported} prompt tokens, about the size of only "
                    "the newest messages (Ollama's uncached-tokens bug, ollama#16414; upgrade "
                    "Ollama): estimating instead"
                ),
            )
        elif reading.verdict == "truncated":
            self.truncation_found(
                reading.reported,
                reading.estimated,
                (
                    f"the server cut the front of the conversation: its counts stayed near "
                    f"{reading.reported} tokens while the conversation grew. Working within "
                    f"{self.context.limit} tokens from now on. Fix: give the model a bigger window "
                    "(OLLAMA_CONTEXT_LENGTH=32768 ollama serve, or PARAMETER num_ctx in a "
                    "Modelfile) and set model.context_limit to match; if the server misreports "
                    "its counts instead, set context.truncation_guard = false"
                ),
            )

    async def refused(
        self, error: ContextOverflowError, sent: Sequence[Message], sent_tokens: int
    ) -> None:
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
        self.log.emit(
            ev.ContextOverflowRecovered(
                error=message,
                rejected_tokens=sent_tokens,
                new_limit=self.context.limit,
                limit_source=self.context.limit_source,
            )
        )
