"""Prometheus metrics of a run, served at http://<address>:<port>/metrics while it goes on
(`--metrics-port N` or the `[metrics]` table), with the well-kept prometheus_client.

The numbers are the run's summary (store/summary.py, the fold `status` and `stats` read too),
folded from the events the run's log emits: RunMetrics is a log listener, so the loop knows
nothing of it, and a scrape reads the summary as it is. Counters count from the start of this
process (a resumed run starts them at 0 again, as Prometheus expects of a restarted target).

    metrics = serve_metrics(9464, "127.0.0.1")   # raises ConfigError when the port is taken
    hooks.on_event = also(hooks.on_event, metrics.on_event)
    ...
    metrics.close()
"""

from __future__ import annotations

import errno
import time
from typing import Any, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import start_http_server

from ouroboros.errors import ConfigError
from ouroboros.protocols import Listener
from ouroboros.store.events import EventBase
from ouroboros.store.summary import RunSummary


class RunMetrics:
    """The run's metrics in a registry of their own: its summary, kept up to date by
    `on_event`, read at each scrape. The counters are the sessions' figures the summary folded
    in this process (its turns, tokens and masking), not the run's totals a resume starts
    from."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.summary = RunSummary()
        self.last_event: float | None = None  # Unix time
        self.registry.register(self)

    def on_event(self, event: EventBase) -> None:
        """Fold one event of the log into the summary."""
        self.summary.add_event(event)
        self.last_event = time.time()

    def collect(self) -> Iterator[Metric]:
        """The metrics as the summary has them now (prometheus_client's collector protocol)."""
        summary, totals = self.summary, self.summary.totals()
        yield counter("ouroboros_turns", "Model turns (assistant replies).", totals["turns"])
        calls = CounterMetricFamily(
            "ouroboros_tool_calls",
            "Tool calls, by tool and outcome (ok, error, interrupted).",
            labels=["tool", "outcome"],
        )
        for key, count in summary.tool_calls.items():
            calls.add_metric(key.rsplit(" ", 1), count)
        yield calls
        yield counter("ouroboros_restarts", "Session restarts.", summary.session_restarts)
        yield counter("ouroboros_masked_observations", "Tool results masked.", totals["masked"])
        yield counter("ouroboros_prompt_tokens", "Prompt tokens sent.", totals["prompt_tokens"])
        yield counter(
            "ouroboros_completion_tokens",
            "Completion tokens received.",
            totals["completion_tokens"],
        )
        yield counter("ouroboros_retries", "Model requests retried.", summary.retries)
        yield gauge(
            "ouroboros_context_used_ratio",
            "The last prompt's share of the context "
            "budget, as a ratio (0.526 is 52.6%; above 1 only for a prompt past the "
            "budget).",
            used_ratio(summary.prompt_pct or 0.0),
        )
        yield gauge(
            "ouroboros_context_window_tokens",
            "The context window believed, in tokens.",
            summary.window or 0,
        )
        yield gauge(
            "ouroboros_session",
            "The session going on (1, 2, ...).",
            summary.session if summary.last else 0,
        )
        yield gauge(
            "ouroboros_last_event_timestamp_seconds",
            "When the last event was written (Unix time).",
            self.last_event or 0,
        )


def counter(name: str, documentation: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, documentation, value=value)


def gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


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
        why = (
            "is in use"
            if error.errno == errno.EADDRINUSE
            else f"cannot be used ({error.strerror or error})"
        )
        raise ConfigError(
            f"metrics port {address}:{port} {why}; choose another with "
            "--metrics-port N or metrics.port (0 turns metrics off)"
        ) from None
    return MetricsServer(metrics, server, address, server.server_address[1])


def also(first: Listener | None, second: Listener) -> Listener:
    """A listener that tells `first` (if any), then `second`."""
    if first is None:
        return second

    def both(event: EventBase) -> None:
        first(event)
        second(event)

    return both
