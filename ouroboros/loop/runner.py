"""The outer loop: start or resume a run, then run sessions, restarting them with carryover
when the context manager asks (or a reload does), until the run stops. Every session start
reads the config again and takes what a running run can take (see reload.py).

How a run begins is in startup.py; what a restarted session begins with, in restart.py.
"""

from __future__ import annotations

import asyncio
import os
import signal
from dataclasses import replace
from pathlib import Path

from ouroboros.config import LoadedConfig
from ouroboros.errors import (
    EXIT_FAILED_RESUMABLE,
    EXIT_NEEDS_FIX,
    ConfigError,
    ModelError,
    OuroborosError,
    PermanentModelError,
    RunFailed,
    StateError,
    end_exit_code,
    signal_exit_code,
)
from ouroboros.loop import systemd
from ouroboros.loop.budgets import BUDGET, BudgetMeter
from ouroboros.loop.continuation import done_words, flags_to_remember, how_to_continue
from ouroboros.loop.deadline import Deadline, startup_secs
from ouroboros.loop.endings import RestartSession, StopRun
from ouroboros.loop.evidence import believe_told
from ouroboros.loop.handoff import handoff_budget, tokens_of
from ouroboros.loop.heartbeat import HEARTBEAT_FILE, Heartbeat
from ouroboros.loop.live_config import LiveConfig
from ouroboros.loop.memory import SystemPrompt, mission_changed, system_message
from ouroboros.loop.reload import Change, bad_edit, config_diff, needs_new_run, show, with_live
from ouroboros.loop.restart import (
    begin_session,
    carried_messages,
    count_progress,
    fresh_start,
    may_restart,
)
from ouroboros.loop.server_wait import WAIT_CONDITION, WAITING, WaitNotices, wait_for_server
from ouroboros.loop.session import Services, Session
from ouroboros.loop.startup import (
    api_key,
    build_toolbox,
    check_writable_state_dir,
    claim_window,
    live_from,
    log_changes,
    make_window_real,
    refuse_what_cannot_fit,
    resume_run,
    start_run,
    startup_warnings,
    sweep_temporaries,
)
from ouroboros.loop.state import RunState, save_state
from ouroboros.loop.stopping import stop_signals
from ouroboros.loop.tool_use import ToolUseWatch, no_tools_warning
from ouroboros.protocols import Interrupted, Listener, Message, RunHooks
from ouroboros.sandbox.guard import RunGuard
from ouroboros.sandbox.lock import WorkspaceLock
from ouroboros.server.client import ChatClient, client_settings
from ouroboros.server.discovery import WindowQuestions, tools_word
from ouroboros.server.kinds import same_model
from ouroboros.server.tokenizer import TokenCounter
from ouroboros.store import events as ev
from ouroboros.store.atomic import write_failure
from ouroboros.store.log import EventLog, find_run, new_run_id, runs_dir, utc_now
from ouroboros.store.observations import OBSERVATIONS_DIR
from ouroboros.store.owner import claim_state_dir


async def run_agent(
    loaded: LoadedConfig,
    hooks: RunHooks,
    *,
    resume: bool = False,
    run_id: str | None = None,
    message: str = "",
) -> int:
    """Run (or resume) the agent until it stops. Returns the exit code (the table in
    ouroboros.errors): 0 done, 3 paused, 128 + N for a stop by signal N; a failed run raises
    RunFailed (exit 1, or 2 when it needs a fix). Config errors raise before anything is
    written. `message` (on resume) is a new instruction for the agent."""
    with stop_signals(hooks.stop):
        try:
            return await start_and_run(loaded, hooks, resume=resume, run_id=run_id, message=message)
        except Interrupted:  # stopped before the run began: nothing was recorded
            return signal_exit_code(hooks.stop.signal_name or "SIGINT")


