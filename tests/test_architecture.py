"""The house rules a newcomer relies on: packages named for concepts whose imports point one
way, in the order of LAYERS

    cli -> demo -> ui, metrics -> loop -> testing -> tools -> sandbox -> server -> window ->
    config -> store -> errors, protocols

each package importing only what its `__init__` docstring says it may ("May import `store`,
`config` and the base modules."), no import cycles (imports inside functions included),
functions a reader can take in, and modules that stay one concept (no length rule below ~450
statements: cohesion is the measure). Length is counted in statements (every statement in the
body, nested ones included, as the parser sees them), not physical lines, so a formatter that
wraps a call one argument per line changes no count. Where the code breaks a rule today, the
exception is named here with its reason, never allowed silently."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "ouroboros"
# In statements (see `statements`): today's longest module has 366, the longest function 33.
MAX_MODULE_STATEMENTS = 450
MAX_FUNCTION_STATEMENTS = 36
MAX_TOP_LEVEL_MODULES = 6
# Each layer may import the ones after it, never one before it.
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
# What every package may import: the error tree, the seams and the package's version.
BASE_MODULES = ("ouroboros", "ouroboros.errors", "ouroboros.protocols")
# Imports that break a rule, each with why it is there and what would remove it.
EXCEPTIONS = {
    (
        "ouroboros.config.schema",
        "ouroboros.tools.screening",
    ): "config validates blocked patterns as screening compiles them (inside the validator)",
    (
        "ouroboros.protocols",
        "ouroboros.store.events",
    ): "the seams name the event type for type checkers only (under TYPE_CHECKING)",
    (
        "ouroboros.ui.dashboard",
        "ouroboros.window.ledger",
    ): "the dashboard sizes a handoff whose event gives no count with the window's "
    "characters-per-token estimate; goes when the handoff event carries its count",
}
# Import cycles known today, as the modules in each: none.
KNOWN_CYCLES: set[frozenset[str]] = set()


def module_name(path: Path, root: Path = PACKAGE) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(root: Path = PACKAGE) -> dict[str, Path]:
    return {module_name(path, root): path for path in sorted(root.rglob("*.py"))}


@cache
def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def imports_of(path: Path, name: str, known: set[str], deferred: bool = True) -> set[str]:
    """The modules of `known` that `name` imports: every import in the file, those inside
    functions and under TYPE_CHECKING included (a deferred import still points one way or
    the other, and still closes a cycle when its function runs); with `deferred` False only
    the top-level ones. `from package import module` imports the module; `from module
    import name` the module."""
    tree = parsed(path)
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


@cache
def graph(deferred: bool = True, root: Path = PACKAGE) -> dict[str, set[str]]:
    known = modules(root)
    return {name: imports_of(path, name, set(known), deferred) for name, path in known.items()}


def cycles(edges: dict[str, set[str]]) -> set[frozenset[str]]:
    """Every set of modules that import one another round a circle (the strongly connected
    components of more than one module, Tarjan's algorithm)."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: set[frozenset[str]] = set()

    def visit(node: str) -> None:
        order[node] = low[node] = len(order)
        stack.append(node)
        for dep in sorted(edges.get(node, ())):
            if dep not in order:
                visit(dep)
                low[node] = min(low[node], low[dep])
            elif dep in stack:
                low[node] = min(low[node], order[dep])
        if low[node] == order[node]:
            component = stack[stack.index(node) :]
            del stack[stack.index(node) :]
            if len(component) > 1:
                found.add(frozenset(component))

    for node in sorted(edges):
        if node not in order:
            visit(node)
    return found


def layer_of(module: str) -> int | None:
    short = module.removeprefix("ouroboros.")
    for index, layer in enumerate(LAYERS):
        if any(short == n or short.startswith(f"{n}.") for n in layer):
            return index
    return None


def packages() -> dict[str, Path]:
    return {init.parent.name: init for init in sorted(PACKAGE.glob("*/__init__.py"))}


def docstring(path: Path) -> str:
    return ast.get_docstring(parsed(path)) or ""


def may_import(text: str) -> tuple[str, ...] | None:
    """What a package's docstring says it may import: the `names` of its sentence "May import
    `a`, `b.c` and the base modules." up to its first period or semicolon (after it, "never
    `ui`" is not a permission); None when it has no such sentence."""
    sentence = re.search(r"May\s+import\s+(.*?)(?:[.;](?=\s|$))", text, re.DOTALL)
    if sentence is None:
        return None
    words = " ".join(sentence[1].split())
    named = tuple(f"ouroboros.{name}" for name in re.findall(r"`([\w.]+)`", words))
    return named + (BASE_MODULES if "the base modules" in words else ())


def allowed(dep: str, permitted: tuple[str, ...]) -> bool:
    """Whether `dep` is one of the modules or packages `permitted` names (the top package
    only as itself: its version, not everything under it)."""
    return any(
        dep == name or name != "ouroboros" and dep.startswith(f"{name}.") for name in permitted
    )


def outside_its_package(module: str, dep: str) -> bool:
    return module.split(".")[:2] != dep.split(".")[:2]


def test_the_docstring_draws_the_layers_in_their_order() -> None:
    drawn = " ".join(__doc__.split("\n\n")[1].split()).split(" -> ")
    assert drawn == [", ".join(layer) for layer in LAYERS]


def test_no_import_cycles_deferred_imports_included() -> None:
    edges = graph()
    assert {"ouroboros.config", "ouroboros.tools"} <= edges["ouroboros.loop.startup"]  # not vacuous
    found = cycles(edges)
    assert not found - KNOWN_CYCLES, "new import cycles"
    assert not KNOWN_CYCLES - found, "a known cycle is gone: remove its exception"


def test_the_store_has_no_cycle_even_through_a_deferred_import() -> None:
    """Data flows one way in the store (events -> summary -> segments -> retention -> log):
    an import inside a function would only hide a circle."""
    edges = graph(deferred=True)
    store = {
        module: {dep for dep in deps if dep.startswith("ouroboros.store.")}
        for module, deps in edges.items()
        if module.startswith("ouroboros.store.")
    }
    assert "ouroboros.store.segments" in store["ouroboros.store.log"]  # not vacuous
    assert not cycles(store)


def test_imports_point_one_way_from_the_cli_down() -> None:
    wrong = []
    for module, deps in graph().items():
        mine = layer_of(module)
        for dep in deps:
            theirs = layer_of(dep)
            exempt = (module, dep) in EXCEPTIONS
            if mine is not None and theirs is not None and theirs < mine and not exempt:
                wrong.append(f"{module} imports {dep}")
    assert not wrong


def test_every_package_imports_only_what_its_docstring_allows() -> None:
    permitted = {name: may_import(docstring(init)) for name, init in packages().items()}
    assert not [name for name, names in permitted.items() if names is None], (
        "a package's docstring says nothing of what it may import"
    )
    wrong = []
    for module, deps in graph().items():
        package = module.split(".")[1] if module.count(".") else ""
        if package not in permitted:
            continue
        for dep in sorted(deps):
            if (
                outside_its_package(module, dep)
                and (module, dep) not in EXCEPTIONS
                and not allowed(dep, permitted[package] or ())
            ):
                wrong.append(f"{module} imports {dep}")
    assert not wrong


def test_what_a_package_may_import_lies_below_it() -> None:
    upward = []
    for name, init in packages().items():
        for allowed_name in may_import(docstring(init)) or ():
            theirs = layer_of(allowed_name)
            if theirs is not None and theirs <= layer_of(f"ouroboros.{name}"):
                upward.append(f"{name} may import {allowed_name}")
    assert not upward


def test_every_exception_is_still_needed() -> None:
    edges = graph()
    assert [pair for pair in EXCEPTIONS if pair[1] not in edges.get(pair[0], set())] == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == {frozenset({"a", "b", "c"})}
    assert cycles({"a": {"b"}, "b": set()}) == set()
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c", "a"}}) == {
        frozenset({"a", "b"}),
        frozenset({"c", "d"}),
    }


