"""The `ouroboros` command. Each command parses its arguments, builds what it needs and calls
one function; errors become one line on stderr and an exit code (2 for usage or config)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Coroutine, Optional, TypeVar

import typer

from ouroboros import __version__
from ouroboros.errors import ConfigError, OuroborosError, UsageError

# Each command imports what it uses, so `--version`, `--help` and the read-only commands start
# without the runner, httpx or rich.
if TYPE_CHECKING:
    from ouroboros.config import ContextConfig, LoadedConfig
    from ouroboros.runner import RunHooks

app = typer.Typer(
    name="ouroboros",
    help="Run an LLM agent indefinitely, managing its context window.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

T = TypeVar("T")

# The config key each `run` flag sets, and the flag as errors name it.
RUN_FLAGS = {"agent.workspace": "--workspace", "model.name": "--model",
             "model.base_url": "--base-url", "agent.max_turns": "--max-turns"}

ConfigOption = typer.Option(None, "--config", "-c", help="Path to ouroboros.toml "
                            "(default: the nearest one here or in a directory above).")
HeadlessOption = typer.Option(False, "--headless", help="Print plain lines, one per event, "
                              "instead of the live view (also when stdout is not a terminal).")
RunIdArgument = typer.Argument(None, metavar="[RUN_ID]", show_default=False,
                               help="The run (default: the latest).")


def fail(error: OuroborosError) -> typer.Exit:
    typer.echo(f"error: {error.message}", err=True)
    return typer.Exit(error.exit_code)


def guarded(action: Callable[[], T]) -> T:
    """Run a command body, turning Ouroboros errors into one line and their exit code, and
    any other failure of the filesystem (a full disk, a read-only directory) into one line
    and exit 1."""
    try:
        return action()
    except OuroborosError as error:
        raise fail(error) from None
    except OSError as error:
        what = f"cannot use {error.filename}: " if error.filename else ""
        raise fail(OuroborosError(f"{what}{error.strerror or error}")) from None


def version_callback(value: bool) -> None:
    if value:
        typer.echo(f"ouroboros {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: bool = typer.Option(False, "--version", callback=version_callback,
                                 is_eager=True, help="Show the version and exit."),
) -> None:
    """Ouroboros keeps an agent working for hours: it masks old tool output, warns the agent
    before the window is full, and restarts the session with its recent turns carried over."""


def interactive(headless: bool) -> bool:
    """Whether to draw the live view: not asked for plain lines, and stdout is a terminal."""
    return not headless and sys.stdout.isatty()


def make_hooks(headless: bool, context: ContextConfig | None = None) -> RunHooks:
    """The live dashboard on a terminal (with the thresholds to mark on its gauge), else one
    plain line per event."""
    from ouroboros.runner import RunHooks
    from ouroboros.ui.plain import plain_printer

    if interactive(headless):
        from ouroboros.ui.live import live_hooks

        if context is None:
            return live_hooks()
        return live_hooks(context.soft_threshold_pct, context.hard_threshold_pct)
    hooks = RunHooks()
    hooks.on_event = plain_printer(on_closed=lambda: stop_for_closed_output(hooks))
    return hooks


def stop_for_closed_output(hooks: RunHooks) -> None:
    """Output into a closed pipe (`ouroboros run | head`) stops the run as a stop signal
    does, delivered the same way (from the event loop, not inside the event being printed):
    the stop is recorded, exit 0, and the run can be resumed."""
    import asyncio

    try:
        asyncio.get_running_loop().call_soon(hooks.stop.signal, "SIGPIPE")
    except RuntimeError:  # no run going on
        hooks.stop.signal("SIGPIPE")


def flags(**values: Any) -> dict[str, Any]:
    return {key: value for key, value in values.items() if value is not None}


def project_file(config: Path | None) -> Path:
    """The --config file, else the nearest ouroboros.toml upward from here (as git finds its
    repository). Raises ConfigError, saying where it looked, when there is none."""
    from ouroboros.config import CONFIG_FILENAME, find_project

    if config is not None:
        return config
    found = find_project(Path.cwd())
    if found is None:
        raise ConfigError(f"no {CONFIG_FILENAME} in {Path.cwd()} or any directory above it; "
                          "run `ouroboros init` to create a project, or pass --config")
    return found


def load_project(config: Path | None, overrides: dict[str, Any] | None = None) -> LoadedConfig:
    """The config of the project a command is about (see project_file), or exit 2."""
    from ouroboros.config import load_config

    def load() -> LoadedConfig:
        loaded = load_config(project_file(config), overrides or {}, flag_names=RUN_FLAGS)
        loaded.check_state_dir()
        return loaded

    return guarded(load)


@app.command(short_help="Start a new run of the agent in this project.")
def run(
    config: Optional[Path] = ConfigOption,
    workspace: Optional[Path] = typer.Option(None, help="The agent's workspace directory."),
    model: Optional[str] = typer.Option(None, help="Model name, e.g. llama3.2."),
    base_url: Optional[str] = typer.Option(None, help="Server root, e.g. http://127.0.0.1:11434."),
    max_turns: Optional[int] = typer.Option(None, min=0, help="Stop after N model turns in "
                                            "total (0 = no limit)."),
    headless: bool = HeadlessOption,
) -> None:
    """Start a new run of the agent described by ouroboros.toml and SYSTEM_PROMPT.md."""
    from ouroboros.runner import run_agent

    overrides = flags(**{"agent.workspace": workspace, "model.name": model,
                         "model.base_url": base_url, "agent.max_turns": max_turns})
    loaded = load_project(config, overrides)
    hooks = make_hooks(headless, loaded.config.context)
    raise typer.Exit(run_to_end(hooks, interactive(headless), lambda: run_agent(loaded, hooks)))


@app.command(short_help="Continue a stopped run: Ctrl+C, max turns, done, idle, error, crash.")
def resume(
    config: Optional[Path] = ConfigOption,
    run_id: Optional[str] = typer.Option(None, "--run", help="The run to resume "
                                         "(default: the latest)."),
    message: str = typer.Option("", "--message", "-m", help="A new instruction for the agent "
                                "(for a run that is complete or paused idle)."),
    max_turns: Optional[int] = typer.Option(None, min=0, help="N more model turns from here "
                                            "(0 = no limit); default: the limit it had."),
    workspace: Optional[Path] = typer.Option(None, help="The agent's workspace directory "
                                             "(default: the one the run started with)."),
    model: Optional[str] = typer.Option(None, help="Model name (default: the run's)."),
    base_url: Optional[str] = typer.Option(None, help="Server root (default: the run's)."),
    headless: bool = HeadlessOption,
) -> None:
    """Continue a stopped run from its log, with the flags it started with unless given
    others: after Ctrl+C or SIGTERM, max turns (--max-turns N for N more), task_complete or
    an idle pause (--message "..." for a new instruction), an error or a crash."""
    from ouroboros.continuation import plan_resume, refusal
    from ouroboros.runner import run_agent

    given = flags(**{"agent.workspace": workspace, "model.name": model,
                     "model.base_url": base_url})
    found = load_project(config)
    plan = guarded(lambda: plan_resume(found.state_dir, run_id, given, max_turns))
    loaded = load_project(config, plan.flags)
    why_not = refusal(plan.run_id, plan.end, total_turns=plan.total_turns,
                      max_turns=loaded.config.agent.max_turns, message=message)
    if why_not is not None:
        raise fail(UsageError(why_not))
    hooks = make_hooks(headless, loaded.config.context)
    raise typer.Exit(run_to_end(hooks, interactive(headless), lambda: run_agent(
        loaded, hooks, resume=True, run_id=plan.run_id, message=message)))


def run_to_end(hooks: RunHooks, live: bool, start: Callable[[], Coroutine[Any, Any, int]]
               ) -> int:
    """Run the harness; its exit code. A stop signal after the run is over is ignored, so
    the code is the one logged. On a terminal, how to continue is said below the dashboard."""
    import asyncio

    from ouroboros.stopping import ignore_late_signals

    ended: list[dict[str, Any]] = []
    shown = hooks.on_event

    def on_event(event: dict[str, Any]) -> None:
        if shown is not None:
            shown(event)
        if event["type"] == "run_end":
            ended.append(event)

    if live:
        hooks.on_event = on_event
    ignore_late_signals()
    code = guarded(lambda: asyncio.run(start()))
    for end in ended:
        summary = f"task complete: {end['summary']}\n" if end.get("summary") else ""
        typer.echo(f"{summary}{end['next']}" if end.get("next") else summary, err=True)
    return code


@app.command(short_help="Create a project: ouroboros.toml, SYSTEM_PROMPT.md, workspace/.")
def init(
    directory: Path = typer.Argument(Path("."), help="The project directory to create.",
                                     file_okay=False),
) -> None:
    """Create a project: ouroboros.toml, SYSTEM_PROMPT.md and an empty workspace/."""
    from ouroboros.scaffold import create_project

    created = guarded(lambda: create_project(directory))
    for path in created:
        typer.echo(f"created {path}{'/' if path.is_dir() else ''}")
    go = "ouroboros run" if directory.resolve() == Path.cwd().resolve() \
        else f"cd {directory} && ouroboros run"
    typer.echo(f"next: write the agent's mission in SYSTEM_PROMPT.md, start Ollama, then\n"
               f"  {go}\nor try it first without a model server:\n  ouroboros demo")


config_app = typer.Typer(help="Show or change the configuration.", no_args_is_help=True)
app.add_typer(config_app, name="config")


@config_app.command("show", short_help="Every key, its value and where it came from.")
def config_show(
    config: Optional[Path] = ConfigOption,
    full: bool = typer.Option(False, "--full", help="Every item of long lists "
                              "(safety.blocked_patterns), not just the first ones."),
) -> None:
    """Every key, its effective value, where it came from, and what differs from the
    default."""
    from rich.console import Console

    from ouroboros.config import load_config
    from ouroboros.ui.config_view import config_table

    loaded = guarded(lambda: load_config(config, {}))
    Console().print(config_table(loaded, full=full))


# ignore_unknown_options: a VALUE such as -1 or -x is the value, not an unknown option
@config_app.command("set", short_help="Change one key in ouroboros.toml, validated.",
                    context_settings={"ignore_unknown_options": True})
def config_set(
    key: str = typer.Argument(..., help="A dotted key, e.g. context.soft_threshold_pct."),
    value: str = typer.Argument(..., help="A TOML value (0.6, true, \"text\") or plain text."),
    config: Optional[Path] = ConfigOption,
) -> None:
    """Set one key in ouroboros.toml, validated first; every comment and other line of the
    file is kept (a commented-out default is uncommented where it is)."""
    from ouroboros.config import load_config, set_config_value
    from ouroboros.reload import effect_note, live_holder
    from ouroboros.ui.config_view import override_note, toml_value
    from ouroboros.ui.status import run_status

    path = guarded(lambda: project_file(config))
    written = guarded(lambda: set_config_value(path, key, value))
    shown = path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path
    typer.echo(f"{key} = {toml_value(written)} (in {shown})")
    loaded = guarded(lambda: load_config(path, {}))
    note = override_note(loaded, key)
    if note is not None:
        typer.echo(note)
    if live_holder(loaded.state_dir) is not None:
        found = guarded(lambda: run_status(loaded.state_dir))
        where = (found.state.session, found.state.turn) if found is not None else (None, None)
        typer.echo(effect_note(key, *where))


@app.command(short_help="Make the running run read its config now (a new session).")
def reload(config: Optional[Path] = ConfigOption) -> None:
    """Ask the running run to end its session early (after a wind-down), so the next session
    starts now with the config as it is on disk (the same as SIGHUP to the harness)."""
    import socket

    from ouroboros.reload import request_reload

    loaded = load_project(config)
    holder = guarded(lambda: request_reload(loaded.state_dir, socket.gethostname()))
    typer.echo(f"asked run {holder.get('run_id')} (pid {holder['pid']}) to end its session: "
               "the agent saves its state, then the next session reads the config again")


@app.command(short_help="The current or last run: where it is, how full its context.")
def status(config: Optional[Path] = ConfigOption) -> None:
    """The current or last run: is it running, where it is, how full its context is."""
    from datetime import datetime, timezone

    from rich.console import Console

    from ouroboros.ui.status import run_status, status_view

    loaded = load_project(config)
    found = guarded(lambda: run_status(loaded.state_dir))
    if found is None:
        typer.echo(f"no runs yet in {loaded.state_dir}")
        return
    Console().print(status_view(found, now=datetime.now(timezone.utc)))


@app.command(short_help="The project's runs: state, sessions, turns, last event.")
def runs(config: Optional[Path] = ConfigOption) -> None:
    """The project's runs, newest last: started, state, sessions, turns, last event."""
    from datetime import datetime, timezone

    from rich.console import Console

    from ouroboros.ui.runs import project_runs, runs_view

    loaded = load_project(config)
    found = guarded(lambda: project_runs(loaded.state_dir))
    if not found:
        typer.echo(f"no runs yet in {loaded.state_dir}")
        return
    Console().print(runs_view(found, now=datetime.now(timezone.utc)))