async def start_and_run(
    loaded: LoadedConfig, hooks: RunHooks, *, resume: bool, run_id: str | None, message: str
) -> int:
    loaded.check_files()
    check_writable_state_dir(loaded)  # read-only or not ours: exit 2, before anything else
    cfg = loaded.config
    if resume:
        run_dir = find_run(loaded.state_dir, run_id)
        run_id = run_dir.name
    else:
        run_id = new_run_id()
        run_dir = runs_dir(loaded.state_dir) / run_id
    guard = RunGuard.prepare(loaded)  # a required sandbox that is missing stops us here
    on_text, on_event = guard.screen_stream(hooks.on_text, hooks.on_event)
    hooks = replace(hooks, on_text=on_text, on_event=on_event)  # no secret on the terminal
    lock = claim_workspace(loaded, run_id, run_dir)
    client = ChatClient(
        cfg.model.base_url,
        cfg.model.name,
        api_key=api_key(cfg.model.api_key_env),
        **client_settings(cfg.model),
    )
    background: list[asyncio.Future[None]] = []
    counter = TokenCounter(cfg.model.base_url, cfg.model.name, http=client.http)
    runner: Runner | None = None
    try:
        # before an interrupted call is answered: its processes are gone
        guard.start(lock.kernel_fds)
        # WATCHDOG=1 from the event loop: a loop that hangs stops the pings
        background.append(asyncio.ensure_future(systemd.keep_watchdog()))
        # Until the run's own heartbeat takes over: a probe sees a process starting, not stuck.
        starting = Heartbeat(loaded.state_dir / HEARTBEAT_FILE, run_id)
        background.append(asyncio.ensure_future(starting.keep_beating(cfg.metrics.heartbeat_secs)))
        startup = await hooks.stop.cancellable(
            reach_server(client, loaded, starting, hooks.on_event)
        )
        runner = await hooks.stop.cancellable(
            Runner.open(
                loaded,
                run_dir,
                client,
                counter,
                hooks,
                resume=resume,
                message=message,
                guard=guard,
                startup=startup,
            )
        )
        background.pop().cancel()
        runner.log.subscribe(systemd.on_event)
        systemd.notify_systemd(f"READY=1\nSTATUS=run {run_id}: session {runner.state.session}")
        if (note := lock.takeover_note()) is not None:
            runner.log.emit(ev.WarningEvent(message=note))
        return await runner.run()
    finally:
        for task in background:
            task.cancel()
        if runner is not None:  # its state's writer holds the run dir open (run() closes it)
            runner.services.state_file.close()
        await client.aclose()
        guard.close()
        lock.release()


def claim_workspace(loaded: LoadedConfig, run_id: str, run_dir: Path) -> WorkspaceLock:
    """Take the workspace lock for `run_id` and the state dir for this project, then sweep the
    temporaries a kill left there before their rename (no other harness writes there now)."""
    lock = WorkspaceLock.acquire(loaded.state_dir, loaded.workspace, run_id)
    try:
        claim_state_dir(loaded.state_dir, project=loaded.root, workspace=loaded.workspace)
    except BaseException:
        lock.release()
        raise
    sweep_temporaries(loaded.state_dir, run_dir, run_dir / OBSERVATIONS_DIR)
    return lock


async def reach_server(
    client: ChatClient, loaded: LoadedConfig, heartbeat: Heartbeat, on_event: Listener | None
) -> Deadline:
    """Check the server before anything is recorded, waiting for one that nothing answers at
    yet up to `model.wait_for_server_secs` (server_wait.py): the wait is a warning line on the
    terminal (or JSON), a STATUS= line for systemd and `doing` in the heartbeat, which
    `status --json` reads as "waiting". Returns the start-up deadline, counted from the
    server's first answer."""
    startup = Deadline.after(startup_secs(os.environ))

    async def probe() -> None:
        nonlocal startup
        startup = Deadline.after(startup_secs(os.environ))
        await startup.within(check_reachable(client), lambda: None, "the model check")

    def doing(what: str) -> None:
        heartbeat.record.update(doing=what, since=utc_now())
        heartbeat.beat()

    def began(words: str) -> None:
        doing(f"{WAITING} at {client.base_url}")
        systemd.notify_systemd(f"STATUS={words}")
        if on_event is not None:
            on_event(ev.WarningEvent(message=words, condition=WAIT_CONDITION, ts=utc_now()))

    def ended() -> None:
        doing("starting")
        if on_event is not None:
            on_event(
                ev.WarningCleared(
                    condition=WAIT_CONDITION,
                    ts=utc_now(),
                    message=f"the model server at {client.base_url} answers",
                )
            )

    await wait_for_server(
        probe, loaded.config.model.wait_for_server_secs, client.base_url, WaitNotices(began, ended)
    )
    return startup


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


async def warn_without_tools(
    loaded: LoadedConfig,
    client: ChatClient,
    state: RunState,
    log: EventLog,
    startup: Deadline | None,
) -> None:
    """One warning when the server says the model will not be shown the tools (tool_use.py);
    nothing when it does not say, or not within the start-up deadline."""
    model = loaded.config.model
    asking = tools_word(model.base_url, client.model, http=client.http)
    said = await (
        asking if startup is None else startup.within(asking, lambda: None, "the tools question")
    )
    warning = no_tools_warning(*said, model.name) if said is not None else None
    if warning is not None:
        state.warn_once(log, "no_tools", warning)


