"""The terminal view of a run: assistant text as it streams, and a line per event."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from ouroboros.runner import RunHooks
from ouroboros.ui.plain import format_line


def live_hooks(console: Console | None = None) -> RunHooks:
    console = console or Console()
    streaming = {"open": False}

    def on_text(piece: str) -> None:
        console.print(piece, end="", style="cyan", markup=False, highlight=False)
        streaming["open"] = True

    def on_event(event: dict[str, Any]) -> None:
        if streaming["open"]:
            console.print()
            streaming["open"] = False
        if event["type"] == "assistant":
            return  # its text was shown as it streamed
        line = format_line(event)
        if line is not None:
            console.print(line, markup=False, highlight=False)

    def confirm_restart(reason: str) -> bool:
        answer = console.input(f"Context full ({reason}). Restart the session? [Y/n] ")
        return answer.strip().lower() in ("", "y", "yes")

    return RunHooks(on_event=on_event, on_text=on_text, confirm_restart=confirm_restart)
