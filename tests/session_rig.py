"""A session's world for tests: the fake model, real file tools in a temporary workspace,
the run's state and its events in memory (tests/fakes.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Coroutine

from ouroboros.config import AgentConfig, Config, ContextConfig, LoadedConfig, ModelConfig
from ouroboros.loop.live_config import LiveConfig
from ouroboros.loop.restart import begin_session, fresh_start
from ouroboros.loop.session import Services, Session
from ouroboros.loop.state import RunState
from ouroboros.protocols import StopFlag
from ouroboros.server.retry import RetryPolicy
from ouroboros.store import events as ev
from ouroboros.tools import FileRead, FileWrite, TaskComplete, Toolbox
from ouroboros.window.conversation import note
from ouroboros.window.manager import ContextManager
from tests.fakes import FakeModel, MemoryLog, Waits, call, reply

SYSTEM = {"role": "system", "content": "You are a careful agent."}
CONTINUE = "Continue working towards your goals. Use your tools."


class Rig:
    """A session's world: the fake model, real file tools in `workspace`, the run's state,
    the events in memory."""

    def __init__(
        self,
        tmp_path: Path,
        model: FakeModel,
        *,
        limit: int = 4000,
        max_turns: int = 0,
        max_idle_turns: int = 3,
        agent: dict[str, Any] | None = None,
        **policy: Any,
    ) -> None:
        self.workspace = tmp_path / "ws"
        self.workspace.mkdir(exist_ok=True)
        self.model = model
        self.log = MemoryLog()
        self.policy = ContextConfig(**policy)
        context = ContextManager.create(limit, "test", 0, self.policy)
        self.state = RunState("run", [dict(SYSTEM), note("continue", "Begin.")], context)
        self.log.listeners.append(self.state.digest.take)  # as the runner's log feeds it
        self.waits = Waits()
        self.toolbox = Toolbox(
            [
                FileRead(self.workspace, max_read_bytes=100_000, on_security=print),
                FileWrite(self.workspace, on_security=print),
                TaskComplete(),
                self.waits,
            ]
        )
        run_dir = tmp_path / "run"
        run_dir.mkdir(exist_ok=True)
        config = Config(
            model=ModelConfig(max_retry_secs=1),
            agent=AgentConfig(
                max_turns=max_turns,
                continue_message=CONTINUE,
                max_idle_turns=max_idle_turns,
                **(agent or {}),
            ),
        )
        self.services = Services(
            client=model,
            toolbox=self.toolbox,
            log=self.log,
            run_dir=run_dir,
            stop=StopFlag(),
            live=LiveConfig(LoadedConfig(config, None, tmp_path, {})),
            backoff=RetryPolicy(base_delay=0.001, max_delay=0.001),
        )

    def file(self, name: str, text: str) -> str:
        (self.workspace / name).write_text(text)
        return name

    def run(self) -> BaseException:
        """Run a session to its end; what ended it."""
        return ended(Session(self.state, self.services).run())

    def restart(self, facts_chars: int = 0) -> Any:
        """What the runner does after RestartSession (without reading a config)."""
        fitted = fresh_start(
            self.state,
            dict(SYSTEM),
            self.toolbox.schemas(),
            self.policy,
            None,
            facts_chars=facts_chars,
        )
        previous = begin_session(self.state, fitted.messages)
        self.log.session, self.log.turn = self.state.session, 0
        self.log.emit(
            ev.SessionRestart(previous_turns=previous, carryover_messages=0, reason="test")
        )
        return fitted


def ended(work: Coroutine[Any, Any, Any]) -> BaseException:
    try:
        asyncio.run(work)
    except BaseException as error:
        return error
    raise AssertionError("a session never returns")


def reads(rig: Rig, size: int) -> Any:
    """A model that reads a new file of `size` characters every turn."""
    count = iter(range(1000))

    def step(sent: list[dict[str, Any]]) -> Any:
        i = next(count)
        name = rig.file(f"part{i}.txt", f"PART {i}\n" + "x" * size)
        return reply(f"reading part {i}", call("file_read", path=name))

    return step


def contents(messages: list[dict[str, Any]]) -> list[str]:
    return [m.get("content") or "" for m in messages]
