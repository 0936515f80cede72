"""The agent's tools and the Toolbox that runs the model's tool calls with them.

    toolbox = Toolbox(default_tools(workspace, shell_timeout_secs=120, max_output_bytes=50_000,
                                    blocked_patterns=[], secret_env_names=["OPENAI_API_KEY"],
                                    on_security=print))
    result = await toolbox.run(call)  # never raises: every failure is an "error: ..." result
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ouroboros.protocols import Tool, ToolCall, ToolResult
from ouroboros.sandbox import Sandbox
from ouroboros.tools.complete import COMPLETE_KEY, TaskComplete
from ouroboros.tools.files import FileRead, FileWrite, ListDir
from ouroboros.tools.safety import PathEscape, SecurityHook
from ouroboros.tools.shell import ShellExec

__all__ = [
    "ArgumentError",
    "FileRead",
    "FileWrite",
    "ListDir",
    "PathEscape",
    "COMPLETE_KEY",
    "SecurityHook",
    "ShellExec",
    "TaskComplete",
    "Toolbox",
    "checked_arguments",
    "default_tools",
    "parse_arguments",
]

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
    "null": (type(None),),
}


class ArgumentError(ValueError):
    """Arguments a tool cannot take; the message tells the model what to send instead."""


def json_type(value: Any) -> str:
    """The JSON Schema type name of a parsed JSON value."""
    if isinstance(value, bool):
        return "boolean"
    for name in ("integer", "number", "string", "array", "object", "null"):
        if isinstance(value, _JSON_TYPES[name]):
            return name
    return type(value).__name__


def _expected_types(spec: dict[str, Any]) -> list[str]:
    declared = spec.get("type", [])
    return [declared] if isinstance(declared, str) else list(declared)


def _allows(spec: dict[str, Any], value: Any) -> bool:
    expected = _expected_types(spec)
    actual = json_type(value)
    return not expected or actual in expected or (actual == "integer" and "number" in expected)


def _describe(spec: dict[str, Any]) -> str:
    return " or ".join(_expected_types(spec)) or "any type"


def parse_arguments(text: str) -> dict[str, Any]:
    """The JSON object the model sent as a call's arguments; empty text means no arguments.

        parse_arguments('{"path": "a.md"}')  # -> {"path": "a.md"}
    """
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise ArgumentError(
            f"the arguments are not valid JSON ({error}); send them as one JSON object, "
            'e.g. {"name": "value"}'
        ) from error
    if not isinstance(value, dict):
        raise ArgumentError(f"the arguments must be a JSON object, not {json_type(value)}")
    return value


def checked_arguments(arguments: dict[str, Any], parameters: dict[str, Any]) -> dict[str, Any]:
    """`arguments` checked against a tool's JSON schema: required names, simple types and, when
    the schema forbids them, unknown names. A null optional argument counts as omitted, as
    models often send null for what they mean to leave out."""
    properties: dict[str, Any] = parameters.get("properties", {})
    required: list[str] = parameters.get("required", [])
    present = {
        name: value
        for name, value in arguments.items()
        if value is not None or name in required or _allows(properties.get(name, {}), None)
    }
    missing = [name for name in required if name not in present]
    if missing:
        listed = ", ".join(f"'{name}' ({_describe(properties.get(name, {}))})" for name in missing)
        raise ArgumentError(f"missing required argument {listed}")
    if parameters.get("additionalProperties") is False:
        unknown = [name for name in present if name not in properties]
        if unknown:
            raise ArgumentError(
                f"unknown argument '{unknown[0]}'; the arguments are: {', '.join(properties)}"
            )
    for name, value in present.items():
        spec = properties.get(name, {})
        if not _allows(spec, value):
            raise ArgumentError(
                f"argument '{name}' must be {_describe(spec)}, got {json_type(value)}"
            )
    return present


def _failure(message: str, tool: str) -> ToolResult:
    return ToolResult(f"error: {message}", ok=False, meta={"tool": tool})


class Toolbox:
    """The tools the model may call, by name.

    toolbox = Toolbox([FileRead(...), ShellExec(...)]); await toolbox.run(call)
    """

    def __init__(self, tools: Iterable[Tool] = (),
                 redact: Callable[[str], str] | None = None) -> None:
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

    async def run(self, call: ToolCall) -> ToolResult:
        """Run one tool call. Unknown tools, bad arguments and exceptions inside the tool all
        come back as results starting with `error:`; only cancellation propagates. Known
        secrets in the result are redacted."""
        result = await self._run(call)
        if self.redact is None:
            return result
        return ToolResult(self.redact(result.content), result.ok, result.meta)

    async def _run(self, call: ToolCall) -> ToolResult:
        tool = self._tools.get(call.name)
        if tool is None:
            available = ", ".join(self.names) or "none"
            return _failure(f"unknown tool '{call.name}'; available tools: {available}", call.name)
        try:
            parameters = tool.schema()["function"].get("parameters", {})
            return await tool.run(checked_arguments(parse_arguments(call.arguments), parameters))
        except ArgumentError as error:
            return _failure(f"{call.name}: {error}", call.name)
        except Exception as error:
            return _failure(f"{call.name} failed: {type(error).__name__}: {error}", call.name)


def default_tools(
    workspace: Path,
    *,
    shell_timeout_secs: float,
    max_output_bytes: int,
    blocked_patterns: list[str],
    secret_env_names: list[str],
    on_security: SecurityHook,
    sandbox: Sandbox | None = None,
) -> list[Tool]:
    """file_read, file_write, shell_exec and list_dir, in that order, all in `workspace`;
    shell commands run in `sandbox` (None: the best this machine offers)."""
    return [
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
