"""Decoration-time checks: every construct the frontend cannot compile, and every unknown name.

Why a separate syntactic pass: a function whose parameters are not all annotated is compiled only at
its first call, and branches folded away are never compiled at all; this pass still reports what
cannot work, at the line where it is written, when the function is defined.
"""

from __future__ import annotations

import ast
import builtins
import difflib
from collections.abc import Iterator
from typing import Any

from .source import SourceInfo

_MISSING = object()


class Namespace:
    """The names a function sees besides its locals: closure cells, globals, builtins (in that order)."""

    def __init__(self, fn: Any) -> None:
        self.globals: dict[str, Any] = getattr(fn, "__globals__", {})
        code = getattr(fn, "__code__", None)
        cells = getattr(fn, "__closure__", None) or ()
        self.cells = dict(zip(code.co_freevars, cells)) if code is not None else {}
        found = self.globals.get("__builtins__", builtins)
        self.builtins: dict[str, Any] = found if isinstance(found, dict) else vars(found)

    def lookup(self, name: str) -> Any:
        """The value bound to ``name`` now, or ``MISSING``."""
        cell = self.cells.get(name)
        if cell is not None:
            try:
                return cell.cell_contents
            except ValueError:  # an empty cell: the closure variable is not assigned yet
                return _MISSING
        if name in self.globals:
            return self.globals[name]
        return self.builtins.get(name, _MISSING)

    def known(self) -> Iterator[str]:
        yield from self.cells
        yield from self.globals
        yield from self.builtins


MISSING = _MISSING

# node type -> (code, what, hint)
_UNSUPPORTED: dict[type, tuple[str, str, str]] = {
    ast.While: ("E-COMPILE-WHILE", "`while` loops are not supported",
                "use `for i in range(n)` with a bound known before the loop; data-dependent loops cannot be "
                "compiled"),
    ast.Try: ("E-COMPILE-TRY", "`try` is not supported",
              "remove the try/except: errors inside a jitted function surface as msvm errors at call time"),
    ast.ListComp: ("E-COMPILE-COMPREHENSION", "comprehensions are not supported",
                   "write a `for` loop over range(...) or over a tuple/list, or build a tuple by hand"),
    ast.SetComp: ("E-COMPILE-COMPREHENSION", "comprehensions are not supported",
                  "write a `for` loop over range(...) or over a tuple/list"),
    ast.DictComp: ("E-COMPILE-COMPREHENSION", "comprehensions are not supported",
                   "write a `for` loop over range(...) or over a tuple/list"),
    ast.GeneratorExp: ("E-COMPILE-COMPREHENSION", "generator expressions are not supported",
                       "write a `for` loop over range(...) or over a tuple/list"),
    ast.Break: ("E-COMPILE-BREAK", "`break` is not supported",
                "loops always run every iteration; select results with ms.ops.where instead"),
    ast.Continue: ("E-COMPILE-BREAK", "`continue` is not supported",
                   "put the rest of the loop body under an `if` instead"),
    ast.Lambda: ("E-COMPILE-UNSUPPORTED", "lambdas are not supported", "define a function with @ms.jit and "
                 "call it"),
    ast.FunctionDef: ("E-COMPILE-UNSUPPORTED", "nested functions are not supported",
                      "define the helper at module level with @ms.jit and call it"),
    ast.AsyncFunctionDef: ("E-COMPILE-UNSUPPORTED", "nested functions are not supported",
                           "define the helper at module level with @ms.jit"),
    ast.ClassDef: ("E-COMPILE-UNSUPPORTED", "class definitions are not supported", "define classes outside"),
    ast.With: ("E-COMPILE-UNSUPPORTED", "`with` is not supported", "move the context manager outside"),
    ast.Raise: ("E-COMPILE-UNSUPPORTED", "`raise` is not supported",
                "check the arguments before calling; shape mismatches raise ms.ShapeError by themselves"),
    ast.Global: ("E-COMPILE-UNSUPPORTED", "`global` is not supported", "return the value instead"),
    ast.Nonlocal: ("E-COMPILE-UNSUPPORTED", "`nonlocal` is not supported", "return the value instead"),
    ast.Delete: ("E-COMPILE-UNSUPPORTED", "`del` is not supported", "just stop using the name"),
    ast.Import: ("E-COMPILE-UNSUPPORTED", "imports inside a jitted function are not supported",
                 "import at module level"),
    ast.ImportFrom: ("E-COMPILE-UNSUPPORTED", "imports inside a jitted function are not supported",
                     "import at module level"),
    ast.Yield: ("E-COMPILE-UNSUPPORTED", "generators are not supported", "return a tuple"),
    ast.YieldFrom: ("E-COMPILE-UNSUPPORTED", "generators are not supported", "return a tuple"),
    ast.Await: ("E-COMPILE-UNSUPPORTED", "`await` is not supported", "call the function outside"),
    ast.Dict: ("E-COMPILE-UNSUPPORTED", "dict literals are not supported", "use a tuple or separate names"),
    ast.Set: ("E-COMPILE-UNSUPPORTED", "set literals are not supported", "use a tuple"),
    ast.JoinedStr: ("E-COMPILE-UNSUPPORTED", "f-strings are not supported", "build strings outside"),
    ast.AsyncFor: ("E-COMPILE-UNSUPPORTED", "`async for` is not supported", "use `for`"),
    ast.AsyncWith: ("E-COMPILE-UNSUPPORTED", "`async with` is not supported", "move it outside"),
}
for _name in ("TryStar", "Match"):
    if hasattr(ast, _name):
        _UNSUPPORTED[getattr(ast, _name)] = (
            ("E-COMPILE-TRY", "`try` is not supported", "remove the try/except")
            if _name == "TryStar" else
            ("E-COMPILE-UNSUPPORTED", "`match` is not supported", "use if/elif on shapes or static values")
        )


