"""Every error Ouroboros reports to a person.

Each carries a one-line message a person can act on and the exit code the CLI uses.

    OuroborosError                 exit 1 unless said otherwise
    ├── ConfigError                exit 2: bad ouroboros.toml, flag, env var or missing file
    ├── UsageError                 exit 2: a command used wrongly (unknown run id, ...)
    ├── RunLockedError             exit 2: another harness owns this workspace
    ├── RunFailed                  the run stopped on a model error; it can be resumed
    ├── StateError                 the run's files cannot be written or read (disk full, ...)
    └── ModelError                 the model server failed us; one of three families:
        ├── TransientModelError    retry with backoff (or after the server's Retry-After)
        │   └── ServerUnreachableError
        ├── ContextOverflowError   the prompt did not fit: the context manager shrinks it and
        │   │                      the turn is asked again
        │   └── EmptyStreamError   200 with no data: llama.cpp's answer to an oversized prompt;
        │                          the server is asked once to count the prompt and name its
        │                          window before anything is shrunk
        └── PermanentModelError    retrying cannot help: the run stops with one line
            ├── ModelNotFoundError
            ├── ToolsNotSupportedError
            ├── AuthError
            ├── NotAnLLMServerError  HTTP answers, but not an OpenAI-compatible chat API
            └── WindowTooSmallError  the prompt and tools alone fill the context window

A failure is put in its family once, where the client meets it (HTTP statuses and error
bodies in `ouroboros.server.errors.classify`, the stream's own failures in
`ouroboros.server.reader`): `ouroboros.server.retry` retries TransientModelError and nothing else,
the session hands ContextOverflowError to the context manager, and anything else ends the run.
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


class NotAnLLMServerError(PermanentModelError):
    pass


class TransientModelError(ModelError):
    retry_after: float | None
    """Seconds the server asked us to wait (its `Retry-After`); None when it did not say."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ServerUnreachableError(TransientModelError):
    pass


class EmptyStreamError(ContextOverflowError):
    """An empty 200 stream: the usual sign of an oversized prompt, but not proof of one."""


class WindowTooSmallError(PermanentModelError):
    pass


class StateError(OuroborosError):
    """The run's files (log, snapshot, observations) cannot be written or read back: a full
    disk, a file size limit, a read-only or damaged state dir. Exit 1; what was written
    before stays whole, and `ouroboros resume` continues once the cause is fixed."""
