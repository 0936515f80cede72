"""Starting and continuing runs: `ouroboros run`, `resume` and `init`, and how a run is shown
(the live dashboard on a terminal, else plain lines)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Coroutine, Optional

import typer

from ouroboros.cli.common import (
    ConfigOption,
    HeadlessOption,
    JsonOption,
    MetricsPortOption,
    app,
    fail,
    guarded,
    load_project,
    run_path,
)
from ouroboros.errors import NothingToResume, StillPaused, UsageError

if TYPE_CHECKING:
    from ouroboros.config import ContextConfig, LoadedConfig
    from ouroboros.metrics import MetricsServer
    from ouroboros.protocols import RunHooks


def interactive(headless: bool, json_lines: bool = False) -> bool:
    """Whether to draw the live view: not asked for plain lines or JSON, and stdout is a
    terminal."""
    return not headless and not json_lines and sys.stdout.isatty()


def make_hooks(
    headless: bool,
    context: ContextConfig | None = None,
    json_lines: bool = False,
    past: Path | None = None,
) -> RunHooks:
    """The live dashboard on a terminal (with the thresholds to mark on its gauge, and for a
    resume the run's log so far), else one plain line per event, or with `json_lines` one
    JSON record per event."""
    from ouroboros.protocols import RunHooks
    from ouroboros.ui.plain import plain_printer

    if json_lines:
        from ouroboros.ui.records import json_printer

        hooks = RunHooks()
        hooks.on_event = json_printer(on_closed=lambda: stop_for_closed_output(hooks))
        return hooks
    if interactive(headless):
        from ouroboros.ui.live import live_hooks

        if context is None:
            return live_hooks(past=past)
        return live_hooks(context.soft_threshold_pct, context.hard_threshold_pct, past=past)
    hooks = RunHooks()
    hooks.on_event = plain_printer(on_closed=lambda: stop_for_closed_output(hooks))
    return hooks


def stop_for_closed_output(hooks: RunHooks) -> None:
    """Output into a closed pipe (`ouroboros run | head`) stops the run as a stop signal
    does, delivered the same way (from the event loop, not inside the event being printed):
    the stop is recorded, exit 141 (128 + SIGPIPE, as a shell reports it), and the run can be
    resumed."""
    import asyncio

    try:
        asyncio.get_running_loop().call_soon(hooks.stop.signal, "SIGPIPE")
    except RuntimeError:  # no run going on
        hooks.stop.signal("SIGPIPE")


def flags(**values: Any) -> dict[str, Any]:
    """The flags given on the command line: those whose value is not None."""
    return {key: value for key, value in values.items() if value is not None}


@app.command(short_help="Start a new run of the agent (--continue: go on with the last one).")
def run(
    config: Optional[Path] = ConfigOption,
    workspace: Optional[Path] = typer.Option(
        None, metavar="DIR", help="The agent's workspace directory."
    ),
    model: Optional[str] = typer.Option(None, metavar="NAME", help="Model name, e.g. llama3.2."),
    base_url: Optional[str] = typer.Option(
        None,
        metavar="URL",
        help="Server root, e.g. http://127.0.0.1:11434 (or host:port, as OLLAMA_HOST).",
    ),
    max_turns: Optional[int] = typer.Option(
        None, min=0, metavar="N", help="Stop after N model turns in total (0 = no limit)."
    ),
    keep_going: bool = typer.Option(
        False,
        "--continue",
        help="Continue the project's latest "
        "run if it can go on, else start one: the one command for "
        "a systemd unit or a pod.",
    ),
    run_id: Optional[str] = typer.Option(
        None,
        "--run",
        metavar="RUN_ID",
        help="With --continue: the run to continue (default: the latest).",
    ),
    headless: bool = HeadlessOption,
    json_lines: bool = JsonOption,
    metrics_port: Optional[int] = MetricsPortOption,
) -> None:
    """Start a new run of the agent described by ouroboros.toml and SYSTEM_PROMPT.md; with
    --continue, go on with the latest run instead (a complete one is left complete)."""
    from ouroboros.loop.runner import run_agent

    if run_id is not None and not keep_going:
        raise fail(
            UsageError(
                "--run names a run to continue: add --continue, or use `ouroboros resume --run ID`"
            )
        )
    overrides = flags(
        **{
            "agent.workspace": workspace,
            "model.name": model,
            "model.base_url": base_url,
            "agent.max_turns": max_turns,
            "metrics.port": metrics_port,
        }
    )
    if keep_going:
        continue_run(config, overrides, run_id, headless, json_lines)
    loaded = owned(load_project(config, overrides))
    hooks = make_hooks(headless, loaded.config.context, json_lines)
    raise typer.Exit(
        run_to_end(
            hooks,
            interactive(headless, json_lines) or json_lines,
            lambda: run_agent(loaded, hooks),
            loaded,
        )
    )


def owned(loaded: LoadedConfig) -> LoadedConfig:
    """`loaded`, unless its state dir belongs to another project: then one line, exit 2."""
    from ouroboros.store.owner import check_state_dir

    guarded(lambda: check_state_dir(loaded.state_dir, loaded.root))
    return loaded


def continue_run(
    config: Path | None,
    overrides: dict[str, Any],
    run_id: str | None,
    headless: bool,
    json_lines: bool,
) -> None:
    """`run --continue`: resume the latest run (or `run_id`) with the flags it remembers under
    those given now; return (so a new run starts) when the project has none. A complete run,
    or one out of turns, is left as it is, and the line says so."""
    from ouroboros.loop.continuation import continue_plan

    found = owned(load_project(config, overrides))
    plan = guarded(lambda: continue_plan(found.state_dir, run_id, overrides))
    if plan is None:
        return
    loaded = load_project(config, plan.flags)
    agent = loaded.config.agent
    stay = guarded(lambda: plan.stays(agent.max_turns, agent.max_tokens, agent.max_wall_secs))
    if stay is not None:
        typer.echo(stay.message, err=True)
        raise typer.Exit(stay.exit_code)
    raise typer.Exit(resume_to_end(loaded, plan.run_id, headless, json_lines))


@app.command(short_help="Continue a stopped run: Ctrl+C, max turns, done, idle, error, crash.")
def resume(
    config: Optional[Path] = ConfigOption,
    run_id: Optional[str] = typer.Option(
        None, "--run", metavar="RUN_ID", help="The run to resume (default: the latest)."
    ),
    message: str = typer.Option(
        "",
        "--message",
        "-m",
        metavar="TEXT",
        help="A new instruction for the agent (for a run that is complete or paused idle).",
    ),
    max_turns: Optional[int] = typer.Option(
        None,
        min=0,
        metavar="N",
        help="N more model turns from here (0 = no limit); default: the limit it had.",
    ),
    workspace: Optional[Path] = typer.Option(
        None,
        metavar="DIR",
        help="The agent's workspace directory (default: the one the run started with).",
    ),
    model: Optional[str] = typer.Option(
        None, metavar="NAME", help="Model name (default: the run's)."
    ),
    base_url: Optional[str] = typer.Option(
        None, metavar="URL", help="Server root (default: the run's)."
    ),
    headless: bool = HeadlessOption,
    json_lines: bool = JsonOption,
    metrics_port: Optional[int] = MetricsPortOption,
) -> None:
    """Continue a stopped run from its log, with the flags it started with unless given
    others: after Ctrl+C or SIGTERM, max turns (--max-turns N for N more), task_complete or
    an idle pause (--message "..." for a new instruction), an error or a crash."""
    from ouroboros.loop.continuation import TURN_LIMIT, plan_resume, refusal
    from ouroboros.store.log import list_runs, runs_dir

    given = flags(
        **{
            "agent.workspace": workspace,
            "model.name": model,
            "model.base_url": base_url,
            "metrics.port": metrics_port,
        }
    )
    found = owned(load_project(config, given))
    if run_id is None and not list_runs(found.state_dir):
        raise fail(
            NothingToResume(
                f"no runs in {runs_dir(found.state_dir)} to resume; start "
                "one with `ouroboros run` (or `ouroboros run --continue`)"
            )
        )
    plan = guarded(lambda: plan_resume(found.state_dir, run_id, given, max_turns))
    loaded = load_project(config, plan.flags)
    limit = loaded.config.agent.max_turns
    limit_from = (
        f"--max-turns {limit}, given to `ouroboros run`"
        if TURN_LIMIT in plan.flags
        else f"agent.max_turns = {limit} {loaded.origin(TURN_LIMIT)}"
    )
    why_not = refusal(
        plan.run_id,
        plan.end,
        total_turns=plan.total_turns,
        max_turns=limit,
        message=message,
        limit_from=limit_from,
    )
    if why_not is not None:
        complete = plan.end is not None and plan.end.reason == "task_complete"
        raise fail(
            NothingToResume(why_not) if complete and not message.strip() else StillPaused(why_not)
        )
    raise typer.Exit(resume_to_end(loaded, plan.run_id, headless, json_lines, message))


def resume_to_end(
    loaded: LoadedConfig, run_id: str, headless: bool, json_lines: bool, message: str = ""
) -> int:
    """Resume run `run_id` and run it to its end, shown as the flags say (the dashboard
    caught up with the run so far); its exit code."""
    from ouroboros.loop.runner import run_agent

    past = guarded(lambda: run_path(loaded, run_id))
    hooks = make_hooks(headless, loaded.config.context, json_lines, past)
    return run_to_end(
        hooks,
        interactive(headless, json_lines) or json_lines,
        lambda: run_agent(loaded, hooks, resume=True, run_id=run_id, message=message),
        loaded,
    )


def run_to_end(
    hooks: RunHooks,
    live: bool,
    start: Callable[[], Coroutine[Any, Any, int]],
    loaded: LoadedConfig | None = None,
) -> int:
    """Run the harness; its exit code. A stop signal after the run is over is ignored, so
    the code is the one logged. With `live` (the dashboard, or JSON lines on stdout), how the
    run ended and how to continue it are said on stderr.
    With `loaded`, its [metrics] port (when set) serves the run's metrics meanwhile."""
    import asyncio

    from ouroboros.loop.stopping import ignore_late_signals
    from ouroboros.store.events import EventBase, RunEnd

    ended: list[RunEnd] = []
    shown = hooks.on_event

    def on_event(event: EventBase) -> None:
        if shown is not None:
            shown(event)
        if isinstance(event, RunEnd):
            ended.append(event)

    if live:
        hooks.on_event = on_event
    ignore_late_signals()
    metrics = serve_metrics(loaded, hooks) if loaded is not None else None
    try:
        code = guarded(lambda: asyncio.run(start()))
    finally:
        if metrics is not None:
            metrics.close()
    for end in ended:
        summary = f"task complete: {end.summary}\n" if end.summary else ""
        typer.echo(terminal_lines(f"{summary}{end.next}" if end.next else summary), err=True)
    return code


def terminal_lines(text: str) -> str:
    """`text` wrapped at spaces to the width of the terminal stderr is (so a command in it is
    never split inside a word); as it is when stderr is not a terminal."""
    import shutil
    import sys
    import textwrap

    if not sys.stderr.isatty():
        return text
    width = shutil.get_terminal_size().columns
    return "\n".join(
        textwrap.fill(line, width, break_long_words=False, break_on_hyphens=False)
        for line in text.split("\n")
    )


def serve_metrics(loaded: LoadedConfig, hooks: RunHooks) -> MetricsServer | None:
    """Serve the run's metrics when metrics.port is set, fed by the run's events; a port in
    use is one line and exit 2, before the run starts."""
    settings = loaded.config.metrics
    if not settings.port:
        return None
    from ouroboros.metrics import also
    from ouroboros.metrics import serve_metrics as serve

    server = guarded(lambda: serve(settings.port, settings.address))
    hooks.on_event = also(hooks.on_event, server.on_event)
    return server


@app.command(short_help="Create a project: ouroboros.toml, SYSTEM_PROMPT.md, workspace/.")
def init(
    directory: Optional[Path] = typer.Argument(
        None,
        metavar="DIR",
        show_default=False,
        help="The project directory to create (default: here).",
        file_okay=False,
    ),
    missing: bool = typer.Option(
        False,
        "--missing",
        help="Add only what an existing project "
        "lacks (its config, the system prompt and workspace it "
        "names), changing nothing that is there.",
    ),
    config: Optional[Path] = typer.Option(
        None,
        "--config",
        "-c",
        metavar="PATH",
        help="With --missing: the "
        "project's config file (default: DIR/ouroboros.toml, "
        "else the nearest one).",
    ),
) -> None:
    """Create a project: ouroboros.toml, SYSTEM_PROMPT.md and an empty workspace/; with
    --missing, add only what an existing project lacks."""
    from ouroboros.cli.scaffold import complete_project, create_project

    if config is not None and not missing:
        raise fail(UsageError("--config goes with --missing (a new project is made in DIR)"))
    if missing:
        path = config or (
            directory / "ouroboros.toml" if directory is not None else missing_target()
        )
        created = guarded(lambda: complete_project(path))
        for made in created:
            typer.echo(f"created {made}{'/' if made.is_dir() else ''}")
        if not created:
            typer.echo(
                f"nothing is missing: {path}, its system prompt and its workspace are all there"
            )
        return
    directory = directory or Path(".")
    created = guarded(lambda: create_project(directory))
    for made in created:
        typer.echo(f"created {made}{'/' if made.is_dir() else ''}")
    go = (
        "ouroboros run"
        if directory.resolve() == Path.cwd().resolve()
        else f"cd {directory} && ouroboros run"
    )
    typer.echo(
        f"next: write the agent's mission in SYSTEM_PROMPT.md, start Ollama, then\n"
        f"  {go}\nor try it first without a model server:\n  ouroboros demo"
    )


def missing_target() -> Path:
    """The config `init --missing` completes: the nearest project's, else ./ouroboros.toml."""
    from ouroboros.config import CONFIG_FILENAME, find_project

    return find_project(Path.cwd()) or Path(CONFIG_FILENAME)
