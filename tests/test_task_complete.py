"""The task_complete tool: offered by default, it ends the run with exit 0, reason
task_complete and the agent's summary; `[agent] allow_complete = false` takes it away."""

from __future__ import annotations

import asyncio

from ouroboros.protocols import ToolCall
from ouroboros.testing import Reply
from ouroboros.tools import COMPLETE_KEY, TaskComplete, Toolbox
from tests.helpers import make_project, of_type, ouroboros_here, run_events


def run_call(arguments: str):
    return asyncio.run(Toolbox([TaskComplete()]).run(ToolCall("c1", "task_complete", arguments)))


def test_the_tool_says_when_to_call_it_and_takes_a_summary():
    function = TaskComplete().schema()["function"]
    assert function["name"] == "task_complete"
    assert function["description"] == "Ends the run. Call once the whole task is done and checked."
    assert function["parameters"]["required"] == ["summary"]


def test_a_summary_marks_the_result_and_an_empty_one_is_refused():
    done = run_call('{"summary": "  wrote  the\\nreport  "}')
    assert done.ok and done.meta[COMPLETE_KEY] == "wrote the report"
    empty = run_call('{"summary": "  "}')
    assert not empty.ok and COMPLETE_KEY not in empty.meta
    assert empty.content.startswith("error: task_complete needs a summary")
    missing = run_call("{}")
    assert (missing.ok, missing.content) == (
        False,
        "error: task_complete: missing required argument 'summary' (string)",
    )
    # other arguments are ignored: refusing them would only delay the end of a finished task
    extra = run_call('{"summary": "done", "status": "ok"}')
    assert extra.ok and extra.meta[COMPLETE_KEY] == "done"
    long = run_call('{"summary": "%s"}' % ("x" * 5000))
    assert len(long.meta[COMPLETE_KEY]) == 2000


def test_task_complete_ends_the_run_with_its_summary(tmp_path, scripted_server):
    server = scripted_server(
        [
            Reply("Writing.", [("file_write", {"path": "a.txt", "content": "a"})]),
            Reply(
                "Done.",
                [
                    ("task_complete", {"summary": "a.txt is written"}),
                    ("file_write", {"path": "b.txt", "content": "b"}),
                ],
            ),
        ]
    )
    config = make_project(tmp_path, server.base_url)

    result = ouroboros_here("run", "--config", str(config), "--headless")

    assert result.returncode == 0, result.stderr
    assert "run ended: task_complete: a.txt is written after 2 turns" in result.stdout
    end = run_events(tmp_path)[-1]
    assert (end["reason"], end["exit_code"], end["summary"]) == (
        "task_complete",
        0,
        "a.txt is written",
    )
    # the other calls of the same reply still ran: nothing is left pending
    assert (tmp_path / "workspace" / "b.txt").read_text() == "b"
    assert len(server.requests) == 2
    assert "task_complete" in [t["function"]["name"] for t in server.requests[0]["tools"]]


def test_allow_complete_false_takes_the_tool_away(tmp_path, scripted_server):
    server = scripted_server([Reply("Done.", [("task_complete", {"summary": "done"})])] * 3)
    config = make_project(
        tmp_path, server.base_url, agent={"allow_complete": False, "max_turns": 2}
    )

    result = ouroboros_here("run", "--config", str(config), "--headless")

    assert result.returncode == 3, result.stderr
    assert "task_complete" not in [t["function"]["name"] for t in server.requests[0]["tools"]]
    events = run_events(tmp_path)
    assert events[-1]["reason"] == "max_turns"
    assert all(not r["ok"] for r in of_type(events, "tool_result"))  # an unknown tool
