"""How a run begins: a new run's first state and log, a resumed run's state recovered from
its log (resume.py), and the parts every session works with that the config decides (the
toolbox, the window the config claims, the system prompt as it is on disk now).

    state, log = start_run(loaded, run_dir, on_event, claim, flags, guard)
    state, log, interrupted = resume_run(loaded, run_dir, on_event, claim, flags, message, guard)
"""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path
from typing import Any, Mapping

import httpx

from ouroboros import __version__
from ouroboros.config import LoadedConfig
from ouroboros.errors import ConfigError, PermanentModelError, WindowTooSmallError
from ouroboros.loop.deadline import Deadline
from ouroboros.loop.reload import Change, config_diff
from ouroboros.loop.resume import drop_torn_line, rebuilt_warning, recover
from ouroboros.loop.state import RunState
from ouroboros.protocols import EventSink, Listener, Message, ToolCall
from ouroboros.sandbox.guard import RunGuard
from ouroboros.server.discovery import context_from_name, discover_context_limit
from ouroboros.server.identity import ModelServer
from ouroboros.server.kinds.ollama import OLLAMA, WindowNotMade, sized_model
from ouroboros.server.tokenizer import TokenCounter
from ouroboros.store import events as ev
from ouroboros.store.files import make_private_dir
from ouroboros.store.log import EVENTS_FILE, SEGMENT_BYTES, Durability, EventLog, RunTail
from ouroboros.store.observations import OBSERVATIONS_DIR, obs_number
from ouroboros.store.retention import Retention
from ouroboros.store.segments import complete_summary, write_manifest
from ouroboros.tools import Recall, Toolbox, default_tools
from ouroboros.window.conversation import Record, note
from ouroboros.window.manager import ContextManager
from ouroboros.window.policy import fixed_part_problem, least_tokens

Claim = tuple[int, str]  # the window the config claims (or the server says), and from where


def start_run(
    loaded: LoadedConfig,
    run_dir: Path,
    on_event: Listener | None,
    claim: Claim,
    flags: dict[str, Any],
    guard: RunGuard | None,
) -> tuple[RunState, EventLog]:
    """A new run's state, and its log begun with `run_start` and `session_start`."""
    cfg = loaded.config
    context = ContextManager.create(*claim, cfg.model.max_output_tokens, cfg.context)
    state = RunState(run_dir.name, first_messages(loaded, cfg.agent.continue_message), context)
    log = open_log(
        run_dir,
        on_event,
        seq=0,
        state=state,
        guard=guard,
        durability=cfg.logging.durability,
        segment_bytes=segment_bytes(loaded),
        retention=retention(loaded),
    )
    log.emit(
        ev.RunStart(
            run_id=run_dir.name,
            version=__version__,
            pid=os.getpid(),
            config=loaded.redacted(),
            flags=flags,
            **sandbox_fields(guard),
        )
    )
    log.emit(
        ev.SessionStart(
            context_limit=context.limit,
            limit_source=context.limit_source,
            budget=context.budget,
            carryover_messages=0,
        )
    )
    return state, log


