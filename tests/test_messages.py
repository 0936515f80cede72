"""Messages that tell the truth: real flag names, hints that fit the server, one wording for
masking, warnings at start for what would silently go wrong, whole command descriptions."""

from __future__ import annotations

import ast
import asyncio
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer
from typer.testing import CliRunner

import ouroboros
from ouroboros.cli import app
from ouroboros.config import load_config
from ouroboros.errors import ModelNotFoundError, ToolsNotSupportedError
from ouroboros.loop.runner import startup_warnings
from ouroboros.server.client import ChatClient
from ouroboros.server.kinds import hint, kind_from_answers, kind_from_url
from ouroboros.testing import Reply
from tests.helpers import make_project, of_type, run_events
from tests.helpers import ouroboros as run_command
from tests.ui_sample import write_sample_run

PACKAGE = Path(ouroboros.__file__).parent
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z-]*")
OTHER_PROGRAM = re.compile(r"`(?!ouroboros\b)[^`]*`")  # `llama-server --jinja`, not ours


def invoke(*args: str, columns: int = 100) -> object:
    env = {"COLUMNS": str(columns), "XDG_CONFIG_HOME": "/nonexistent-ouroboros-test"}
    return CliRunner(env=env).invoke(app, list(args))


# -- real flag names --


def every_command(command: Any) -> list[Any]:
    found = [command]
    for sub in getattr(command, "commands", {}).values():
        found += every_command(sub)
    return found


def known_flags() -> set[str]:
    flags = {"--help"}
    for command in every_command(typer.main.get_command(app)):
        for param in command.params:
            flags.update(o for o in param.opts + param.secondary_opts if o.startswith("--"))
    return flags


def docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring nodes: they describe code, they are not messages."""
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def flags_named_in_messages() -> dict[str, str]:
    """Each flag that a string in the package names, and where: every string literal (f-string
    parts included) but docstrings, regular expressions and commands of other programs."""
    named = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = docstrings(tree)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
                continue
            if id(node) in skip or "(?" in node.value or "\\s" in node.value:
                continue
            for flag in FLAG.findall(OTHER_PROGRAM.sub("", node.value)):
                named.setdefault(flag, f"{path.relative_to(PACKAGE)}:{node.lineno}")
    return named


def test_every_flag_a_message_names_exists():
    named = flags_named_in_messages()
    known = known_flags()

    assert {"--config", "--workspace", "--all"} <= named.keys()  # the walk sees messages
    assert {flag: where for flag, where in named.items() if flag not in known} == {}


def test_a_bad_run_flag_is_named_as_typed(tmp_path):
    config = make_project(tmp_path, "http://127.0.0.1:9")

    result = invoke("run", "-c", str(config), "--workspace", str(tmp_path / "nope"), "--headless")

    assert result.exit_code == 2
    assert "(agent.workspace from flag --workspace)" in result.stderr
    assert "--agent-workspace" not in result.stderr


# -- hints that fit the server --


@pytest.mark.parametrize(
    "url, kind",
    [
        ("http://127.0.0.1:11434", "ollama"),
        ("localhost", "ollama"),
        ("http://127.0.0.1:8080/v1", "llama.cpp"),
        ("http://gpu:8000", "vllm"),
        ("http://127.0.0.1:1234", "other"),
        ("https://api.example.com", "other"),
    ],
)
def test_the_url_suggests_a_server(url, kind):
    assert kind_from_url(url) == kind


def test_the_servers_answers_say_what_it_is():
    assert kind_from_answers({"version": "0.6.2"}, None, None) == "ollama"
    assert (
        kind_from_answers(
            None, {"default_generation_settings": {"n_ctx": 4096}}, {"data": [{"id": "m"}]}
        )
        == "llama.cpp"
    )
    assert kind_from_answers(None, None, {"data": [{"id": "m", "max_model_len": 32768}]}) == "vllm"
    assert kind_from_answers(None, None, {"data": [{"id": "m"}]}) is None


@pytest.mark.parametrize("situation", ["unreachable", "model_not_found", "no_tools"])
def test_only_ollama_hints_name_ollama(situation):
    hints = {
        kind: hint(kind, situation, "qwen3:8b") for kind in ("ollama", "llama.cpp", "vllm", "other")
    }

    assert "ollama" in hints["ollama"]
    assert all(
        "ollama" not in text.replace("`ollama serve`, ", "")
        for kind, text in hints.items()
        if kind != "ollama"
    )
    assert "llama-server" in hints["llama.cpp"] and "vllm" in hints["vllm"]
    assert len(set(hints.values())) == 4


def test_the_hints_say_what_to_do():
    assert (
        hint("ollama", "model_not_found", "qwen3:8b")
        == "run `ollama pull qwen3:8b` or set model.name to one of them"
    )
    assert hint("ollama", "unreachable") == (
        "is `ollama serve` running there? (set model.base_url or OLLAMA_HOST to point elsewhere)"
    )
    assert "--jinja" in hint("llama.cpp", "no_tools")
    assert "--enable-auto-tool-choice" in hint("vllm", "no_tools")


def failure(routes: dict[str, httpx.Response], base_url: str, **options) -> str:
    """The message of a chat request that fails against a server answering `routes`."""

    def answer(request: httpx.Request) -> httpx.Response:
        return routes.get(f"{request.method} {request.url.path}", httpx.Response(404))

    async def go() -> str:
        async with ChatClient(
            base_url, "qwen3:8b", transport=httpx.MockTransport(answer), **options
        ) as client:
            with pytest.raises((ModelNotFoundError, ToolsNotSupportedError)) as caught:
                await client.complete([{"role": "user", "content": "hi"}], [])
            return caught.value.message

    return asyncio.run(go())


def test_a_missing_model_on_llama_cpp_gets_no_ollama_hint():
    routes = {
        "GET /props": httpx.Response(200, json={"default_generation_settings": {}}),
        "GET /v1/models": httpx.Response(200, json={"data": [{"id": "gemma"}]}),
        "POST /v1/chat/completions": httpx.Response(
            404, json={"error": {"message": "model 'qwen3:8b' not found"}}
        ),
    }

    message = failure(routes, "http://127.0.0.1:8081")

    assert "the server has: gemma" in message
    assert "ollama" not in message and "llama-server" in message


def test_a_missing_model_on_vllm_says_how_to_serve_it():
    routes = {
        "GET /v1/models": httpx.Response(
            200, json={"data": [{"id": "mistral", "max_model_len": 32768}]}
        ),
        "POST /v1/chat/completions": httpx.Response(
            404, json={"error": {"message": "The model `qwen3:8b` does not exist."}}
        ),
    }

    message = failure(routes, "http://127.0.0.1:9000")

    assert "`vllm serve qwen3:8b`" in message and "ollama" not in message


def test_a_kind_the_caller_knows_wins_over_the_port():
    routes = {
        "POST /v1/chat/completions": httpx.Response(
            400, json={"error": {"message": "qwen3:8b does not support tools"}}
        )
    }

    message = failure(routes, "http://127.0.0.1:11434", server_kind="llama.cpp")

    assert "--jinja" in message and "ollama" not in message


def test_an_unreachable_llama_server_gets_a_llama_server_hint():
    message = ChatClient("http://127.0.0.1:8080", "m").unreachable().message

    assert "llama-server" in message and "ollama" not in message


# -- one wording for masking --


def test_status_stats_and_logs_speak_of_masked_tool_results(tmp_path):
    config = tmp_path / "ouroboros.toml"
    config.write_text("")
    write_sample_run(tmp_path / ".ouroboros")

    outputs = {
        command: invoke(command, "-c", str(config)).output
        for command in ("status", "stats", "logs")
    }

    assert "5 tool results masked (2 masking rounds)" in outputs["status"]
    assert "5 tool results masked (2 masking rounds)" in outputs["stats"]
    assert "masked 3 tool results" in outputs["logs"]
    for command, output in outputs.items():
        assert "observations" not in output, command
        assert not re.search(r"\bmasks\b|masked obs", output), command


# -- warnings at start --


def loaded_project(tmp_path: Path, prompt: str, **model: object):
    config = make_project(tmp_path, "http://127.0.0.1:9", prompt=prompt, model=model)
    return load_config(config, env={}, user_file=None)


def test_an_unset_key_variable_and_an_empty_prompt_are_warned_about(tmp_path):
    loaded = loaded_project(tmp_path, "  \n", api_key_env="MY_SERVER_KEY")

    warnings = startup_warnings(loaded, {})

    assert warnings == [
        "model.api_key_env names MY_SERVER_KEY, which is not set in the environment: "
        "requests go without an API key",
        f"the system prompt {loaded.system_prompt_path} is empty: the agent starts with no "
        "mission (write it in that file)",
    ]
    assert startup_warnings(loaded, {"MY_SERVER_KEY": "k"}) == warnings[1:]


def test_a_set_key_and_a_written_prompt_give_no_warning(tmp_path):
    loaded = loaded_project(tmp_path, "Keep the notes tidy.", api_key_env="MY_SERVER_KEY")

    assert startup_warnings(loaded, {"MY_SERVER_KEY": "k"}) == []
    assert startup_warnings(loaded_project(tmp_path / "b", "Work."), {}) == []


def test_a_run_starts_with_those_warnings(tmp_path, scripted_server):
    server = scripted_server([Reply("Nothing to do.")])
    make_project(
        tmp_path,
        server.base_url,
        prompt="",
        model={"api_key_env": "MY_SERVER_KEY"},
        agent={"max_turns": 1},
    )

    result = run_command("run", "--headless", cwd=tmp_path)

    assert result.returncode == 3, result.stderr
    warnings = [e["message"] for e in of_type(run_events(tmp_path), "warning")]
    assert any("MY_SERVER_KEY" in w for w in warnings)
    assert any("is empty" in w for w in warnings)
    assert "WARNING model.api_key_env names MY_SERVER_KEY" in result.stdout


# -- whole command descriptions --


@pytest.mark.parametrize("group", [[], ["config"]])
def test_help_lists_every_command_without_cutting_it(group):
    result = invoke(*group, "--help", columns=80)

    assert result.exit_code == 0
    listed = result.output.split("Commands:\n", 1)[1].splitlines()
    command = typer.main.get_command(app)
    for name in group:
        command = command.commands[name]
    assert [line.split()[0] for line in listed if line.strip()] == list(command.commands)
    assert not [line for line in listed if line.rstrip().endswith("...")]
