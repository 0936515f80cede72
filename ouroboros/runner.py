"""The outer loop: start or resume a run, then run sessions, restarting them with carryover
when the context manager asks (or a reload does), until the run stops. Every session start
reads the config again and takes what a running run can take (see reload.py).
"""

from __future__ import annotations

import asyncio
import os
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from ouroboros import __version__
from ouroboros import context as ctx
from ouroboros.client import ChatClient, client_settings
from ouroboros.config import LoadedConfig
from ouroboros.context import ContextManager
from ouroboros.continuation import flags_to_remember, how_to_continue
from ouroboros.discovery import allocated_context, discover_context_limit, same_model
from ouroboros.errors import (
    ConfigError,
    ModelError,
    RunFailed,
    OuroborosError,
    StateError,
    WindowTooSmallError,
)
from ouroboros.events import (
    EVENTS_FILE,
    FORMAT_VERSION,
    Durability,
    EventLog,
    find_run,
    new_run_id,
    runs_dir,
    write_failure,
)
from ouroboros.guard import RunGuard
from ouroboros.lock import WorkspaceLock
from ouroboros.protocols import Message, TextSink
from ouroboros.reload import (
    Change,
    bad_edit,
    config_diff,
    needs_new_run,
    show,
    with_live,
)
from ouroboros.resume import drop_torn_line, rebuilt_warning, recover
from ouroboros.retry import RetryPolicy
from ouroboros.session import RestartSession, Services, Session, StopRun
from ouroboros.state import RunState, StopFlag
from ouroboros.stopping import Interrupted, stop_signals
from ouroboros.tools import TaskComplete, Toolbox, default_tools
from ouroboros.tokenize import TokenCounter
from ouroboros.tools.recall import RecallTool
from ouroboros.window import at_session_start, reclaimed, with_allocated

# Sessions in a row that end without one successful tool call before the run is stopped.
MAX_BARREN_SESSIONS = 3

Listener = Callable[[dict[str, Any]], None]
ConfirmRestart = Callable[[str], bool]


@dataclass
class RunHooks:
    """How the terminal takes part: it watches events and text, and may be asked to confirm."""

    on_event: Listener | None = None
    on_text: TextSink | None = None
    confirm_restart: ConfirmRestart | None = None  # None: cannot ask (headless)
    stop: StopFlag = field(default_factory=StopFlag)


async def run_agent(loaded: LoadedConfig, hooks: RunHooks, *, resume: bool = False,
                    run_id: str | None = None, message: str = "") -> int:
    """Run (or resume) the agent until it stops. Returns the exit code: 0 for a normal stop
    (a stop signal included), 1 for a failed run. Config errors raise before anything is
    written. `message` (on resume) is a new instruction for the agent."""
    with stop_signals(hooks.stop):
        try:
            return await start_and_run(loaded, hooks, resume=resume, run_id=run_id,
                                       message=message)
        except Interrupted:  # stopped before the run began: nothing was recorded
            return 0


async def start_and_run(loaded: LoadedConfig, hooks: RunHooks, *, resume: bool,
                        run_id: str | None, message: str) -> int:
    loaded.check_files()
    cfg = loaded.config
    if resume:
        run_dir = find_run(loaded.state_dir, run_id)
        run_id = run_dir.name
    else:
        run_id = new_run_id()
        run_dir = runs_dir(loaded.state_dir) / run_id
    guard = RunGuard.prepare(loaded)  # a required sandbox that is missing stops us here
    lock = WorkspaceLock.acquire(loaded.state_dir, loaded.workspace, run_id)
    client = ChatClient(
        cfg.model.base_url, cfg.model.name, api_key=api_key(cfg.model.api_key_env),
        **client_settings(cfg.model))
    counter = TokenCounter(cfg.model.base_url, cfg.model.name, http=client.http)
    try:
        guard.start()  # before an interrupted call is answered: its processes are gone
        await hooks.stop.cancellable(check_reachable(client))
        runner = await hooks.stop.cancellable(
            Runner.open(loaded, run_dir, client, counter, hooks, resume=resume, message=message,
                        guard=guard))
        if lock.taken_over is not None:
            runner.log.emit("warning", message=f"took over a stale lock left by pid "
                            f"{lock.taken_over.get('pid')} (that process is gone)")
        return await runner.run()
    finally:
        await client.aclose()
        guard.close()
        lock.release()


