"""The window's state has one owner: no module outside window/ assigns a field of the context
manager; the loop tells it what it learned (told, probed_with, reclaim, configure, ...) and
the window decides what to make of it."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "ouroboros"


def names_the_context(node: ast.expr) -> bool:
    """`context`, `self.context`, `state.context`, `runner.state.context`..."""
    return (isinstance(node, ast.Name) and node.id == "context") or (
        isinstance(node, ast.Attribute) and node.attr == "context"
    )


def writes(tree: ast.AST) -> list[int]:
    """The lines assigning an attribute of the context manager (or deeper: context.x.y,
    context.x[k])."""
    lines = []
    for node in ast.walk(tree):
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, (ast.AugAssign, ast.AnnAssign))
            else []
        )
        for target in targets:
            while isinstance(target, (ast.Attribute, ast.Subscript)):
                if names_the_context(target.value):
                    lines.append(node.lineno)
                    break
                target = target.value
    return lines


def test_no_module_outside_window_writes_window_state() -> None:
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{line}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if "window" not in path.parts
        for line in writes(ast.parse(path.read_text()))
    ]
    assert not found, "the window's state assigned outside window/"


def test_a_write_to_the_window_from_outside_is_found() -> None:
    code = (
        "def f(state):\n    x = 1\n    state.context.window = 2\n    self.context.revision += 1\n"
        "    context.observations['c0'] = 3\n    rows[0] = 4\n"
    )
    assert writes(ast.parse(code)) == [3, 4, 5]
