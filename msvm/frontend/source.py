"""A jitted function's source: its AST, and the mapping of AST positions to real file lines and columns.

Why this is kept apart: every instruction and every CompileError carries a ``SourceLoc`` in the user's
file (or notebook cell), so positions must be translated the same way everywhere, including for
functions whose source is indented (methods, closures) and lines with non-ASCII text.
"""

from __future__ import annotations

import ast
import inspect
from dataclasses import dataclass
from typing import Any

from ..errors import CompileError, SourceLoc


@dataclass(frozen=True)
class SourceInfo:
    """Where a function's source lives; ``lines`` are the function's own lines as they are in the file."""

    file: str
    first_line: int  # file line number of the source's first line (the first decorator)
    indent: int  # characters of indentation removed before parsing
    lines: tuple[str, ...]

    def loc(self, node: ast.AST) -> SourceLoc:
        """The file position of ``node`` (0-based character column)."""
        lineno = getattr(node, "lineno", 1)
        col = self._column(lineno, getattr(node, "col_offset", 0))
        return SourceLoc(self.file, self.first_line + lineno - 1, col)

    def _column(self, lineno: int, byte_col: int) -> int:
        if not 1 <= lineno <= len(self.lines):
            return byte_col + self.indent
        text = self.lines[lineno - 1][self.indent:]
        return len(text.encode("utf-8")[:byte_col].decode("utf-8", "replace")) + self.indent

    def quote(self, node: ast.AST) -> str:
        """The source line of ``node`` with a caret under its column."""
        lineno = getattr(node, "lineno", None)
        if lineno is None or not 1 <= lineno <= len(self.lines):
            return ""
        line = self.lines[lineno - 1].rstrip()
        stripped = line.lstrip()
        margin = len(line) - len(stripped)
        col = self._column(lineno, getattr(node, "col_offset", 0)) - margin
        return f"\n    {stripped}\n    {' ' * max(col, 0)}^"

    def error(self, code: str, node: ast.AST, message: str, hint: str | None = None) -> CompileError:
        """A CompileError at ``node``: the message quotes the offending line."""
        return CompileError(message + self.quote(node), code=code, source=self.loc(node), hint=hint)


def parse_function(fn: Any) -> tuple[SourceInfo, ast.FunctionDef]:
    """Read and parse ``fn``'s source (works for files and IPython cells, which linecache knows)."""
    code = getattr(fn, "__code__", None)
    name = getattr(fn, "__name__", repr(fn))
    file = code.co_filename if code is not None else "<unknown>"
    try:
        raw_lines, first_line = inspect.getsourcelines(fn)
    except (OSError, TypeError) as exc:
        raise CompileError(
            f"cannot read the source of {name}: {exc}", code="E-COMPILE-SOURCE",
            source=SourceLoc(file, code.co_firstlineno if code is not None else 1),
            hint="define the function in a file or a notebook cell (not with exec or in a bare REPL)",
        ) from None
    first_line = max(first_line, 1)
    lines = tuple(line.rstrip("\r\n") for line in raw_lines)
    head = lines[0]
    indent = len(head) - len(head.lstrip())
    body = [line[indent:] if line[:indent].strip() == "" else line.lstrip() for line in lines]
    info = SourceInfo(file, first_line, indent, lines)
    try:
        module = ast.parse("\n".join(body) + "\n")
    except SyntaxError as exc:
        raise CompileError(f"cannot parse the source of {name}: {exc.msg}", code="E-COMPILE-SOURCE",
                           source=SourceLoc(file, first_line + (exc.lineno or 1) - 1,
                                            (exc.offset or 1) - 1 + indent),
                           hint="the source file changed since the function was defined? re-run it") from None
    node = module.body[0] if module.body else None
    if not isinstance(node, ast.FunctionDef):
        where = node if node is not None else ast.Pass(lineno=1, col_offset=0)
        kind = "an async function" if isinstance(node, ast.AsyncFunctionDef) else "a lambda or expression"
        raise info.error("E-COMPILE-UNSUPPORTED", where, f"@ms.jit cannot compile {kind}",
                         "decorate a plain `def` function")
    return info, node


__all__ = ["SourceInfo", "parse_function"]
