"""Prometheus metrics of a run, served at http://<address>:<port>/metrics while it goes on
(`--metrics-port N` or the `[metrics]` table), with the well-kept prometheus_client.

The numbers come from the events the run's log emits, nothing else: RunMetrics is a log
listener, so the loop knows nothing of it. Counters count from the start of this process (a
resumed run starts them at 0 again, as Prometheus expects of a restarted target).

    metrics = serve_metrics(9464, "127.0.0.1")   # raises ConfigError when the port is taken
    hooks.on_event = also(hooks.on_event, metrics.on_event)
    ...
    metrics.close()
"""

from __future__ import annotations

import errno
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.exposition import start_http_server

from ouroboros.errors import ConfigError
from ouroboros.store import events as ev
from ouroboros.protocols import Listener
from ouroboros.store.events import EventBase


class RunMetrics:
    """The run's metrics in a registry of their own, kept up to date by `on_event`."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.turns = Counter("ouroboros_turns", "Model turns (assistant replies).", registry=r)
        self.tool_calls = Counter("ouroboros_tool_calls", "Tool calls, by tool and outcome "
                                  "(ok, error, interrupted).", ["tool", "outcome"], registry=r)
        self.restarts = Counter("ouroboros_restarts", "Session restarts.", registry=r)
        self.masked = Counter("ouroboros_masked_observations", "Tool results masked.",
                              registry=r)
        self.prompt_tokens = Counter("ouroboros_prompt_tokens", "Prompt tokens sent.",
                                     registry=r)
        self.completion_tokens = Counter("ouroboros_completion_tokens",
                                         "Completion tokens received.", registry=r)
        self.retries = Counter("ouroboros_retries", "Model requests retried.", registry=r)
        self.context_used = Gauge("ouroboros_context_used_ratio", "The last prompt's share "
                                  "of the context budget, as a ratio (0.526 is 52.6%; above 1 "
                                  "only for a prompt past the budget).", registry=r)
        self.window = Gauge("ouroboros_context_window_tokens", "The context window believed, "
                            "in tokens.", registry=r)
        self.session = Gauge("ouroboros_session", "The session going on (1, 2, ...).",
                             registry=r)
        self.last_event = Gauge("ouroboros_last_event_timestamp_seconds", "When the last "
                                "event was written (Unix time).", registry=r)
        self.info: dict[str, Any] = {}

    def on_event(self, event: EventBase) -> None:
        """Count one event of the log."""
        self.session.set(event.session)
        self.last_event.set_to_current_time()
        match event:
            case ev.Assistant():
                self.turns.inc()
            case ev.ToolResultEvent(name=name, ok=ok):
                outcome = "interrupted" if event.interrupted else "ok" if ok else "error"
                self.tool_calls.labels(tool=name, outcome=outcome).inc()
            case ev.SessionRestart():
                self.restarts.inc()
            case ev.ContextMask(observations_masked=masked):
                self.masked.inc(masked)
            case ev.TokenUsage():
                self.prompt_tokens.inc(event.prompt_tokens)
                self.completion_tokens.inc(event.completion_tokens)
                self.context_used.set(used_ratio(event.context_used_pct))
                self.window.set(event.context_limit)
            case ev.Retry():
                self.retries.inc()
            case ev.SessionStart(context_limit=limit) | ev.RunResumed(context_limit=limit):
                self.window.set(limit)
            case ev.ContextTruncationDetected(new_limit=limit) | \
                    ev.ContextOverflowRecovered(new_limit=limit):
                self.window.set(limit)


def used_ratio(pct: float) -> float:
    """A percentage as the ratio Prometheus expects of a `_ratio`: 52.6 -> 0.526."""
    return round(pct / 100.0, 6)


class MetricsServer:
    """RunMetrics served over HTTP from a daemon thread until `close()`."""

    def __init__(self, metrics: RunMetrics, server: Any, address: str, port: int) -> None:
        self.metrics = metrics
        self._server = server
        self.address = address
        self.port = port

    def on_event(self, event: EventBase) -> None:
        self.metrics.on_event(event)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def serve_metrics(port: int, address: str = "127.0.0.1") -> MetricsServer:
    """Serve a new RunMetrics at http://address:port/metrics. A port that is taken (or an
    address this machine does not have) is a ConfigError: one line, exit 2."""
    metrics = RunMetrics()
    try:
        server, _ = start_http_server(port, addr=address, registry=metrics.registry)
    except OSError as error:
        why = "is in use" if error.errno == errno.EADDRINUSE else \
            f"cannot be used ({error.strerror or error})"
        raise ConfigError(f"metrics port {address}:{port} {why}; choose another with "
                          "--metrics-port N or metrics.port (0 turns metrics off)") from None
    return MetricsServer(metrics, server, address, server.server_address[1])


def also(first: Listener | None, second: Listener) -> Listener:
    """A listener that tells `first` (if any), then `second`."""
    if first is None:
        return second

    def both(event: EventBase) -> None:
        first(event)
        second(event)

    return both