@app.command(short_help="Per-session numbers and a chart of context use.")
def stats(run_id: Optional[str] = RunIdArgument,
          config: Optional[Path] = ConfigOption,
          all_sessions: bool = typer.Option(False, "--all", help="List every session (a "
                                            "long run shows its first and last few).")) -> None:
    """Per-session numbers and a chart of context use over the run's turns."""
    from rich.console import Console

    from ouroboros.events import read_events
    from ouroboros.ui.stats import run_stats, stats_view

    loaded = load_project(config)
    events = guarded(lambda: read_events(run_log(loaded, run_id)).events)
    context = loaded.config.context
    Console().print(stats_view(run_stats(events, context.soft_threshold_pct,
                                         context.hard_threshold_pct),
                               all_sessions=all_sessions))


@app.command()
def logs(
    run_id: Optional[str] = RunIdArgument,
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing new events until "
                                "the run ends (or Ctrl+C)."),
    types: Optional[list[str]] = typer.Option(None, "--type", "-t", help="Only events of this "
                                              "type (repeatable), e.g. --type tool_call."),
    config: Optional[Path] = ConfigOption,
) -> None:
    """A run's events, one readable line each."""
    from ouroboros.events import read_events
    from ouroboros.ui.follow import follow_events
    from ouroboros.ui.plain import format_any, listed, select_types

    loaded = load_project(config)
    wanted = guarded(lambda: select_types(types or []))
    path = guarded(lambda: run_log(loaded, run_id))
    events = follow_events(path) if follow else guarded(lambda: read_events(path).events)
    try:
        for event in events:
            if listed(event["type"], wanted):
                typer.echo(format_any(event))
    except KeyboardInterrupt:
        pass


