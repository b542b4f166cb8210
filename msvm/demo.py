"""``msvm demo``: the quickstart notebook's story in a terminal, in a few seconds and without IPython.

Compile a function with symbolic shapes, verify it, disassemble it, run it on changing shapes, step
a few instructions looking at the registers, summarise a trace, and — where the JIT is built in —
show its cache and hit rate. Every number printed comes from the public API the notebooks use.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from . import ops, vm
from .errors import format_address
from .frontend import Tensor, jit, mutable
from .interpreter import RegisterState
from .verifier import verify_module

SHAPES = ((1, 3, 8, 8, 4), (2, 3, 8, 8, 4), (4, 3, 16, 12, 6), (8, 3, 32, 32, 16), (2, 3, 16, 16, 8))
JIT_CALLS = 12


IMAGES = Tensor["N", 3, "H", "W"]  # a batch of 3-channel images of any size: N, H, W are symbols


@jit
def block(x: IMAGES, h):
    """Crop the top ``h`` rows, scale, shift and rectify: shapes stay symbolic (N, H, W, h)."""
    y = x[:, :, :h, :]
    return ops.relu(y * 2.0 + 1.0)


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join("    " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells)


def _register(reg: RegisterState) -> list[object]:
    shape = list(reg.shape) if reg.kind == "tensor" else repr(reg.value) if reg.kind != "empty" else "-"
    where = format_address(reg.producer) if reg.producer is not None and reg.kind != "empty" else ""
    strides = list(reg.strides) if reg.strides is not None else ""
    return [reg.name, reg.kind, shape, reg.symbolic or "", reg.dtype or "", strides, where]


def _section(n: int, title: str) -> None:
    print(f"\n{n}. {title}")


def _inputs(n: int, c: int, h: int, w: int, crop: int) -> tuple[np.ndarray, int]:
    rng = np.random.default_rng(n * 1000 + h)
    return rng.standard_normal((n, c, h, w)).astype(np.float32), mutable(crop)


def run_demo() -> None:
    """Print the tour; takes well under 10 s."""
    t0 = time.perf_counter()
    print("msvm demo: one function with symbolic shapes through the MS-VM")

    _section(1, "compile: the first call compiles block to MS-BC for its kinds of arguments")
    start = time.perf_counter()
    block(*_inputs(1, 3, 8, 8, 4))
    print(f"    first call (compile + verify + run): {(time.perf_counter() - start) * 1e3:.1f} ms")
    module = block.bytecode
    print(f"    block -> module {module.name!r}: {module.functions[0].size} instructions, "
          f"{module.functions[0].num_regs} registers, {len(module.constants)} constants")

    _section(2, "verify: every register gets a type with a symbolic shape")
    info = verify_module(module).functions["block"]
    print(_table(("reg", "type"), [(f"R{i}", t) for i, t in enumerate(info.types)]))

    _section(3, "disassemble (the same text the assembler reads back)")
    print("\n".join("    " + line for line in str(module).splitlines()))

    _section(4, "run with changing shapes: one compiled version serves them all")
    rows = []
    for n, c, h, w, crop in SHAPES:
        x, cut = _inputs(n, c, h, w, crop)
        start = time.perf_counter()
        out = block(x, cut)
        took = (time.perf_counter() - start) * 1e6
        assert np.allclose(out, np.maximum(x[:, :, :crop, :] * 2 + 1, 0))
        rows.append(([n, c, h, w], int(cut), list(out.shape), f"{took:.0f}"))
    print(_table(("input", "h", "output", "µs"), rows))
    print(f"    versions compiled: {len(block.versions)} (shapes are symbolic, so no recompiles)")

    _section(5, "step: the interpreter one instruction at a time, registers as they are written")
    ex = block.debug(*_inputs(2, 3, 8, 8, 4))
    for _ in range(5):
        ins = ex.current_instruction
        at = format_address(ex.pc)
        written = ex.step()
        what = written.summary() if written is not None else "(no register written)"
        print(f"    {at}  {ins.name:<14} -> {what}")
    ex.run()
    print("    ... run to the end; registers at RET:")
    print(_table(("reg", "kind", "shape / value", "symbolic", "dtype", "strides", "producer"),
                 [_register(r) for r in ex.registers]))

    _section(6, "trace: one event per executed instruction (ms.vm.enable_bc_trace)")
    vm.clear_bc_trace()
    vm.enable_bc_trace(True, path=None)
    try:
        for n, c, h, w, crop in SHAPES[:3]:
            block(*_inputs(n, c, h, w, crop))
    finally:
        vm.enable_bc_trace(False)
    summary = vm.bc_trace_summary()
    rows = [(op, s["count"], f"{s['total_us']:.1f}", f"{s['median_us']:.1f}") for op, s in summary.items()]
    print(_table(("op", "count", "total µs", "median µs"), rows))
    vm.clear_bc_trace()

    _section(7, "JIT: hot, shape-stable regions compiled in the background")
    _jit_section()
    print(f"\ndone in {time.perf_counter() - t0:.2f} s — the same story, with widgets: "
          "notebooks/01_quickstart.ipynb (scripts/lab.sh)")


def _jit_section() -> None:
    x, cut = _inputs(4, 3, 16, 16, 8)
    for _ in range(JIT_CALLS):
        block(x, cut)
    vm.wait_for_compiles(5.0)
    for _ in range(JIT_CALLS):
        block(x, cut)
    entries = [e for e in vm.jit_info() if e.get("function") == "block"]
    print(_table(("entry", "status", "source", "hits", "compile ms", "interp ms", "native ms", "code bytes"),
                 [(e.get("name"), e.get("status"), e.get("source") or "-", e.get("hits"),
                   _ms(e.get("compile_ms")), _ms(e.get("interp_ms"), 3), _ms(e.get("native_ms"), 3),
                   e.get("code_bytes")) for e in entries]))
    rate, avg = vm.get_jit_hit_rate(), vm.get_avg_compile_time()
    print(f"    hit rate {rate:.2f}, average compile time {_ms(avg)} ms")


def _ms(value: object, digits: int = 1) -> str:
    return f"{value:.{digits}f}" if isinstance(value, (int, float)) else "-"
