"""The run's config flows whole: one place (LiveConfig) takes each config a session start
reads again, and every holder of a live key has the new value from it: the window's policy
and reply reserve, the HTTP client's sampling, the retries, the stuck guard, the tools and
the session's agent keys."""

from __future__ import annotations

import asyncio
import json
import tomllib
from pathlib import Path
from typing import Any

import tomli_w

from ouroboros.config import Config, LoadedConfig, load_config
from ouroboros.loop.guards import step_of
from ouroboros.loop.live_config import LiveConfig
from ouroboros.loop.runner import Runner
from ouroboros.protocols import RunHooks, ToolCall, ToolResult
from ouroboros.server.client import ChatClient, client_settings
from ouroboros.server.tokenizer import TokenCounter
from ouroboros.testing import Reply
from tests.helpers import make_project

# One live key for each holder, changed from its value in the project file.
BEFORE = {
    "context": {"soft_threshold_pct": 0.7},
    "model": {"temperature": 0.2, "max_output_tokens": 512, "max_retry_secs": 2},
    "agent": {"max_turns": 50, "stuck_repeats": 4},
    "safety": {"blocked_patterns": []},
}
AFTER = {
    "context": {"soft_threshold_pct": 0.6},
    "model": {"temperature": 0.9, "max_output_tokens": 1024, "max_retry_secs": 7},
    "agent": {"max_turns": 80, "stuck_repeats": 2},
    "safety": {"blocked_patterns": ["forbidden"]},
}


def test_a_new_config_is_handed_whole_to_every_follower_in_order() -> None:
    first = LoadedConfig(Config(), None, Path("/p"), {})
    second = LoadedConfig(
        Config.model_validate({"agent": {"max_turns": 9}}),
        None,
        Path("/p"),
        {"agent.max_turns": "project file"},
    )
    live, taken = LiveConfig(first), []
    live.follow(lambda loaded: taken.append(("window", loaded)))
    live.follow(lambda loaded: taken.append(("tools", loaded)))

    live.replace(second)

    assert live.config.agent.max_turns == 9 and live.loaded is second
    assert taken == [("window", second), ("tools", second)]


def edit(config: Path, tables: dict[str, dict[str, Any]]) -> None:
    """What a person does with an editor: change keys in ouroboros.toml."""
    doc = tomllib.loads(config.read_text())
    for table, values in tables.items():
        doc.setdefault(table, {}).update(values)
    config.write_text(tomli_w.dumps(doc))


async def holders(runner: Runner, server: Any, path: str) -> dict[str, Any]:
    """What each holder of a live key goes by, as a person would see it (`path`: a file the
    agent fails to read twice in a row, new to the stuck guard)."""
    services, context = runner.services, runner.state.context
    await services.client.complete([{"role": "user", "content": "Go on."}], [])
    shell = await services.toolbox.run(
        ToolCall("s1", "shell_exec", json.dumps({"command": "echo forbidden"}))
    )
    failing = step_of(
        "",
        [
            (
                ToolCall("c1", "file_read", json.dumps({"path": path})),
                ToolResult(f"error: no such file: {path}", ok=False),
            )
        ],
    )
    alarms = [services.stuck.observe(failing) for _ in range(2)]
    return {
        "soft threshold": context.policy.soft_threshold_pct,
        "reply reserve": context.max_output_tokens,
        "temperature sent": server.requests[-1]["temperature"],
        "max_tokens sent": server.requests[-1]["max_tokens"],
        "retrying for": services.retry.max_retry_secs,
        "max turns": services.config.agent.max_turns,
        "stuck after two": alarms[-1] is not None,
        "shell blocks": shell.content.startswith("error: command blocked"),
    }


def test_a_live_key_edited_in_ouroboros_toml_reaches_each_holder(tmp_path, scripted_server):
    server = scripted_server([Reply("Reading.")] * 2, context_length=8192)
    config = make_project(
        tmp_path,
        server.base_url,
        **{**BEFORE, "safety": {"sandbox": "off", "blocked_patterns": []}},
    )
    loaded = load_config(config, env={}, user_file=None)
    model = loaded.config.model

    async def edited_between() -> tuple[dict[str, Any], list[str], dict[str, Any]]:
        client = ChatClient(model.base_url, model.name, **client_settings(model))
        try:
            runner = await Runner.open(
                loaded,
                loaded.state_dir / "runs" / "run1",
                client,
                TokenCounter(model.base_url, model.name, http=client.http),
                RunHooks(),
                resume=False,
            )
            before = await holders(runner, server, "a.txt")
            edit(config, AFTER)
            changes = await runner.reread_config()  # what a session start does
            after = await holders(runner, server, "b.txt")
            runner.log.close()
        finally:
            await client.aclose()
        return before, sorted(change.key for change in changes), after

    before, changed, after = asyncio.run(edited_between())

    assert changed == sorted(f"{table}.{key}" for table, values in AFTER.items() for key in values)
    assert before == {
        "soft threshold": 0.7,
        "reply reserve": 512,
        "temperature sent": 0.2,
        "max_tokens sent": 512,
        "retrying for": 2,
        "max turns": 50,
        "stuck after two": False,
        "shell blocks": False,
    }
    assert after == {
        "soft threshold": 0.6,
        "reply reserve": 1024,
        "temperature sent": 0.9,
        "max_tokens sent": 1024,
        "retrying for": 7,
        "max turns": 80,
        "stuck after two": True,
        "shell blocks": True,
    }
