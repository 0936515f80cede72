"""`ouroboros demo`: a scripted agent at work in a small window, no model server needed."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ouroboros.cli.common import HeadlessOption, app, guarded
from ouroboros.cli.running import interactive, make_hooks
from ouroboros.errors import UsageError


@app.command(short_help="See a scripted agent at work; no model server needed.")
def demo(
    headless: bool = HeadlessOption,
    keep: Optional[Path] = typer.Option(
        None,
        "--keep",
        metavar="DIR",
        file_okay=False,
        help="Make the demo project in DIR and keep it "
        "(default: a temporary directory, removed at the "
        "end).",
    ),
    parts: int = typer.Option(
        12, min=1, metavar="N", help="Data files the demo agent must work through."
    ),
    speed: Optional[str] = typer.Option(
        None,
        "--speed",
        metavar="N|max",
        help="Pace: 2 is "
        "twice as fast, max runs at once (default: 1 on a "
        "terminal, max with --headless or a pipe).",
    ),
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
    code = guarded(
        lambda: show_demo(hooks, directory, voice, parts=parts, speed=pace, keep=keep is not None)
    )
    raise typer.Exit(code)


def demo_directory(keep: Path | None) -> Path:
    """Where the demo project goes: DIR, unless it holds a project other than a demo's."""
    import tempfile

    from ouroboros.cli.scaffold import PROMPT_FILENAME
    from ouroboros.config import CONFIG_FILENAME
    from ouroboros.demo import DEMO_PROMPT

    if keep is None:
        return Path(tempfile.mkdtemp(prefix="ouroboros-demo-"))
    prompt = keep / PROMPT_FILENAME
    if (keep / CONFIG_FILENAME).exists() and not (
        prompt.is_file() and prompt.read_text(encoding="utf-8") == DEMO_PROMPT
    ):
        raise UsageError(f"{keep} holds a project that is not a demo; pick another directory")
    return keep
