"""Context management: what fills the model's window, and what to do about it.

Everything here is pure: functions and a small state object, no I/O. The session feeds in
what the server reported and the messages it holds; the ContextManager answers with a
decision (`Continue | Mask | WindDown | Restart`) or a conversation that fits.

Vocabulary:
- *budget*: the tokens a prompt may use, the context limit minus a reserve for the reply.
  Zones and `context_used_pct` are fractions of the budget, so 100% is the wall.
- *observation*: a tool result. Masking replaces its content with a placeholder that says
  what was there; the message itself (and the call it answers) stays.
- *turn*: an assistant message and everything after it up to the next assistant message
  (its tool results and any notes). Turns are never split.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from ouroboros import tokens as tk
from ouroboros.protocols import Message, ToolCall, ToolResult, Usage, WireMessages
from ouroboros.tally import Tally
from ouroboros.window import Count, Verdict, Window, after_refusal, judge

if TYPE_CHECKING:
    from ouroboros.config import ContextConfig

NOTE_KEY = "_note"  # marks messages the harness wrote; stripped before sending
# The reply's reserve is max_output_tokens, but never more than this share of the window.
REPLY_RESERVE_MAX_SHARE = 0.25
# A restarted session starts at most this full (and below the soft threshold), so it has
# room to work before the next wind-down.
FRESH_START_MAX_FILL = 0.5
# One tool result never takes more than this share of the budget.
RESULT_MAX_SHARE = 0.25
MIN_RESULT_CHARS = 200

_THINK = re.compile(r"<think>.*?(?:</think>|$)", re.DOTALL)

Note = Literal["continue", "mask", "wind_down", "restart", "interrupted"]
Truncation = Literal["head", "tail", "both"]


# --- decisions ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Continue:
    pass


@dataclass(frozen=True)
class Mask:
    tool_call_ids: list[str]


@dataclass(frozen=True)
class WindDown:
    pass


@dataclass(frozen=True)
class Restart:
    reason: str


Decision = Continue | Mask | WindDown | Restart


def decide(policy: ContextConfig, used: float, candidates: list[str],
           wound_down: bool) -> tuple[Decision, bool]:
    """The decision at `used` (a fraction of the budget), given the observations worth
    masking (oldest first), and whether the agent has been told to wind down since.

    Continue below the soft threshold; above it, mask the oldest observations (never the
    newest `keep_recent_observations`). At the hard threshold with nothing left to mask, wind
    down; still there a turn later, restart. Masking comes first even above the hard
    threshold: one large result can jump past both thresholds, and masking is far cheaper
    than a restart. The wind-down rearms only once use falls below the soft threshold: a
    conversation hovering about the hard threshold would otherwise wind down forever.
    Returns the decision and whether the agent stands wound down after it.
    """
    if used < policy.soft_threshold_pct:
        return Continue(), False
    keep = policy.keep_recent_observations
    ids = (candidates[:-keep] if keep else candidates)[: policy.mask_batch_size]
    if ids:
        return Mask(ids), wound_down
    if used < policy.hard_threshold_pct:
        return Continue(), wound_down
    if wound_down:
        return Restart(f"context at {used:.0%} of the budget after the wind-down"), True
    return WindDown(), True


# --- messages -------------------------------------------------------------------------------


def note(kind: Note, text: str) -> Message:
    """A message the harness adds to the conversation (sent to the model as a user turn)."""
    return {"role": "user", "content": text, NOTE_KEY: kind}


def to_wire(messages: list[Message]) -> list[Message]:
    """The messages as the server should see them: without the harness's private keys."""
    return [{k: v for k, v in m.items() if not k.startswith("_")} for m in messages]


def without_reasoning(text: str) -> str:
    """Assistant text without its `<think>` blocks. Kept out of the history: templates strip
    earlier reasoning anyway (so counts would shrink unpredictably), and it costs tokens."""
    return _THINK.sub("", text).lstrip()