async def check_reachable(client: ChatClient) -> None:
    """Fail fast, before a run is recorded, when nothing listens at the server's address
    (retrying is for servers that go away during a run, not for one never started), when what
    answers there is not an LLM server, or when Ollama does not have the model (other servers
    may serve one model under any name)."""
    models = await client.listed_models()
    if models is None:
        return
    listed = any(same_model(name, client.model) for name in models)
    if not listed and await client.detect_kind() == "ollama":
        raise await client.missing_model()


def api_key(env_name: str) -> str | None:
    return os.environ.get(env_name) or None if env_name else None


class Runner:
    guard: RunGuard | None = None  # the sandbox, redaction and tool processes of the run

    def __init__(self, loaded: LoadedConfig, run_dir: Path, state: RunState, log: EventLog,
                 services: Services, hooks: RunHooks) -> None:
        self.loaded = loaded
        self.run_dir = run_dir
        self.state = state
        self.log = log
        self.services = services
        self.hooks = hooks

    @classmethod
    async def open(cls, loaded: LoadedConfig, run_dir: Path, client: ChatClient,
                   counter: TokenCounter, hooks: RunHooks, *, resume: bool,
                   message: str = "", guard: RunGuard | None = None) -> Runner:
        cfg = loaded.config
        flags = flags_to_remember(loaded.config.model_dump(), loaded.sources)
        claimed, source = await claim_window(loaded)
        if resume:
            recovered = recover(run_dir, cfg.context, read_system_prompt(loaded))
            if recovered.torn_line is not None:
                drop_torn_line(run_dir, recovered.valid_bytes)
            state = recovered.state
            context = state.context
            context.window = reclaimed(context.window, claimed, source)
            context.max_output_tokens = cfg.model.max_output_tokens
            state.barren_sessions = 0
            state.reload = ""  # a resume reads the config anyway
            state.idle_turns = 0  # the person chose to go on
            state.instruction = message.strip() or state.instruction
            log = open_log(run_dir, hooks, seq=recovered.seq, state=state, guard=guard,
                           durability=cfg.logging.durability)
            log.emit("run_resumed", total_turns=state.total_turns, restarts=state.restarts,
                     torn_line_dropped=recovered.torn_line is not None,
                     interrupted_tools=[c.name for c in recovered.interrupted],
                     context_limit=context.limit, limit_source=context.limit_source,
                     budget=context.budget, flags=flags, message=message.strip(),
                     **sandbox_fields(guard))
            if recovered.rebuilt is not None:
                log.emit("warning", message=rebuilt_warning(recovered.rebuilt, state))
            # A new process takes every key: log what differs from what the run last used.
            log_changes(log, config_diff(recovered.config, loaded.redacted(), loaded.sources))
        else:
            context = ContextManager.create(claimed, source, cfg.model.max_output_tokens,
                                            cfg.context)
            state = RunState(run_dir.name, first_messages(loaded, cfg.agent.continue_message),
                             context)
            log = open_log(run_dir, hooks, seq=0, state=state, guard=guard,
                           durability=cfg.logging.durability)
            log.emit("run_start", format_version=FORMAT_VERSION, run_id=run_dir.name, version=__version__,
                     pid=os.getpid(), config=loaded.redacted(), flags=flags,
                     **sandbox_fields(guard))
            log.emit("session_start", context_limit=context.limit,
                     limit_source=context.limit_source, budget=context.budget,
                     carryover_messages=0)
        guarded = guard.warnings() if guard is not None else []
        for message in startup_warnings(loaded, os.environ) + guarded:
            log.emit("warning", message=message)
        toolbox = build_toolbox(loaded, run_dir, state.context, log, guard)
        services = Services(
            client=client, toolbox=toolbox, log=log, run_dir=run_dir,
            retry=RetryPolicy(max_retry_secs=cfg.model.max_retry_secs), stop=hooks.stop,
            max_turns=cfg.agent.max_turns, continue_message=cfg.agent.continue_message,
            max_idle_turns=cfg.agent.max_idle_turns, on_text=hooks.on_text, counter=counter)
        runner = cls(loaded, run_dir, state, log, services, hooks)
        runner.guard = guard
        session = Session(state, services)
        if resume:
            for call in recovered.interrupted:
                session.answer_interrupted(call)
        session.snapshot()  # a run killed before its first reply resumes
        return runner

    async def run(self) -> int:
        """Run sessions until the run stops; 0 for a normal stop. A model failure is logged,
        the run is left resumable, and RunFailed carries the message out. A stop signal
        cancels the sessions wherever they wait (see stopping.py)."""
        stop = self.services.stop
        stop.listeners.append(lambda name: self.log.emit("stop_requested", signal=name))
        self.install_signal_handlers()
        try:
            await stop.cancellable(self.sessions())
        except StopRun as stopped:
            self.finish(stopped.reason, 0, stopped.summary)
        except Interrupted as interrupted:
            self.finish(interrupted.reason, 0)
        except ModelError as error:
            self.log.emit("error", message=error.message, kind=type(error).__name__)
            self.finish("error", 1)
            raise RunFailed(f"{error.message} (run {self.state.run_id} is saved: fix the "
                            "cause, then `ouroboros resume` continues it)") from None
        except (StateError, OSError) as error:
            raise self.cannot_write(error) from None
        finally:
            self.remove_signal_handlers()
        return 0

    async def sessions(self) -> None:
        while True:
            try:
                await Session(self.state, self.services).run()
            except RestartSession as restart:
                await self.restart(restart.reason)

    async def restart(self, reason: str) -> None:
        changes = await self.reread_config()
        state, cfg = self.state, self.loaded.config.context
        if cfg.max_restarts and state.restarts >= cfg.max_restarts:
            raise StopRun("max_restarts")
        if not cfg.auto_restart:
            confirm = self.hooks.confirm_restart
            if confirm is None or not confirm(reason):
                raise StopRun("restart_declined")
        context = state.context
        state.barren_sessions = 0 if state.session_successes else state.barren_sessions + 1
        if state.barren_sessions >= MAX_BARREN_SESSIONS:
            raise WindowTooSmallError(self.cannot_progress(
                f"{state.barren_sessions} sessions in a row ended without one successful tool "
                "call"))
        carried = ctx.carryover(state.messages, cfg.carryover_turns)
        model = self.loaded.config.model
        context.window = with_allocated(at_session_start(context.window),
                                        await allocated_context(model.base_url, model.name))
        context.new_session()
        fresh = [system_message(self.loaded, state.messages[0]),
                 ctx.restart_marker(state.session + 1, state.session_turns), *carried]
        fitted = context.fit(fresh, self.services.toolbox.schemas(), context.fresh_start_target())
        if context.used_pct(fitted.tokens) >= cfg.soft_threshold_pct:
            raise WindowTooSmallError(self.cannot_progress(
                f"a fresh session would start {context.used_pct(fitted.tokens):.0%} full "
                f"(~{fitted.tokens} tokens: the system prompt, the tool definitions and the "
                "newest turn)"))
        self.log.emit("session_end", reason="restart")
        previous_turns = state.session_turns
        state.session += 1
        state.restarts += 1
        state.session_turns = state.session_successes = 0
        state.reload = ""
        state.messages = fitted.messages
        carried = fitted.messages[2:]
        # Saved before the events that announce it: a crash in between resumes the new session.
        Session(state, self.services).snapshot()
        self.log.session, self.log.turn = state.session, 0
        self.log.emit("session_restart", session=state.session, previous_turns=previous_turns,
                      carryover_messages=len(carried), carryover_masked=len(fitted.masked),
                      carryover_turns_dropped=fitted.dropped_turns, reason=reason)
        log_changes(self.log, changes)
        self.log.emit("session_start", context_limit=context.limit,
                      limit_source=context.limit_source, budget=context.budget,
                      carryover_messages=len(carried))

    # -- tuning: the config read again at every session start --

    async def reread_config(self) -> list[Change]:
        """Read the config layers again and take the keys a running run can take; return
        those changes (logged once the new session is announced). A config that no longer
        loads changes nothing; it, and each key that needs a new run, is warned about once."""
        try:
            new = self.loaded.reread()
        except ConfigError as error:
            self.warn_once(f"config error: {error.message}", bad_edit(error.message))
            return []
        changes = config_diff(self.loaded.redacted(), new.redacted(), new.sources)
        for change in changes:
            if not change.live:
                self.warn_once(f"needs a new run: {change.key} = {show(change.new)}",
                               needs_new_run(change))
        applied = [change for change in changes if change.live]
        if applied:
            limit_changed = any(c.key == "model.context_limit" for c in applied)
            await self.apply_config(with_live(self.loaded, new), limit_changed=limit_changed)
        return applied

    async def apply_config(self, loaded: LoadedConfig, *, limit_changed: bool) -> None:
        """Make `loaded` the run's config: the context policy and reply reserve, the window
        claim (through the same evidence rules as a resume), the client's settings, retries,
        limits and the tools."""
        self.loaded = loaded
        cfg, context, services = loaded.config, self.state.context, self.services
        context.policy = cfg.context
        context.max_output_tokens = cfg.model.max_output_tokens
        if limit_changed:
            context.window = reclaimed(context.window, *await claim_window(loaded))
        if isinstance(services.client, ChatClient):
            services.client.configure(**client_settings(cfg.model))
        services.retry = RetryPolicy(max_retry_secs=cfg.model.max_retry_secs)
        services.max_turns = cfg.agent.max_turns
        services.continue_message = cfg.agent.continue_message
        services.max_idle_turns = cfg.agent.max_idle_turns
        services.toolbox = build_toolbox(loaded, self.run_dir, context, self.log, self.guard)

    def warn_once(self, key: str, message: str) -> None:
        self.state.warn_once(self.log, key, message)

    def cannot_progress(self, why: str) -> str:
        """The one line for a run that cannot make progress in the window it believes."""
        context = self.state.context
        return (f"the run cannot make progress: {why}, in a {context.limit}-token window "
                f"({context.limit_source}). Give the model a bigger window "
                "(Ollama: OLLAMA_CONTEXT_LENGTH or num_ctx; llama.cpp: -c) and set "
                "model.context_limit to match, or shorten SYSTEM_PROMPT.md")

    def cannot_write(self, error: StateError | OSError) -> StateError:
        """A full disk or a file size limit: the `error` and `run_end` events go to the log
        if it can still take them; what was written before stays as it was."""
        failed = error if isinstance(error, StateError) else \
            write_failure(error.filename or self.run_dir, error)
        try:
            self.finish("error", 1, failed=failed)
        except (StateError, OSError):
            pass
        return failed

    def finish(self, reason: str, code: int, summary: str = "",
               failed: StateError | None = None) -> None:
        """Record the end: every way a run ends leaves it resumable, and `next` says how.
        The end records (with the `error` of a failed write) go to the log all or none."""
        agent = self.loaded.config.agent
        with self.log.together():
            if failed is not None:
                self.log.emit("error", message=failed.message, kind="StateError")
            self.log.emit("session_end", reason=reason)
            self.log.emit("run_end", reason=reason, exit_code=code,
                          sessions=self.state.session, total_turns=self.state.total_turns,
                          restarts=self.state.restarts, resumable=True,
                          **({"summary": summary} if summary else {}),
                          next=how_to_continue(reason, max_turns=agent.max_turns,
                                               max_idle_turns=agent.max_idle_turns))
        Session(self.state, self.services).snapshot()
        self.log.close()

    # -- SIGHUP (`ouroboros reload`) ends the session early, so the next one reads the
    # -- config; SIGINT and SIGTERM stop the run (run_agent hands them to the stop flag)

    def install_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGHUP, self.request_reload, signal.SIGHUP.name)

    def remove_signal_handlers(self) -> None:
        asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)

    def request_reload(self, signal_name: str) -> None:
        """Ask the session to end early: the agent is told to save its state, then the
        session restarts and the new one reads the config again."""
        if not self.state.reload:
            self.state.reload = "requested"
            self.log.emit("reload_requested", signal=signal_name)


