"""Tool arguments declared once, as a pydantic model: the JSON schema the server is sent and the
check of what the model sends both come from it.

    class ReadArguments(ToolArguments):
        path: str = Field(description="File path, relative to the workspace.")
        offset: int = Field(1, ge=1, description="First line to read (1-based). Default 1.")

    parameters(ReadArguments)  # {"type": "object", "properties": {...}, "required": ["path"], ...}
    ReadArguments.check({"path": "a.md", "offset": 0})
    # ArgumentError: argument 'offset' must be at least 1, got 0

Validation is strict: "5" is not an integer and true is not a number, so a model learns the
type the schema asks for instead of having a guess accepted. A null for an optional argument
counts as omitted, as models often send null for what they mean to leave out. Unknown arguments
are refused, naming the ones there are, unless a model sets `extra="ignore"`.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from collections.abc import Mapping
from typing import Any, Generic, Self, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator
from pydantic_core import ErrorDetails

from ouroboros.protocols import ToolResult

__all__ = [
    "ArgumentError",
    "ModelTool",
    "ToolArguments",
    "argument_failure",
    "function_schema",
    "json_type",
    "parameters",
    "parse_arguments",
]

_BOUNDS = {
    "greater_than_equal": ("ge", "at least"),
    "less_than_equal": ("le", "at most"),
    "greater_than": ("gt", "more than"),
    "less_than": ("lt", "less than"),
}


class ArgumentError(ValueError):
    """Arguments a tool cannot take: one problem a line, each telling the model what to send."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


def argument_failure(tool: str, problems: list[str]) -> ToolResult:
    """The result the model sees for arguments `tool` cannot take: one `error:` line a problem."""
    content = "\n".join(f"error: {tool}: {problem}" for problem in problems)
    return ToolResult(content, ok=False, meta={"tool": tool})


def json_type(value: Any) -> str:
    """The JSON Schema type name of a parsed JSON value."""
    if value is None:
        return "null"
    for kind, name in (
        (bool, "boolean"),
        (int, "integer"),
        (float, "number"),
        (str, "string"),
        (list, "array"),
        (dict, "object"),
    ):
        if isinstance(value, kind):
            return name
    return type(value).__name__


def parse_arguments(text: str) -> dict[str, Any]:
    """The JSON object the model sent as a call's arguments; empty text means no arguments.

    parse_arguments('{"path": "a.md"}')  # -> {"path": "a.md"}
    """
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise ArgumentError(
            [
                f"the arguments are not valid JSON ({error}); send them as one JSON object, "
                'e.g. {"name": "value"}'
            ]
        ) from error
    if not isinstance(value, dict):
        raise ArgumentError([f"the arguments must be a JSON object, not {json_type(value)}"])
    return value


class ToolArguments(BaseModel):
    """The arguments of one tool. Subclass it with a `Field(description=...)` per argument and
    bounds as `ge`/`le`; `parameters()` turns it into the schema, `check()` validates."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _null_means_omitted(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        fields = cls.model_fields
        return {
            name: value
            for name, value in data.items()
            if value is not None or name not in fields or fields[name].is_required()
        }

    @classmethod
    def check(cls, arguments: Mapping[str, Any]) -> Self:
        """`arguments` as this model, or ArgumentError naming every argument that is wrong."""
        try:
            return cls.model_validate(arguments)
        except ValidationError as error:
            properties = parameters(cls)["properties"]
            raise ArgumentError(
                [_problem(detail, properties) for detail in error.errors(include_url=False)]
            ) from None


def _problem(detail: ErrorDetails, properties: dict[str, Any]) -> str:
    """One pydantic error as one line for the model: the argument, what is allowed, what came."""
    loc = detail["loc"]
    if not loc:
        return detail["msg"]
    name = f"{loc[0]}" + "".join(f"[{part}]" for part in loc[1:])
    kind, given, context = detail["type"], detail["input"], detail.get("ctx", {})
    expected = _describe(properties.get(name, {}))
    if kind == "missing":
        return f"missing required argument '{name}' ({expected})"
    if kind == "extra_forbidden":
        return f"unknown argument '{name}'; the arguments are: {', '.join(properties)}"
    if kind.endswith("_type") and name in properties:
        return f"argument '{name}' must be {expected}, got {json_type(given)}"
    if kind in _BOUNDS:
        key, words = _BOUNDS[kind]
        return f"argument '{name}' must be {words} {context[key]}, got {_shown(given)}"
    subject, _, said = detail["msg"].partition(" ")  # "Input should be ...", "String should ..."
    return f"argument '{name}' {said if subject.istitle() else detail['msg']}, got {_shown(given)}"


def _describe(spec: Mapping[str, Any]) -> str:
    declared = spec.get("type", [])
    return " or ".join([declared] if isinstance(declared, str) else declared) or "any type"


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 60 else f"{text[:57]}..."


def parameters(model: type[BaseModel]) -> dict[str, Any]:
    """The JSON schema of `model` as OpenAI-compatible servers expect tool parameters, and no
    more: every byte is sent with every request. No titles or defaults (the descriptions say
    them), and an optional `X | None` is sent as plain `X` (a null counts as omitted), since
    some local servers cannot read `anyOf`."""
    return copy.deepcopy(_parameters(model))


@functools.cache
def _parameters(model: type[BaseModel]) -> dict[str, Any]:
    """parameters(), made once per model: pydantic takes milliseconds per schema, and every
    session start and restart asks for every tool's."""
    raw = model.model_json_schema()
    if "$defs" in raw:
        raise TypeError(f"{model.__name__}: tool arguments must be flat, without nested models")
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {name: _property(spec) for name, spec in raw["properties"].items()},
        "required": raw.get("required", []),
    }
    if raw.get("additionalProperties") is False:
        schema["additionalProperties"] = False
    return schema