def resume_run(
    loaded: LoadedConfig,
    run_dir: Path,
    on_event: Listener | None,
    claim: Claim,
    flags: dict[str, Any],
    message: str,
    guard: RunGuard | None,
) -> tuple[RunState, EventLog, list[ToolCall]]:
    """A stopped run's state as its log and snapshot say, its log continued with
    `run_resumed`, and the tool calls a stop or crash cut short (to be answered)."""
    cfg = loaded.config
    recovered = recover(run_dir, cfg.context, read_system_prompt(loaded))
    if recovered.torn_line is not None:
        drop_torn_line(run_dir, recovered.valid_bytes)
    state = recovered.state
    context = state.context
    context.forget_unreferenced(state.messages)  # a run saved before records were dropped
    context.reclaim(*claim)
    context.configure(context.policy, cfg.model.max_output_tokens)
    state.barren_sessions = 0
    state.reload = ""  # a resume reads the config anyway
    state.idle_turns = 0  # the person chose to go on
    state.digest.start_counting()
    state.instruction = message.strip() or state.instruction
    log = open_log(
        run_dir,
        on_event,
        seq=recovered.seq,
        state=state,
        guard=guard,
        durability=cfg.logging.durability,
        tail=recovered.tail,
        segment_bytes=segment_bytes(loaded),
        retention=retention(loaded),
    )
    if recovered.repaired is not None and recovered.tail is not None:
        write_manifest(run_dir, recovered.tail.manifest)
    log.emit(
        ev.RunResumed(
            total_turns=state.total_turns,
            restarts=state.restarts,
            torn_line_dropped=recovered.torn_line is not None,
            interrupted_tools=[c.name for c in recovered.interrupted],
            context_limit=context.limit,
            limit_source=context.limit_source,
            budget=context.budget,
            flags=flags,
            message=message.strip(),
            **sandbox_fields(guard),
        )
    )
    if recovered.rebuilt is not None:
        log.emit(ev.WarningEvent(message=rebuilt_warning(recovered.rebuilt, state)))
    if recovered.repaired is not None:
        log.emit(ev.WarningEvent(message=recovered.repaired))
    # A new process takes every key: log what differs from what the run last used.
    log_changes(log, config_diff(recovered.config, loaded.redacted(), loaded.sources))
    return state, log, recovered.interrupted


# A state dir that fails with one of these needs a person (a read-only mount, a directory
# the user may not write, a file in the way); a full disk or a quota is temporary (exit 1).
NEEDS_FIX_ERRNOS = frozenset(
    {errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOTDIR, errno.EISDIR, errno.ELOOP}
)
TEMPORARY_GLOB = ".ouroboros-*.tmp"  # what store.atomic writes before its rename
TEMPORARY_MIN_AGE_SECS = 60.0  # older than any write that could be going on


def needs_fix(error: OSError) -> bool:
    """Whether an OSError on the state dir needs a person (exit 2), not time (exit 1)."""
    return error.errno in NEEDS_FIX_ERRNOS


