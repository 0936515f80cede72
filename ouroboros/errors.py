"""Every error Ouroboros reports to a person.

Each carries a one-line message a person can act on and the exit code the CLI uses.

    OuroborosError                 exit 1 unless said otherwise
    ├── ConfigError                exit 2: bad ouroboros.toml, flag, env var or missing file
    ├── UsageError                 exit 2: a command used wrongly (unknown run id, ...)
    │   ├── NothingToResume        exit 4: `resume` with no run, or of a complete one
    │   └── StillPaused            exit 3: `resume` of a run out of turns (no --max-turns)
    ├── RunLockedError             exit 2: another harness owns this workspace
    ├── RunFailed                  the run stopped on a model error; it can be resumed: exit 1,
    │                              or 2 for a PermanentModelError (it needs a fix first)
    ├── StateError                 the run's files cannot be written or read (disk full, ...)
    └── ModelError                 the model server failed us; one of three families:
        ├── TransientModelError    retry with backoff (or after the server's Retry-After)
        │   └── ServerUnreachableError
        ├── ContextOverflowError   the prompt did not fit: the context manager shrinks it and
        │   │                      the turn is asked again
        │   └── EmptyStreamError   200 with no data: llama.cpp's answer to an oversized prompt;
        │                          the server is asked once to count the prompt and name its
        │                          window before anything is shrunk
        └── PermanentModelError    exit 2: retrying cannot help: the run stops with one line
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

import signal

# -- Exit codes a supervisor (systemd, Kubernetes) can act on. `ouroboros run`, `resume` and
# -- `run --continue` exit with one of these, and the log's `run_end` records the same.
#
#   code     meaning                          what a supervisor does
#   0        done: the agent called            nothing (a Job completes)
#            task_complete
#   1        failed, resumable: the model      restart after a pause: `run --continue`
#            server stayed down past the       picks the run up where it stopped
#            retry budget, the disk was full
#   2        needs a fix: bad config, flag     do not restart: a person must act
#            or workspace, a window too
#            small, a model that is missing,
#            a workspace another harness holds,
#            a state dir it cannot write
#            (read-only, not its user's)
#   3        paused: idle (no tool call in     do not restart: it waits for a person
#            max_idle_turns turns), max_turns, (`resume --message`, `--max-turns N`,
#            max_restarts or a budget          a budget raised, then `resume`)
#            (agent.max_tokens, max_wall_secs)
#            reached
#   4        nothing to resume: no run, or     do not restart
#            `resume` of a run that is complete
#   128+N    stopped by signal N: 130 SIGINT,  restart: the run is saved and
#            143 SIGTERM, 141 closed output    `run --continue` goes on
EXIT_DONE = 0
EXIT_FAILED_RESUMABLE = 1
EXIT_NEEDS_FIX = 2
EXIT_PAUSED = 3
EXIT_NOTHING_TO_RESUME = 4
EXIT_CODES = {
    "done": EXIT_DONE,
    "failed_resumable": EXIT_FAILED_RESUMABLE,
    "needs_fix": EXIT_NEEDS_FIX,
    "paused": EXIT_PAUSED,
    "nothing_to_resume": EXIT_NOTHING_TO_RESUME,
}
# How each way a run can end (a `run_end` reason) exits; a stop signal is 128 + its number.
END_EXIT_CODES = {
    "task_complete": EXIT_DONE,
    "idle": EXIT_PAUSED,
    "stuck": EXIT_PAUSED,
    "redoing": EXIT_PAUSED,
    "max_turns": EXIT_PAUSED,
    "max_restarts": EXIT_PAUSED,
    "budget": EXIT_PAUSED,
    "restart_declined": EXIT_PAUSED,
}


def signal_exit_code(name: str) -> int:
    """128 + the signal's number, as a shell reports a process a signal ended:
    "SIGTERM" -> 143, "SIGINT" -> 130, "SIGPIPE" -> 141."""
    return 128 + int(signal.Signals[name])


def end_exit_code(reason: str, signal_name: str | None = None) -> int:
    """The exit code of a run that ended for `reason` (a `run_end` reason); a run stopped by
    a signal (`interrupted`, `interrupted_now`) exits 128 + the first signal's number."""
    if signal_name is not None and reason.startswith("interrupted"):
        return signal_exit_code(signal_name)
    return END_EXIT_CODES.get(reason, EXIT_DONE)


class OuroborosError(Exception):
    exit_code = 1

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ConfigError(OuroborosError):
    exit_code = EXIT_NEEDS_FIX


class UsageError(OuroborosError):
    exit_code = EXIT_NEEDS_FIX


class RunLockedError(OuroborosError):
    exit_code = EXIT_NEEDS_FIX


class NothingToResume(UsageError):
    """`resume` with no run to continue, or of a run that is complete."""

    exit_code = EXIT_NOTHING_TO_RESUME


class StillPaused(UsageError):
    """`resume` of a run that has had its max_turns, without `--max-turns N` for more."""

    exit_code = EXIT_PAUSED


class RunFailed(OuroborosError):
    """The run stopped on a model error and is saved; exit 1 when retrying later can help
    (the server was down), 2 when a person must fix something first (a window too small)."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILED_RESUMABLE) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class ModelError(OuroborosError):
    pass


class PermanentModelError(ModelError):
    exit_code = EXIT_NEEDS_FIX


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
