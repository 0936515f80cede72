"""One run with restarts, every surface a person reads it on: `status`, `status --json`,
`stats`, `stats --all`, the dashboard and the metrics show the same figures for the same
events (they read one fold of the log, store/summary.py)."""

from __future__ import annotations

import asyncio
import json
import re

from prometheus_client import generate_latest
from rich.console import Console

from ouroboros.config import load_config
from ouroboros.demo import RecordingAgent, write_demo_project
from ouroboros.loop.runner import RunHooks, run_agent
from ouroboros.metrics import RunMetrics, also
from ouroboros.testing import ScriptedServer
from ouroboros.ui.dashboard import DashboardState
from ouroboros.ui.render import render
from tests.helpers import of_type, ouroboros_here, run_events

CONTEXT = 4096
PARTS = 14


def run_demo(tmp_path, live: DashboardState, metrics: RunMetrics) -> None:
    """The demo task in a small window, watched by a dashboard and metrics as `run` has them."""
    with ScriptedServer(
        RecordingAgent(PARTS), model="scripted-demo", context_length=CONTEXT
    ) as server:
        write_demo_project(tmp_path, server.base_url, PARTS)
        loaded = load_config(
            tmp_path / "ouroboros.toml", {"safety.sandbox": "off"}, env={}, user_file=None
        )
        hooks = RunHooks(on_event=also(live.apply, metrics.on_event))
        assert asyncio.run(run_agent(loaded, hooks)) == 0


def shown(text: str, pattern: str) -> str:
    found = re.search(pattern, text, re.MULTILINE)
    assert found, f"{pattern!r} not in:\n{text}"
    return found.group(1)


def table_rows(text: str) -> dict[str, list[str]]:
    """`stats`'s table: its cells by the first one (the session, or `all` for the totals)."""
    rows = [
        [cell.strip() for cell in line.split("│")[1:-1]]
        for line in text.splitlines()
        if line.count("│") == 9
    ]
    return {row[0]: row[1:] for row in rows if row and row[0]}


def metric(scraped: str, name: str) -> float:
    return float(shown(scraped, rf"^{name} (\S+)$"))


def test_every_surface_shows_the_same_figures_for_a_run_with_restarts(tmp_path):
    live, metrics = DashboardState(), RunMetrics()
    run_demo(tmp_path, live, metrics)
    events = run_events(tmp_path)
    restarts = of_type(events, "session_restart")
    turns = len(of_type(events, "assistant"))
    prompt = sum(e["prompt_tokens"] for e in of_type(events, "token_usage"))
    assert len(restarts) >= 2 and turns > 10

    status = ouroboros_here("status", cwd=tmp_path).stdout
    health = json.loads(ouroboros_here("status", "--json", cwd=tmp_path).stdout)
    stats = ouroboros_here("stats", cwd=tmp_path).stdout
    whole = ouroboros_here("stats", "--all", cwd=tmp_path).stdout
    console = Console(record=True, width=100)
    console.print(render(live))
    screen = console.export_text()
    scraped = generate_latest(metrics.registry).decode()

    # restarts and turns
    assert shown(status, r"^restarts\s+(\d+)\s*$") == str(len(restarts))
    assert health["restarts"] == len(restarts)
    assert shown(screen, r"restarts (\d+)") == str(len(restarts))
    assert metric(scraped, "ouroboros_restarts_total") == len(restarts)
    for text in (stats, whole):
        assert f"{turns} turns, {len(restarts)} restarts" in text
    assert shown(status, r"^turn\s+\d+ in this session, (\d+) in total") == str(turns)
    assert health["total_turns"] == turns
    assert shown(screen, r"total turns (\d+)") == str(turns)
    assert metric(scraped, "ouroboros_turns_total") == turns

    # tokens
    assert health["prompt_tokens"] == prompt
    assert metric(scraped, "ouroboros_prompt_tokens_total") == prompt
    for text in (stats, whole):
        assert table_rows(text)["all"][4] == f"{prompt:,}"

    # the context of the session going on, and of each session a restart ended
    now = "--" if health["context_pct"] is None else f"{health['context_pct']:.1f}%"
    assert shown(status, r"^context\s+(\S+)") == now
    assert shown(screen, r"context .*  (\S+%|--)\s*│") == now
    for restart in restarts:
        said = shown(restart["reason"], r"context at ([\d.]+)% of the budget")
        assert f"{restart['context_used_pct']:.1f}" == said
        for text in (stats, whole):  # the session it ended peaked at what its reason says
            assert table_rows(text)[str(restart["session"] - 1)][1] == f"{said}%"
