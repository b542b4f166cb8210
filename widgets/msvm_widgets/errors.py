"""msvm errors in a cell: a short message at the cell line or bytecode address, no internal traceback.

Why an exception with ``_render_traceback_``: IPython shows exactly the lines it returns, as the cell's
error output, and the cell is still marked as failed (nbclient raises, "run all" stops). One error
output, readable in JupyterLab, nbconvert, GitHub and a terminal alike — no separate HTML box, no
frames from msvm's compiler. Locations in cells read ``In[7]:3:5`` (line 1 is the line after ``%%msvm``).
"""

from __future__ import annotations

import linecache
import re
from collections.abc import Mapping

from msvm.errors import MsvmError, SourceLoc, VerifyError

RED, CYAN, GREEN, BOLD, RESET = "\x1b[31m", "\x1b[36m", "\x1b[32m", "\x1b[1m", "\x1b[0m"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


class MsvmCellError(Exception):
    """What a failing ``%%msvm`` cell raises: its traceback is the short rendered message."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        super().__init__(strip_ansi("\n".join(lines)))

    def _render_traceback_(self) -> list[str]:
        return self.lines


def quote(source: SourceLoc) -> list[str]:
    """The source line at ``source`` and a caret under its column ([] when the line is unknown)."""
    line = linecache.getline(source.file, source.line).rstrip()
    if not line:
        return []
    stripped = line.lstrip()
    caret = max(source.col - (len(line) - len(stripped)), 0)
    return [f"      {stripped}", f"      {' ' * caret}{RED}^{RESET}"]


def render_error(exc: MsvmError, cell_names: Mapping[str, str] | None = None) -> list[str]:
    """Coloured lines: what, where (cell line or bytecode address), the code line and a caret, the hint."""
    names = dict(cell_names or {})

    def rel(text: str) -> str:
        for file, label in names.items():
            text = text.replace(f'"{file}"', label).replace(file, label)
        return text

    head = f"{RED}{BOLD}msvm {type(exc).__name__}{RESET} [{exc.code}]"
    if exc.location:
        head += f" at {CYAN}{rel(exc.location)}{RESET}"
    lines = [head]
    if isinstance(exc, VerifyError) and exc.diagnostics:
        lines.append(f"  {exc.message.splitlines()[0]}")
        for d in exc.diagnostics:
            lines += [f"  {rel(part)}" for part in str(d).splitlines()]
            if d.source is not None:
                lines += quote(d.source)
        return lines
    body = exc.message.splitlines() or [""]
    lines += [f"  {rel(part)}" for part in body]
    if exc.source is not None and len(body) == 1:
        lines += quote(exc.source)
    if exc.hint:
        lines.append(f"  {GREEN}hint:{RESET} {rel(exc.hint)}")
    return lines
