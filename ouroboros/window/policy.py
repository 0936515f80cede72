"""Context management: what fills the model's window, and what to do about it.

Everything here is pure functions, no I/O: the decision after a turn (`decide`: `Continue |
Mask | WindDown | Restart`), how much one masking round masks and whether it is worth what
the server's prompt cache loses, the budget, the fixed part's problem. The object that holds
the window's state and carries the decisions out is manager.py's ContextManager; what is done
to the conversation (notes, placeholders, masking, dropping turns, carryover) is in
conversation.py.

Vocabulary:
- *budget*: the tokens a prompt may use, the context limit minus a reserve for the reply.
  Zones and `context_used_pct` are fractions of the budget, so 100% is the wall.
- *observation* and *turn*: see conversation.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

from ouroboros.protocols import Message
from ouroboros.window import ledger
from ouroboros.window.conversation import (
    Observation,
    placeholder,
    replaces_result,
)

if TYPE_CHECKING:
    from ouroboros.config import ContextConfig

# The reply's reserve is max_output_tokens, but never more than this share of the window.
REPLY_RESERVE_MAX_SHARE = 0.25
# A restarted session starts at most this full (and below the soft threshold), so it has
# room to work before the next wind-down.
FRESH_START_MAX_FILL = 0.5
# One tool result never takes more than this share of the budget.
RESULT_MAX_SHARE = 0.25
MIN_RESULT_CHARS = 200
MIN_RESULT_TOKENS = 64
CAP_MARKER_TOKENS = 40  # the line that says what was cut, and how to read it
# When the fixed part of every prompt (the system prompt and the tool definitions in full)
# takes more than this share of the budget, the tools are sent in their short form.
BRIEF_TOOLS_SHARE = 0.4
# A restart costs about two turns (the save before it, the read of the notes after it): a
# masking round is given up for one only in a session where that is at most this share.
RESTART_TURNS = 2
MAX_RESTART_SHARE = 0.2
# Tool definitions are JSON, denser than prose: estimated at no more characters per token.
SCHEMA_CHARS_PER_TOKEN = 3.5


# --- decisions ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Continue:
    """Nothing to do: the conversation fits."""


@dataclass(frozen=True)
class Mask:
    """Replace these observations (by tool-call id) with placeholders."""

    tool_call_ids: list[str]


@dataclass(frozen=True)
class WindDown:
    """Tell the agent to save its state: the session restarts soon."""


@dataclass(frozen=True)
class Restart:
    """End the session; the next begins with what carries over."""

    reason: str


Decision = Continue | Mask | WindDown | Restart


def at_rest(policy: ContextConfig, used: float) -> bool:
    """Below the soft threshold: nothing to weigh, the agent goes on (and a wind-down told
    before is over)."""
    return used < policy.soft_threshold_pct


def decide(
    policy: ContextConfig,
    used: float,
    candidates: Sequence[tuple[str, float]],
    wound_down: bool,
    recent: Sequence[tuple[str, float]] = (),
    unacted: int = 0,
    pending: float = 0.0,
    maskable: float | None = None,
    unsaved: bool = False,
    idle: bool = False,
    reprocessed: Callable[[str], float] | None = None,
    turns: int = 0,
    read_after_save: bool = False,
) -> tuple[Decision, bool]:
    """The decision at `used` (a fraction of the budget), given the observations worth
    masking (oldest first: id and the share of the budget masking it would free), and
    whether the agent has been told to wind down since. Returns the decision and whether
    the agent stands wound down after it.

    Every masking round makes a prefix-caching server process everything after its first
    placeholder again, so rounds are few and large (mask_round):
    - below the soft threshold: continue (and the wind-down rearms);
    - between the thresholds: one round, only when it brings use down to
      `mask_low_water_pct`; a smaller one waits;
    - no round, at either threshold, that frees less than it makes the server process again
      (`reprocessed(id)`: the share of the budget from that result to the end; None: unknown)
      in a conversation of `turns` (held, carried ones among them) long enough that the
      restart taking its place costs little (worth_a_round);
    - at the hard threshold: one round of whatever it may mask. Never masked: the newest
      `keep_recent_observations` and the `unacted` ones (the agent has not seen them).
      With nothing there, the `recent` ones the agent has acted on (id and share each) are
      masked when that brings use below the hard threshold; and when masking them with the
      unacted ones (`pending`: what those would free) would, the agent gets its turn to
      act on what it just got;
    - otherwise, or when the session is *full* (masking every result it may, `maskable`,
      would leave it above the middle of the thresholds; None: unknown), wind down; still
      there a turn later, restart. A full session would buy a turn or two a round, creeping
      up until old turns are dropped from under the agent;
    - but the save is the last thing before a restart: when the agent did work since its
      save and was not asked again since (`unsaved`: conversation.unsaved_work), it is told
      to wind down once more, and the restart waits for the turn after;
    - and a session with no work done yet (`idle`: conversation.worked_this_session) gets
      its turn to act on what it just received while the prompt fits: in a small window a
      wind-down there made the agent save before recording its first part, every session,
      and no session ever got further; so does, for one turn (the caller grants it no two
      in a row), an agent whose newest turn saved (wrote a file) and read what it has not
      acted on (`read_after_save`): told to save again at once, it
      repeated the save, the read went unrecorded into the next session, and that session
      began fuller and held one step where it could have held two.
    """
    if at_rest(policy, used):
        return Continue(), False
    keep = max(policy.keep_recent_observations, unacted)
    ids = mask_round(used, candidates[:-keep] if keep else candidates, policy)
    chosen = set(ids)
    freed = sum(share for tool_call_id, share in candidates if tool_call_id in chosen)
    if ids and not worth_a_round(ids[0], freed, reprocessed, turns):
        ids, maskable = [], 0.0  # a session no round is worth is full: a restart is cheaper
    if used < policy.hard_threshold_pct:  # a round only when it lasts: to the low-water mark
        worth_it = ids and used - freed <= policy.mask_low_water_pct
        return (Mask(ids) if worth_it else Continue()), wound_down
    full = (
        maskable is not None
        and used - maskable >= (policy.soft_threshold_pct + policy.hard_threshold_pct) / 2
    )
    if not full:
        if ids:
            return Mask(ids), wound_down
        spare = enough_to_mask(used, recent, policy.hard_threshold_pct)
        if spare and worth_a_round(
            spare[0], sum(share for i, share in recent if i in spare), reprocessed, turns
        ):
            return Mask(spare), wound_down
        if (
            used - pending - sum(share for _, share in recent) < policy.hard_threshold_pct
            and used < 1
        ):
            return Continue(), wound_down
    if (idle or read_after_save) and unacted and used < 1 and not wound_down:
        return Continue(), False
    if wound_down and not unsaved:
        return Restart(f"context at {100 * used:.1f}% of the budget after the wind-down"), True
    return WindDown(), True


def worth_a_round(
    first: str, freed: float, reprocessed: Callable[[str], float] | None, turns: int
) -> bool:
    """Whether a masking round whose oldest result is `first` and which frees `freed` (a
    share of the budget) is worth what it costs: a prefix-caching server processes everything
    after `first` again (`reprocessed(first)`, less what the round frees). It is when it frees
    at least that much; and in a conversation of fewer than RESTART_TURNS / MAX_RESTART_SHARE
    `turns` (the turns it holds, those carried over at the last restart among them), where the
    restart that would take the round's place would spend too large a share of the session
    saving and reading the notes back."""
    if reprocessed is None or turns * MAX_RESTART_SHARE < RESTART_TURNS:
        return True
    return freed >= reprocessed(first) - freed


def mask_round(
    used: float, candidates: Sequence[tuple[str, float]], policy: ContextConfig
) -> list[str]:
    """The observations one masking round masks, oldest first: at least `mask_batch_size`,
    and as many more as bring `used` down to `mask_low_water_pct`. Every round makes a
    prefix-caching server process everything after its first placeholder again, whatever
    it masks, so a round is made to last: masked down to the low-water mark, the session
    works a while before the next."""
    ids: list[str] = []
    for tool_call_id, share in candidates:
        if used <= policy.mask_low_water_pct and len(ids) >= policy.mask_batch_size:
            break
        ids.append(tool_call_id)
        used -= share
    return ids


def enough_to_mask(used: float, recent: Sequence[tuple[str, float]], below: float) -> list[str]:
    """The oldest of `recent` whose masking brings `used` below `below`; none if all of
    them would not."""
    ids: list[str] = []
    for tool_call_id, share in recent:
        ids.append(tool_call_id)
        used -= share
        if used < below:
            return ids
    return []


def reclaimed_pct(before: int, after: int) -> float:
    """How much smaller a prompt of `before` tokens got, in percent, at `after`."""
    return 100 * (before - after) / before if before else 0.0


def prompt_budget(limit: int, max_output_tokens: int) -> int:
    """The tokens a prompt may take: the limit less the reply's reserve."""
    return limit - min(max_output_tokens, int(limit * REPLY_RESERVE_MAX_SHARE))