def _property(spec: Mapping[str, Any]) -> dict[str, Any]:
    rest = {key: value for key, value in spec.items() if key not in ("title", "default")}
    branches = [branch for branch in rest.pop("anyOf", []) if branch != {"type": "null"}]
    if len(branches) == 1:
        rest = {**branches[0], **rest}
    elif branches:
        rest["anyOf"] = branches
    description = rest.pop("description", None)
    ordered = {"type": rest.pop("type")} if "type" in rest else {}
    ordered.update(rest)
    if description is not None:
        ordered["description"] = description
    return ordered


def function_schema(name: str, description: str, model: type[BaseModel]) -> dict[str, Any]:
    """The OpenAI function-tool definition of a tool whose arguments are `model`."""
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters(model)},
    }


def brief_schema(schema: dict[str, Any], description: str = "") -> dict[str, Any]:
    """A tool definition's short form, for a window too small to spend on the full one: the
    `description` given (else the full one's first sentence), the arguments' names, types
    and which are required, and no more (no argument descriptions, bounds or
    `additionalProperties`: each call is still checked whole by its tool)."""
    function = schema["function"]
    described = function.get("description", "")
    first = description or re.split(r"(?<=[.!?])\s", described, maxsplit=1)[0]
    parameters = function.get("parameters", {})
    properties = {
        name: {
            key: value for key, value in spec.items() if key in ("type", "anyOf", "enum", "items")
        }
        for name, spec in parameters.get("properties", {}).items()
    }
    brief = {"type": "object", "properties": properties}
    if parameters.get("required"):
        brief["required"] = parameters["required"]
    return {
        "type": "function",
        "function": {"name": function["name"], "description": first, "parameters": brief},
    }


A = TypeVar("A", bound=ToolArguments)


class ModelTool(Generic[A]):
    """A tool whose arguments are a ToolArguments model: `schema()` and the check of every call
    come from `Arguments`; subclasses give `name`, `Arguments`, `description()` and `call()`.

        class Echo(ModelTool[EchoArguments]):
            name, Arguments = "echo", EchoArguments
            def description(self) -> str: return "Say the text back."
            async def call(self, arguments: EchoArguments) -> ToolResult: ...
    """

    name: str
    Arguments: type[A]
    subject: str = ""  # the argument that says what a call is about (see protocols.Tool)
    brief: str = ""  # the description in a few words, for small windows ("": its first sentence)

    def description(self) -> str:
        raise NotImplementedError

    def schema(self) -> dict[str, Any]:
        return function_schema(self.name, self.description(), self.Arguments)

    async def run(self, arguments: dict[str, Any]) -> ToolResult:
        """Check `arguments` against the model, then call the tool; arguments it cannot take
        come back as an `error:` result naming each problem."""
        try:
            checked = self.Arguments.check(arguments)
        except ArgumentError as error:
            return argument_failure(self.name, error.problems)
        return await self.call(checked)

    async def call(self, arguments: A) -> ToolResult:
        raise NotImplementedError
