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
import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from ouroboros.protocols import Message, ToolCall, ToolResult

DEFAULT_CHARS_PER_TOKEN = 4.0
MESSAGE_OVERHEAD_TOKENS = 4
# A server count this far below our estimate means it cut the prompt: loose before any usage
# has calibrated the estimate, tight after.
TRUNCATION_RATIO = 0.6
CALIBRATED_TRUNCATION_RATIO = 0.85
NOTE_KEY = "_note"  # marks messages the harness wrote; stripped before sending

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


# --- messages -------------------------------------------------------------------------------


def note(kind: Note, text: str) -> Message:
    """A message the harness adds to the conversation (sent to the model as a user turn)."""
    return {"role": "user", "content": text, NOTE_KEY: kind}


def to_wire(messages: list[Message]) -> list[Message]:
    """The messages as the server should see them: without the harness's private keys."""
    return [{k: v for k, v in m.items() if not k.startswith("_")} for m in messages]


def message_chars(message: Message) -> int:
    chars = len(message.get("content") or "")
    for call in message.get("tool_calls") or ():
        function = call.get("function", {})
        chars += len(function.get("name", "")) + len(function.get("arguments", ""))
    return chars


def tools_chars(tools: list[dict[str, Any]]) -> int:
    return len(json.dumps(tools)) if tools else 0


# --- estimates ------------------------------------------------------------------------------


@dataclass
class Calibration:
    """This run's characters per token, learned from turns whose usage the server reported."""

    chars: int = 0
    tokens: int = 0

    @property
    def chars_per_token(self) -> float:
        if self.tokens <= 0:
            return DEFAULT_CHARS_PER_TOKEN
        return self.chars / self.tokens

    def observe(self, chars: int, prompt_tokens: int) -> None:
        self.chars += chars
        self.tokens += prompt_tokens


def prompt_chars(messages: list[Message], tools: list[dict[str, Any]]) -> int:
    return sum(message_chars(m) for m in messages) + tools_chars(tools)


def estimate_tokens(
    messages: list[Message], tools: list[dict[str, Any]], chars_per_token: float
) -> int:
    """Tokens a prompt would take: characters over the calibrated ratio, plus a per-message
    allowance for the chat template's role markers."""
    text_tokens = math.ceil(prompt_chars(messages, tools) / chars_per_token)
    return text_tokens + MESSAGE_OVERHEAD_TOKENS * len(messages)


def looks_truncated(reported: int, estimated: int, calibrated: bool) -> bool:
    """Ollama silently cuts the front of an oversized prompt and reports the cut count."""
    ratio = CALIBRATED_TRUNCATION_RATIO if calibrated else TRUNCATION_RATIO
    return estimated > 0 and reported < ratio * estimated


