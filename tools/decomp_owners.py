"""Dump the final decomposition table: for each overload, the function that wins and its wrappers.

Each entry is printed as ``overload: chain`` where the chain lists, outermost first, every
function a call goes through (a wrapper's closure names the entry it wraps), each as
``module:qualname#hash`` (the hash is of the function's source text, so a moved module
keeps its hashes). Run it before and after a change to the table's assembly and diff the
two outputs: a restructuring that changes no behaviour changes no chain but module names.

    PYTHONPATH=$PWD python tools/decomp_owners.py > before.txt
    PYTHONPATH=$PWD python tools/decomp_owners.py --no-modules > before_bodies.txt
"""

from __future__ import annotations

import argparse
import ast
import functools
import hashlib
import inspect
import textwrap
from typing import Any


class _Body(ast.NodeTransformer):
    """Drops what a move or a restructuring may change without changing behaviour: import
    statements (they name modules), docstrings, decorators (the registration)."""

    def visit_Import(self, node: ast.AST) -> None:
        return None

    visit_ImportFrom = visit_Import

    def _strip(self, node: Any) -> Any:
        node.decorator_list = []
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:]
        node.body = body or [ast.Pass()]
        self.generic_visit(node)
        return node

    visit_FunctionDef = visit_AsyncFunctionDef = _strip


def _source_hash(fn: Any) -> str:
    """A hash of the function's syntax tree (comments, docstrings, imports and
    decorators left out); a lambda is found inside the statement that holds it."""
    try:
        src = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError):
        return "nosource"
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return hashlib.sha1(src.encode()).hexdigest()[:10]
    if fn.__name__ == "<lambda>":
        args = list(fn.__code__.co_varnames[: fn.__code__.co_argcount])
        lambdas = [n for n in ast.walk(tree) if isinstance(n, ast.Lambda)
                   and [a.arg for a in n.args.args] == args]
        node: Any = lambdas[0] if lambdas else tree
    else:
        node = _Body().visit(tree.body[0])
    text = ast.dump(node, annotate_fields=False, include_attributes=False)
    return hashlib.sha1(text.encode()).hexdigest()[:10]


def _simple(v: Any) -> bool:
    return isinstance(v, (str, int, float, bool, type(None), tuple)) or type(v).__name__ in (
        "OpOverload", "OpOverloadPacket", "dtype")


def _value(v: Any, modules: bool, depth: int) -> str:
    if hasattr(v, "__code__") or isinstance(v, functools.partial):
        return describe(v, modules, depth + 1)
    return repr(v) if _simple(v) else f"<{type(v).__name__}>"


def describe(fn: Any, modules: bool, depth: int = 0) -> str:
    """One line for ``fn`` and what it wraps (closure cells and defaults that are callables)."""
    if depth > 12:
        return "..."
    if isinstance(fn, functools.partial):
        parts = [_value(a, modules, depth) for a in fn.args]
        parts += [f"{k}={_value(v, modules, depth)}" for k, v in fn.keywords.items()]
        return f"partial({describe(fn.func, modules, depth + 1)}, {', '.join(parts)})"
    code = getattr(fn, "__code__", None)
    if code is None:
        return f"<{type(fn).__name__} {getattr(fn, '__qualname__', repr(fn))}>"
    name = fn.__qualname__
    if modules:
        name = f"{fn.__module__}:{name}"
    head = f"{name}#{_source_hash(fn)}"
    inner: list[str] = []
    extras: list[str] = []
    cells = fn.__closure__ or ()
    for var, cell in zip(code.co_freevars, cells, strict=True):
        try:
            v = cell.cell_contents
        except ValueError:
            continue
        if callable(v) and not isinstance(v, type) and type(v).__name__ not in (
                "OpOverload", "OpOverloadPacket") and hasattr(v, "__code__") or isinstance(
                v, functools.partial):
            inner.append(f"{var}={describe(v, modules, depth + 1)}")
        elif _simple(v):
            extras.append(f"{var}={v!r}")
    for k, v in (fn.__kwdefaults__ or {}).items():
        if _simple(v):
            extras.append(f"{k}={v!r}")
    for i, v in enumerate(fn.__defaults__ or ()):
        if hasattr(v, "__code__"):
            inner.append(f"default{i}={describe(v, modules, depth + 1)}")
        elif _simple(v):
            extras.append(f"default{i}={v!r}")
    out = head
    if extras:
        out += "[" + ", ".join(extras) + "]"
    if inner:
        out += " -> (" + "; ".join(inner) + ")"
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-modules", action="store_true",
                        help="leave module names out (compare bodies across moves)")
    args = parser.parse_args()
    from torchneuron.compiler import decomposition_table

    table = decomposition_table()
    for op in sorted(table, key=str):
        print(f"{op}: {describe(table[op], not args.no_modules)}")


if __name__ == "__main__":
    main()
