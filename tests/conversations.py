"""Conversations to test the context with: messages as a model and its tools write them."""

from __future__ import annotations

import json
from typing import Any

from ouroboros.config import ContextConfig
from ouroboros.protocols import ToolCall, ToolResult
from ouroboros.window import conversation as conv
from ouroboros.window.manager import ContextManager


def tool_call(call_id: str, name: str, **arguments: Any) -> ToolCall:
    """A call as a model makes it: its arguments as JSON."""
    return ToolCall(call_id, name, json.dumps(arguments))


def asked(*calls: ToolCall, text: str = "") -> dict:
    """The assistant message that makes these calls."""
    return {"role": "assistant", "content": text, "tool_calls": [c.to_wire() for c in calls]}


def read_call(call_id: str) -> ToolCall:
    return tool_call(call_id, "file_read", path=f"{call_id}.txt")


def assistant(*call_ids: str, text: str = "") -> dict:
    """An assistant message reading a file for each call id (none: no tool calls)."""
    if not call_ids:
        return {"role": "assistant", "content": text}
    return asked(*map(read_call, call_ids), text=text)


def tool(call_id: str, content: str) -> dict:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def answer(cm: ContextManager, call: ToolCall, result: ToolResult, subject: str = "") -> dict:
    """The message of `call`'s result, registered with the manager as the loop registers it
    (ContextManager.add_result does the same for a Conversation)."""
    obs = conv.describe(call, subject, result, cm.new_observation_id())
    return tool(call.id, cm.admit(obs, result.content))


def manager(limit: int = 10_000, **settings) -> ContextManager:
    return ContextManager.create(limit, "test", 0, ContextConfig(**settings))


def conversation(cm: ContextManager, n_calls: int, size: int = 400) -> list[dict]:
    """system, kickoff, then n turns of one file_read each, registered with the manager (the
    messages only: a Conversation of them, `held`, keeps their sizes as they are measured;
    the kickoff is no note of the harness's there)."""
    messages = [{"role": "system", "content": "mission"}, {"role": "user", "content": "go"}]
    for i in range(n_calls):
        call_id = f"c{i}"
        messages.append(assistant(call_id))
        content = f"KEY: {i:04d}\n" + "x" * size
        result = ToolResult(content, meta={"path": f"data/{i}.txt"})
        messages.append(answer(cm, read_call(call_id), result, f"data/{i}.txt"))
    return messages


def worked(cm: ContextManager, messages: list[dict]) -> list[dict]:
    """`messages` with a command that succeeded before their turns: a session at work."""
    result = ToolResult("[exit code 0]", meta={"command": "true", "exit_code": 0})
    command = tool_call("w0", "shell_exec", command="true")
    return [*messages[:2], asked(command), answer(cm, command, result, "true"), *messages[2:]]


def held(cm: ContextManager, messages: list) -> conv.Conversation:
    """`messages` (or records) as the one conversation that keeps what is measured of them."""
    return conv.Conversation(messages, cm.worth_masking)
