"""Conversations to test the context with: messages as a model and its tools write them."""

from __future__ import annotations

import json

from ouroboros.config import ContextConfig
from ouroboros.protocols import ToolCall, ToolResult
from ouroboros.window import conversation as conv
from ouroboros.window.manager import ContextManager


def assistant(*call_ids: str, text: str = "") -> dict:
    message = {"role": "assistant", "content": text}
    if call_ids:
        message["tool_calls"] = [
            {
                "id": i,
                "type": "function",
                "function": {"name": "file_read", "arguments": json.dumps({"path": f"{i}.txt"})},
            }
            for i in call_ids
        ]
    return message


def tool(call_id: str, content: str) -> dict:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


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
        obs = conv.describe(
            ToolCall(call_id, "file_read", ""), f"data/{i}.txt", result, cm.new_observation_id()
        )
        messages.append(tool(call_id, cm.admit(obs, content)))
    return messages


def worked(cm: ContextManager, messages: list[dict]) -> list[dict]:
    """`messages` with a command that succeeded before their turns: a session at work."""
    result = ToolResult("[exit code 0]", meta={"command": "true", "exit_code": 0})
    obs = conv.describe(ToolCall("w0", "shell_exec", ""), "true", result, cm.new_observation_id())
    return [
        *messages[:2],
        assistant("w0"),
        tool("w0", cm.admit(obs, "[exit code 0]")),
        *messages[2:],
    ]


def held(cm: ContextManager, messages: list) -> conv.Conversation:
    """`messages` (or records) as the one conversation that keeps what is measured of them."""
    return conv.Conversation(messages, cm.worth_masking)
