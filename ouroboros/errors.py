"""Every error Ouroboros reports to a person.

Each carries a one-line message a person can act on and the exit code the CLI uses.

    OuroborosError                 exit 1 unless said otherwise
    ├── ConfigError                exit 2: bad ouroboros.toml, flag, env var or missing file
    ├── UsageError                 exit 2: a command used wrongly (unknown run id, ...)
    ├── RunLockedError             exit 2: another harness owns this workspace
    ├── RunFailed                  the run stopped on a model error; it can be resumed
    └── ModelError                 the model server failed us
        ├── PermanentModelError    retrying cannot help: stop the run
        │   ├── ModelNotFoundError
        │   ├── ToolsNotSupportedError
        │   ├── AuthError
        │   └── WindowTooSmallError  the prompt and tools alone fill the context window
        ├── ContextOverflowError   the prompt did not fit: shrink it and retry
        └── TransientModelError    retry with backoff
            ├── ServerUnreachableError
            └── EmptyStreamError   200 with no data: llama.cpp's answer to an oversized prompt
"""

from __future__ import annotations


class OuroborosError(Exception):
    exit_code = 1

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ConfigError(OuroborosError):
    exit_code = 2


class UsageError(OuroborosError):
    exit_code = 2


class RunLockedError(OuroborosError):
    exit_code = 2


class RunFailed(OuroborosError):
    pass


class ModelError(OuroborosError):
    pass


class PermanentModelError(ModelError):
    pass


class ModelNotFoundError(PermanentModelError):
    pass


class ToolsNotSupportedError(PermanentModelError):
    pass


class AuthError(PermanentModelError):
    pass


class ContextOverflowError(ModelError):
    pass


class TransientModelError(ModelError):
    pass


class ServerUnreachableError(TransientModelError):
    pass


class EmptyStreamError(TransientModelError):
    pass


class WindowTooSmallError(PermanentModelError):
    pass
