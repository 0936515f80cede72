"""The context manager: the one object the loop talks to about the window.

It owns the belief of how big the window is (belief.py), the calibration of the estimates
(ledger.py) and the observation records, and carries out what policy.py decides on the
conversation (conversation.py) it is given: a request fitted to the budget
(`request`), a tool result taken in (`add_result`), the decision after a turn carried out
(`after_turn`), and what the server said of its window (`told`, `refused`, ...). Nothing
outside window/ writes its fields. No I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, Callable, Literal, Sequence

from ouroboros.protocols import Message, ToolCall, ToolResult, Usage, WireMessages
from ouroboros.window import ledger
from ouroboros.window.belief import (
    Count,
    Probe,
    Verdict,
    Window,
    accept,
    after_probe,
    after_refusal,
    at_session_start,
    judge,
    reclaimed,
    with_allocated,
    with_filler_rate,
)
from ouroboros.window.conversation import (
    RECALL_TOOL,
    WIND_DOWN_TEXT,
    WRITING_TOOLS,
    Conversation,
    Observation,
    cap_text,
    describe,
    mask_notice,
    newest_reads,
    note,
    notes_written,
    placeholder,
    read_after_save,
    recalled_target,
    replaces_result,
    save_results,
    saved_after_work,
    standing_writes,
    unacted_turns,
    unsaved_work,
    worked_this_session,
    worth_masking,
)
from ouroboros.window.plain import flat
from ouroboros.window.policy import (
    CAP_MARKER_TOKENS,
    FRESH_START_MAX_FILL,
    MIN_RESULT_CHARS,
    MIN_RESULT_TOKENS,
    RESULT_MAX_SHARE,
    SCHEMA_CHARS_PER_TOKEN,
    Continue,
    Decision,
    Mask,
    Restart,
    WindDown,
    at_rest,
    brief_tools,
    decide,
    mask_frees,
    prompt_budget,
    reclaimed_pct,
)
from ouroboros.window.probes import DOUBT_EVERY, Signs, doubted, probe_size
from ouroboros.window.sizes import Tally

if TYPE_CHECKING:
    from ouroboros.config import ContextConfig


@dataclass(frozen=True)
class TurnEnd:
    """The window's decision after a turn, carried out on the conversation (a Mask's
    placeholders and its notice, a WindDown's note), and the prompt's tokens before and
    after."""

    decision: Decision
    before: int
    after: int

    @property
    def reclaimed_pct(self) -> float:
        return reclaimed_pct(self.before, self.after)


@dataclass
class Reading:
    """The window after one model turn."""

    prompt_tokens: int  # the server's count when it proved whole, else the ledger's figure
    completion_tokens: int
    source: Literal["server", "estimate"]
    estimated: int  # the ledger's figure for what was sent
    verdict: Verdict
    reported: int | None = None  # what the server said, whatever it proved
    cached_tokens: int | None = None


@dataclass
class Fitted:
    messages: Conversation
    masked: list[str] = field(default_factory=list)
    dropped_turns: int = 0
    tokens: int = 0
    before: int = 0  # the tokens before any was masked or dropped


@dataclass(frozen=True)
class Prompt:
    """A request as the server will see it: the conversation fitted to the budget and
    encoded (`wire`, a live view: read it before the conversation changes), how many of its
    messages it holds, and what fitting them did."""

    wire: WireMessages
    sent: int
    fitted: Fitted

    @property
    def tokens(self) -> int:
        return self.fitted.tokens


@dataclass(frozen=True)
class LastCount:
    """The last count later counts are compared with (the conversation's revision and length
    when it was sent, and what the server reported), and the suspect counts since."""

    revision: int
    messages: int
    reported: int
    suspects: int = 0
    largest_suspect: int = 0


@dataclass
class ContextManager:
    """Tracks how full the window is and decides what to do about it.

    `policy` is the `[context]` table as configured now; everything else is the state a
    resumed run gets back (`to_dict`/`from_dict`).
    """

    window: Window
    max_output_tokens: int
    policy: ContextConfig
    calibration: ledger.Calibration = field(default_factory=ledger.Calibration)
    base_tokens: int | None = None  # tool schemas and template tokens, learned from counts
    # the chat template's tokens around a message, beyond its text (ledger.learned_overhead)
    message_overhead: float = ledger.MESSAGE_OVERHEAD_TOKENS
    observations: dict[str, Observation] = field(default_factory=dict)
    total_masked: int = 0
    mask_rounds: int = 0
    wound_down: bool = False
    read_granted: bool = False  # the last turn was let go on for a read after a save
    next_observation: int = 1
    revision: int = 0  # bumped whenever the conversation changes other than by appending
    # (compared with the last count's; saved with the state)
    last_count: LastCount | None = None
    probed: bool = False  # the server was asked to count a prompt this session
    # The session's probes so far (probes.py decides when the next goes): counts taken, the
    # count at the last probe, whether a short count has had its probe.
    counts_taken: int = 0
    probed_at: int = -DOUBT_EVERY
    short_doubted: bool = False
    brief: bool = False  # the tools are sent in their short form (see session_tools)
    notes: list[str] = field(default_factory=list)  # files the agent writes (notes_written)

    @classmethod
    def create(
        cls, limit: int, limit_source: str, max_output_tokens: int, policy: ContextConfig
    ) -> ContextManager:
        return cls(Window(limit, limit_source), max_output_tokens, policy)

    # -- numbers --

    @property
    def limit(self) -> int:
        return self.window.limit

    @property
    def limit_source(self) -> str:
        return self.window.source

    @property
    def budget(self) -> int:
        return prompt_budget(self.limit, self.max_output_tokens)

    @property
    def chars_per_token(self) -> float:
        return self.calibration.chars_per_token

    @property
    def per_dense(self) -> float:
        return self.calibration.tokens_per_dense_char

    def used_pct(self, tokens: int) -> float:
        return tokens / self.budget if self.budget > 0 else 1.0

    def base(self, tools: list[dict[str, Any]]) -> int:
        if self.base_tokens is not None:
            return self.base_tokens
        return ledger.estimate_chars(ledger.tools_chars(tools), self.chars_per_token)

    def current_tokens(
        self, messages: Sequence[Message], tools: list[dict[str, Any]], upto: int | None = None
    ) -> int:
        """The window a request of these messages (the first `upto`) would take: measured
        sizes where counts have been attributed, estimates for the rest."""
        tally = self.held(messages).tally
        return self.base(tools) + tally.tokens(self.chars_per_token, self.per_dense, upto)

    def held(self, messages: Sequence[Message]) -> Conversation:
        """`messages` as a Conversation, whose running sums answer for it; a plain list (a
        test's) is taken as a conversation of its own, its sums made afresh."""
        if isinstance(messages, Conversation):
            return messages
        return Conversation(messages, self.worth_masking)

    def worth_masking(self, message: Message) -> str | None:
        """The tool-call id of a result worth masking (conversation.worth_masking)."""
        return worth_masking(message, self.observations)

    def wire(self, messages: Sequence[Message], upto: int | None = None) -> WireMessages:
        """The messages (the first `upto`) as the server should see them, encoded."""
        return self.held(messages).tally.wire(upto)

    def comparable(self, sent: int) -> LastCount | None:
        """The last count, if the `sent` messages only extend the conversation it was made
        of."""
        last = self.last_count
        if last is None or last.revision != self.revision or last.messages > sent:
            return None
        return last

    def observe_reply(
        self,
        conversation: Sequence[Message],
        tools: list[dict[str, Any]],
        usage: Usage | None,
        reply_chars: int,
        sent: int | None = None,
    ) -> Reading:
        """Take in what the server reported for the request of the first `sent` messages of
        the conversation (all by default; usage None: nothing)."""
        self.counts_taken += 1
        cpt, per_dense = self.chars_per_token, self.per_dense
        held = self.held(conversation)
        tally = held.tally
        sent = len(held) if sent is None else sent
        messages = tally.tokens(cpt, per_dense, sent)
        estimate = self.base(tools) + messages
        reported = usage.prompt_tokens if usage else None
        previous = self.comparable(sent)
        # What the messages sent since the last count add, by the running sums (no text read)
        added = messages - tally.tokens(cpt, per_dense, previous.messages) if previous else 0
        # Judged against the messages alone: servers disagree most on the base (some never
        # show the model its tool schemas).
        count = Count(
            reported,
            messages,
            previous.reported if previous else None,
            added,
            previous.suspects if previous else 0,
            previous.largest_suspect if previous else 0,
            usage.cached_tokens if usage else None,
        )
        distrusted = self.window.distrusted
        verdict, self.window = judge(self.window, count, guard=self.policy.truncation_guard)
        if self.window.distrusted and not distrusted:  # what its counts taught is suspect too:
            self.calibration = ledger.Calibration()  # estimate at the default rate, which errs high
        if verdict == "whole":
            assert reported is not None
            if previous is None or not self._take_growth(held, previous, sent, reported):
                self._take_count(held, tools, sent, reported)
            self.last_count = LastCount(self.revision, sent, reported)
        elif verdict == "suspect":
            assert reported is not None
            self.last_count = (
                replace(
                    previous,
                    suspects=previous.suspects + 1,
                    largest_suspect=max(previous.largest_suspect, reported),
                )
                if previous
                else LastCount(self.revision, sent, reported, 1, reported)
            )
        elif verdict == "truncated":
            self.last_count = None
        guess = ledger.estimate_chars(reply_chars, cpt)
        completion = (usage.completion_tokens if usage else None) or min(
            guess, self.max_output_tokens or guess
        )
        whole = verdict == "whole"
        return Reading(
            reported if whole and reported else estimate,
            completion,
            "server" if whole else "estimate",
            estimate,
            verdict,
            reported,
            usage.cached_tokens if usage else None,
        )

    def _take_count(
        self, held: Conversation, tools: list[dict[str, Any]], sent: int, reported: int
    ) -> None:
        """A whole count: what the measured messages do not explain is shared among the
        uncounted ones, the base taking the rest (ledger.attribute)."""
        tally = held.tally
        fresh = tally.unmeasured(sent)
        self.base_tokens, shares, chars, attributed = ledger.attribute(
            [held[i] for i in fresh],
            tally.measured_sum(sent),
            reported,
            self.base(tools),
            self.chars_per_token,
            self.per_dense,
        )
        dense = sum(tally.entries[i].dense for i in fresh) if shares else 0
        for index, tokens in zip(fresh, shares):
            held.measure(index, tokens)
        self.calibration.observe(chars, attributed, dense)

    def _take_growth(
        self, held: Conversation, previous: LastCount, sent: int, reported: int
    ) -> bool:
        """A whole count of a prompt that only grew since the last one: what it grew by is
        what the messages added since cost, the chat template's wrapping of each included.
        It is shared among them (measured before or not) and the base stays as it was: a
        base that took in each turn's wrapping would count it again in every fresh session
        (ledger.grown_shares). False when the growth cannot be shared so (the caller attributes
        the count as a first one)."""
        cpt, per_dense = self.chars_per_token, self.per_dense
        new = list(range(previous.messages, sent))
        sizes = [ledger.message_tokens(held[i], cpt, per_dense, held.measured_at(i)) for i in new]
        shares = ledger.grown_shares(reported - previous.reported, sizes)
        if shares is None or self.base_tokens is None:
            return False
        tally = held.tally
        fresh = set(tally.unmeasured(sent))
        if fresh:
            chars = sum(ledger.message_chars(held[i]) for i in new if i in fresh)
            tokens = sum(t for i, t in zip(new, shares) if i in fresh)
            dense = sum(tally.entries[i].dense for i in new if i in fresh)
            self.calibration.observe(
                chars, tokens - ledger.MESSAGE_OVERHEAD_TOKENS * len(fresh), dense
            )
        else:  # all counted by the tokenizer, each with the overhead believed: learn it
            self.message_overhead = ledger.learned_overhead(
                self.message_overhead, sum(shares) - sum(sizes), len(new)
            )
        for index, tokens in zip(new, shares):
            held.measure(index, tokens)
        return True

    def refused(self, rejected_tokens: int, named: int | None) -> None:
        """The server refused a prompt of about this size as too long."""
        self.window = after_refusal(self.window, rejected_tokens, named)
        self.last_count = None

    # -- decisions --

    def evaluate(self, tokens: int, messages: Sequence[Message]) -> Decision:
        """The decision after a turn. The results of the newest turn are never masked here:
        the agent has not seen them yet; nor the newest read of its notes, nor a write no
        later one replaced (never_masked).
        Below the soft threshold, as most turns are, nothing is weighed."""
        used = self.used_pct(tokens)
        if at_rest(self.policy, used):
            self.wound_down = self.read_granted = False
            return Continue()
        held = self.held(messages)
        tally = held.tally
        tally.tokens(self.chars_per_token, self.per_dense)  # its sizes at today's rates
        starts = tally.starts
        spared = self.never_masked()
        gains = {
            i: self.mask_gain(i, size)
            for i, size in tally.candidate_sizes().items()
            if i not in spared
        }  # oldest first
        candidates = list(gains)
        unacted = len([i for i in tally.candidates(starts[-1]) if i not in spared]) if starts else 0
        kept = max(self.policy.keep_recent_observations, unacted)
        acted = len(candidates) - unacted
        recent = [(i, gains[i]) for i in candidates[max(len(candidates) - kept, 0) : acted]]
        pending = sum(gains[i] for i in candidates[acted:])
        maskable = sum(gains[i] for i in candidates[: max(acted, 0)])
        unsaved = self.wound_down and unsaved_work(held, held.notes, self.observations)
        # a read after a save gets one turn, not one a turn: the next such turn winds down
        grant = (
            bool(starts)
            and not self.read_granted
            and read_after_save(held[starts[-1] :], self.observations)
        )
        decision, self.wound_down = decide(
            self.policy,
            used,
            list(gains.items()),
            self.wound_down,
            recent,
            unacted,
            pending,
            maskable,
            unsaved,
            idle=not worked_this_session(held, held.notes, self.observations),
            reprocessed=self.reprocessed(tally) if self.policy.prefix_cache else None,
            turns=len(starts),
            read_after_save=grant,
        )
        self.read_granted = grant and isinstance(decision, Continue)
        return decision

    def reprocessed(self, tally: Tally) -> Callable[[str], float]:
        """The share of the budget a prefix-caching server processes again when the result
        of this tool-call id (or its call, when masking cuts that) is the first to change:
        sized only when a round is weighed."""
        return lambda tool_call_id: self.used_pct(
            tally.suffix(
                tool_call_id,
                self.chars_per_token,
                self.per_dense,
                call=bool(self.observations[tool_call_id].call_cut),
            )
        )

    def after_turn(self, messages: Conversation, tools: list[dict[str, Any]]) -> TurnEnd:
        """Decide (evaluate) and carry the decision out on `messages`: the loop is told
        what was done, to log it, and raises the restart."""
        tokens = self.current_tokens(messages, tools)
        wound_down = self.wound_down
        decision = self.evaluate(tokens, messages)
        if isinstance(decision, WindDown) and not wound_down and self.blind(messages, tools):
            decision = Restart(
                f"context at {100 * self.used_pct(tokens):.1f}% of the budget; the agent's "
                "notes hold its work, and a wind-down could not show it what it just read"
            )
        if isinstance(decision, Mask):
            self.mask(messages, decision.tool_call_ids)
            end = TurnEnd(decision, tokens, self.current_tokens(messages, tools))
            messages.append(*mask_notice(len(decision.tool_call_ids), end.reclaimed_pct))
            return end
        if isinstance(decision, WindDown):
            messages.add_note("wind_down", WIND_DOWN_TEXT.format(pct=self.used_pct(tokens)))
        return TurnEnd(decision, tokens, tokens)

    def blind(self, messages: Conversation, tools: list[dict[str, Any]]) -> bool:
        """Whether a wind-down now would only ask the agent to save again what it has saved,
        in a prompt that cannot show it what it has just received: a save before its newest
        turn follows all its work, that turn did none, and fitting the wound-down prompt
        (fit, tried on a copy) masks its results. A restart carries them over instead, and
        costs no turn. (A turn that saved and read is let go on for the read instead, while
        the prompt fits: policy.decide's `read_after_save`.)"""
        starts = messages.tally.starts
        if not starts or not saved_after_work(messages[: starts[-1]], self.observations):
            return False
        if not saved_after_work(messages, self.observations):  # its newest turn worked
            return False
        newest = set(messages.tally.candidates(starts[-1]))
        trial = Conversation(messages.records, self.worth_masking)
        trial.append(*note("wind_down", WIND_DOWN_TEXT.format(pct=1.0)))
        revision = self.revision
        fitted = self.fit(trial, tools)
        self.revision = revision  # a trial: the conversation held did not change
        return bool(newest & set(fitted.masked))

    def mask_gain(self, tool_call_id: str, size: int) -> float:
        """The share of the budget masking this result (of `size` tokens) would free."""
        return self.used_pct(
            mask_frees(self.observations[tool_call_id], size, self.chars_per_token)
        )

    def mask(self, messages: Sequence[Message], ids: list[str]) -> Conversation:
        """Mask these results (by tool-call id): the conversation is told which
        placeholders replace them. Returns it (a plain list given: a conversation of it)."""
        conversation = self.held(messages)
        self._hide(conversation, ids)
        self.masked(ids)
        return conversation

    def _hide(self, conversation: Conversation, ids: list[str]) -> None:
        hidden = [self.observations[i] for i in ids]
        conversation.mask({o.tool_call_id: placeholder(o) for o in hidden if replaces_result(o)})
        conversation.cut_calls({o.tool_call_id: o.target for o in hidden if o.call_cut})
        self.revision += 1

    def masked(self, ids: list[str]) -> None:
        """Count these results as masked in the run: done by `mask`, and by the caller of
        `fit` for the fitted conversation it keeps (a fit it throws away counts nothing)."""
        if not ids:
            return
        for tool_call_id in ids:
            self.observations[tool_call_id].masked = True
        self.total_masked += len(ids)
        self.mask_rounds += 1

    def fit(
        self,
        messages: Sequence[Message],
        tools: list[dict[str, Any]],
        target: int | None = None,
        keep: int | None = None,
        fresh: bool = False,
    ) -> Fitted:
        """Make a conversation fit `target` tokens (default: the budget): mask older results
        oldest-first, then drop the oldest complete turns (the newest read of each notes
        file last, kept_reads), and only then mask the results the agent has not acted on
        yet (conversation.unacted_turns, or the newest `keep` turns), which are never
        dropped. Wound down, the agent saves next from what it sees: the turns that hold
        nothing the save needs (the notes read and the work since,
        conversation.save_results) go first, then the newest results are masked, then the
        work since the read, and the read itself last. A `fresh` session's first prompt
        holds the results the agent has acted on masked, room or not: the server processes
        that prompt whole anyway, where masking one later would make it process everything
        after it again. A write's call keeps its content until a later write of the file
        replaces it (standing_writes). The masks are counted only when the caller keeps
        the result (`masked(fitted.masked)`)."""
        target = self.budget if target is None else target
        conversation = self.held(messages)
        tokens = self.current_tokens(conversation, tools)
        fitted = Fitted(conversation, tokens=tokens, before=tokens)
        if fitted.tokens <= target and not fresh:
            return fitted
        tally = conversation.tally
        starts = tally.starts
        keep = unacted_turns(conversation, conversation.notes, starts) if keep is None else keep
        newest_turn = starts[-keep] if starts and keep else len(conversation)
        standing = standing_writes(self.observations)
        newest = [i for i in tally.candidates(newest_turn) if i not in standing]
        kept_read = self.kept_reads()
        spared = kept_read | standing
        acted = [i for i in tally.candidates(0, newest_turn) if i not in spared]
        self._mask_until(fitted, acted, tools, 0 if fresh else target)
        if self.wound_down:  # the agent saves next: what it saves from goes last
            since = save_results(conversation, self.notes, self.observations)
            self._drop_until(fitted, tools, target, keep, kept_read | since, strict=True)
            self._mask_until(fitted, newest, tools, target)
            self._drop_until(fitted, tools, target, keep, kept_read, strict=True)
        self._drop_until(fitted, tools, target, keep, kept_read)
        self._mask_until(fitted, newest, tools, target)
        if keep > 1:  # the last resort: the turn a wind-down interrupted goes too
            self._drop_until(fitted, tools, target, 1)
        return fitted

    def never_masked(self) -> set[str]:
        """The results a masking round leaves: the kept reads, and the writes whose content
        the file still holds (conversation.standing_writes)."""
        return self.kept_reads() | standing_writes(self.observations)

    def kept_reads(self) -> set[str]:
        """The results never masked or dropped while anything else can go: the newest read
        of each file the agent writes (its notes; conversation.newest_reads)."""
        return newest_reads(self.notes, self.observations)

    def _drop_until(
        self,
        fitted: Fitted,
        tools: list[dict[str, Any]],
        target: int,
        keep: int,
        spared: set[str] | frozenset[str] = frozenset(),
        strict: bool = False,
    ) -> None:
        while fitted.tokens > target:
            if not fitted.messages.drop_oldest_turn(keep, spared, strict):
                return
            fitted.dropped_turns += 1
            self.revision += 1
            fitted.tokens = self.current_tokens(fitted.messages, tools)

    def _mask_until(
        self, fitted: Fitted, ids: list[str], tools: list[dict[str, Any]], target: int
    ) -> None:
        for tool_call_id in ids:
            if fitted.tokens <= target:
                return
            self._hide(fitted.messages, [tool_call_id])
            fitted.masked.append(tool_call_id)
            fitted.tokens = self.current_tokens(fitted.messages, tools)

    def fixed_tokens(self, system: Message, tools: list[dict[str, Any]]) -> int:
        """What every prompt of a session holds before any work: the system prompt and the
        tool definitions, by the estimate."""
        return ledger.message_tokens(
            system, self.chars_per_token, self.per_dense
        ) + self.tools_tokens(tools)

    def tools_tokens(self, tools: list[dict[str, Any]]) -> int:
        """The tool definitions by the estimate: JSON, at its own density."""
        cpt = min(self.chars_per_token, SCHEMA_CHARS_PER_TOKEN)
        return ledger.estimate_chars(ledger.tools_chars(tools), cpt)

    def session_tools(
        self, system: Message, full: list[dict[str, Any]], brief: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """The tool definitions a session sends: `brief` when the fixed part with `full`
        ones is large for the window (see brief_tools). A change of form forgets the learned
        base, which counted the other one."""
        short = brief_tools(self.fixed_tokens(system, full), self.budget)
        if short != self.brief:
            self.base_tokens, self.brief = None, short
        return brief if short else full

    def fresh_start_target(self) -> int:
        """How full a restarted session may begin."""
        return int(self.budget * min(self.policy.soft_threshold_pct, FRESH_START_MAX_FILL))

    def new_session(self, told: tuple[int, str] | None = None) -> None:
        """A session begins: the belief as a session start holds it (belief.at_session_start),
        then what the server says of its window now (`told`: tokens and who said so)."""
        self.window = at_session_start(self.window)
        if told is not None:
            self.told(*told)
        self.wound_down = self.probed = self.short_doubted = False
        self.counts_taken, self.probed_at = 0, -DOUBT_EVERY
        self.changed()
        self.last_count = None

    # -- what the loop learns of the window (belief.py decides what to make of it) --

    def configure(self, policy: ContextConfig, max_output_tokens: int) -> None:
        """The `[context]` policy and the reply's reserve as configured now."""
        self.policy, self.max_output_tokens = policy, max_output_tokens

    def reclaim(self, limit: int, source: str) -> None:
        """The window the config claims (or the server says) at a start or a reload."""
        self.window = reclaimed(self.window, limit, source)

    def told(self, tokens: int, told_by: str) -> None:
        """The server says it allocated this window (belief.with_allocated)."""
        self.window = with_allocated(self.window, tokens, told_by)

    def probed_with(self, probe: Probe) -> None:
        """What a probe of the window found (belief.after_probe)."""
        self.window = after_probe(self.window, probe)

    def filler_measured(self, rate: float) -> None:
        """How many tokens the server counts per word of probe filler."""
        self.window = with_filler_rate(self.window, rate)

    def count_asked(self) -> None:
        """The server was asked to count a prompt this session."""
        self.probed = True

    def units_changed(self) -> None:
        """The server counts in other units than before: earlier counts compare with none."""
        self.last_count = None

    def changed(self) -> None:
        """The conversation changed other than by appending (its system prompt replaced)."""
        self.revision += 1

    def rescale(
        self, messages: Sequence[Message], sent: int, reported: int, estimated: int
    ) -> None:
        """The server counted a prompt the window holds (its first `sent` messages, ~`estimated`
        by the ledger) below what the ledger had measured of it: it counts in other units
        than it did (counts gone 40 % low after the first). The measured sizes are scaled to
        its count, so the ledger is in the units its window is believed in, and the
        comparison with earlier counts starts over."""
        conversation = self.held(messages)
        scale = reported / max(estimated, 1)
        for index in range(sent):
            tokens = conversation.measured_at(index)
            if tokens is not None:
                conversation.measure(index, max(round(tokens * scale), 1))
        self.units_changed()

    def doubts(self, signs: Signs) -> bool:
        """Whether what a count says against the belief is worth a probe (probes.doubted); a
        short count's probe is counted, once a session."""
        doubt = doubted(signs, self.window, self.short_doubted)
        self.short_doubted = self.short_doubted or (doubt and not (signs.cut or signs.below))
        return doubt

    def probe_due(self, doubt: bool = False, *, force: bool = False) -> int:
        """The tokens a probe should hold now (probes.probe_size; 0: none), counted as sent."""
        since = self.counts_taken - self.probed_at
        size = probe_size(self.window, doubt, force=force, since_last=since)
        if size:
            self.probed_at = self.counts_taken
        return size

    def counted_whole(self, reported: int) -> None:
        """A count the server took whole, read back from the log: the window holds it."""
        self.window = accept(self.window, reported)

    def restored(self, next_observation: int, wound_down: bool) -> None:
        """What a rebuild from the log found of the counters a snapshot would have held."""
        self.next_observation = max(self.next_observation, next_observation)
        self.wound_down = wound_down

    # -- observations --

    def result_tokens(self) -> int:
        """The most tokens one tool result may take: max_tool_result_tokens, and never more
        than a share of the budget, so one result cannot fill a small window."""
        return max(
            min(self.policy.max_tool_result_tokens, int(self.budget * RESULT_MAX_SHARE)),
            MIN_RESULT_TOKENS,
        )

    def max_result_chars(self, text: str = "") -> int:
        """How many characters of `text` a tool result keeps to stay within `result_tokens`
        by the estimate (dense scripts at their own rate, see ledger.py); for a text that
        fits, its length. Without a text: the cap for text of the usual density."""
        tokens, cpt, per_dense = self.result_tokens(), self.chars_per_token, self.per_dense
        estimate = ledger.estimate_text(text, cpt, per_dense) if text else 0
        if estimate <= tokens:
            return (
                max(len(text), int(tokens * cpt), MIN_RESULT_CHARS)
                if text
                else max(int(tokens * cpt), MIN_RESULT_CHARS)
            )
        chars = int(len(text) * tokens / estimate)
        for _ in range(4):  # head and tail may be denser than the whole: check, shrink
            kept, _cut = cap_text(text, chars, self.policy.tool_result_truncation, "obs-0")
            over = ledger.estimate_text(kept, cpt, per_dense) - tokens - CAP_MARKER_TOKENS
            if over <= 0:
                break
            chars = int(chars * tokens / (tokens + over))
        return max(chars, 1)

    def new_observation_id(self) -> str:
        obs_id = f"obs-{self.next_observation}"
        self.next_observation += 1
        return obs_id

    def request(self, messages: Conversation, tools: list[dict[str, Any]]) -> Prompt:
        """The next request: `messages` fitted to the budget in place (fit; what it masked
        counted), and encoded as the server should see them."""
        fitted = self.fit(messages, tools)
        self.masked(fitted.masked)
        return Prompt(self.wire(messages), len(messages), fitted)

    def add_result(
        self, messages: Conversation, call: ToolCall, subject: str, result: ToolResult
    ) -> Observation:
        """A tool result comes in: it is registered as an observation, cut to what the model
        may read (admit) and added to `messages`. The observation says what the loop logs of
        it; the placeholder that may replace it later is the window's too (after_turn)."""
        obs = describe(call, subject, result, self.new_observation_id())
        messages.add_result(call.id, self.admit(obs, result.content))
        return obs

    def admit(self, obs: Observation, text: str) -> str:
        """Register a tool result and return its content as the model will see it."""
        capped, cut = cap_text(
            text, self.max_result_chars(text), self.policy.tool_result_truncation, obs.id
        )
        obs.truncated = cut > 0
        if obs.tool == RECALL_TOOL:  # its placeholder names what it brought back
            obs.target = recalled_target(obs.target, self.observations.values())
        self.observations[obs.tool_call_id] = obs
        if obs.tool in WRITING_TOOLS:
            self.notes = notes_written(self.notes, obs)  # a new list, never changed in place
        return capped

    def forget_unreferenced(self, messages: Sequence[Message]) -> int:
        """At a session boundary: drop the records of observations no message refers to any
        more (their text stays on disk for `recall` while retained), so what a turn and a
        snapshot touch is bounded by the window, not by the run's history. Returns how many
        went."""
        live = {m.get("tool_call_id") for m in messages if m["role"] == "tool"}
        before = len(self.observations)
        self.observations = {k: o for k, o in self.observations.items() if k in live}
        return before - len(self.observations)

    # -- persistence --

    def to_dict(self, observations: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
        """Every field but the policy (configured anew at a resume), as plain data (flat);
        `observations`: each observation's dict, when the caller keeps them made (the run's
        state does, loop/state.py: this runs at every turn's end)."""
        data = {
            f.name: flat(getattr(self, f.name))
            for f in fields(self)
            if f.name not in ("policy", "observations")
        }
        data["observations"] = flat(self.observations) if observations is None else observations
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any], policy: ContextConfig) -> ContextManager:
        data = dict(data)
        data["window"] = Window(**data["window"])
        data["calibration"] = ledger.Calibration(**data["calibration"])
        data["observations"] = {k: Observation(**v) for k, v in data["observations"].items()}
        if data.get("last_count") is not None:
            data["last_count"] = LastCount(**data["last_count"])
        return cls(policy=policy, **data)