class Runner:
    guard: RunGuard | None = None  # the sandbox, redaction and tool processes of the run

    def __init__(
        self, run_dir: Path, state: RunState, log: EventLog, services: Services, hooks: RunHooks
    ) -> None:
        self.live = services.live
        self.run_dir = run_dir
        self.state = state
        self.log = log
        self.services = services
        self.hooks = hooks
        self.budgets = BudgetMeter(state, lambda: self.services.config.agent, services.stop)

    @property
    def loaded(self) -> LoadedConfig:
        """The run's config as it is now, with where each value came from."""
        return self.live.loaded

    @classmethod
    async def open(
        cls,
        loaded: LoadedConfig,
        run_dir: Path,
        client: ChatClient,
        counter: TokenCounter,
        hooks: RunHooks,
        *,
        resume: bool,
        message: str = "",
        guard: RunGuard | None = None,
        startup: Deadline | None = None,
    ) -> Runner:
        """Start a new run in `run_dir`, or pick up the one there; snapshot its state, so a
        run killed before its first reply resumes."""
        cfg = loaded.config
        flags = flags_to_remember(cfg.model_dump(), loaded.sources)
        claim = await claim_window(loaded, client.http, startup)
        making = make_window_real(loaded, client, claim)
        claim = await (
            making
            if startup is None
            else startup.within(making, lambda: claim, "the model with the window")
        )
        await refuse_what_cannot_fit(loaded, claim, counter, startup)
        if resume:
            state, log, interrupted = resume_run(
                loaded, run_dir, hooks.on_event, claim, flags, message, guard
            )
        else:
            state, log = start_run(loaded, run_dir, hooks.on_event, claim, flags, guard)
            interrupted = []
        asker = WindowQuestions(client.base_url, client.model, http=client.http)
        told = await (
            asker.told()
            if startup is None
            else startup.within(asker.told(), lambda: None, "the window it allocated")
        )
        guarded = guard.warnings() if guard is not None else []
        guarded += [
            f"the server did not answer {what} within the start-up deadline "
            f"({startup.secs:g} s): going on with what is known"
            for what in (startup.missed if startup is not None else [])
        ]
        for warning in startup_warnings(loaded, os.environ) + guarded:
            log.emit(ev.WarningEvent(message=warning))
        await warn_without_tools(loaded, client, state, log, startup)
        believe_told(state.context, told, lambda key, text: state.warn_once(log, key, text))
        services = Services(
            client=client,
            toolbox=build_toolbox(loaded, run_dir, state.context, log, guard),
            log=log,
            run_dir=run_dir,
            stop=hooks.stop,
            live=LiveConfig(loaded),
            on_text=hooks.on_text,
            counter=counter,
            asker=asker,
            state_dir=loaded.state_dir,
        )
        runner = cls(run_dir, state, log, services, hooks)
        runner.guard = guard
        runner.follow_config()
        client.reply_room = lambda: runner.state.context.limit - runner.state.context.budget
        if state.replace_system(runner.system_prompt()):  # the memory now, on a resume too
            state.context.changed()
        session = Session(state, services)
        for call in interrupted:
            session.tool_calls.answer_interrupted(call)
        runner.snapshot()
        log.subscribe(ToolUseWatch(runner.warn_once).take)  # last: it may emit
        return runner

    async def run(self) -> int:
        """Run sessions until the run stops; its exit code (see ouroboros.errors). A model
        failure is logged, the run is left resumable, and RunFailed carries the message out.
        A stop signal cancels the sessions wherever they wait (see stopping.py)."""
        stop = self.services.stop
        stop.listeners.append(lambda name: self.log.emit(ev.StopRequested(signal=name)))
        self.log.subscribe(self.budgets.on_event)
        self.budgets.check()  # a resume of a run whose budget is spent pauses again at once
        self.install_signal_handlers()
        beating = self.start_heartbeat()
        try:
            await stop.cancellable(self.sessions())
        except StopRun as stopped:
            return self.finish(stopped.reason, self.exit_code(stopped.reason), stopped.summary)
        except Interrupted as interrupted:
            return self.finish(interrupted.reason, self.exit_code(interrupted.reason))
        except ModelError as error:
            self.log.emit(ev.ErrorEvent(message=error.message, kind=type(error).__name__))
            code = (
                EXIT_NEEDS_FIX if isinstance(error, PermanentModelError) else EXIT_FAILED_RESUMABLE
            )
            self.finish("error", code)
            raise RunFailed(
                f"{error.message} (run {self.state.run_id} is saved: fix the "
                "cause, then `ouroboros resume` continues it)",
                code,
            ) from None
        except (StateError, OSError) as error:
            raise self.cannot_write(error) from None
        finally:
            beating.cancel()
            self.remove_signal_handlers()
            self.services.state_file.close()

    def start_heartbeat(self) -> asyncio.Future[None]:
        """Keep <state_dir>/heartbeat: at every event, and every metrics.heartbeat_secs
        while the run waits (heartbeat.py)."""
        heartbeat = Heartbeat(self.loaded.state_dir / HEARTBEAT_FILE, self.state.run_id)
        self.log.subscribe(heartbeat.on_event)
        return asyncio.ensure_future(
            heartbeat.keep_beating(self.loaded.config.metrics.heartbeat_secs)
        )

    def exit_code(self, reason: str) -> int:
        """How a run that ended for `reason` exits: the table in ouroboros.errors."""
        return end_exit_code(reason, self.services.stop.signal_name)

    async def sessions(self) -> None:
        while True:
            try:
                await Session(self.state, self.services).run()
            except RestartSession as restart:
                await self.restart(restart.reason, restart.context_used_pct)

    async def restart(self, reason: str, context_used_pct: float | None = None) -> None:
        """Begin the next session with what carries over, under the config as it is now."""
        changes = await self.reread_config()
        state, policy = self.state, self.loaded.config.context
        may_restart(state, policy, reason, self.hooks.confirm_restart)
        self.brake(count_progress(state, state.digest))
        asker = self.services.asker
        told = await asker.told() if asker is not None else None
        context, toolbox = state.context, self.services.toolbox
        previous_prompt = state.system_prompt
        system = self.system_prompt()
        facts = handoff_budget(policy.handoff_max_tokens, context.budget)
        fitted = fresh_start(
            state,
            system.message,
            toolbox.schemas(),
            policy,
            told,
            facts_chars=int(facts * context.chars_per_token),
            memory=system.pinned_memory,
            brief=toolbox.brief_schemas(),
        )
        self.log.emit(ev.SessionEnd(reason="restart"))
        previous_turns = begin_session(state, fitted.messages, system.marks)
        carried = carried_messages(fitted.messages)
        # Saved before the events that announce it: a crash in between resumes the new session.
        self.snapshot()
        self.log.at_session_boundary(live_from(state))
        self.log.session, self.log.turn = state.session, 0
        self.log.emit(
            ev.SessionRestart(
                previous_turns=previous_turns,
                carryover_messages=carried,
                carryover_masked=len(fitted.masked),
                carryover_turns_dropped=fitted.dropped_turns,
                reason=reason,
                context_used_pct=context_used_pct,
            )
        )
        log_changes(self.log, changes)
        self.log_prompt_change(previous_prompt, system)
        self.log.emit(
            ev.SessionStart(
                context_limit=context.limit,
                limit_source=context.limit_source,
                budget=context.budget,
                carryover_messages=carried,
            )
        )
        handoff = str(fitted.messages[-1]["content"])
        self.log.emit(ev.Handoff(text=handoff, tokens=tokens_of(handoff, context.chars_per_token)))

    def brake(self, cause: str | None) -> None:
        """Sessions in a row without progress, the agent to blame: the run pauses, stuck."""
        if cause is not None:
            self.log.emit(ev.Stuck(kind="barren", detail=cause, action="pause"))
            raise StopRun("stuck")

    def system_prompt(self) -> SystemPrompt:
        """The mission and the agent's memory as the files are now (memory.py); a file that
        cannot be pinned is warned about once."""
        state = self.state
        prompt, warnings = system_message(
            self.loaded, state.system_prompt, state.context.chars_per_token, state.context.budget
        )
        for warning in warnings:
            self.warn_once(warning, warning)
        return prompt

    def log_prompt_change(self, before: SystemPrompt, now: SystemPrompt) -> None:
        """One line when the system prompt file was edited since the session before, as a
        config edit gets one."""
        changed = mission_changed(before, now)
        if changed is not None:
            self.log.emit(
                ev.PromptChanged(
                    path=str(self.loaded.system_prompt_path),
                    old_chars=changed[0],
                    new_chars=changed[1],
                )
            )

    def snapshot(self) -> None:
        """Write the whole state, durably: at the start, at restarts and at the end."""
        self.log.sync()
        save_state(self.state, self.log, self.services.state_file, durable=True)

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
        self.state.clear_warnings(
            self.log, lambda key: key.startswith("config error: "), "the config loads again"
        )
        changes = config_diff(self.loaded.redacted(), new.redacted(), new.sources)
        pending = {f"needs a new run: {c.key} = {show(c.new)}" for c in changes if not c.live}
        self.state.clear_warnings(
            self.log,
            lambda key: key.startswith("needs a new run: ") and key not in pending,
            "the config no longer asks for a change that needs a new run",
        )
        for change in changes:
            if not change.live:
                self.warn_once(
                    f"needs a new run: {change.key} = {show(change.new)}", needs_new_run(change)
                )
        applied = [change for change in changes if change.live]
        if applied:
            limit_changed = any(c.key == "model.context_limit" for c in applied)
            await self.apply_config(with_live(self.loaded, new), limit_changed=limit_changed)
        return applied

    async def apply_config(self, loaded: LoadedConfig, *, limit_changed: bool) -> None:
        """Make `loaded` the run's config: the one place that holds it takes it whole, and so
        does every holder of a copy (follow_config); a changed window size is claimed again,
        through the same evidence rules as a resume."""
        self.live.replace(loaded)
        if limit_changed:
            context, client = self.state.context, self.services.client
            http = client.http if isinstance(client, ChatClient) else None
            context.reclaim(*await claim_window(loaded, http))

    def follow_config(self) -> None:
        """The holders that keep a copy of live keys take each new config whole: the context
        window (its policy, the reply's reserve), the HTTP client (sampling, reply limits)
        and the tools, built again from it. The rest read it from `live` as they need it."""
        context, services = self.state.context, self.services

        def window(loaded: LoadedConfig) -> None:
            context.configure(loaded.config.context, loaded.config.model.max_output_tokens)

        def client(loaded: LoadedConfig) -> None:
            if isinstance(services.client, ChatClient):
                services.client.configure(**client_settings(loaded.config.model))

        def tools(loaded: LoadedConfig) -> None:
            services.toolbox = build_toolbox(loaded, self.run_dir, context, self.log, self.guard)

        for follower in (window, client, tools):
            self.live.follow(follower)

    def warn_once(self, key: str, message: str) -> None:
        self.state.warn_once(self.log, key, message)

    def cannot_write(self, error: StateError | OSError) -> StateError:
        """A full disk or a file size limit: the `error` and `run_end` events go to the log
        if it can still take them; what was written before stays as it was."""
        failed = (
            error
            if isinstance(error, StateError)
            else write_failure(error.filename or self.run_dir, error)
        )
        try:
            self.finish("error", 1, failed=failed)
        except (StateError, OSError):
            pass
        return failed

    def finish(
        self, reason: str, code: int, summary: str = "", failed: StateError | None = None
    ) -> int:
        """Record the end: every way a run ends leaves it resumable, and `next` says how.
        The end records (with the `error` of a failed write) go to the log all or none."""
        agent = self.loaded.config.agent
        self.budgets.check()  # the run's time, up to its end
        with self.log.together():
            if failed is not None:
                self.log.emit(ev.ErrorEvent(message=failed.message, kind="StateError"))
            self.log.emit(ev.SessionEnd(reason=reason))
            self.log.emit(
                ev.RunEnd(
                    reason=reason,
                    exit_code=code,
                    sessions=self.state.session,
                    total_turns=self.state.total_turns,
                    restarts=self.state.restarts,
                    resumable=True,
                    summary=summary,
                    next=how_to_continue(
                        reason,
                        max_turns=agent.max_turns,
                        max_idle_turns=agent.max_idle_turns,
                        last_words=last_reply(self.state.messages),
                        budget=self.budgets.words(),
                    ),
                    budget=(self.budgets.reached or "") if reason == BUDGET else "",
                    said_done=done_words(reason, last_reply(self.state.messages)),
                    tokens_used=self.state.tokens_used,
                    wall_secs=self.state.wall_secs,
                )
            )
        self.snapshot()
        self.log.close()
        return code

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
            self.log.emit(ev.ReloadRequested(signal=signal_name))


__all__ = ["RunHooks", "run_agent", "OuroborosError"]


def last_reply(messages: list[Message]) -> str:
    """The text of the agent's last reply ("" if it has none)."""
    reply = next((m for m in reversed(messages) if m.get("role") == "assistant"), None)
    return str(reply.get("content") or "") if reply is not None else ""