def test_a_cycle_through_an_import_inside_a_function_is_found(tmp_path: Path) -> None:
    root = tmp_path / "pkg"
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "log.py").write_text("from pkg.segments import manifest\n")
    (root / "segments.py").write_text("def manifest():\n    from pkg import log\n    return log\n")

    assert cycles(graph(root=root)) == {frozenset({"pkg.log", "pkg.segments"})}
    assert cycles(graph(deferred=False, root=root)) == set()


def test_a_docstring_says_what_a_package_may_import() -> None:
    assert may_import(
        "The run.\n\nMay import `window`, `store.files` and the base modules; never `ui`."
    ) == ("ouroboros.window", "ouroboros.store.files", *BASE_MODULES)
    assert may_import("The house. No imports said.") is None


def statements(node: ast.AST) -> int:
    """How long `node` is to read, in statements: every statement in it, at any depth
    (a docstring is one; an `if` is one plus those in its branches), the node itself not
    counted. The same however the code is formatted: it is read from the syntax tree."""
    return sum(isinstance(n, ast.stmt) for n in ast.walk(node)) - isinstance(node, ast.stmt)


def test_no_module_is_too_long_to_take_in() -> None:
    long = [
        f"{name}: {count} statements"
        for name, path in modules().items()
        if (count := statements(parsed(path))) > MAX_MODULE_STATEMENTS
    ]
    assert not long


def test_no_function_is_too_long_to_take_in() -> None:
    long = []
    for name, path in modules().items():
        for node in ast.walk(parsed(path)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if (count := statements(node)) > MAX_FUNCTION_STATEMENTS:
                    long.append(f"{name}.{node.name}: {count} statements")
    assert not long


def test_length_is_the_same_however_the_code_is_wrapped() -> None:
    one_line = "def f(a, b):\n    return g(a, b, c=1)\n"
    wrapped = (
        "def f(\n    a,\n    b,\n):\n    return g(\n        a,\n        b,\n        c=1,\n    )\n"
    )
    assert statements(ast.parse(one_line).body[0]) == statements(ast.parse(wrapped).body[0]) == 1
    nested = 'def f():\n    """Doc."""\n    if x:\n        y = 1\n    return y\n'
    assert statements(ast.parse(nested).body[0]) == 4


def test_every_module_has_a_package_named_for_its_concept() -> None:
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, top
    unplaced = [
        name
        for name in modules()
        if name != "ouroboros" and layer_of(name) is None and name not in ("ouroboros.__main__",)
    ]
    assert not unplaced


def test_every_package_says_what_it_owns() -> None:
    silent = [name for name, init in packages().items() if not docstring(init).strip()]
    assert not silent
