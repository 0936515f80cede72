"""What cannot work is refused at the start: a system prompt and tools that leave a session no
room in the window stop the run before its first request, with one line of figures and the
keys to change (exit 2); and a reply is never asked for more tokens than the window leaves
beside the prompt budget."""

from __future__ import annotations

from ouroboros.config.schema import ContextConfig
from ouroboros.testing import Reply
from ouroboros.window.policy import fixed_part_problem, least_tokens
from tests.helpers import make_project, ouroboros_here

LONG_MISSION = "Keep the garden of notes in order, every bed of it. " * 120  # 6,240 chars


def test_a_prompt_and_tools_that_leave_no_room_stop_the_run_before_its_first_request(
    tmp_path, scripted_server
):
    server = scripted_server([Reply("ok")])
    config = make_project(
        tmp_path,
        server.base_url,
        prompt=LONG_MISSION,
        model={"context_limit": 1024, "max_output_tokens": 128},
    )
    ran = ouroboros_here("run", "-c", str(config), "--headless", "--max-turns", "1")

    assert ran.returncode == 2, ran.stdout + ran.stderr
    assert server.requests == [] and server.count_requests == []
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "error: the system prompt and the tool definitions take "
    )
    for named in (
        "896-token prompt budget",
        "model.context_limit",
        "model.max_output_tokens",
        "SYSTEM_PROMPT.md",
    ):
        assert named in lines[0]
    assert not (tmp_path / ".ouroboros" / "runs").exists()


def test_the_same_prompt_runs_in_a_window_that_holds_it(tmp_path, scripted_server):
    server = scripted_server([Reply("ok")])
    config = make_project(
        tmp_path, server.base_url, prompt=LONG_MISSION, model={"context_limit": 8192}
    )
    ran = ouroboros_here("run", "-c", str(config), "--headless", "--max-turns", "1")
    assert ran.returncode == 3, ran.stdout + ran.stderr


def test_a_reply_is_never_asked_more_than_the_window_leaves(tmp_path, scripted_server):
    server = scripted_server([Reply("ok")])
    config = make_project(
        tmp_path, server.base_url, model={"context_limit": 1024, "max_output_tokens": 2048}
    )
    ran = ouroboros_here("run", "-c", str(config), "--headless", "--max-turns", "1")

    assert ran.returncode == 3, ran.stdout + ran.stderr
    assert server.requests[0]["max_tokens"] == 256  # 1,024 less the 768-token prompt budget


def test_the_fixed_part_is_judged_as_a_fresh_session_is():
    policy = ContextConfig()
    assert fixed_part_problem(300, "counted by the server", 1024, 96, policy) is None
    line = fixed_part_problem(284, "counted by the server", 400, 96, policy)
    assert line is not None and line.startswith(
        "the system prompt and the tool definitions take 284 tokens (counted by the server), "
        "93% of the 304-token prompt budget (a 400-token window less 96 kept for the reply), "
        "leaving 20 where one tool result may take 76"
    )


def test_the_least_a_prompt_takes_is_below_any_vocabularys_count():
    messages = [{"role": "system", "content": "x" * 800}, {"role": "user", "content": "go"}]
    assert least_tokens(messages, []) == 802 // 8 + 8
