import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import Field

from ouroboros.protocols import ToolCall, ToolResult
from ouroboros.tools import ModelTool, Recall, ToolArguments, Toolbox, default_tools
from ouroboros.tools.arguments import parameters


class RepeatArguments(ToolArguments):
    text: str = Field(description="What to repeat.")
    times: int = Field(1, ge=1, le=10, description="How often.")
    sep: str | None = None


class Repeat(ModelTool[RepeatArguments]):
    """A tool that records what it was given."""

    name = "repeat"
    Arguments = RepeatArguments

    def __init__(self) -> None:
        self.received: list[RepeatArguments] = []

    def description(self) -> str:
        return "Repeat a text."

    async def call(self, arguments: RepeatArguments) -> ToolResult:
        self.received.append(arguments)
        return ToolResult((arguments.sep or "").join([arguments.text] * arguments.times))


def free_form(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}


class Clock:
    name = "clock"
    subject = ""

    def schema(self) -> dict[str, Any]:
        return free_form(self.name)

    async def run(self, arguments: dict[str, Any]) -> ToolResult:
        return ToolResult(f"noon {sorted(arguments)}")


class Broken:
    name = "broken"
    subject = ""

    def schema(self) -> dict[str, Any]:
        return free_form(self.name)

    async def run(self, arguments: dict[str, Any]) -> ToolResult:
        raise RuntimeError("disk on fire")


def call(toolbox: Toolbox, name: str, arguments: str) -> ToolResult:
    return asyncio.run(toolbox.run(ToolCall(id="call_1", name=name, arguments=arguments)))


@pytest.fixture
def repeat() -> Repeat:
    return Repeat()


@pytest.fixture
def toolbox(repeat: Repeat) -> Toolbox:
    return Toolbox([repeat, Clock(), Broken()])


def test_runs_the_named_tool_with_parsed_arguments(toolbox: Toolbox, repeat: Repeat) -> None:
    result = call(toolbox, "repeat", '{"text": "ab", "times": 3}')
    assert result == ToolResult("ababab")
    assert repeat.received == [RepeatArguments(text="ab", times=3)]


def test_empty_arguments_mean_no_arguments(toolbox: Toolbox) -> None:
    assert call(toolbox, "clock", "").content == "noon []"


def test_unknown_tool_lists_the_available_ones(toolbox: Toolbox) -> None:
    result = call(toolbox, "teleport", "{}")
    assert not result.ok
    assert result.content == (
        "error: unknown tool 'teleport'; available tools: repeat, clock, broken"
    )


def test_unparseable_arguments_quote_the_parse_error(toolbox: Toolbox, repeat: Repeat) -> None:
    result = call(toolbox, "repeat", '{"text": "ab",')
    assert not result.ok
    assert result.content.startswith("error: repeat: the arguments are not valid JSON (Expecting")
    assert "JSON object" in result.content
    assert repeat.received == []


@pytest.mark.parametrize(
    ("arguments", "kind"), [('["ab"]', "array"), ('"ab"', "string"), ("3", "integer")]
)
def test_arguments_must_be_an_object(toolbox: Toolbox, arguments: str, kind: str) -> None:
    result = call(toolbox, "repeat", arguments)
    assert not result.ok
    assert result.content == f"error: repeat: the arguments must be a JSON object, not {kind}"


def test_missing_required_argument_is_named_with_its_type(toolbox: Toolbox, repeat: Repeat) -> None:
    result = call(toolbox, "repeat", '{"times": 2}')
    assert not result.ok
    assert result.content == "error: repeat: missing required argument 'text' (string)"
    assert repeat.received == []


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ('{"text": 5}', "argument 'text' must be string, got integer"),
        ('{"text": "a", "times": "2"}', "argument 'times' must be integer, got string"),
        ('{"text": "a", "times": true}', "argument 'times' must be integer, got boolean"),
        ('{"text": "a", "times": 2.5}', "argument 'times' must be integer, got number"),
    ],
)
def test_wrong_types_name_the_argument_and_the_expected_type(
    toolbox: Toolbox, repeat: Repeat, arguments: str, message: str
) -> None:
    result = call(toolbox, "repeat", arguments)
    assert not result.ok
    assert result.content == f"error: repeat: {message}"
    assert repeat.received == []