def log_changes(log: EventLog, changes: list[Change]) -> None:
    for change in changes:
        log.emit("config_changed", key=change.key, old=change.old,
                 new=change.new, source=change.source)


def sandbox_fields(guard: RunGuard | None) -> dict[str, Any]:
    """For `run_start` and `run_resumed`: what the shell is confined to, and what not."""
    return {"sandbox": guard.sandbox.describe()} if guard is not None else {}


def open_log(run_dir: Path, hooks: RunHooks, *, seq: int, state: RunState,
             guard: RunGuard | None = None, durability: Durability = "turn") -> EventLog:
    log = EventLog(run_dir / EVENTS_FILE, seq=seq, session=state.session,
                   turn=state.session_turns, durability=durability)
    if guard is not None and guard.redact:
        log.redact = guard.redact
    if hooks.on_event is not None:
        log.subscribe(hooks.on_event)
    return log


async def claim_window(loaded: LoadedConfig) -> tuple[int, str]:
    """The window the config claims (or the server says), and where that came from."""
    model = loaded.config.model
    return await discover_context_limit(
        model.base_url, model.name, model.context_limit,
        configured_in=setting_origin(loaded.sources.get("model.context_limit", "default")))


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
        warnings.append(f"model.api_key_env names {name}, which is not set in the environment: "
                        "requests go without an API key")
    path = loaded.system_prompt_path
    if path.is_file() and not path.read_text(encoding="utf-8").strip():
        warnings.append(f"the system prompt {path} is empty: the agent starts with no mission "
                        "(write it in that file)")
    return warnings


