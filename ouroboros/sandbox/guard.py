"""What a run does to keep the agent's tools in their place, gathered for the runner: the
shell's sandbox, the secrets redactor, and the tool processes of the workspace (killed when
the run starts, at its end (through the tool cgroup, or, without one, as the subreaper of the
tools' orphans: orphans.py), and by a watchdog when the harness goes).

    guard = RunGuard.prepare(loaded)   # ConfigError (exit 2) when a sandbox is required and
                                       # missing; nothing is written before
    guard.start()                      # after the lock: leftovers killed, watchdog started
    ...                                # guard.sandbox, guard.redact, guard.warnings()
    guard.close()                      # tool processes killed, the private temp dir removed
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ouroboros.config import LoadedConfig, SafetyConfig
from ouroboros.errors import ConfigError
from ouroboros.sandbox.cgroup import ToolCgroup
from ouroboros.sandbox.orphans import Orphans
from ouroboros.sandbox.policy import Sandbox
from ouroboros.sandbox.reaper import Watchdog, reap, remove_temp_dirs, workspace_tag
from ouroboros.sandbox.secrets import (
    Redactor,
    StreamRedactor,
    scrub_own_environment,
    secret_values,
    short_secret_warning,
    short_secrets,
)


def protected_paths(loaded: LoadedConfig) -> dict[str, Path]:
    """What the shell must not touch: the state dir, the config and the system prompt."""
    paths = {"state dir": loaded.state_dir, "system prompt": loaded.system_prompt_path}
    if loaded.path is not None:
        paths["config"] = loaded.path
    return paths


def prepare_sandbox(loaded: LoadedConfig) -> Sandbox:
    safety = loaded.config.safety
    return Sandbox.prepare(
        safety.sandbox,
        workspace=loaded.workspace,
        network=safety.network,
        protected=protected_paths(loaded),
    )


@dataclass
class RunGuard:
    sandbox: Sandbox
    redact: Redactor
    workspace: Path
    reaped: list[int] = field(default_factory=list)
    watchdog: Watchdog | None = None
    too_short: list[str] = field(default_factory=list)  # secrets not redacted, by name
    orphans: Orphans | None = None  # without a tool cgroup: the harness adopts the orphans

    @classmethod
    def prepare(cls, loaded: LoadedConfig) -> RunGuard:
        model = loaded.config.model
        secrets = secret_values(model.api_key_env, model.base_url, os.environ)
        scrub_own_environment(secrets)
        return cls(
            prepare_sandbox(loaded),
            Redactor.of(secrets),
            loaded.workspace,
            too_short=short_secrets(model.api_key_env, model.base_url, os.environ),
        )

    def start(self, lock_fds: Sequence[int] = ()) -> None:
        """Kill what an earlier harness left running in the workspace, and start the watchdog
        that kills what this one leaves. Call it holding the workspace's lock: `lock_fds`,
        which the watchdog holds too until it has killed them."""
        tag = workspace_tag(self.workspace)
        self.reaped = reap(tag)
        remove_temp_dirs(tag, keep=self.sandbox.private_tmp)
        cgroup = ToolCgroup.of(tag)
        self.sandbox.cgroup = cgroup.create() if cgroup is not None else None
        self.watchdog = Watchdog.start(tag, lock_fds)
        if self.sandbox.cgroup is None:
            self.orphans = Orphans.adopt()
            if self.orphans is not None and self.watchdog.process is not None:
                self.orphans.started(self.watchdog.process)
                self.orphans.tell = self.watchdog.tell
            self.sandbox.orphans = self.orphans

    def sandbox_for(self, safety: SafetyConfig, loaded: LoadedConfig) -> Sandbox:
        """The sandbox for a new session: a changed setting is applied if it can be."""
        current = self.sandbox
        if (current.setting, current.network) != (safety.sandbox, safety.network):
            try:
                self.sandbox = prepare_sandbox(loaded)
            except ConfigError:
                return current
            self.sandbox.cgroup, self.sandbox.orphans = current.cgroup, current.orphans
            current.close()
        return self.sandbox

    def screen_stream(
        self, on_text: Callable[[str], None] | None, on_event: Callable[[Any], None] | None
    ) -> tuple[Callable[[str], None] | None, Callable[[Any], None] | None]:
        """The terminal's hooks with the streamed reply redacted before it is shown (a secret
        split across pieces too); what is held back of it is let out before the next event
        (the reply's own, once the stream has ended). Events come redacted from the log."""
        if not self.redact or on_text is None:
            return on_text, on_event
        text = StreamRedactor(self.redact, on_text)

        def event_after_text(record: Any) -> None:
            text.flush()
            if on_event is not None:
                on_event(record)

        return text, event_after_text

    def warnings(self) -> list[str]:
        found = []
        if self.sandbox.mechanism == "none":  # "auto" found no sandbox: say it loudly
            found.append(f"sandbox: {self.sandbox.summary}")
        if self.too_short:
            found.append(short_secret_warning(self.too_short))
        if self.reaped:
            pids = ", ".join(map(str, self.reaped[:10]))
            found.append(
                f"killed {len(self.reaped)} tool process(es) an earlier harness left "
                f"running in this workspace (pid {pids})"
            )
        return found

    def close(self) -> None:
        if self.orphans is not None:
            self.orphans.release()
        if self.watchdog is not None:
            self.watchdog.stop()
        self.sandbox.close()
