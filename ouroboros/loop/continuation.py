"""How a stopped run is continued: the flags it remembers, whether `ouroboros resume` can go on
as asked, and the line that tells a person how. Pure functions over the run's log.

Every way a run stops leaves it resumable: a stop signal, max_turns (`--max-turns N` gives N
more turns), task_complete and an idle pause (`--message "..."` gives the agent a new
instruction), an error, a crash.

    summary = read_tail(run_dir).summary()  # the remembered flags and turns (store.summary)
    flags = resume_flags(summary.flags, given, more_turns=5, total_turns=summary.assistants)
    why_not = refusal(run_id, end, total_turns=12, max_turns=10, message="")
    plan = continue_plan(state_dir, None, given)  # `run --continue`; None: start a new run
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Mapping

from ouroboros.errors import EXIT_DONE, EXIT_PAUSED
from ouroboros.loop.budgets import BUDGET, budget_reached, budget_words
from ouroboros.store.events import RunEnd
from ouroboros.store.log import EVENTS_FILE, find_run, list_runs, parse_logged, read_tail
from ouroboros.store.summary import REMEMBERED_FLAGS, TURN_LIMIT, RunSummary

MESSAGE_HINT: Final = 'ouroboros resume --message "what to do next"'


@dataclass(frozen=True)
class ResumePlan:
    """What `ouroboros resume` continues, and with which flags."""

    run_id: str
    flags: dict[str, Any]
    total_turns: int
    end: RunEnd | None  # the run_end record the log ends with, if any

    def stays(self, max_turns: int, max_tokens: int = 0, max_wall_secs: float = 0) -> Stay | None:
        """Why `run --continue` leaves this run as it is (under the `max_turns` and budgets it
        would run with), and the exit code that says so; None when it goes on. A complete
        run is done (exit 0); a run out of turns, or paused on a budget still spent, is still
        paused (exit 3)."""
        if self.end is not None and self.end.reason == "task_complete":
            summary = f": {self.end.summary}" if self.end.summary else ""
            return Stay(
                f"run {self.run_id} is complete (task_complete{summary}); it is left "
                f"as it is. To give the agent more to do: {MESSAGE_HINT}",
                EXIT_DONE,
            )
        spent = budget_spent(self.end, max_tokens, max_wall_secs)
        if spent is not None:
            return Stay(
                f"run {self.run_id} has spent its budget ({spent}); it is left as it "
                f"is: raise {spent.split(' ')[0]}, then `ouroboros resume` continues "
                "it",
                EXIT_PAUSED,
            )
        why_not = refusal(
            self.run_id, self.end, total_turns=self.total_turns, max_turns=max_turns, message=""
        )
        return Stay(why_not, EXIT_PAUSED) if why_not is not None else None


def budget_spent(end: RunEnd | None, max_tokens: int, max_wall_secs: float) -> str | None:
    """For a run that paused on a budget: the budget it would still be over under these
    limits, in words ("agent.max_tokens = 1000 (used 1,204 tokens)"); else None."""
    if end is None or end.reason != BUDGET:
        return None
    key = budget_reached(end.tokens_used, end.wall_secs, max_tokens, max_wall_secs)
    return (
        None
        if key is None
        else budget_words(key, end.tokens_used, end.wall_secs, max_tokens, max_wall_secs)
    )


@dataclass(frozen=True)
class Stay:
    """`run --continue` leaves the run as it is: the line that says why, and the exit code."""

    message: str
    exit_code: int


def continue_plan(
    state_dir: Path, run_id: str | None, given: Mapping[str, Any]
) -> ResumePlan | None:
    """What `run --continue` continues: the named run, else the latest; None when the project
    has no run yet (a new one starts). The flags given now are the run's limits as they
    would be for `run` (`--max-turns` is the total, so a supervisor's fixed command line
    does not add turns at every restart)."""
    if run_id is None and not list_runs(state_dir):
        return None
    return plan_resume(state_dir, run_id, given, None)


def plan_resume(
    state_dir: Path, run_id: str | None, given: Mapping[str, Any], more_turns: int | None
) -> ResumePlan:
    """Read the run's summary (the latest run unless named; its manifest and current segment):
    its remembered flags under those given now, its turns so far and how it ended. Raises
    UsageError as find_run does."""
    run_dir = find_run(state_dir, run_id)
    return summary_plan(run_dir, read_tail(run_dir).summary(), given, more_turns)


def summary_plan(
    run_dir: Path, summary: RunSummary, given: Mapping[str, Any], more_turns: int | None
) -> ResumePlan:
    """plan_resume from the run's summary, where the caller has read it already."""
    last = summary.anchors.get("run_end")
    end = (
        parse_logged(last, run_dir / EVENTS_FILE)
        if last is not None and last["seq"] == summary.last.get("seq")
        else None
    )
    total = summary.assistants  # as turns_taken
    flags = resume_flags(summary.flags, given, more_turns=more_turns, total_turns=total)
    return ResumePlan(run_dir.name, flags, total, end if isinstance(end, RunEnd) else None)


def flags_to_remember(
    config: Mapping[str, Mapping[str, Any]], sources: Mapping[str, str]
) -> dict[str, Any]:
    """The remembered keys that came from command-line flags, with their values in `config`
    ({"model": {"name": ...}, ...}). A base URL with a password in it is not written to the
    log (the config's applies on resume)."""
    flags = {}
    for key in REMEMBERED_FLAGS:
        table, name = key.split(".")
        value = config.get(table, {}).get(name)
        if sources.get(key) == "flag" and not (name == "base_url" and "@" in str(value)):
            flags[key] = value
    return flags