def read_system_prompt(loaded: LoadedConfig) -> str:
    return loaded.system_prompt_path.read_text(encoding="utf-8")


def first_messages(loaded: LoadedConfig, kickoff: str) -> list[Message]:
    return [{"role": "system", "content": read_system_prompt(loaded)},
            ctx.note("continue", kickoff)]


def system_message(loaded: LoadedConfig, previous: Message) -> Message:
    """SYSTEM_PROMPT.md as it is on disk now (the agent may have edited it); the previous one
    if the file has gone."""
    try:
        return {"role": "system", "content": read_system_prompt(loaded)}
    except OSError:
        return previous


def build_toolbox(loaded: LoadedConfig, run_dir: Path, context: ContextManager,
                  log: EventLog, guard: RunGuard | None = None) -> Toolbox:
    safety = loaded.config.safety
    secrets = [loaded.config.model.api_key_env] if loaded.config.model.api_key_env else []
    tools = default_tools(
        loaded.workspace, shell_timeout_secs=safety.shell_timeout_secs,
        max_output_bytes=safety.max_output_bytes, blocked_patterns=safety.blocked_patterns,
        secret_env_names=secrets, on_security=lambda event: log.emit("security", **event),
        sandbox=guard.sandbox_for(safety, loaded) if guard is not None else None)
    toolbox = Toolbox(tools, redact=guard.redact if guard is not None and guard.redact
                      else None)
    toolbox.add(RecallTool(run_dir / "observations", context.max_result_chars))
    if loaded.config.agent.allow_complete:
        toolbox.add(TaskComplete())
    return toolbox


__all__ = ["RunHooks", "run_agent", "OuroborosError"]