def prompt_budget(limit: int, max_output_tokens: int) -> int:
    """The tokens a prompt may take: the limit less the reply's reserve."""
    return limit - min(max_output_tokens, int(limit * REPLY_RESERVE_MAX_SHARE))


# --- observations and placeholders ----------------------------------------------------------


@dataclass
class Observation:
    """What a placeholder needs to say about one tool result."""

    id: str
    tool_call_id: str
    tool: str
    target: str
    chars: int
    lines: int
    first_line: str
    exit_code: int | None = None
    truncated: bool = False
    masked: bool = False


def call_arguments(text: str) -> dict[str, Any]:
    """A tool call's arguments as an object, for describing the call; {} when they are not
    one (the tool itself reports bad arguments)."""
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def describe(tool: str, arguments: dict[str, Any], result: ToolResult, obs_id: str,
             tool_call_id: str) -> Observation:
    meta = result.meta
    target = str(meta.get("path") or meta.get("command") or arguments.get("path")
                 or arguments.get("command") or arguments.get("id") or "")
    text = result.content
    first_line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return Observation(
        id=obs_id,
        tool_call_id=tool_call_id,
        tool=tool,
        target=target,
        chars=len(text),
        lines=text.count("\n") + (1 if text and not text.endswith("\n") else 0),
        first_line=first_line,
        exit_code=meta.get("exit_code"),
    )


def human_size(chars: int) -> str:
    if chars < 1024:
        return f"{chars} B"
    return f"{chars / 1024:.1f} KB"


def placeholder(obs: Observation) -> str:
    parts = [obs.target] if obs.target else []
    parts += [f"{obs.lines} lines", human_size(obs.chars)]
    if obs.exit_code is not None:
        parts.append(f"exit code {obs.exit_code}")
    if obs.first_line:
        began = obs.first_line[:40] + ("..." if len(obs.first_line) > 40 else "")
        parts.append(f'began "{began}"')
    return (f"[{obs.tool} result masked: {', '.join(parts)}. "
            f'recall(id="{obs.id}") shows it again]')


def cap_text(text: str, max_chars: int, keep: Truncation, obs_id: str) -> tuple[str, int]:
    """Cut an oversized tool result to max_chars, keeping the head, the tail or both, with a
    line saying what was cut and how to get it back. Returns the text and the chars cut."""
    if len(text) <= max_chars:
        return text, 0
    cut = len(text) - max_chars
    marker = (f"[... {cut:,} characters cut ({keep} kept); "
              f'recall(id="{obs_id}", offset=N) reads the full output ...]')
    if keep == "head":
        return f"{text[:max_chars]}\n{marker}", cut
    if keep == "tail":
        return f"{marker}\n{text[-max_chars:]}", cut
    half = max_chars // 2
    return f"{text[:half]}\n{marker}\n{text[len(text) - (max_chars - half):]}", cut


# --- turns, masking, carryover --------------------------------------------------------------


def turn_starts(messages: list[Message]) -> list[int]:
    """Indexes of the assistant messages: each begins a turn that runs to the next one."""
    return [i for i, m in enumerate(messages) if m["role"] == "assistant"]


def worth_masking(message: Message, observations: dict[str, Observation]) -> str | None:
    """The tool-call id of a result whose observation is unmasked and longer than its
    placeholder; None for any other message."""
    if message["role"] != "tool":
        return None
    obs = observations.get(message.get("tool_call_id", ""))
    if obs is None or obs.masked or len(message.get("content") or "") <= len(placeholder(obs)):
        return None
    return obs.tool_call_id


def maskable(messages: list[Message], observations: dict[str, Observation]) -> list[str]:
    """Tool-call ids of the unmasked observations worth masking, oldest first."""
    return [i for i in (worth_masking(m, observations) for m in messages) if i is not None]


