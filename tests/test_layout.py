"""The package's layout rules, checked on its source: no import circle between modules
(imports inside functions count; ``if TYPE_CHECKING:`` blocks, which never run, do not),
no module of ``compiler/`` over 600 lines, at most 20 modules at the top of
``compiler/``, and one owner per decomposition overload (a second registration raises)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from torchneuron.compiler.decomp.registry import DuplicateDecomposition, owners, registrar

PACKAGE = Path(__file__).resolve().parents[1] / "torchneuron"
COMPILER = PACKAGE / "compiler"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_only(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return True
    return False


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (at the top or inside a function). An
    import names the module itself (``from a.b import c`` names ``a.b.c`` when that is a
    module, else ``a.b``); the parent packages Python runs first are not edges."""
    files = {_module_name(p): p for p in root.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in files}
    for mod, path in files.items():
        tree = ast.parse(path.read_text(), str(path))
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)) or _type_checking_only(node, parents):
                continue
            if isinstance(node, ast.Import):
                graph[mod].update(a.name for a in node.names if a.name in files)
                continue
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            for alias in node.names:
                target = f"{base}.{alias.name}"
                if target in files:
                    graph[mod].add(target)
                elif base in files:
                    graph[mod].add(base)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The graph's strongly connected components of more than one module (or a module
    importing itself), each as a list of module names (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in graph[node]:
                    found.append(sorted(component))
    return found


def test_no_import_circle() -> None:
    found = cycles(import_graph())
    assert not found, "import circles (a module that imports another that imports it back, " \
        "lazily or not): " + "; ".join(" <-> ".join(c) for c in found)


def test_cycle_finder_finds_a_circle() -> None:
    """The check above can fail: a lazy import back is a circle."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert cycles(graph) == [["a", "b", "c"], ["e"]]


def test_compiler_modules_small_and_top_level_short() -> None:
    long = {str(p.relative_to(PACKAGE)): n for p in COMPILER.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 600}
    assert not long, f"compiler modules over 600 lines (split them by concept): {long}"
    top = sorted(p.name for p in COMPILER.glob("*.py"))
    assert len(top) <= 20, f"{len(top)} modules at the top of compiler/ (at most 20): {top}"


def test_second_registration_of_an_overload_raises() -> None:
    table: dict = {}
    register = registrar(table, filed={})
    register(torch.ops.aten.add.Tensor)(lambda a, b: a + b)
    with pytest.raises(DuplicateDecomposition, match="aten.add.Tensor is decomposed twice"):
        register(torch.ops.aten.add.Tensor)(lambda a, b: b + a)
    other: dict = {}
    with pytest.raises(DuplicateDecomposition, match="decomposed twice"):
        owners([table, {torch.ops.aten.add.Tensor: lambda a, b: a - b}, other])


def test_every_overload_has_one_owner() -> None:
    """The families' tables (dict literals included) share no overload: building the
    table's own layer raises otherwise."""
    from torchneuron.compiler.decomp.table import LAYERS, own_entries

    assert LAYERS[1] is own_entries
    assert own_entries({})  # raises DuplicateDecomposition on an overload in two families
