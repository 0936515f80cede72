"""The run's config as it is now, in one place: the validated config a run started with,
replaced whole when a session start reads the config again and takes its live keys
(runner.reread_config, reload.with_live).

What in the loop needs a key reads it here when it needs it: the session's agent keys, the
retry deadline, the stuck guard's thresholds, the budgets. A holder that keeps its own copy
follows it instead, and is handed each new config whole: the context window (its policy and
reply reserve) and the HTTP client (sampling and reply limits) are in packages that know
nothing of the loop, and the tools are built from the config.

    live = LiveConfig(loaded)
    live.follow(lambda loaded: client.configure(**client_settings(loaded.config.model)))
    live.config.agent.max_turns     # the value now
    live.replace(reread)            # each follower takes it, in the order they followed
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ouroboros.config import Config, LoadedConfig

Follower = Callable[[LoadedConfig], None]


@dataclass
class LiveConfig:
    """The one owner of the run's config; `replace` is the only way it changes."""

    loaded: LoadedConfig
    followers: list[Follower] = field(default_factory=list, repr=False)

    @property
    def config(self) -> Config:
        return self.loaded.config

    def follow(self, take: Follower) -> None:
        """Hand `take` every config that replaces this one."""
        self.followers.append(take)

    def replace(self, loaded: LoadedConfig) -> None:
        self.loaded = loaded
        for take in self.followers:
            take(loaded)
