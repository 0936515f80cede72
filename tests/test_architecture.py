"""The house rules a newcomer relies on: modules a reader can take in, and imports that
point one way (cli -> runner -> session -> client, context, tools, events)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "ouroboros"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 50
# Each layer may import the ones after it, never one before it.
LAYERS = (
    ("cli",),
    ("runner", "startup", "restart"),
    ("session", "actions", "upkeep", "checkpoints", "flow", "idling"),
    ("client", "context", "conversation", "tools", "events", "eventlog"),
)


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imports_of(path: Path, name: str, known: set[str], deferred: bool = False) -> set[str]:
    """The ouroboros modules `name` imports when it is loaded: top-level imports, and with
    `deferred` also the ones inside functions (those cannot make a cycle at load time, but
    still point one way or the other). `from package import module` imports the module;
    `from module import name` the module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree) if deferred else tree.body:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            submodules = {f"{base}.{alias.name}" for alias in node.names} & known
            found.update(submodules or {base})
    return found & known - {name}


def graph(deferred: bool = False) -> dict[str, set[str]]:
    known = modules()
    return {name: imports_of(path, name, set(known), deferred) for name, path in known.items()}


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(edges.get(node, ())):
            if state.get(dep) == 1:
                return stack[stack.index(dep):] + [dep]
            if dep not in state and (cycle := visit(dep)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def layer_of(module: str) -> int | None:
    short = module.removeprefix("ouroboros.")
    for index, layer in enumerate(LAYERS):
        if any(short == n or short.startswith(f"{n}.") for n in layer):
            return index
    return None


def test_no_import_cycles() -> None:
    edges = graph()
    assert {"ouroboros.config", "ouroboros.tools"} <= edges["ouroboros.startup"]  # not vacuous
    assert find_cycle(edges) is None


def test_imports_point_one_way_from_the_cli_down() -> None:
    wrong = []
    for module, deps in graph(deferred=True).items():
        mine = layer_of(module)
        for dep in deps:
            theirs = layer_of(dep)
            if mine is not None and theirs is not None and theirs < mine:
                wrong.append(f"{module} imports {dep}")
    assert not wrong


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_module_is_too_long_to_take_in() -> None:
    long = []
    for name, path in modules().items():
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_MODULE_LINES:
            long.append(f"{name}: {lines} lines")
    assert not long


def test_no_function_is_too_long_to_take_in() -> None:
    long = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    long.append(f"{name}.{node.name}: {length} lines")
    assert not long