@pytest.mark.parametrize(
    ("times", "message"),
    [
        (0, "argument 'times' must be at least 1, got 0"),
        (11, "argument 'times' must be at most 10, got 11"),
    ],
)
def test_bounds_name_the_argument_and_what_is_allowed(
    toolbox: Toolbox, repeat: Repeat, times: int, message: str
) -> None:
    result = call(toolbox, "repeat", json.dumps({"text": "a", "times": times}))
    assert not result.ok
    assert result.content == f"error: repeat: {message}"
    assert repeat.received == []


def test_every_problem_gets_a_line_of_its_own(toolbox: Toolbox) -> None:
    result = call(toolbox, "repeat", '{"times": 0, "sep": 1, "tims": 2}')
    assert result.content.splitlines() == [
        "error: repeat: missing required argument 'text' (string)",
        "error: repeat: argument 'times' must be at least 1, got 0",
        "error: repeat: argument 'sep' must be string, got integer",
        "error: repeat: unknown argument 'tims'; the arguments are: text, times, sep",
    ]


def test_the_schema_sent_to_the_server_comes_from_the_arguments_model(repeat: Repeat) -> None:
    assert repeat.schema() == {
        "type": "function",
        "function": {
            "name": "repeat",
            "description": "Repeat a text.",
            "parameters": {
                "type": "object",
                "properties": {
                    "text": {"type": "string", "description": "What to repeat."},
                    "times": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": 10,
                        "description": "How often.",
                    },
                    "sep": {"type": "string"},
                },
                "required": ["text"],
                "additionalProperties": False,
            },
        },
    }


def test_unknown_arguments_are_refused_when_the_schema_says_so(toolbox: Toolbox) -> None:
    result = call(toolbox, "repeat", '{"text": "a", "tims": 2}')
    assert result.content == (
        "error: repeat: unknown argument 'tims'; the arguments are: text, times, sep"
    )
    assert call(toolbox, "clock", '{"anything": 1}').content == "noon ['anything']"


def test_null_for_an_optional_argument_counts_as_omitted(toolbox: Toolbox, repeat: Repeat) -> None:
    assert call(toolbox, "repeat", '{"text": "a", "times": null, "sep": null}') == ToolResult("a")
    assert repeat.received == [RepeatArguments(text="a")]
    assert call(toolbox, "repeat", '{"text": null}').content == (
        "error: repeat: argument 'text' must be string, got null"
    )


def test_an_exception_inside_a_tool_becomes_an_error_result(toolbox: Toolbox) -> None:
    result = call(toolbox, "broken", "{}")
    assert not result.ok
    assert result.content == "error: broken failed: RuntimeError: disk on fire"


def test_tool_names_are_unique(repeat: Repeat) -> None:
    toolbox = Toolbox([repeat])
    with pytest.raises(ValueError, match="repeat"):
        toolbox.add(Repeat())
    toolbox.add(Clock())
    assert toolbox.names == ["repeat", "clock"]


