"""One session: ask the model, run its tools, keep the window in budget, repeat.

The loop never ends by itself: it raises `RestartSession` when the context manager says so and
`StopRun` when the run should end (Ctrl+C, max turns). The runner catches both.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ouroboros import context as ctx
from ouroboros import tokens as tk
from ouroboros.context import Mask, Restart, WindDown
from ouroboros.errors import ContextOverflowError, EmptyStreamError, ModelError
from ouroboros.events import EventLog, write_snapshot
from ouroboros.protocols import (
    Message,
    ModelClient,
    StreamResult,
    TextSink,
    TokenCounter,
    ToolCall,
    Usage,
)
from ouroboros.retry import RetryPolicy, with_retries
from ouroboros.state import RunState, StopFlag
from ouroboros.tools import Toolbox
from ouroboros.window import named_window

MAX_OVERFLOW_RECOVERIES = 3


class RestartSession(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class StopRun(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class Services:
    client: ModelClient
    toolbox: Toolbox
    log: EventLog
    run_dir: Path
    retry: RetryPolicy
    stop: StopFlag
    max_turns: int = 0
    continue_message: str = "Continue working towards your goals. Use your tools."
    on_text: TextSink | None = None
    counter: TokenCounter | None = None


class Session:
    def __init__(self, state: RunState, services: Services) -> None:
        self.state = state
        self.s = services
        self.context = state.context
        self.log = services.log
        self.tools = services.toolbox.schemas()

    @property
    def messages(self) -> list[Message]:
        return self.state.messages

    @messages.setter
    def messages(self, value: list[Message]) -> None:
        self.state.messages = value

    async def run(self) -> None:
        await self.finish_interrupted_turn()
        while True:
            self.check_limits()
            self.log.turn = self.state.session_turns + 1
            reply = await self.query()
            await self.execute(reply.tool_calls)
            self.manage_context()
            self.checkpoint()

    async def finish_interrupted_turn(self) -> None:
        """After a resume: run the tool calls the last reply made that never started."""
        pending = ctx.pending_calls(self.messages)
        if pending or self.messages[-1]["role"] == "assistant":
            await self.execute(pending)
            self.manage_context()
            self.checkpoint()

    def check_limits(self) -> None:
        if self.s.stop.reason is not None:
            raise StopRun(self.s.stop.reason)
        if self.s.max_turns and self.state.total_turns >= self.s.max_turns:
            raise StopRun("max_turns")

    # -- one turn --

    async def query(self) -> StreamResult:
        for _ in range(MAX_OVERFLOW_RECOVERIES + 1):
            await self.measure()
            sent_tokens = self.fit()
            sent = list(self.messages)
            try:
                reply = await with_retries(
                    lambda: self.s.client.complete(ctx.to_wire(sent), self.tools, self.s.on_text),
                    self.s.retry, on_retry=self.on_retry)
            except (ContextOverflowError, EmptyStreamError) as error:
                await self.overflowed(error, sent, sent_tokens)
                continue
            await self.record(sent, reply)
            self.checkpoint()
            return reply
        raise ModelError(f"the server kept refusing the prompt as too long after "
                         f"{MAX_OVERFLOW_RECOVERIES} attempts to shrink it to fit a "
                         f"{self.context.limit}-token window ({self.context.limit_source}); "
                         "set model.context_limit to the window the server really has")

    async def measure(self) -> None:
        """Count what was never counted with the server's tokenizer, where it has one."""
        counter = self.s.counter
        if counter is None:
            return
        for message in tk.unmeasured(self.messages):
            tokens = await counter.count(tk.message_text(message))
            if tokens is None:
                return
            message[tk.TOKENS_KEY] = tokens + tk.MESSAGE_OVERHEAD_TOKENS

    async def overflowed(self, error: ModelError, sent: list[Message], sent_tokens: int) -> None:
        """The server refused the prompt as too long: believe a smaller window and refit.

        An empty stream says nothing of sizes, so the prompt is asked again without streaming:
        llama.cpp then names its window, or counts the prompt (it fit: the empty stream was a
        glitch)."""
        message, named = str(error), named_window(str(error))
        if isinstance(error, EmptyStreamError):
            try:
                fits = await self.s.client.prompt_tokens(ctx.to_wire(sent), self.tools)
            except ContextOverflowError as refusal:
                fits, message, named = None, refusal.message, named_window(refusal.message)
            if fits is not None or sent_tokens <= self.context.window.accepted:
                self.log.emit("retry", attempt=1, delay_secs=0, error=message)
                return
        self.context.refused(sent_tokens, named)
        self.log.emit("context_overflow_recovered", error=message, rejected_tokens=sent_tokens,
                      new_limit=self.context.limit, limit_source=self.context.limit_source)

    def fit(self) -> int:
        """Shrink the conversation before sending if it would not fit; return its size."""
        before = self.context.current_tokens(self.messages, self.tools)
        fitted = self.context.fit(self.messages, self.tools)
        self.messages = fitted.messages
        if fitted.masked:
            self.log_mask(len(fitted.masked), before, fitted.tokens, preflight=True)
        if fitted.dropped_turns:
            self.log.emit("context_drop", turns_dropped=fitted.dropped_turns,
                          tokens_after=fitted.tokens)
        if fitted.tokens > self.context.budget:
            self.warn_once("oversize", f"the newest turn alone (~{fitted.tokens} tokens) does "
                           f"not fit the {self.context.budget}-token budget; sending it anyway")
        return fitted.tokens

    async def record(self, sent: list[Message], reply: StreamResult) -> None:
        """Add the reply to the conversation: only now does the turn count (a request that
        failed for good, or was cut short by a crash, is asked again on resume)."""
        self.state.session_turns += 1
        self.state.total_turns += 1
        message = reply.to_message()
        message["content"] = ctx.without_reasoning(reply.text)
        self.messages.append(message)
        self.log.emit("assistant", text=reply.text, finish_reason=reply.finish_reason,
                      tool_calls=[asdict(call) for call in reply.tool_calls])
        usage = reply.usage
        if (usage is None or usage.prompt_tokens is None) and not self.context.probed:
            usage = await self.probe(sent, usage)
        reading = self.context.observe_reply(sent, self.tools, usage, len(reply.text))
        self.log.emit("token_usage", prompt_tokens=reading.prompt_tokens,
                      completion_tokens=reading.completion_tokens,
                      total_tokens=reading.prompt_tokens + reading.completion_tokens,
                      context_limit=self.context.limit, budget=self.context.budget,
                      context_used_pct=round(100 * self.context.used_pct(reading.prompt_tokens), 1),
                      source=reading.source, reported=reading.reported,
                      cached_tokens=reading.cached_tokens, verdict=reading.verdict)
        self.explain(reading)

    async def probe(self, sent: list[Message], usage: Usage | None) -> Usage | None:
        """Once a session, when the stream carried no count: ask the server to count the
        prompt, so the ledger learns what only it knows (tool schemas, template tokens)."""
        self.context.probed = True
        try:
            counted = await self.s.client.prompt_tokens(ctx.to_wire(sent), self.tools)
        except ModelError:
            return usage
        if counted is None:
            return usage
        return Usage(counted, usage.completion_tokens if usage else None)

    def explain(self, reading: ctx.Reading) -> None:
        """Tell the person what a count proved, once per kind."""
        if reading.verdict == "unknown":
            self.warn_once("estimate", "the server sent no token usage (or a count of 0); "
                           f"estimating at {self.context.chars_per_token:.1f} characters per "
                           "token")
        elif reading.verdict == "uncached":
            self.warn_once("uncached", (
                f"the server counted {reading.reported} prompt tokens, about the size of only "
                "the newest messages (Ollama's uncached-tokens bug, ollama#16414; upgrade "
                "Ollama): estimating instead"))
        elif reading.verdict == "truncated":
            self.log.emit("context_truncation_detected", reported=reading.reported,
                          estimated=reading.estimated, new_limit=self.context.limit,
                          limit_source=self.context.limit_source)
            self.warn_once("truncation", (
                f"the server cut the front of the conversation: its counts stayed near "
                f"{reading.reported} tokens while the conversation grew. Working within "
                f"{self.context.limit} tokens from now on. Fix: give the model a bigger window "
                "(OLLAMA_CONTEXT_LENGTH=32768 ollama serve, or PARAMETER num_ctx in a "
                "Modelfile) and set model.context_limit to match; if the server misreports "
                "its counts instead, set context.truncation_guard = false"))

    async def execute(self, calls: list[ToolCall]) -> None:
        for call in calls:
            await self.run_tool(call)
            self.checkpoint()
        if not calls:
            self.messages.append(ctx.note("continue", self.s.continue_message))

    async def run_tool(self, call: ToolCall) -> None:
        self.log.emit("tool_call", id=call.id, name=call.name, arguments=call.arguments)
        self.log.sync()
        started = time.monotonic()
        result = await self.s.toolbox.run(call)
        self.state.session_successes += int(result.ok)
        obs_id = self.context.new_observation_id()
        self.save_observation(obs_id, result.content)
        obs = ctx.describe(call.name, parse_object(call.arguments), result, obs_id, call.id)
        content = self.context.admit(obs, result.content)
        self.messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
        self.log.emit("tool_result", id=call.id, name=call.name, ok=result.ok,
                      bytes=len(result.content.encode()), observation=obs_id,
                      truncated=obs.truncated, summary=obs.first_line[:120],
                      duration_ms=round(1000 * (time.monotonic() - started)))

    # -- the window --

    def manage_context(self) -> None:
        tokens = self.context.current_tokens(self.messages, self.tools)
        match self.context.evaluate(tokens, self.messages):
            case Mask(tool_call_ids=ids):
                self.messages = self.context.mask(self.messages, ids)
                after = self.context.current_tokens(self.messages, self.tools)
                reclaimed = self.log_mask(len(ids), tokens, after, preflight=False)
                self.messages.append(ctx.mask_notice(len(ids), reclaimed))
            case WindDown():
                pct = self.context.used_pct(tokens)
                self.messages.append(ctx.note("wind_down", ctx.WIND_DOWN_TEXT.format(pct=pct)))
                self.log.emit("wind_down", context_used_pct=round(100 * pct, 1))
            case Restart(reason=reason):
                raise RestartSession(reason)

    def log_mask(self, count: int, before: int, after: int, *, preflight: bool) -> float:
        reclaimed = 100 * (before - after) / before if before else 0.0
        self.log.emit("context_mask", observations_masked=count,
                      total_masked=self.context.total_masked, tokens_before=before,
                      tokens_after=after, reclaimed_pct=round(reclaimed, 1), preflight=preflight)
        return reclaimed

    # -- bookkeeping --

    def on_retry(self, attempt: int, delay: float, error: Exception) -> None:
        self.log.emit("retry", attempt=attempt, delay_secs=round(delay, 2), error=str(error))

    def warn_once(self, key: str, message: str) -> None:
        if key not in self.state.warned:
            self.state.warned.append(key)
            self.log.emit("warning", message=message)

    def save_observation(self, obs_id: str, text: str) -> None:
        directory = self.s.run_dir / "observations"
        directory.mkdir(exist_ok=True)
        (directory / f"{obs_id}.txt").write_text(text, encoding="utf-8")

    def checkpoint(self) -> None:
        self.log.sync()
        write_snapshot(self.s.run_dir, self.log.seq, self.state.to_dict())


def parse_object(arguments: str) -> dict[str, Any]:
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