@app.command()
def watch(run_id: Optional[str] = RunIdArgument,
          config: Optional[Path] = ConfigOption) -> None:
    """The live dashboard of a run going on in another terminal."""
    from ouroboros.ui.dashboard import DashboardState
    from ouroboros.ui.live import watch as watch_log

    loaded = load_project(config)
    path = guarded(lambda: run_log(loaded, run_id))
    context = loaded.config.context
    state = DashboardState(soft=context.soft_threshold_pct, hard=context.hard_threshold_pct)
    try:
        watch_log(path, state)
    except KeyboardInterrupt:
        pass


@app.command(short_help="See a scripted agent at work; no model server needed.")
def demo(
    headless: bool = HeadlessOption,
    keep: Optional[Path] = typer.Option(None, "--keep", metavar="DIR", file_okay=False,
                                        help="Make the demo project in DIR and keep it "
                                        "(default: a temporary directory, removed at the "
                                        "end)."),
    parts: int = typer.Option(12, min=1, help="Data files the demo agent must work through."),
    speed: Optional[str] = typer.Option(None, "--speed", metavar="N|max", help="Pace: 2 is "
                                        "twice as fast, max runs at once (default: 1 on a "
                                        "terminal, max with --headless or a pipe)."),
) -> None:
    """Watch the harness work without a model server: a scripted agent does a long task in
    a small window, through masking, wind-down and restarts, each explained as it happens."""
    from ouroboros.demo import parse_speed, show_demo
    from ouroboros.ui.captions import Voice

    pace = guarded(lambda: parse_speed(speed, interactive=interactive(headless)))
    directory = guarded(lambda: demo_directory(keep))
    if interactive(headless):  # the dashboard and the captions above it share one console
        from ouroboros.ui.live import live_hooks

        voice = Voice.for_terminal()
        hooks = live_hooks(console=voice.console)
    else:
        voice, hooks = Voice(styled=False), make_hooks(headless=True)
    code = guarded(lambda: show_demo(hooks, directory, voice, parts=parts, speed=pace,
                                     keep=keep is not None))
    raise typer.Exit(code)


def demo_directory(keep: Path | None) -> Path:
    """Where the demo project goes: DIR, unless it holds a project other than a demo's."""
    import tempfile

    from ouroboros.demo import DEMO_PROMPT

    if keep is None:
        return Path(tempfile.mkdtemp(prefix="ouroboros-demo-"))
    prompt = keep / "SYSTEM_PROMPT.md"
    if (keep / "ouroboros.toml").exists() and not (
            prompt.is_file() and prompt.read_text(encoding="utf-8") == DEMO_PROMPT):
        raise UsageError(f"{keep} holds a project that is not a demo; pick another directory")
    return keep


def run_log(loaded: LoadedConfig, run_id: str | None) -> Path:
    from ouroboros.events import EVENTS_FILE, find_run

    return find_run(loaded.state_dir, run_id) / EVENTS_FILE


def main() -> None:
    app()