def apply_masks(messages: list[Message], placeholders: dict[str, str]) -> list[Message]:
    """Replace the content of the named tool results (by tool-call id); nothing else changes."""
    return [
        {**tk.forget(m), "content": placeholders[m["tool_call_id"]]}
        if m["role"] == "tool" and m.get("tool_call_id") in placeholders else m
        for m in messages
    ]


def pending_calls(messages: list[Message]) -> list[ToolCall]:
    """Tool calls of the last assistant message that have no result yet."""
    last = next((i for i in range(len(messages) - 1, -1, -1)
                 if messages[i]["role"] == "assistant"), None)
    if last is None:
        return []
    answered = {m.get("tool_call_id") for m in messages[last + 1:] if m["role"] == "tool"}
    return [
        ToolCall(c["id"], c["function"]["name"], c["function"].get("arguments", ""))
        for c in messages[last].get("tool_calls") or ()
        if c["id"] not in answered
    ]


def carryover(messages: list[Message], turns: int) -> list[Message]:
    """The last `turns` complete turns, minus the harness's notes about the old window."""
    if turns <= 0:
        return []
    starts = turn_starts(messages)
    if not starts:
        return []
    kept = messages[starts[-turns] if len(starts) >= turns else starts[0]:]
    return [m for m in kept if m.get(NOTE_KEY) not in ("wind_down", "mask")]


def drop_oldest_turn(messages: list[Message]) -> list[Message] | None:
    """Remove the oldest complete turn, never the preamble before it nor the newest turn.
    Returns None when there is nothing left that may go."""
    starts = turn_starts(messages)
    if len(starts) < 2:
        return None
    return messages[: starts[0]] + messages[starts[1]:]