def prompt_budget(limit: int, max_output_tokens: int) -> int:
    """The tokens a prompt may take: the limit less the reply's reserve (at most a quarter)."""
    return limit - min(max_output_tokens, limit // 4)


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


def maskable(messages: list[Message], observations: dict[str, Observation]) -> list[str]:
    """Tool-call ids of the unmasked observations worth masking (longer than their
    placeholder), oldest first."""
    ids = []
    for m in messages:
        if m["role"] == "tool":
            obs = observations.get(m.get("tool_call_id", ""))
            if (obs is not None and not obs.masked
                    and len(m.get("content") or "") > len(placeholder(obs))):
                ids.append(obs.tool_call_id)
    return ids


def select_for_masking(
    messages: list[Message], observations: dict[str, Observation], batch: int, keep_recent: int
) -> list[str]:
    candidates = maskable(messages, observations)
    if keep_recent:
        candidates = candidates[:-keep_recent]
    return candidates[:batch]


def apply_masks(messages: list[Message], placeholders: dict[str, str]) -> list[Message]:
    """Replace the content of the named tool results (by tool-call id); nothing else changes."""
    return [
        {**m, "content": placeholders[m["tool_call_id"]]}
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
class ContextSettings:
    soft_threshold_pct: float = 0.70
    hard_threshold_pct: float = 0.90
    mask_batch_size: int = 3
    keep_recent_observations: int = 2
    max_tool_result_tokens: int = 8000
    tool_result_truncation: Truncation = "head"


@dataclass
class Reading:
    """The window after one model turn."""

    prompt_tokens: int
    completion_tokens: int
    source: Literal["server", "estimate"]
    estimated: int
    truncated: bool = False


@dataclass
class Fitted:
    messages: list[Message]
    masked: list[str] = field(default_factory=list)
    dropped_turns: int = 0
    tokens: int = 0


@dataclass
class ContextManager:
    """Tracks how full the window is and decides what to do about it. Serialisable: its
    fields are the counters a resumed run must get back."""

    limit: int
    limit_source: str
    reserve: int
    settings: ContextSettings = field(default_factory=ContextSettings)
    calibration: Calibration = field(default_factory=Calibration)
    observations: dict[str, Observation] = field(default_factory=dict)
    total_masked: int = 0
    mask_rounds: int = 0
    wound_down: bool = False
    truncation_detected: bool = False
    next_observation: int = 1
    largest_prompt: int = 0  # the most prompt tokens the server has reported taking
    # Tokens the server counted for the first `anchor_messages` messages of the conversation.
    anchor_tokens: int = 0
    anchor_messages: int = 0

    @classmethod
    def create(cls, limit: int, limit_source: str, max_output_tokens: int,
               settings: ContextSettings) -> ContextManager:
        reserve = limit - prompt_budget(limit, max_output_tokens)
        return cls(limit=limit, limit_source=limit_source, reserve=reserve, settings=settings)

    # -- numbers --

    @property
    def budget(self) -> int:
        return self.limit - self.reserve

    @property
    def chars_per_token(self) -> float:
        return self.calibration.chars_per_token

    def estimate(self, messages: list[Message], tools: list[dict[str, Any]]) -> int:
        return estimate_tokens(messages, tools, self.chars_per_token)

    def used_pct(self, tokens: int) -> float:
        return tokens / self.budget if self.budget > 0 else 1.0

    def current_tokens(self, messages: list[Message], tools: list[dict[str, Any]]) -> int:
        """The window now: what the server counted for the last request, plus an estimate of
        what was added since. Without a valid anchor, the calibrated estimate of it all."""
        if 0 < self.anchor_messages <= len(messages):
            added = messages[self.anchor_messages:]
            return self.anchor_tokens + estimate_tokens(added, [], self.chars_per_token)
        return self.estimate(messages, tools)

    def observe_reply(self, sent: list[Message], tools: list[dict[str, Any]],
                      prompt_tokens: int | None, completion_tokens: int | None,
                      reply_chars: int) -> Reading:
        """Take in the usage of a finished turn (None when the server sent none)."""
        estimated = self.estimate(sent, tools)
        if prompt_tokens is None:
            completion = completion_tokens or math.ceil(reply_chars / self.chars_per_token)
            self.anchor_tokens, self.anchor_messages = estimated, len(sent)
            return Reading(estimated, completion, "estimate", estimated)
        reading = Reading(prompt_tokens, completion_tokens or 0, "server", estimated)
        self.largest_prompt = max(self.largest_prompt, prompt_tokens)
        if looks_truncated(prompt_tokens, estimated, self.calibration.tokens > 0):
            # The server's window is at least the largest prompt it has taken, and smaller
            # than this one: work within the former.
            reading.truncated = True
            self.truncation_detected = True
            self.limit = max(min(self.largest_prompt, self.limit), 1)
            self.reserve = self.limit - prompt_budget(self.limit, self.reserve)
            self.anchor_messages = 0
            return reading
        self.calibration.observe(prompt_chars(sent, tools), prompt_tokens)
        self.anchor_tokens, self.anchor_messages = prompt_tokens, len(sent)
        return reading

    def lower_limit(self, rejected_tokens: int) -> None:
        """The server refused a prompt of this (estimated) size: shrink the budget below it."""
        new_budget = max(int(rejected_tokens * 0.9), 1)
        if new_budget < self.budget:
            self.limit = new_budget + self.reserve
        self.anchor_messages = 0

    # -- decisions --

    def evaluate(self, tokens: int, messages: list[Message]) -> Decision:
        """Continue below the soft threshold; above it, mask the oldest observations. At the
        hard threshold with nothing left to mask, wind down; still there a turn later, restart.

        Masking comes first even above the hard threshold: one large observation can jump
        straight past both thresholds, and masking an old one is far cheaper than a restart.
        """
        used = self.used_pct(tokens)
        s = self.settings
        if used < s.hard_threshold_pct:
            self.wound_down = False
        if used < s.soft_threshold_pct:
            return Continue()
        ids = select_for_masking(messages, self.observations, s.mask_batch_size,
                                 s.keep_recent_observations)
        if ids:
            return Mask(ids)
        if used < s.hard_threshold_pct:
            return Continue()
        if self.wound_down:
            return Restart(f"context at {used:.0%} of the budget after the wind-down")
        self.wound_down = True
        return WindDown()

    def mask(self, messages: list[Message], ids: list[str]) -> list[Message]:
        for tool_call_id in ids:
            self.observations[tool_call_id].masked = True
        masked = apply_masks(messages, {i: placeholder(self.observations[i]) for i in ids})
        self.total_masked += len(ids)
        self.mask_rounds += 1
        self.anchor_messages = 0
        return masked

    def fit(self, messages: list[Message], tools: list[dict[str, Any]],
            target: int | None = None) -> Fitted:
        """Make a conversation fit `target` tokens (default: the budget): mask older results
        oldest-first, then drop the oldest complete turns, and only then mask the newest
        turn's results, which the model has not seen yet."""
        target = self.budget if target is None else target
        fitted = Fitted(messages, tokens=self.current_tokens(messages, tools))
        starts = turn_starts(messages)
        newest = maskable(messages[starts[-1]:], self.observations) if starts else []
        older = [i for i in maskable(messages, self.observations) if i not in newest]
        self._mask_until(fitted, older, tools, target)
        while fitted.tokens > target:
            shorter = drop_oldest_turn(fitted.messages)
            if shorter is None:
                break
            fitted.messages = shorter
            fitted.dropped_turns += 1
            fitted.tokens = self.estimate(fitted.messages, tools)
        self._mask_until(fitted, newest, tools, target)
        return fitted

    def _mask_until(self, fitted: Fitted, ids: list[str], tools: list[dict[str, Any]],
                    target: int) -> None:
        for tool_call_id in ids:
            if fitted.tokens <= target:
                return
            fitted.messages = self.mask(fitted.messages, [tool_call_id])
            fitted.masked.append(tool_call_id)
            fitted.tokens = self.estimate(fitted.messages, tools)

    def fresh_start_target(self) -> int:
        """How full a restarted session may begin: below the soft threshold and at most half
        the budget, so every session has room to make progress before the next wind-down."""
        return int(self.budget * min(self.settings.soft_threshold_pct, 0.5))

    # -- observations --

    def max_result_chars(self) -> int:
        """Tool results are capped at max_tool_result_tokens, and never more than a quarter of
        the budget, so one result cannot fill a small window."""
        tokens = min(self.settings.max_tool_result_tokens, self.budget // 4)
        return max(int(tokens * self.chars_per_token), 200)

    def new_observation_id(self) -> str:
        obs_id = f"obs-{self.next_observation}"
        self.next_observation += 1
        return obs_id

    def admit(self, obs: Observation, text: str) -> str:
        """Register a tool result and return its content as the model will see it."""
        capped, cut = cap_text(text, self.max_result_chars(),
                               self.settings.tool_result_truncation, obs.id)
        obs.truncated = cut > 0
        self.observations[obs.tool_call_id] = obs
        return capped

    def find_observation(self, obs_id: str) -> Observation | None:
        return next((o for o in self.observations.values() if o.id == obs_id), None)

    # -- persistence --

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ContextManager:
        data = dict(data)
        data["settings"] = ContextSettings(**data["settings"])
        data["calibration"] = Calibration(**data["calibration"])
        data["observations"] = {k: Observation(**v) for k, v in data["observations"].items()}
        return cls(**data)


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
