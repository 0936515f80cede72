"""The API key never reaches the agent: not from a file a user left in the workspace, not from
the harness's /proc entry (even with the sandbox off), and never into the log."""

from __future__ import annotations

import json
from pathlib import Path
from subprocess import CompletedProcess

from ouroboros.sandbox.secrets import (
    REDACTED,
    Redactor,
    StreamRedactor,
    environment_block,
    held_back,
    secret_values,
)
from ouroboros.store import events as ev
from ouroboros.store.log import EventLog
from ouroboros.testing import Reply
from tests.helpers import clean_env, make_project, ouroboros, ouroboros_child, run_events

KEY = "sk-proj-9f8e7d6c5b4a3210"


def run_with_key(config: Path, max_turns: int, key: str = KEY) -> CompletedProcess[str]:
    """`ouroboros run --headless` in a process of its own, its API key in TEST_API_KEY."""
    return ouroboros_child(
        "run",
        "--config",
        str(config),
        "--headless",
        "--max-turns",
        str(max_turns),
        env=clean_env(TEST_API_KEY=key),
    )


def tool_results(server) -> list[str]:
    return [m["content"] for m in server.requests[-1]["messages"] if m["role"] == "tool"]


def test_a_key_left_in_a_workspace_file_is_redacted_from_results_and_log(tmp_path, scripted_server):
    server = scripted_server(
        [
            Reply("read the env file", [("file_read", {"path": ".env"})]),
            Reply(
                "and through the shell",
                [("shell_exec", {"command": 'cat .env; echo "$TEST_API_KEY"'})],
            ),
            Reply("done"),
        ]
    )
    config = make_project(tmp_path, server.base_url, model={"api_key_env": "TEST_API_KEY"})
    (tmp_path / "workspace" / ".env").write_text(f"OPENAI_API_KEY={KEY}\n")

    result = run_with_key(config, max_turns=3)

    assert result.returncode == 3, result.stderr
    read, shell = tool_results(server)
    assert f"OPENAI_API_KEY={REDACTED}" in read
    assert shell.startswith(f"OPENAI_API_KEY={REDACTED}\n\n[exit code 0]")
    assert KEY not in json.dumps(server.requests)
    run_dir = tmp_path / ".ouroboros" / "runs" / run_events(tmp_path)[0]["run_id"]
    for path in run_dir.rglob("*"):
        if path.is_file():
            assert KEY not in path.read_text(errors="replace"), path
    assert KEY not in result.stdout


def test_a_key_a_person_pastes_into_a_message_never_reaches_the_model(tmp_path, scripted_server):
    """`ouroboros tell` and `resume --message` go through the redaction every tool result
    does."""
    from ouroboros.loop.inbox import post

    server = scripted_server([Reply("working", [("list_dir", {"path": "."})]), Reply("ok")])
    config = make_project(tmp_path, server.base_url, model={"api_key_env": "TEST_API_KEY"})
    post(tmp_path / ".ouroboros", f"the key is {KEY}, use it")

    first = run_with_key(config, max_turns=2)
    again = ouroboros_child(
        "resume",
        "--config",
        str(config),
        "--headless",
        "--max-turns",
        "3",
        "--message",
        f"and again: {KEY}",
        env=clean_env(TEST_API_KEY=KEY),
    )

    assert first.returncode == 3 and again.returncode == 3, first.stderr + again.stderr
    told = [
        m["content"]
        for r in server.requests
        for m in r["messages"]
        if m["role"] == "user"
        and "key is" in (m.get("content") or "")
        or "and again" in (m.get("content") or "")
    ]
    assert told and all(REDACTED in text for text in told)
    assert KEY not in json.dumps(server.requests)


def test_the_key_is_scrubbed_from_the_harness_proc_entry_even_unconfined(tmp_path, scripted_server):
    server = scripted_server(
        [
            Reply(
                "peek",
                [
                    (
                        "shell_exec",
                        {"command": "tr '\\0' '\\n' < /proc/$PPID/environ | grep TEST_API_KEY"},
                    )
                ],
            ),
            Reply("done"),
        ]
    )
    config = make_project(
        tmp_path, server.base_url, model={"api_key_env": "TEST_API_KEY"}, safety={"sandbox": "off"}
    )

    result = ouroboros(
        "run",
        "--config",
        str(config),
        "--headless",
        "--max-turns",
        "2",
        env=clean_env(TEST_API_KEY=KEY),
    )

    assert result.returncode == 3, result.stderr
    [peek] = tool_results(server)
    # Overwritten in the process itself, not merely redacted on the way out.
    assert peek.startswith("TEST_API_KEY=" + "*" * len(KEY)), peek