def fixed_part_problem(
    fixed: int, how: str, limit: int, max_output_tokens: int, policy: ContextConfig
) -> str | None:
    """Why no session could work when the system prompt and the tool definitions take `fixed`
    tokens (`how`: "counted by the server", "at least, by the estimate") of the prompt budget
    the window leaves: they reach the hard threshold, or leave less room than one tool result
    may take (as a fresh session is judged at a restart). None when they fit."""
    budget = prompt_budget(limit, max_output_tokens)
    result = max(
        min(policy.max_tool_result_tokens, int(budget * RESULT_MAX_SHARE)), MIN_RESULT_TOKENS
    )
    room = budget - fixed
    if fixed < policy.hard_threshold_pct * budget and room >= result:
        return None
    return (
        f"the system prompt and the tool definitions take {fixed} tokens ({how}), "
        f"{fixed / budget:.0%} of the {budget}-token prompt budget (a {limit}-token window "
        f"less {limit - budget} kept for the reply), leaving {max(room, 0)} where one tool "
        f"result may take {result}: no session could do any work. Raise "
        "model.context_limit (and the server's window: llama.cpp -c, Ollama "
        "OLLAMA_CONTEXT_LENGTH), lower model.max_output_tokens, or shorten "
        "SYSTEM_PROMPT.md"
    )