def local_names(fn: ast.FunctionDef) -> set[str]:
    """Parameters and every name the body assigns: these never resolve to globals (Python's rule)."""
    args = fn.args
    names = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return names


def assigned_names(stmts: list[ast.stmt]) -> set[str]:
    """Names stored anywhere in ``stmts`` (loop bodies: what may be loop-carried)."""
    out: set[str] = set()
    for stmt in stmts:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                out.add(node.id)
    return out


class _Checker(ast.NodeVisitor):
    def __init__(self, src: SourceInfo, namespace: Namespace, locals_: set[str]) -> None:
        self.src = src
        self.namespace = namespace
        self.locals = locals_

    def generic_visit(self, node: ast.AST) -> None:
        entry = _UNSUPPORTED.get(type(node))
        if entry is not None:
            code, what, hint = entry
            raise self.src.error(code, node, what, hint)
        super().generic_visit(node)

    def visit_For(self, node: ast.For) -> None:
        if node.orelse:
            raise self.src.error("E-COMPILE-UNSUPPORTED", node.orelse[0], "`for ... else` is not supported",
                                 "loops never break, so put the else body after the loop")
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self.check_target(target)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self.check_target(node.target)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self.check_target(node.target)
        if node.value is not None:
            self.visit(node.value)  # the annotation itself is not evaluated

    def check_target(self, target: ast.expr) -> None:
        if isinstance(target, ast.Subscript):
            raise self.src.error(
                "E-COMPILE-SUBSCRIPT-ASSIGN", target,
                "assigning into a tensor is not supported: tensors are immutable",
                "build a new tensor: ms.ops.where(mask, new, x), ms.ops.concat(...) or ms.ops.pad(...)")
        if isinstance(target, ast.Attribute):
            raise self.src.error("E-COMPILE-UNSUPPORTED", target, "attribute assignment is not supported",
                                 "assign to a local name and return the value")
        if isinstance(target, ast.Starred):
            self.check_target(target.value)
        if isinstance(target, (ast.Tuple, ast.List)):
            for item in target.elts:
                self.check_target(item)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load) and node.id not in self.locals and \
                self.namespace.lookup(node.id) is MISSING:
            raise unknown_name(self.src, node, self.namespace, self.locals)


def unknown_name(src: SourceInfo, node: ast.Name, namespace: Namespace, locals_: set[str]) -> Exception:
    close = difflib.get_close_matches(node.id, [*locals_, *namespace.known()], n=1)
    hint = f"did you mean {close[0]!r}?" if close else "define it before the function, or pass it in"
    return src.error("E-COMPILE-UNKNOWN-NAME", node, f"name {node.id!r} is not defined", hint)


def check_function(src: SourceInfo, fn: ast.FunctionDef, namespace: Namespace) -> None:
    """Raise a CompileError for the first unsupported construct or unknown name in ``fn``."""
    args = fn.args
    if args.vararg is not None or args.kwarg is not None:
        bad = args.vararg or args.kwarg
        raise src.error("E-COMPILE-UNSUPPORTED", bad, "*args and **kwargs parameters are not supported",
                        "name every parameter")
    checker = _Checker(src, namespace, local_names(fn) | {fn.name})  # its own name is bound after decoration
    for stmt in fn.body:
        checker.visit(stmt)


__all__ = ["MISSING", "Namespace", "assigned_names", "check_function", "local_names", "unknown_name"]