def test_the_event_log_redacts_what_it_writes_and_tells(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "events.jsonl")
    log.redact = Redactor.of([KEY, 'pa"ss\\word'])
    told: list[ev.EventBase] = []
    log.subscribe(told.append)
    log.emit(ev.ErrorEvent(message=f"the key is {KEY}", kind='pa"ss\\word'))
    log.close()
    text = (tmp_path / "events.jsonl").read_text()
    assert KEY not in text and "ss\\\\word" not in text
    assert json.loads(text)["message"] == f"the key is {REDACTED}"
    assert told[0] == ev.ErrorEvent.model_validate_json(text)
    assert (told[0].message, told[0].kind) == (f"the key is {REDACTED}", REDACTED)


def test_only_secrets_long_enough_to_be_told_apart_are_redacted() -> None:
    redact = Redactor.of(["short", KEY, ""])
    assert redact(f"short {KEY}") == f"short {REDACTED}"
    assert not Redactor.of(["1234567"])


def test_the_secrets_are_the_key_and_the_server_password() -> None:
    env = {"MY_KEY": KEY}
    assert secret_values("MY_KEY", "http://u:hunter2hunter2@h:1", env) == [KEY, "hunter2hunter2"]
    assert secret_values("", "http://h:1", env) == []


def test_the_environment_block_is_read_from_proc_stat() -> None:
    fields = " ".join(str(n) for n in range(3, 53))
    assert environment_block(f"1 (a) b) {fields}") == (50, 51)
    assert environment_block("1 (short) S 1") is None


def test_a_key_the_model_writes_into_a_call_is_in_no_file_of_the_run(tmp_path, scripted_server):
    server = scripted_server(
        [
            Reply("use it", [("shell_exec", {"command": f"echo {KEY} | wc -c"})]),
            Reply(f"the key was {KEY}"),
            Reply("done"),
        ]
    )
    config = make_project(tmp_path, server.base_url, model={"api_key_env": "TEST_API_KEY"})

    result = run_with_key(config, max_turns=3)

    assert result.returncode == 3, result.stderr  # paused at its max_turns
    run_dir = tmp_path / ".ouroboros" / "runs" / run_events(tmp_path)[0]["run_id"]
    assert (run_dir / "state.json").is_file()
    for path in run_dir.rglob("*"):
        if path.is_file():
            assert KEY not in path.read_text(errors="replace"), path
    assert KEY not in result.stdout


def test_a_secret_shaped_like_json_leaves_every_record_whole(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "events.jsonl")
    log.redact = Redactor.of(["12345678", "completion_tokens", "token_usage"])
    log.emit(
        ev.TokenUsage(
            prompt_tokens=12345678,
            completion_tokens=5,
            total_tokens=12345683,
            context_limit=12345678,
            budget=100,
            context_used_pct=1.0,
            source="server",
        )
    )
    log.emit(
        ev.ErrorEvent(message="the password is 12345678, see completion_tokens", kind="token_usage")
    )
    log.close()
    usage, error = [
        json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()
    ]
    assert (usage["prompt_tokens"], usage["completion_tokens"]) == (12345678, 5)
    assert usage["context_limit"] == 12345678
    assert usage["type"] == "token_usage"
    assert error["message"] == f"the password is {REDACTED}, see {REDACTED}"
    assert error["kind"] == REDACTED


def test_a_key_too_short_to_redact_is_one_start_up_warning(tmp_path, scripted_server):
    server = scripted_server([Reply("done")])
    config = make_project(tmp_path, server.base_url, model={"api_key_env": "TEST_API_KEY"})

    result = run_with_key(config, max_turns=1, key="abc123")

    assert result.returncode == 3, result.stderr  # paused at its max_turns
    warning = (
        "the API key in $TEST_API_KEY is under 8 characters, too short to tell from "
        "ordinary text: not redacted from the log, the state or tool results"
    )
    assert result.stdout.count(warning) == 1, result.stdout


def test_a_secret_streamed_in_pieces_is_redacted_at_every_split() -> None:
    redact = Redactor.of([KEY])
    text = f"before {KEY} between {KEY[:5]} after {KEY}"
    expected = f"before {REDACTED} between {KEY[:5]} after {REDACTED}"
    for first in range(len(text)):
        for second in range(first, len(text)):
            shown: list[str] = []
            stream = StreamRedactor(redact, shown.append)
            for piece in (text[:first], text[first:second], text[second:]):
                stream(piece)
                assert KEY not in "".join(shown)
            stream.flush()
            assert "".join(shown) == expected, (first, second)


