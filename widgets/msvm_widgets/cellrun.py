"""Running a ``%%msvm`` cell: every top-level function in it is jitted (and call-tracked) as it is defined.

Why a decorator injected into the cell's AST rather than jitting after the cell ran: the cell usually
calls its functions right after defining them, so they must be jitted at definition. The cell is
compiled under the shell's own cache name (``shell.compile.cache``), so tracebacks and
``inspect.getsource`` see the cell's lines and msvm's source locations point into the cell. The value
of a last expression is returned, for IPython to show as ``Out[n]`` like any cell.
"""

from __future__ import annotations

import ast
import inspect
from dataclasses import dataclass
from typing import Any

from msvm.frontend import JitFunction, JitOptions

from .calls import CallLog, TrackedJitFunction

DECORATOR = "__msvm_cell_jit__"  # bound in the user namespace only while the cell runs


@dataclass
class CellResult:
    functions: list[str]  # the top-level functions the cell defined, now jitted
    value: Any  # the value of the cell's last expression (None if it ends with a statement)


def _decorate(tree: ast.Module) -> list[str]:
    """Put ``@__msvm_cell_jit__`` outermost on every top-level ``def``; returns their names."""
    names = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            anchor = node.decorator_list[0] if node.decorator_list else node
            node.decorator_list.insert(0, ast.copy_location(ast.Name(DECORATOR, ast.Load()), anchor))
            names.append(node.name)
    ast.fix_missing_locations(tree)
    return names


def cell_jit(options: JitOptions, log: CallLog) -> Any:
    """The injected decorator: plain functions get the magic's options; ``@ms.jit(...)`` keeps its own."""

    def decorate(fn: Any) -> Any:
        if isinstance(fn, TrackedJitFunction):
            return fn
        if isinstance(fn, JitFunction):
            return TrackedJitFunction(fn.py_func, fn.options, log)
        if inspect.isfunction(fn):
            return TrackedJitFunction(fn, options, log)
        return fn  # a class, a property, another decorator's wrapper: left as the cell made it

    return decorate


def run_cell(shell: Any, cell: str, filename: str, options: JitOptions, log: CallLog) -> CellResult:
    """Execute ``cell`` (already registered under ``filename``) in the user namespace."""
    __tracebackhide__ = True
    tree = ast.parse(cell, filename)
    names = _decorate(tree)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    flags = getattr(shell.compile, "flags", 0)
    body = compile(tree, filename, "exec", flags=flags, dont_inherit=True)
    namespace, local = shell.user_global_ns, shell.user_ns
    namespace[DECORATOR] = cell_jit(options, log)
    try:
        exec(body, namespace, local)
        value = None
        if last is not None:
            expr = ast.Expression(last.value)
            value = eval(compile(expr, filename, "eval", flags=flags, dont_inherit=True), namespace, local)
    finally:
        namespace.pop(DECORATOR, None)
    return CellResult(names, value)