# --- the manager ----------------------------------------------------------------------------


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
    messages: list[Message]
    masked: list[str] = field(default_factory=list)
    dropped_turns: int = 0
    tokens: int = 0


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
    calibration: tk.Calibration = field(default_factory=tk.Calibration)
    base_tokens: int | None = None  # tool schemas and template tokens, learned from counts
    observations: dict[str, Observation] = field(default_factory=dict)
    total_masked: int = 0
    mask_rounds: int = 0
    wound_down: bool = False
    next_observation: int = 1
    revision: int = 0  # bumped whenever the conversation changes other than by appending
    last_count: LastCount | None = None
    probed: bool = False  # the server was asked to count a prompt this session

    def __post_init__(self) -> None:
        # Sizes and wire forms of the messages, as running sums: not a field, so it is
        # never saved nor copied with the state.
        self.tally = Tally()

    @classmethod
    def create(cls, limit: int, limit_source: str, max_output_tokens: int,
               policy: ContextConfig) -> ContextManager:
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

    def used_pct(self, tokens: int) -> float:
        return tokens / self.budget if self.budget > 0 else 1.0

    def base(self, tools: list[dict[str, Any]]) -> int:
        if self.base_tokens is not None:
            return self.base_tokens
        return tk.estimate_chars(tk.tools_chars(tools), self.chars_per_token)

    def current_tokens(self, messages: list[Message], tools: list[dict[str, Any]]) -> int:
        """The window a request of these messages would take: measured sizes where counts
        have been attributed, estimates for the rest."""
        self.sync(messages)
        return self.base(tools) + self.tally.tokens(self.chars_per_token)

    def sync(self, messages: list[Message]) -> None:
        """Bring the tally up to `messages`: only what was appended since is looked at,
        unless the conversation changed otherwise (a new `revision`)."""
        self.tally.sync(messages, self.revision, self._worth_masking)

    def _worth_masking(self, message: Message) -> str | None:
        return worth_masking(message, self.observations)

    def wire(self, messages: list[Message]) -> WireMessages:
        """The messages as the server should see them, encoded (see `to_wire`)."""
        self.sync(messages)
        return self.tally.wire()

    def unmeasured(self, messages: list[Message]) -> list[Message]:
        self.sync(messages)
        return self.tally.unmeasured()

    def measured(self, message: Message, tokens: int) -> None:
        """Write what the server's tokenizer counted for a message of the last `sync`."""
        self.tally.measure(message, tokens)

    def comparable(self, sent: list[Message]) -> LastCount | None:
        """The last count, if `sent` only extends the conversation it was made of."""
        last = self.last_count
        if last is None or last.revision != self.revision or last.messages > len(sent):
            return None
        return last

    def observe_reply(self, sent: list[Message], tools: list[dict[str, Any]],
                      usage: Usage | None, reply_chars: int) -> Reading:
        """Take in what the server reported for the request `sent` (usage None: nothing)."""
        cpt = self.chars_per_token
        self.sync(sent)
        messages = self.tally.tokens(cpt)
        estimate = self.base(tools) + messages
        reported = usage.prompt_tokens if usage else None
        previous = self.comparable(sent)
        added = (sum(tk.message_tokens(m, cpt) for m in sent[previous.messages:])
                 if previous else 0)
        # Judged against the messages alone: servers disagree most on the base (some never
        # show the model its tool schemas).
        count = Count(reported, messages, previous.reported if previous else None, added,
                      previous.suspects if previous else 0,
                      previous.largest_suspect if previous else 0)
        verdict, self.window = judge(self.window, count, guard=self.policy.truncation_guard)
        if verdict == "whole":
            assert reported is not None
            fresh = self.tally.unmeasured()
            self.base_tokens, shares, chars, attributed = tk.attribute(
                fresh, self.tally.measured_sum, reported, self.base(tools), cpt)
            for message, tokens in zip(fresh, shares):
                self.tally.measure(message, tokens)
            self.calibration.observe(chars, attributed)
            self.last_count = LastCount(self.revision, len(sent), reported)
        elif verdict == "suspect":
            assert reported is not None
            self.last_count = (
                replace(previous, suspects=previous.suspects + 1,
                        largest_suspect=max(previous.largest_suspect, reported))
                if previous else LastCount(self.revision, len(sent), reported, 1, reported))
        elif verdict == "truncated":
            self.last_count = None
        guess = tk.estimate_chars(reply_chars, cpt)
        completion = (usage.completion_tokens if usage else None) or min(
            guess, self.max_output_tokens or guess)
        whole = verdict == "whole"
        return Reading(reported if whole and reported else estimate, completion,
                       "server" if whole else "estimate", estimate, verdict, reported,
                       usage.cached_tokens if usage else None)

    def refused(self, rejected_tokens: int, named: int | None) -> None:
        """The server refused a prompt of about this size as too long."""
        self.window = after_refusal(self.window, rejected_tokens, named)
        self.last_count = None

    # -- decisions --

    def evaluate(self, tokens: int, messages: list[Message]) -> Decision:
        self.sync(messages)
        decision, self.wound_down = decide(self.policy, self.used_pct(tokens),
                                           self.tally.candidates(), self.wound_down)
        return decision

    def mask(self, messages: list[Message], ids: list[str]) -> list[Message]:
        self.sync(messages)
        for tool_call_id in ids:
            self.observations[tool_call_id].masked = True
        masked = apply_masks(messages, {i: placeholder(self.observations[i]) for i in ids})
        self.total_masked += len(ids)
        self.mask_rounds += 1
        self.revision += 1
        self.tally.replace(masked, ids, self.revision, self._worth_masking)
        return masked

    def fit(self, messages: list[Message], tools: list[dict[str, Any]],
            target: int | None = None) -> Fitted:
        """Make a conversation fit `target` tokens (default: the budget): mask older results
        oldest-first, then drop the oldest complete turns, and only then mask the newest
        turn's results, which the model has not seen yet."""
        target = self.budget if target is None else target
        fitted = Fitted(messages, tokens=self.current_tokens(messages, tools))
        if fitted.tokens <= target:
            return fitted
        starts = self.tally.starts
        newest_turn = starts[-1] if starts else len(messages)
        newest = self.tally.candidates(newest_turn)
        self._mask_until(fitted, self.tally.candidates(0, newest_turn), tools, target)
        while fitted.tokens > target:
            shorter = drop_oldest_turn(fitted.messages)
            if shorter is None:
                break
            fitted.messages = shorter
            fitted.dropped_turns += 1
            self.revision += 1
            fitted.tokens = self.current_tokens(fitted.messages, tools)
        self._mask_until(fitted, newest, tools, target)
        return fitted

    def _mask_until(self, fitted: Fitted, ids: list[str], tools: list[dict[str, Any]],
                    target: int) -> None:
        for tool_call_id in ids:
            if fitted.tokens <= target:
                return
            fitted.messages = self.mask(fitted.messages, [tool_call_id])
            fitted.masked.append(tool_call_id)
            fitted.tokens = self.current_tokens(fitted.messages, tools)

    def fresh_start_target(self) -> int:
        """How full a restarted session may begin."""
        return int(self.budget * min(self.policy.soft_threshold_pct, FRESH_START_MAX_FILL))

    def new_session(self) -> None:
        self.wound_down = self.probed = False
        self.revision += 1
        self.last_count = None

    # -- observations --

    def max_result_chars(self) -> int:
        """Tool results are capped at max_tool_result_tokens, and never more than a share of
        the budget, so one result cannot fill a small window."""
        tokens = min(self.policy.max_tool_result_tokens, int(self.budget * RESULT_MAX_SHARE))
        return max(int(tokens * self.chars_per_token), MIN_RESULT_CHARS)

    def new_observation_id(self) -> str:
        obs_id = f"obs-{self.next_observation}"
        self.next_observation += 1
        return obs_id

    def admit(self, obs: Observation, text: str) -> str:
        """Register a tool result and return its content as the model will see it."""
        capped, cut = cap_text(text, self.max_result_chars(),
                               self.policy.tool_result_truncation, obs.id)
        obs.truncated = cut > 0
        self.observations[obs.tool_call_id] = obs
        return capped

    def find_observation(self, obs_id: str) -> Observation | None:
        return next((o for o in self.observations.values() if o.id == obs_id), None)

    # -- persistence --

    def to_dict(self) -> dict[str, Any]:
        return {
            "window": asdict(self.window),
            "max_output_tokens": self.max_output_tokens,
            "calibration": asdict(self.calibration),
            "base_tokens": self.base_tokens,
            "observations": {k: asdict(o) for k, o in self.observations.items()},
            "total_masked": self.total_masked,
            "mask_rounds": self.mask_rounds,
            "wound_down": self.wound_down,
            "next_observation": self.next_observation,
            "revision": self.revision,
            "last_count": asdict(self.last_count) if self.last_count else None,
            "probed": self.probed,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], policy: ContextConfig) -> ContextManager:
        data = dict(data)
        data["window"] = Window(**data["window"])
        data["calibration"] = tk.Calibration(**data["calibration"])
        data["observations"] = {k: Observation(**v) for k, v in data["observations"].items()}
        if data.get("last_count") is not None:
            data["last_count"] = LastCount(**data["last_count"])
        return cls(policy=policy, **data)


def restart_marker(session: int, previous_turns: int) -> Message:
    return note("restart", (
        f"[Session restarted. Session #{session}. The previous session ran {previous_turns} "
        "turns. Check your workspace files for saved progress.]"))


WIND_DOWN_TEXT = (
    "[Context nearly full: {pct:.0%} of the window is used. Save your progress and state to "
    "workspace files now (what is done, what is next, anything you would need to continue). "
    "The session will restart soon with a fresh context; only your files carry over.]"
)


def mask_notice(count: int, reclaimed_pct: float) -> Message:
    return note("mask", f"[Context compressed: {count} observations masked, "
                        f"~{reclaimed_pct:.0f}% of the context reclaimed]")