def test_text_that_only_looks_like_the_start_of_a_secret_is_held_then_let_out() -> None:
    assert held_back("the key sk-pr", [KEY]) == 5
    assert held_back("the key sk-prox", [KEY]) == 0
    assert held_back("", [KEY]) == 0


def test_a_secret_the_model_streams_never_reaches_the_dashboard(
    tmp_path, scripted_server, monkeypatch
) -> None:
    import asyncio
    import io

    from rich.console import Console

    from ouroboros.config import load_config
    from ouroboros.loop.runner import run_agent
    from ouroboros.ui.dashboard import DashboardState
    from ouroboros.ui.live import LiveDashboard

    key = "open sesame 0123456789"  # streamed as three pieces, a word each
    server = scripted_server([Reply(f"The key is {key} as you asked.")])
    config = make_project(tmp_path, server.base_url, model={"api_key_env": "TEST_API_KEY"})
    monkeypatch.setenv("TEST_API_KEY", key)
    loaded = load_config(config, {"agent.max_turns": 1}, env={}, user_file=None)
    dashboard = LiveDashboard(DashboardState(), Console(file=io.StringIO(), width=120))
    frames = Console(file=io.StringIO(), width=120, record=True)
    hooks = dashboard.hooks()
    show = hooks.on_text
    assert show is not None

    def shown_frame_by_frame(piece: str) -> None:  # each frame as the terminal would get it
        show(piece)
        frames.print(dashboard.renderable())

    hooks.on_text = shown_frame_by_frame
    asyncio.run(run_agent(loaded, hooks))

    seen = frames.export_text()
    assert "The key is" in seen and REDACTED in seen  # streamed, and redacted as it came
    assert "sesame" not in seen and "0123456789" not in seen
    assert "as you asked." in seen  # what came after the secret is shown


# -- a password in model.base_url -----------------------------------------------------------

PASSWORD = "hunter2-s3cret-pw"


def test_a_password_in_the_base_url_is_not_printed_when_the_server_is_unreachable(
    tmp_path: Path,
) -> None:
    config = make_project(
        tmp_path, f"http://me:{PASSWORD}@127.0.0.1:1/v1", model={"max_retry_secs": 1}
    )

    result = ouroboros("run", "--config", str(config), "--headless")
    shown = ouroboros("config", "show", "model.base_url", "--config", str(config))

    assert result.returncode == 1
    assert result.stderr.startswith(
        "error: cannot reach the model server at http://me:***@127.0.0.1:1:"
    ), result.stderr
    assert PASSWORD not in result.stdout + result.stderr
    assert "me:***@127.0.0.1:1" in shown.stdout and PASSWORD not in shown.stdout


def test_a_password_in_the_base_url_is_in_no_line_a_run_prints_or_logs(tmp_path, scripted_server):
    server = scripted_server([Reply("done")])
    url = server.base_url.replace("http://", f"http://me:{PASSWORD}@")
    config = make_project(tmp_path, url)

    result = ouroboros("run", "--config", str(config), "--headless", "--max-turns", "1")
    status = ouroboros("status", "--config", str(config))
    logs = ouroboros("logs", "--config", str(config))

    assert result.returncode in (0, 3, 5), result.stderr
    printed = "".join(r.stdout + r.stderr for r in (result, status, logs))
    assert PASSWORD not in printed
    assert PASSWORD not in json.dumps(run_events(tmp_path))


def test_a_shown_url_hides_what_its_userinfo_holds() -> None:
    from ouroboros.config.urls import shown_url

    assert shown_url("http://me:pw@127.0.0.1:1/v1") == "http://me:***@127.0.0.1:1/v1"
    assert shown_url("https://tok3n@example.com") == "https://***@example.com"
    assert shown_url("http://[::1]:8080") == "http://[::1]:8080"
    assert shown_url("http://me:p@ss@host/x@y") == "http://me:***@host/x@y"
    assert shown_url("http://host?next=a@b") == "http://host?next=a@b"


def test_a_bad_base_url_with_a_password_is_named_without_it(tmp_path: Path) -> None:
    config = make_project(tmp_path, "http://127.0.0.1:1")

    result = ouroboros(
        "run",
        "--config",
        str(config),
        "--headless",
        "--base-url",
        f"http://me:{PASSWORD}@host:99999",
    )

    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "error: model.base_url from flag --base-url must be an http:// or https:// URL with a "
        "host and a port from 1 to 65535, like http://127.0.0.1:11434, got "
        '"http://me:***@host:99999"'
    ]