def check_writable_state_dir(loaded: LoadedConfig) -> None:
    """Make the state dir if need be and write a file in it, before a run begins. A state
    dir that cannot be used for good (read-only, not ours, a file in the way) is a
    ConfigError naming `logging.state_dir` (exit 2: a supervisor must not restart it for
    ever); a full disk stays an OSError (exit 1: it may clear)."""
    path = loaded.state_dir
    probe = path / f".ouroboros-probe-{os.getpid()}.tmp"
    try:
        make_private_dir(path)
        fd = os.open(
            probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
        os.close(fd)
        os.unlink(probe)
    except OSError as error:
        if not needs_fix(error):
            raise
        key = "logging.state_dir"
        raise ConfigError(
            f"cannot write to the state dir {path}: "
            f"{error.strerror or error} ({key} {loaded.origin(key)}); make it "
            f"writable for this user or point {key} at a directory that is"
        ) from None


def sweep_temporaries(*directories: Path, now: float | None = None) -> list[Path]:
    """Remove the `.ouroboros-*.tmp` files a killed process left in `directories` (a write
    that never got to its rename), when older than a minute; the ones removed. Call with the
    workspace lock held: no other harness writes there."""
    now = time.time() if now is None else now
    removed = []
    for directory in directories:
        try:
            leftovers = list(directory.glob(TEMPORARY_GLOB))
        except OSError:
            continue
        for path in leftovers:
            try:
                if now - path.lstat().st_mtime >= TEMPORARY_MIN_AGE_SECS:
                    path.unlink()
                    removed.append(path)
            except OSError:
                pass
    return removed


def open_log(
    run_dir: Path,
    on_event: Listener | None,
    *,
    seq: int,
    state: RunState,
    guard: RunGuard | None = None,
    durability: Durability = "turn",
    tail: RunTail | None = None,
    segment_bytes: int = SEGMENT_BYTES,
    retention: Retention | None = None,
) -> EventLog:
    """The run's log, continued after event `seq` (in the current segment of `tail`),
    redacting the run's secrets."""
    log = EventLog(
        run_dir / EVENTS_FILE,
        seq=seq,
        session=state.session,
        turn=state.session_turns,
        durability=durability,
        summary=complete_summary(run_dir, tail.manifest) if tail else None,
        current=tail.records if tail else (),
        segment_bytes=segment_bytes,
    )
    log.retention = retention
    if guard is not None and guard.redact:
        log.redact = guard.redact
    log.subscribe(state.digest.take)  # first: what any listener sees, the digest has folded
    if on_event is not None:
        log.subscribe(on_event)
    return log


def segment_bytes(loaded: LoadedConfig) -> int:
    """How big the current segment of the event log may grow (`logging.segment_mb`)."""
    return int(loaded.config.logging.segment_mb * (1 << 20))


def retention(loaded: LoadedConfig) -> Retention:
    """What history the run keeps (the `logging.keep_*` keys)."""
    cfg = loaded.config.logging
    return Retention(int(cfg.keep_mb * 1e6), cfg.keep_sessions, cfg.keep_days)


def live_from(state: RunState) -> int:
    """The lowest observation number the live conversation still refers to (results from it
    on are kept by retention)."""
    numbers = [obs_number(o.id) for o in state.context.observations.values()]
    return min((n for n in numbers if n is not None), default=state.context.next_observation)


def log_changes(log: EventSink, changes: list[Change]) -> None:
    """A `config_changed` event for each change."""
    for change in changes:
        log.emit(
            ev.ConfigChanged(key=change.key, old=change.old, new=change.new, source=change.source)
        )


def sandbox_fields(guard: RunGuard | None) -> dict[str, Any]:
    """For `run_start` and `run_resumed`: what the shell is confined to, and what not."""
    return {"sandbox": guard.sandbox.describe()} if guard is not None else {}


def api_key(env_name: str) -> str | None:
    """The key in the environment variable `model.api_key_env` names, if any."""
    return os.environ.get(env_name) or None if env_name else None


async def claim_window(
    loaded: LoadedConfig, http: httpx.AsyncClient | None = None, startup: Deadline | None = None
) -> Claim:
    """The window the config claims (or the server says, asked through the run's client
    `http`), and where that came from; guessed from the model's name when the server has not
    said by the start-up deadline."""
    model = loaded.config.model
    asking = discover_context_limit(
        model.base_url,
        model.name,
        model.context_limit,
        configured_in=setting_origin(loaded.sources.get("model.context_limit", "default")),
        api_key=api_key(model.api_key_env),
        http=http,
    )
    if startup is None:
        return await asking
    return await startup.within(
        asking, lambda: context_from_name(model.name), "the window questions"
    )


async def make_window_real(loaded: LoadedConfig, server: ModelServer, claim: Claim) -> Claim:
    """With `model.ensure_window` and a window the config sets, on Ollama: run on a model that
    has that window (`server.kinds.ollama.sized_model`), the server's model renamed to it and
    the claim's source saying so (the session start line and its event). PermanentModelError,
    in one line naming what failed and what to do, when Ollama cannot make it."""
    model = loaded.config.model
    if not model.ensure_window or model.context_limit <= 0:
        return claim
    try:
        sized = await sized_model(server.http, server.model, model.context_limit)
    except WindowNotMade as failed:
        raise PermanentModelError(
            f"cannot give {server.model} the window of {model.context_limit:,} tokens "
            f"model.context_limit asks for: {failed.what}; set model.ensure_window = false to "
            "run on the model as it is, or start Ollama with a bigger window "
            f"({OLLAMA.bigger_window(model.context_limit)})"
        ) from None
    if sized is None:
        return claim
    server.model = sized.name
    return claim[0], f"{claim[1]}; {sized.source}"


async def refuse_what_cannot_fit(
    loaded: LoadedConfig, claim: Claim, counter: TokenCounter, startup: Deadline | None = None
) -> None:
    """Before the first request: WindowTooSmallError, with the figures and the keys to change,
    when the system prompt and the tool definitions (in their short form) leave no session
    room to work in the window claimed. Counted by the server where it can render a prompt
    without running the model (llama.cpp) by the start-up deadline, else the least they can
    take."""
    cfg = loaded.config
    messages = [record.message for record in first_messages(loaded, cfg.agent.continue_message)]
    tools = start_toolbox(loaded).brief_schemas()
    asking = counter.prompt(messages, tools)
    counted = await (
        asking if startup is None else startup.within(asking, lambda: None, "the prompt count")
    )
    fixed, how = (
        (counted, "counted by the server")
        if counted is not None
        else (least_tokens(messages, tools), "at least, by the estimate")
    )
    problem = fixed_part_problem(fixed, how, claim[0], cfg.model.max_output_tokens, cfg.context)
    if problem is not None:
        raise WindowTooSmallError(f"{problem} (window: {claim[1]})")


def start_toolbox(loaded: LoadedConfig) -> Toolbox:
    """The run's tools as the model is shown them, for what they take of the window; none of
    them is called."""
    safety = loaded.config.safety
    return Toolbox(
        default_tools(
            loaded.workspace,
            shell_timeout_secs=safety.shell_timeout_secs,
            max_output_bytes=safety.max_output_bytes,
            blocked_patterns=safety.blocked_patterns,
            secret_env_names=[],
            on_security=lambda event: None,
            recall=Recall(loaded.state_dir / OBSERVATIONS_DIR),
            allow_complete=loaded.config.agent.allow_complete,
        )
    )


def setting_origin(source: str) -> str:
    """Where a setting was made, as "in config" (either file), "from the environment (NAME)"
    or "from a command-line flag"."""
    if source.startswith("environment "):
        return f"from the environment ({source.removeprefix('environment ')})"
    if source == "flag":
        return "from a command-line flag"
    return "in config"


def startup_warnings(loaded: LoadedConfig, env: Mapping[str, str]) -> list[str]:
    """What a run may start with but probably should not: an API key variable that is named
    but not set, and a system prompt with nothing in it."""
    warnings = []
    name = loaded.config.model.api_key_env
    if name and not env.get(name):
        warnings.append(
            f"model.api_key_env names {name}, which is not set in the environment: "
            "requests go without an API key"
        )
    path = loaded.system_prompt_path
    if path.is_file() and not path.read_text(encoding="utf-8").strip():
        warnings.append(
            f"the system prompt {path} is empty: the agent starts with no mission "
            "(write it in that file)"
        )
    return warnings


def read_system_prompt(loaded: LoadedConfig) -> str:
    """SYSTEM_PROMPT.md as it is on disk now."""
    return loaded.system_prompt_path.read_text(encoding="utf-8")


def first_messages(loaded: LoadedConfig, kickoff: str) -> list[Record]:
    """A new run's conversation: the system prompt and the kickoff note."""
    system: Message = {"role": "system", "content": read_system_prompt(loaded)}
    return [Record(system), note("continue", kickoff)]


def build_toolbox(
    loaded: LoadedConfig,
    run_dir: Path,
    context: ContextManager,
    log: EventSink,
    guard: RunGuard | None = None,
) -> Toolbox:
    """The tools the config gives the agent, confined by the run's sandbox."""
    safety = loaded.config.safety
    secrets = [loaded.config.model.api_key_env] if loaded.config.model.api_key_env else []
    tools = default_tools(
        loaded.workspace,
        shell_timeout_secs=safety.shell_timeout_secs,
        max_output_bytes=safety.max_output_bytes,
        blocked_patterns=safety.blocked_patterns,
        secret_env_names=secrets,
        on_security=lambda event: log.emit(ev.Security(**event)),
        sandbox=guard.sandbox_for(safety, loaded) if guard is not None else None,
        recall=Recall(run_dir / OBSERVATIONS_DIR, context.max_result_chars),
        allow_complete=loaded.config.agent.allow_complete,
    )
    return Toolbox(tools, redact=guard.redact if guard is not None and guard.redact else None)
