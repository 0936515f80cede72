"""The task_complete tool: the agent says the task is done, and the run ends.

The tool itself only checks the summary and marks its result; the session sees the mark
(`COMPLETE_KEY` in the result's meta), finishes the turn's other calls and ends the run with
reason `task_complete` and the summary. `ouroboros resume --message "..."` gives the agent
more to do.
"""

from __future__ import annotations

from pydantic import ConfigDict

from ouroboros.protocols import ToolResult
from ouroboros.tools.arguments import ModelTool, ToolArguments

COMPLETE_KEY = "task_complete"  # in ToolResult.meta: the summary, when the call ends the run
MAX_SUMMARY_CHARS = 2000


class CompleteArguments(ToolArguments):
    """task_complete's argument: what was done. Short on purpose, without a description or
    `additionalProperties`: its tokens are in every prompt, and small windows feel each one.
    Other arguments are ignored: refusing them would only delay the end of a finished task."""

    model_config = ConfigDict(extra="ignore")

    summary: str


class TaskComplete(ModelTool[CompleteArguments]):
    """End the run: the task given in the instructions is done."""

    name = "task_complete"
    Arguments = CompleteArguments
    subject = "summary"
    brief = "Ends the run: call once the whole task is done and checked."

    def description(self) -> str:
        return "Ends the run. Call once the whole task is done and checked."

    async def call(self, arguments: CompleteArguments) -> ToolResult:
        summary = " ".join(arguments.summary.split())
        if not summary:
            return ToolResult(
                "error: task_complete needs a summary of what was done; call it again with one",
                ok=False,
            )
        if len(summary) > MAX_SUMMARY_CHARS:
            summary = summary[: MAX_SUMMARY_CHARS - 3] + "..."
        return ToolResult(
            "The task is recorded as complete; the run ends after this turn.",
            meta={COMPLETE_KEY: summary},
        )
