"""The package's import graph stays acyclic, with every import at module top.

A function-level import is how a cycle hides (the module loads, and the cycle
bites later, at the first call that takes that path); these tests fail first.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).parent.parent / "langgraph_resilience"


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _imports(tree: ast.AST, known: dict[str, Path]) -> set[str]:
    """The package's modules a module imports (``from pkg import mod`` counts as mod)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return {n for n in names if n in known}


def test_no_import_cycle() -> None:
    known = _modules()
    graph = {
        name: _imports(ast.parse(path.read_text()), known) - {name} for name, path in known.items()
    }
    # A package's __init__ may import its submodules; a submodule importing its
    # package back (for a sibling) would close a cycle, and is reported.
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        if name in path:
            cycle = [*path[path.index(name) :], name]
            raise AssertionError("import cycle: " + " -> ".join(cycle))
        if name in done:
            return
        for dep in sorted(graph[name]):
            visit(dep, [*path, name])
        done.add(name)

    for name in sorted(graph):
        visit(name, [])


def test_every_import_is_at_module_top() -> None:
    late = []
    for name, path in _modules().items():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                late += [
                    f"{name}:{inner.lineno}"
                    for inner in ast.walk(node)
                    if isinstance(inner, ast.Import | ast.ImportFrom)
                ]
    assert late == []


# The layers, lowest first. A module may import the core, any folder of a lower
# layer, and its own folder; never a folder of its own layer or above it.
CORE = {
    "langgraph_resilience.errors",
    "langgraph_resilience.classify",
    "langgraph_resilience.policy",
    "langgraph_resilience.budget",
    "langgraph_resilience.state",
    "langgraph_resilience._engine",
    "langgraph_resilience._langgraph",
    "langgraph_resilience._store_errors",
}
#: Leaf helpers (process identity, the heartbeat thread): part of the core, they
#: import nothing of the package at all.
LEAVES = "langgraph_resilience._util"
LAYERS = [
    {"telemetry"},
    {"checkpoint"},
    {"limits"},
    {"graph"},
    {"worker"},
    {"effects", "history"},
    {"agents", "testing", "server"},
    {"cli"},
]
MAX_ROOT_MODULES = 12
MAX_LINES = 550


def _folder(module: str) -> str | None:
    """The top folder of a module (``graph`` for ``langgraph_resilience.graph._node``)."""
    parts = module.split(".")
    if module in CORE or module.startswith(LEAVES):
        return None
    return parts[1] if len(parts) > 1 and parts[1] != "__main__" else None


def _layer(folder: str) -> int:
    return next(i for i, layer in enumerate(LAYERS) if folder in layer)


def test_every_folder_has_its_layer() -> None:
    root = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert root - {"_util"} == set().union(*LAYERS)


def test_the_leaf_helpers_import_nothing_of_the_package() -> None:
    known = _modules()
    wrong = [
        f"{name} -> {dep}"
        for name, path in sorted(known.items())
        if name.startswith(LEAVES)
        for dep in _imports(ast.parse(path.read_text()), known)
        if not dep.startswith(LEAVES)
    ]
    assert wrong == []


def test_the_store_keeps_no_loose_files() -> None:
    """``checkpoint/`` holds rooms by what they keep; only its face and the protocol are loose."""
    loose = sorted(p.name for p in (PACKAGE / "checkpoint").glob("*.py"))
    assert loose == ["__init__.py", "_protocol.py"]


def test_no_import_runs_up_the_layers() -> None:
    known = _modules()
    wrong = []
    for name, path in sorted(known.items()):
        if name == "langgraph_resilience" or name == "langgraph_resilience.__main__":
            continue  # the package's face and its entry point may import anything
        mine = _folder(name)
        for dep in sorted(_imports(ast.parse(path.read_text()), known)):
            theirs = _folder(dep)
            if dep.startswith(LEAVES):
                ok = True
            elif dep == "langgraph_resilience":
                ok = mine == "cli"  # the command prints the package's version
            elif theirs is None:
                ok = dep in CORE
            elif mine is None:
                ok = False  # the core imports no folder
            else:
                ok = theirs == mine or _layer(theirs) < _layer(mine)
            if not ok:
                wrong.append(f"{name} -> {dep}")
    assert wrong == []


def test_the_root_is_small_and_every_module_is_a_room() -> None:
    root = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(root) <= MAX_ROOT_MODULES, root
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


def test_the_layout_page_draws_the_tree_as_it_stands() -> None:
    page = (PACKAGE.parent / "docs" / "layout.md").read_text()
    tree = page.split("# Layout", 1)[1].split("```text\n", 1)[1].split("```", 1)[0]
    drawn: set[str] = set()
    folder = ""
    for line in tree.splitlines()[1:]:  # below "langgraph_resilience/"
        indent = len(line) - len(line.lstrip())
        names = [w for w in line.split() if w.endswith((".py", "/"))]
        if indent == 2 and names:
            folder = names[0] if names[0].endswith("/") else ""
            drawn.add(names[0])
        elif indent == 4 and folder:
            drawn.update(folder + n for n in names if n.endswith("/"))
    modules = {p.name for p in PACKAGE.glob("*.py")}
    folders = {f"{p.name}/" for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    inner = {
        f"{p.parent.name}/{p.name}/" for p in PACKAGE.glob("*/*") if (p / "__init__.py").exists()
    }
    assert drawn == modules | folders | inner
