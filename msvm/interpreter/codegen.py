"""Assemble the lowered lines of a function into one Python function (the interpreter's fast path).

Blocks become arms of a ``while True`` dispatch on the block index (a single-block function
is straight-line code); phis become parallel copies on the edges that feed them; back edges
count iterations against the loop limit. The generated source is registered in ``linecache``
so tracebacks show it, and every source line maps back to a bytecode address so a failure is
reported at the instruction that caused it.
"""

from __future__ import annotations

import itertools
import linecache
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..bytecode.opcodes import PHIS
from ..verifier import FunctionInfo
from .lowering import Step, reg

_serial = itertools.count()
ENTRY_LINE = -1  # the address recorded for the prologue that checks the inputs


@dataclass
class Generated:
    fn: Any
    source: str
    filename: str
    line_address: dict[int, int] = field(default_factory=dict)  # source line → bytecode address


class _Writer:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.line_address: dict[int, int] = {}

    def emit(self, depth: int, text: str, address: int | None = None) -> None:
        self.lines.append("    " * depth + text)
        if address is not None:
            self.line_address[len(self.lines)] = address


def generate(
    info: FunctionInfo,
    steps: list[Step],
    names: dict[str, Any],
    *,
    traced: bool = False,
    regions: Sequence[Any] = (),
) -> Generated:
    """Compile ``steps`` into a Python function ``run(a0, a1, …)``.

    ``names`` holds the helpers the prologue uses (ENTRY, SEEN, FAULT, LOOPLIMIT, CTX and, when
    ``traced``, EMIT/NOW, else TRACE/TRACED); every step's own names are merged in. ``regions`` are the
    JIT's region dispatches (``msvm.msjit.runtime.RegionDispatch``): each wraps its run of lines with a
    jump-table lookup that runs native code when there is some.
    """
    fn = info.function
    cfg = info.cfg
    by_block: dict[int, list[Step]] = {}
    for step in steps:
        by_block.setdefault(step.block, []).append(step)
    back_edges = cfg.back_edges()
    starts = {r.address: r for r in regions}
    in_region = {a for r in regions for a in r.addresses}
    params = ", ".join(f"a{i}" for i in range(len(fn.params)))
    w = _Writer()
    w.emit(0, f"def run({params}):")
    if not traced:  # tracing switched on after this was generated: the traced twin runs the call
        w.emit(1, f"if TRACE.enabled: return TRACED({params})")
    w.emit(1, "try:")
    key = _entry_key(info)
    w.emit(2, f"k = ({key}{',' if key.count(',') == 0 and key else ''})", ENTRY_LINE)
    w.emit(2, "B = SEEN.get(k)", ENTRY_LINE)
    w.emit(2, f"if B is None: B = ENTRY(k, ({params}{',' if len(fn.params) == 1 else ''}))", ENTRY_LINE)
    if back_edges:
        w.emit(2, "it = 0")
    multi = len(cfg.rpo) > 1
    depth = 2
    if multi:
        w.emit(2, "b = 0")
        w.emit(2, "while True:")
    for n, block in enumerate(cfg.rpo):
        if multi:
            w.emit(3, f"{'if' if n == 0 else 'elif'} b == {block}:")
            depth = 4
        body = [s for s in by_block.get(block, []) if s.ins.name not in PHIS]
        for step in body:
            region = starts.get(step.address)
            if region is not None:
                _emit_region(w, depth, region, [s for s in body if s.address in region.addresses], traced)
            elif step.address in in_region:
                continue  # emitted with its region
            elif step.line:
                _emit_step(w, depth, step, traced)
            else:
                _emit_terminator(w, depth, step, info, by_block, back_edges, traced)
    w.emit(1, "except MSVM_ERROR:")
    w.emit(2, "raise")
    w.emit(1, "except Exception as exc:")
    w.emit(2, "raise FAULT(exc) from exc")
    source = "\n".join(w.lines) + "\n"
    filename = f"<msvm {code_name(fn.name)}{' traced' if traced else ''} #{next(_serial)}>"
    namespace = dict(names)
    for step in steps:
        namespace.update(step.names)
    for region in regions:
        namespace.update(region.names)
    code = compile(source, filename, "exec")
    exec(code, namespace)
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    return Generated(namespace["run"], source, filename, w.line_address)


