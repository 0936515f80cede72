"""Docstrings and comments name only what exists: every `something.py` path and every dotted
`module.name` they mention resolves in the code base.

A path resolves beside the module that names it, under `ouroboros/` or under the repository
(`store/state_file.py`, `tests/test_state_file.py`). A dotted name is checked when it starts with a
module's name (`conversation.Conversation`, `window.manager.ContextManager`, `store.log.EventLog`):
the name after the module must be defined at its top level (and the one after a class, in
the class). Where only the first part matches a module (`state.alert`, `sandbox.spawn()` in
a usage line: a variable named like a module), a name some class defines is enough. File
names (`state.json`, `events.jsonl`) and config keys of that shape pass the same way.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PATH = re.compile(r"(?<![\w/.-])((?:\w+/)*\w+\.py)\b")
DOTTED = re.compile(r"(?<![\w./-])([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)")
FILE_ENDINGS = {"py", "json", "jsonl", "log", "md", "toml", "txt", "gz", "lock", "sh", "yaml"}
# Dotted names that are not Python, with why.
NOT_PYTHON = {
    "cgroup.procs",  # the kernel's file of a cgroup's processes
    "model.nmae",  # the misspelt key of a did-you-mean example
}


def prose(source: str) -> list[tuple[int, str]]:
    """The docstrings and comments of a module, with the line each starts on."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            if doc := ast.get_docstring(node, clean=False):
                found.append((node.body[0].lineno, doc))
    found += [
        (token.start[0], token.string)
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT
    ]
    return found


def defined(tree: ast.Module) -> dict[str, set[str] | None]:
    """A module's top-level names; for a class, the names its body and `self.x =` define."""
    names: dict[str, set[str] | None] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            members = {n.name for n in node.body if hasattr(n, "name")}
            members |= {
                t.id
                for n in node.body
                if isinstance(n, (ast.Assign, ast.AnnAssign))
                for t in ast.walk(n)
                if isinstance(t, ast.Name)
            }
            members |= {
                n.attr
                for n in ast.walk(node)
                if isinstance(n, ast.Attribute)
                and isinstance(n.ctx, ast.Store)
                and isinstance(n.value, ast.Name)
                and n.value.id == "self"
            }
            names[node.name] = members
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names[node.name] = None
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update({(a.asname or a.name).split(".")[0]: None for a in node.names})
        else:
            names.update(
                {
                    n.id: None
                    for n in ast.walk(node)
                    if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
                }
            )
    return names


class CodeBase:
    def __init__(self, root: Path, package: str = "ouroboros") -> None:
        self.root, self.package = root, root / package
        self.modules: dict[str, Path] = {}
        for path in sorted(self.package.rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            self.modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
        self.names = {
            name: defined(ast.parse(path.read_text(encoding="utf-8")))
            for name, path in self.modules.items()
        }
        self.members = set().union(
            *(m for names in self.names.values() for m in names.values() if m)
        )

    def path_exists(self, path: str, beside: Path) -> bool:
        return any((base / path).is_file() for base in (beside.parent, self.package, self.root))

    def resolves(self, dotted: str) -> bool:
        parts = dotted.split(".")
        if parts[-1] in FILE_ENDINGS or dotted in NOT_PYTHON:
            return True
        for length in range(len(parts), 0, -1):
            prefix = ".".join(parts[:length])
            found = [m for m in self.modules if m == prefix or m.endswith("." + prefix)]
            if not found:
                continue
            rest = parts[length:]
            if not rest:
                return True
            for module in found:
                names = self.names[module]
                if rest[0] in names or f"{module}.{rest[0]}" in self.modules:
                    members = names.get(rest[0])
                    if len(rest) == 1 or members is None or rest[1] in members:
                        return True
            return length == 1 and rest[0] in self.members
        return True  # names no module: not a reference to the code

    def unresolved(self) -> list[str]:
        wrong = []
        for name, path in self.modules.items():
            for line, text in prose(path.read_text(encoding="utf-8")):
                wrong += [
                    f"{name}:{line}: {p}"
                    for p in PATH.findall(text)
                    if not self.path_exists(p, path)
                ]
                wrong += [
                    f"{name}:{line}: {d}" for d in DOTTED.findall(text) if not self.resolves(d)
                ]
        return wrong


@cache
def house() -> CodeBase:
    return CodeBase(ROOT)


def test_docstrings_and_comments_name_only_what_exists() -> None:
    assert not house().unresolved()


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    return root


def test_a_made_up_reference_is_found(tmp_path: Path) -> None:
    root = write(
        tmp_path,
        {
            "ouroboros/__init__.py": '"""The house."""\n',
            "ouroboros/window/__init__.py": "",
            "ouroboros/window/sizes.py": "class Sizes:\n    def add(self): ...\n",
            "ouroboros/loop/journal.py": (
                '"""Sizes as window.sizes.Sizes and `sizes.Sizes.add` keep them '
                "(window/sizes.py),\n"
                'kept in state.json; see loop/journal.py and tests/test_x.py."""\n'
                "# `state.add` is a variable's: Sizes defines add.\n"
            ),
            "tests/test_x.py": "",
        },
    )
    assert CodeBase(root).unresolved() == []
    (root / "ouroboros/window/ui.py").write_text(
        '"""Drawn from window.sizes.Tally, `sizes.Sizes.take` and figures.py; see `policy.py`\n'
        'and nothing else."""\n# sizes.Sizes.grow, say\n',
        encoding="utf-8",
    )
    assert CodeBase(root).unresolved() == [
        "ouroboros.window.ui:1: figures.py",
        "ouroboros.window.ui:1: policy.py",
        "ouroboros.window.ui:1: window.sizes.Tally",
        "ouroboros.window.ui:1: sizes.Sizes.take",
        "ouroboros.window.ui:3: sizes.Sizes.grow",
    ]
