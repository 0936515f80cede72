"""`recall`: bring back a masked or truncated observation by the id its placeholder shows."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from pydantic import ConfigDict, Field

from ouroboros.protocols import ToolResult
from ouroboros.store.observations import ObservationStore
from ouroboros.tools.arguments import ModelTool, ToolArguments


class RecallArguments(ToolArguments):
    """recall's arguments: which observation, and where in it to start. Unknown arguments are
    ignored, as they always were: refusing them would add `additionalProperties` to a schema
    sent with every request, and a wrong offset is already answered with the valid range."""

    model_config = ConfigDict(extra="ignore")

    id: str = Field(description="observation id, e.g. obs-12")
    offset: int = Field(0, description="character offset to start from (default 0)")


class RecallTool(ModelTool[RecallArguments]):
    """Show an observation the context masked or cut, from the file it was saved to.

    RecallTool(run_dir / OBSERVATIONS_DIR, max_chars=lambda: 8000)
    """

    name = "recall"
    Arguments = RecallArguments
    subject = "id"

    def __init__(self, observations_dir: Path, max_chars: Callable[[], int]) -> None:
        self.observations_dir = observations_dir
        self.store = ObservationStore(observations_dir)
        self.max_chars = max_chars

    def description(self) -> str:
        return (
            "Show again the full output of an earlier tool call whose result was masked or "
            "cut to save context. Use the id shown in the placeholder (e.g. obs-12)."
        )

    async def call(self, arguments: RecallArguments) -> ToolResult:
        obs_id = arguments.id.strip()
        offset = arguments.offset
        valid = obs_id.startswith("obs-") and obs_id[4:].isdigit()
        text = self.store.read(obs_id) if valid else None
        if text is None:
            return ToolResult(self.missing(obs_id, valid), ok=False, meta={"id": obs_id})
        text = text.replace("\r\n", "\n").replace("\r", "\n")  # as text mode read it
        if offset < 0 or (offset >= len(text) and text):
            return ToolResult(
                f"error: offset {offset} is outside 0..{len(text) - 1}",
                ok=False,
                meta={"id": obs_id},
            )
        end = offset + self.max_chars()
        body = text[offset:end]
        if end < len(text):
            body += (
                f"\n[showing characters {offset}-{end} of {len(text)}; "
                f'recall(id="{obs_id}", offset={end}) for more]'
            )
        return ToolResult(body, meta={"path": obs_id})

    def missing(self, obs_id: str, valid: bool) -> str:
        """Why there is no text to show: pruned by retention, or no such observation."""
        session = self.store.pruned_after(obs_id) if valid else None
        if session is not None:
            return (
                f"error: {obs_id} was pruned by retention after session {session} (the "
                "run keeps only recent history); run the tool again if you need it"
            )
        return (
            f"error: no observation {obs_id!r}; ids look like obs-12 and appear in masked "
            "placeholders"
        )