def resume_flags(
    remembered: Mapping[str, Any],
    given: Mapping[str, Any],
    *,
    more_turns: int | None,
    total_turns: int,
) -> dict[str, Any]:
    """The flags a resume runs with: the remembered ones, overridden by those given now;
    `--max-turns N` on resume means N more turns (0: no limit).

        resume_flags({"agent.max_turns": 3}, {}, more_turns=5, total_turns=3)
        -> {"agent.max_turns": 8}
    """
    flags = {**remembered, **given}
    if more_turns is not None:
        flags[TURN_LIMIT] = total_turns + more_turns if more_turns else 0
    return flags


def refusal(
    run_id: str,
    end: RunEnd | None,
    *,
    total_turns: int,
    max_turns: int,
    message: str,
    limit_from: str = TURN_LIMIT,
) -> str | None:
    """Why `resume` would stop again at once, as the line that says what to give it; None
    when it can go on. `end` is the run's last run_end record, if it ended cleanly;
    `limit_from` names where `max_turns` was set ("--max-turns 3, given to `ouroboros run`")."""
    if max_turns and total_turns >= max_turns:
        return (
            f"run {run_id} has had its {turns(max_turns)} ({limit_from}); "
            "`ouroboros resume --max-turns N` gives it N more (0: no limit)"
        )
    if end is not None and end.reason == "task_complete" and not message.strip():
        summary = f": {end.summary}" if end.summary else ""
        return (
            f"run {run_id} is complete (task_complete{summary}); to give the agent more to "
            f"do: {MESSAGE_HINT}"
        )
    return None


_DONE_WORDS: Final = re.compile(
    r"\b(?:all done|(?:the |my )?(?:task|work|job)s? (?:is |are |has been |have been )?"
    r"(?:now )?(?:done|complete|completed|finished)|(?:i am|i'm|we are|we're) (?:all )?"
    r"(?:done|finished)|(?:i have |i've )?(?:finished|completed) (?:the|my|all the) "
    r"(?:task|work|job)s?|nothing (?:left|more) to do|mission (?:accomplished|complete))\b",
    re.IGNORECASE,
)


def said_done(text: str) -> str | None:
    """The words in which a reply says the work is done ("ALL DONE", "The task is complete"),
    as written; None when it says no such thing (or only that it is not done)."""
    for match in _DONE_WORDS.finditer(text):
        before = text[max(0, match.start() - 12) : match.start()].lower()
        if not re.search(r"\b(?:not|n't|never|almost|nearly)\W*(?:yet\W*)?$", before):
            return match.group(0)
    return None


def done_words(reason: str, last_words: str) -> str | None:
    """For an idle end, the words in which the agent's last reply said the work is done
    (run_end's `said_done`), "" when it said no such thing; None for any other end."""
    return (said_done(last_words) or "") if reason == "idle" else None


def how_to_continue(
    reason: str,
    *,
    max_turns: int = 0,
    max_idle_turns: int = 0,
    last_words: str = "",
    budget: str = "",
) -> str:
    """The line a stopped run ends with: why it stopped, if it needs saying, and the command
    that continues it. `last_words`: the agent's last reply, for an idle end after it said in
    words that the work is done (most small models never call task_complete); `budget`: the
    budget reached, as budgets.budget_words says it ("agent.max_tokens = 1000 (used ...)")."""
    done = said_done(last_words) if reason == "idle" else None
    if done is not None:
        return (
            f'the agent said it is done ("{done}") without calling task_complete, so '
            f"the run is paused; to give it more to do: {MESSAGE_HINT}"
        )
    match reason:
        case "task_complete":
            return f"the agent says the task is done; to give it more to do: {MESSAGE_HINT}"
        case "idle":
            return (
                f"the agent made no tool call and said nothing new in "
                f"{turns(max_idle_turns)} in a row, so the run is paused; to go on: "
                f"{MESSAGE_HINT} (or `ouroboros resume`)"
            )
        case "stuck":
            return (
                "the agent was stuck in a loop (see the `stuck` event), so the run is "
                f"paused; to go on: {MESSAGE_HINT} (or `ouroboros resume`)"
            )
        case "redoing":
            return (
                "the agent kept doing again what earlier sessions had done (see the "
                "`stuck` event), so the run is paused; check its notes, then: "
                f"{MESSAGE_HINT} (or `ouroboros resume`)"
            )
        case "max_turns":
            return (
                f"the run had its {turns(max_turns)} (agent.max_turns); "
                "`ouroboros resume --max-turns N` gives it N more"
            )
        case "budget":
            key = budget.split(" ")[0] or "agent.max_tokens or agent.max_wall_secs"
            spent = f" ({budget})" if budget else ""
            return (
                f"the run spent its budget{spent}, so it is paused; raise {key} (0: no "
                "limit), then `ouroboros resume` continues the run"
            )
        case "max_restarts":
            return (
                "the run reached context.max_restarts; raise it, then `ouroboros resume` "
                "continues the run"
            )
        case "error":
            return "fix the cause, then `ouroboros resume` continues the run"
    return "`ouroboros resume` continues the run"


def turns(count: int) -> str:
    """ "1 turn", "3 turns"."""
    return f"{count} turn" + ("" if count == 1 else "s")
