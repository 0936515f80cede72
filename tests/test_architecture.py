"""The house rules a newcomer relies on: packages named for concepts whose imports point one
way (cli -> demo -> ui -> loop -> testing -> tools -> sandbox -> server -> store -> window ->
config -> the base modules), no import cycles, functions a reader can take in, and modules
that stay one concept (no length rule below ~800 lines: cohesion is the measure)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "ouroboros"
MAX_MODULE_LINES = 800
MAX_FUNCTION_LINES = 50
MAX_TOP_LEVEL_MODULES = 6
# Each layer may import the ones after it, never one before it. A package's __init__ says
# what it owns and what it may import.
LAYERS = (
    ("cli",),
    ("demo",),
    ("ui", "metrics"),  # the readers of a run's events
    ("loop",),
    ("testing",),
    ("tools",),
    ("sandbox",),
    ("server",),
    ("window",),
    ("config",),
    ("store",),
    ("errors", "protocols"),
)
# Leaf modules a lower layer may still use: config validates blocked patterns as screening
# compiles them; the seams name the event type for type checkers only.
EXCEPTIONS = {
    ("ouroboros.config.schema", "ouroboros.tools.screening"),
    ("ouroboros.protocols", "ouroboros.store.events"),
}


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
    assert {"ouroboros.config", "ouroboros.tools"} <= edges["ouroboros.loop.startup"]  # not vacuous
    assert find_cycle(edges) is None


def test_the_store_has_no_cycle_even_through_a_deferred_import() -> None:
    """Data flows one way in the store (events -> summary -> segments -> retention -> log):
    an import inside a function would only hide a circle."""
    edges = graph(deferred=True)
    store = {module: {dep for dep in deps if dep.startswith("ouroboros.store.")}
             for module, deps in edges.items() if module.startswith("ouroboros.store.")}
    assert "ouroboros.store.segments" in store["ouroboros.store.log"]  # not vacuous
    assert find_cycle(store) is None


def test_imports_point_one_way_from_the_cli_down() -> None:
    wrong = []
    for module, deps in graph(deferred=True).items():
        mine = layer_of(module)
        for dep in deps:
            theirs = layer_of(dep)
            exempt = (module, dep) in EXCEPTIONS
            if mine is not None and theirs is not None and theirs < mine and not exempt:
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


def test_every_module_has_a_package_named_for_its_concept() -> None:
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, top
    unplaced = [name for name in modules() if name != "ouroboros" and layer_of(name) is None
                and name not in ("ouroboros.__main__",)]
    assert not unplaced


def test_every_package_says_what_it_owns() -> None:
    silent = [str(init.parent.name) for init in PACKAGE.glob("*/__init__.py")
              if not (ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or "").strip()]
    assert not silent
