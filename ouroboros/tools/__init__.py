"""The agent's tools and the Toolbox that runs the model's tool calls with them.

    toolbox = Toolbox(default_tools(workspace, shell_timeout_secs=120, max_output_bytes=50_000,
                                    blocked_patterns=[], secret_env_names=["OPENAI_API_KEY"],
                                    on_security=print, recall=Recall(run_dir / OBSERVATIONS_DIR),
                                    allow_complete=True))
    result = await toolbox.run(call)  # never raises: every failure is an "error: ..." result

May import `sandbox` (where shell commands run), `store` (files replaced whole, full results
for recall) and the base modules.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ouroboros.protocols import Tool, ToolCall, ToolResult
from ouroboros.sandbox.policy import Sandbox
from ouroboros.tools.arguments import (
    ArgumentError,
    ModelTool,
    ToolArguments,
    argument_failure,
    brief_schema,
    parse_arguments,
)
from ouroboros.tools.complete import COMPLETE_KEY, TaskComplete
from ouroboros.tools.files import FileRead, FileWrite, ListDir
from ouroboros.tools.recall import RecallTool
from ouroboros.tools.safety import PathEscape, SecurityHook
from ouroboros.tools.shell import ShellExec

__all__ = [
    "ArgumentError",
    "FileRead",
    "FileWrite",
    "ListDir",
    "ModelTool",
    "PathEscape",
    "Recall",
    "RecallTool",
    "COMPLETE_KEY",
    "SecurityHook",
    "ShellExec",
    "TaskComplete",
    "ToolArguments",
    "Toolbox",
    "default_tools",
    "parse_arguments",
]


CUT_OFF_SHOWN_CHARS = 200


def cut_off_result(call: ToolCall) -> ToolResult:
    """The answer to a call the reply's token limit cut before its arguments were whole: it
    was not run, and what arrived is shown (its start) so the agent can send it again."""
    sent = call.arguments[:CUT_OFF_SHOWN_CHARS] + (
        "..." if len(call.arguments) > CUT_OFF_SHOWN_CHARS else ""
    )
    return ToolResult(
        f"error: the call to {call.name} was cut off: the reply reached its token limit "
        f"(max_tokens) before the arguments were complete, so it was not run. What arrived: "
        f"{sent!r}. Send the call again, shorter (write a long file in several parts).",
        ok=False,
        meta={"tool": call.name, "cut_off": True},
    )


def _failure(message: str, tool: str) -> ToolResult:
    return ToolResult(f"error: {message}", ok=False, meta={"tool": tool})


class Toolbox:
    """The tools the model may call, by name.

    toolbox = Toolbox([FileRead(...), ShellExec(...)]); await toolbox.run(call)
    """

    def __init__(
        self, tools: Iterable[Tool] = (), redact: Callable[[str], str] | None = None
    ) -> None:
        self._tools: dict[str, Tool] = {}
        self.redact = redact  # applied to every result: no known secret reaches the model
        for tool in tools:
            self.add(tool)

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def add(self, tool: Tool) -> None:
        """Add a tool; a second tool with the same name is a programming error (ValueError)."""
        if tool.name in self._tools:
            raise ValueError(f"a tool named {tool.name!r} is already in the toolbox")
        self._tools[tool.name] = tool

    def schemas(self) -> list[dict[str, Any]]:
        return [tool.schema() for tool in self._tools.values()]

    def brief_schemas(self) -> list[dict[str, Any]]:
        """The tool definitions in their short form (see arguments.brief_schema), for a small
        window."""
        return [
            brief_schema(tool.schema(), getattr(tool, "brief", "")) for tool in self._tools.values()
        ]

    def subject(self, call: ToolCall) -> str:
        """What the call is about, as its tool names it (a path, a command); "" when the tool
        or the argument is unknown."""
        tool = self._tools.get(call.name)
        try:
            arguments = json.loads(call.arguments or "{}")
        except ValueError:
            return ""
        if tool is None or not tool.subject or not isinstance(arguments, dict):
            return ""
        value = arguments.get(tool.subject)
        return value if isinstance(value, str) else ""

    async def run(self, call: ToolCall) -> ToolResult:
        """Run one tool call. Unknown tools, bad arguments and exceptions inside the tool all
        come back as results starting with `error:`; only cancellation propagates. Known
        secrets in the result are redacted. The arguments are parsed here and checked by the
        tool: a ModelTool against its arguments model."""
        result = await self._run(call)
        if self.redact is None:
            return result
        return ToolResult(self.redact(result.content), result.ok, result.meta)

    async def _run(self, call: ToolCall) -> ToolResult:
        if call.cut_off:
            return cut_off_result(call)
        tool = self._tools.get(call.name)
        if tool is None:
            available = ", ".join(self.names) or "none"
            return _failure(f"unknown tool '{call.name}'; available tools: {available}", call.name)
        try:
            return await tool.run(parse_arguments(call.arguments))
        except ArgumentError as error:
            return argument_failure(call.name, error.problems)
        except Exception as error:
            return _failure(f"{call.name} failed: {type(error).__name__}: {error}", call.name)


@dataclass(frozen=True)
class Recall:
    """Where `recall` finds the full text of earlier results, and how much it shows at once."""

    observations: Path
    max_chars: Callable[[], int] = lambda: 8000


def default_tools(
    workspace: Path,
    *,
    shell_timeout_secs: float,
    max_output_bytes: int,
    blocked_patterns: list[str],
    secret_env_names: list[str],
    on_security: SecurityHook,
    sandbox: Sandbox | None = None,
    recall: Recall | None = None,
    allow_complete: bool = False,
) -> list[Tool]:
    """Every tool of a run, in the order the model is shown them: file_read, file_write,
    shell_exec and list_dir, all in `workspace` (shell commands run in `sandbox`; None: the
    best this machine offers), then recall where `recall` says where results are kept, then
    task_complete where the agent may end the run."""
    tools: list[Tool] = [
        FileRead(workspace, max_read_bytes=max_output_bytes, on_security=on_security),
        FileWrite(workspace, on_security=on_security),
        ShellExec(
            workspace,
            timeout_secs=shell_timeout_secs,
            max_output_bytes=max_output_bytes,
            blocked_patterns=blocked_patterns,
            secret_env_names=secret_env_names,
            on_security=on_security,
            sandbox=sandbox,
        ),
        ListDir(workspace, on_security=on_security),
    ]
    if recall is not None:
        tools.append(RecallTool(recall.observations, recall.max_chars))
    if allow_complete:
        tools.append(TaskComplete())
    return tools