def least_tokens(messages: Sequence[Message], tools: list[dict[str, Any]]) -> int:
    """The fewest tokens these messages and tools can take on any vocabulary we know (the
    densest text at MAX_CHARS_PER_TOKEN, the least a template adds): an estimate that refuses
    only what cannot fit."""
    chars = sum(ledger.message_chars(m) for m in messages) + ledger.tools_chars(tools)
    return math.floor(chars / ledger.MAX_CHARS_PER_TOKEN) + ledger.MESSAGE_OVERHEAD_TOKENS * len(
        messages
    )


def brief_tools(fixed_tokens: int, budget: int) -> bool:
    """Whether the tools go in their short form: the system prompt and the full tool
    definitions (`fixed_tokens`) would take more than BRIEF_TOOLS_SHARE of the `budget`,
    leaving a small window too little for the work itself."""
    return fixed_tokens > BRIEF_TOOLS_SHARE * budget


def mask_frees(obs: Observation, size: int, chars_per_token: float) -> int:
    """The tokens masking `obs` frees: its result (`size` tokens) less its placeholder, and
    what it cuts from its call's arguments (conversation.cut_arguments)."""
    frees = ledger.estimate_chars(obs.call_cut, chars_per_token)
    if replaces_result(obs):
        placeholder_tokens = ledger.estimate_text(placeholder(obs), chars_per_token)
        frees += size - placeholder_tokens - ledger.MESSAGE_OVERHEAD_TOKENS
    return frees