def code_name(name: str) -> str:
    """A bytecode function's name as Python code may carry it: a bytecode name is any string, and
    ``compile()`` refuses a file name with a NUL, so a name with unprintable characters is escaped."""
    return name if name.isprintable() else ascii(name)


def _entry_key(info: FunctionInfo) -> str:
    """The per-call signature the entry check is cached on: input shapes, dtypes and scalars."""
    parts = []
    for _, _, ins in info.function.instructions():
        if ins.name == "TENSOR_CREATE" and ins["arg"] >= 0:
            parts.append(f"a{ins['arg']}.shape, a{ins['arg']}.dtype")
        elif ins.name == "SCALAR_ARG":
            parts.append(f"a{ins['arg']}")
    return ", ".join(parts)


def _emit_region(w: _Writer, depth: int, region: Any, steps: list[Step], traced: bool) -> None:
    """A JIT region: the lines its dispatch puts before and after, and its own lines in between."""
    before, indent, after = region.layout(traced)
    for rel, text in before:
        w.emit(depth + rel, text, region.address)
    for step in steps:
        _emit_step(w, depth + indent, step, traced)
    for rel, text in after:
        w.emit(depth + rel, text, region.address)


def _emit_step(w: _Writer, depth: int, step: Step, traced: bool) -> None:
    if traced:
        w.emit(depth, "t0 = NOW()", step.address)
    w.emit(depth, step.line, step.address)
    if traced:
        dsts = step.ins.writes()
        out = reg(dsts[0]) if dsts else "None"
        w.emit(depth, f"EMIT({step.address}, t0, NOW(), {out})", step.address)
    if step.release:  # registers dead from here on: their buffers go back now, not at return
        w.emit(depth, f"del {', '.join(reg(r) for r in step.release)}", step.address)


def _emit_terminator(
    w: _Writer,
    depth: int,
    step: Step,
    info: FunctionInfo,
    by_block: dict[int, list[Step]],
    back_edges: set[tuple[int, int]],
    traced: bool,
) -> None:
    ins = step.ins
    if traced:
        w.emit(depth, f"EMIT({step.address}, NOW(), NOW(), None)", step.address)
    if ins.name == "RET":
        values = [_returned(r, info) for r in ins["srcs"]]
        if not values:
            w.emit(depth, "return None", step.address)
        elif len(values) == 1:
            w.emit(depth, f"return {values[0]}", step.address)
        else:
            w.emit(depth, f"return ({', '.join(values)})", step.address)
        return
    if ins.name == "JMP":
        _emit_edge(w, depth, step, info, by_block, back_edges, ins["target"])
        return
    w.emit(depth, f"if {reg(ins['cond'])}:", step.address)
    _emit_edge(w, depth + 1, step, info, by_block, back_edges, ins["then"])
    w.emit(depth, "else:", step.address)
    _emit_edge(w, depth + 1, step, info, by_block, back_edges, ins["else"])


def _emit_edge(
    w: _Writer,
    depth: int,
    step: Step,
    info: FunctionInfo,
    by_block: dict[int, list[Step]],
    back_edges: set[tuple[int, int]],
    target: int,
) -> None:
    source = step.block
    copies = []
    for phi in by_block.get(target, []):
        if phi.ins.name in PHIS:
            incoming = dict(phi.ins["incoming"])
            copies.append((reg(phi.ins["dst"]), reg(incoming[source])))
    if copies:
        w.emit(depth, f"{', '.join(d for d, _ in copies)} = {', '.join(s for _, s in copies)}", step.address)
    if (source, target) in back_edges:
        w.emit(depth, "it += 1", step.address)
        w.emit(depth, f"if it > CTX.max_loop_iterations: LOOPLIMIT({step.address})", step.address)
    w.emit(depth, f"b = {target}", step.address)
    w.emit(depth, "continue", step.address)


def _returned(r: int, info: FunctionInfo) -> str:
    """Constants are returned as copies so callers never hold the read-only pool array."""
    fn = info.function
    for _, _, ins in fn.instructions():
        if ins.name == "LOAD_CONST" and ins["dst"] == r:
            return f"{reg(r)}.copy()"
    return reg(r)