def test_default_tools_work_together_in_the_workspace(tmp_path: Path) -> None:
    events: list[dict[str, Any]] = []
    toolbox = Toolbox(
        default_tools(
            tmp_path,
            shell_timeout_secs=30,
            max_output_bytes=10_000,
            blocked_patterns=[],
            secret_env_names=[],
            on_security=events.append,
        )
    )
    assert toolbox.names == ["file_read", "file_write", "shell_exec", "list_dir"]
    assert [schema["function"]["name"] for schema in toolbox.schemas()] == toolbox.names
    assert all(schema["type"] == "function" for schema in toolbox.schemas())

    assert call(toolbox, "file_write", '{"path": "a/b.txt", "content": "hello\\n"}').ok
    catted = call(toolbox, "shell_exec", '{"command": "cat a/b.txt"}')
    assert catted.content == "hello\n[exit code 0]"
    assert call(toolbox, "file_read", '{"path": "a/b.txt"}').content == "hello\n"
    assert call(toolbox, "list_dir", "{}").content == "a/"
    escaped = call(toolbox, "file_read", '{"path": "../x"}')
    assert escaped.content.startswith("error: path '../x' is outside")
    assert events == [{"kind": "path_escape", "tool": "file_read", "path": "../x"}]


def shipped_tools(tmp_path: Path, allow_complete: bool = True) -> list:
    return default_tools(
        tmp_path,
        shell_timeout_secs=30,
        max_output_bytes=10_000,
        blocked_patterns=[],
        secret_env_names=[],
        on_security=print,
        recall=Recall(tmp_path),
        allow_complete=allow_complete,
    )


def test_a_run_gets_every_tool_from_one_registry(tmp_path: Path) -> None:
    toolbox = Toolbox(shipped_tools(tmp_path))
    assert toolbox.names == [
        "file_read",
        "file_write",
        "shell_exec",
        "list_dir",
        "recall",
        "task_complete",
    ]
    without = shipped_tools(tmp_path, allow_complete=False)
    assert "task_complete" not in [tool.name for tool in without]


@pytest.mark.parametrize(
    "name, arguments, subject",
    [
        ("file_read", '{"path": "notes/todo.md", "limit": 3}', "notes/todo.md"),
        ("file_write", '{"content": "x", "path": "out.txt"}', "out.txt"),
        ("list_dir", '{"path": "src"}', "src"),
        ("shell_exec", '{"command": "pytest -q"}', "pytest -q"),
        ("recall", '{"id": "obs-12", "offset": 100}', "obs-12"),
        ("task_complete", '{"summary": "all parts done"}', "all parts done"),
        ("shell_exec", '{"command": ["not", "a", "string"]}', ""),
        ("shell_exec", "not json", ""),
        ("no_such_tool", '{"path": "a"}', ""),
    ],
)
def test_each_tool_names_what_a_call_is_about(tmp_path: Path, name, arguments, subject) -> None:
    toolbox = Toolbox(shipped_tools(tmp_path))
    assert toolbox.subject(ToolCall("c1", name, arguments)) == subject


def test_every_shipped_tool_sends_the_schema_of_its_arguments_model(tmp_path: Path) -> None:
    tools = shipped_tools(tmp_path)
    for tool in tools:
        sent = tool.schema()["function"]["parameters"]
        assert sent == parameters(tool.Arguments), tool.name
        assert sent["properties"], tool.name


def test_the_short_form_of_the_tools_keeps_what_a_call_needs_in_fewer_bytes(tmp_path: Path):
    toolbox = Toolbox(
        default_tools(
            tmp_path,
            shell_timeout_secs=30,
            max_output_bytes=10_000,
            blocked_patterns=[],
            secret_env_names=[],
            on_security=print,
            allow_complete=True,
        )
    )
    full, brief = toolbox.schemas(), toolbox.brief_schemas()
    assert len(json.dumps(brief)) < 0.7 * len(json.dumps(full))
    for long, short in zip(full, brief):
        wanted, given = long["function"]["parameters"], short["function"]["parameters"]
        assert short["function"]["name"] == long["function"]["name"]
        assert set(given["properties"]) == set(wanted["properties"])
        assert given.get("required", []) == wanted["required"]
        assert all(set(spec) == {"type"} for spec in given["properties"].values())
    described = {s["function"]["name"]: s["function"]["description"] for s in brief}
    assert described["file_read"] == "Read a UTF-8 text file in the workspace."  # 1st sentence
    assert "whole task is done" in described["task_complete"]  # a short form of its own
