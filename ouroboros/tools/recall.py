"""`recall`: bring back a masked or truncated observation by the id its placeholder shows."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from ouroboros.protocols import ToolResult


class RecallTool:
    name = "recall"

    def __init__(self, observations_dir: Path, max_chars: Callable[[], int]) -> None:
        self.observations_dir = observations_dir
        self.max_chars = max_chars

    def schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": (
                    "Show again the full output of an earlier tool call whose result was masked "
                    "or cut to save context. Use the id shown in the placeholder (e.g. obs-12)."
                ),
                "parameters": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "string", "description": "observation id, e.g. obs-12"},
                        "offset": {"type": "integer",
                                   "description": "character offset to start from (default 0)"},
                    },
                    "required": ["id"],
                },
            },
        }

    async def run(self, arguments: dict[str, Any]) -> ToolResult:
        obs_id = str(arguments["id"]).strip()
        offset = int(arguments.get("offset") or 0)
        path = self.observations_dir / f"{obs_id}.txt"
        if not obs_id.startswith("obs-") or not obs_id[4:].isdigit() or not path.is_file():
            return ToolResult(f"error: no observation {obs_id!r}; ids look like obs-12 and "
                              "appear in masked placeholders", ok=False, meta={"id": obs_id})
        text = path.read_text(encoding="utf-8")
        if offset < 0 or (offset >= len(text) and text):
            return ToolResult(f"error: offset {offset} is outside 0..{len(text) - 1}",
                              ok=False, meta={"id": obs_id})
        end = offset + self.max_chars()
        body = text[offset:end]
        if end < len(text):
            body += (f"\n[showing characters {offset}-{end} of {len(text)}; "
                     f'recall(id="{obs_id}", offset={end}) for more]')
        return ToolResult(body, meta={"path": obs_id})
