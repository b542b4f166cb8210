"""Large kernels split their outer loop over two threads (the job pool's, woken from the generated
code), which claim chunks of it from a shared counter."""

import re

import numpy as np
import pytest
from codegen_helpers import assert_close, check, compiled, interpret, rand, region

from msvm.msjit.codegen.kernels import PARALLEL_MIN, THREADS

pytestmark = pytest.mark.skipif(THREADS < 2, reason="one CPU: kernels never split")


def _w5(f, x, w):
    h = f.call("add", [f.call("gelu", [f.call("mul", [x, w])]), x])  # a computed row: per-thread scratch
    return f.call("layer_norm", [h, w], {"normalized_shape": (512,)}), f.call("softmax", [h], {"axis": -1})


def test_large_elementwise_and_row_kernels_split():
    rows = PARALLEL_MIN // 512 + 77
    r = check(
        region(_w5, [(f"[{rows}, 512]", "float32"), ("[512]", "float32")]), rand((rows, 512)), rand((512,))
    )
    llvm = r.disassemble("llvm")
    assert ("pool", "run") in r.lowered.externs and "_chunks" in llvm  # a job for the pool
    assert "atomicrmw add" in llvm  # threads claim chunks of rows: a busy core hands its share over


def test_bucket_mode_decides_at_run_time():
    m = region(_w5, [("[N, 512]", "float32"), ("[512]", "float32")])
    r = compiled(m, bounds={"N": 1024}, mem_optimize=True)
    for n in (3, 1024, 700):  # below the threshold (inline), above it (two threads)
        x, w = rand((n, 512), rng=np.random.default_rng(n)), rand((512,))
        assert_close(r.fn(x, w), interpret(m, x, w))


def test_large_reduction_and_copy_split():
    def body(f, x):
        return (
            f.call("sum", [f.call("exp", [x])], {"axis": -1}),
            f.call("slice", [x], {"axes": (1,), "starts": (1,), "stops": (300,)}),
        )

    x = rand((1100, 300))
    r = check(region(body, [("[1100, 300]", "float32")]), x)
    jobs = re.findall(r'define internal void @"\w+_chunks"\(i64\*', r.disassemble("llvm"))
    assert len(jobs) >= 2  # both kernels run as jobs of the pool


def test_small_kernels_called_once_are_inlined_and_split_ones_are_not():
    """A kernel the entry calls once directly is merged into it (LLVM's per-function cost); a kernel
    split over threads is also called from its chunk runner, so it stays a function of its own."""
    rows = PARALLEL_MIN // 512 + 77

    def body(f, x, w):
        head = f.call("slice", [x], {"axes": (0,), "starts": (0,), "stops": (4,)})
        return f.call("relu", [x]), f.call("add", [head, w])

    m = region(body, [(f"[{rows}, 512]", "float32"), ("[512]", "float32")])
    r = check(m, rand((rows, 512)), rand((512,)))
    kernels = dict(re.findall(r'define internal void @"(ew\d+)"\([^\n]*\) (\w+)', r.disassemble("llvm")))
    assert sorted(kernels.values()) == ["alwaysinline", "noinline"], kernels
    split = {name for name, attr in kernels.items() if attr == "noinline"}
    assert {f"{name}_chunks" for name in split} <= set(re.findall(r'@"(\w+_chunks)"', r.disassemble("llvm")))


def test_loop_kernels_are_inlined_only_up_to_the_budget():
    """Many small loop kernels merged into one function cost LLVM more than kept apart, so only the
    first ``INLINE_LOOP_BUDGET`` instructions' worth of them are merged; the rest stay functions."""
    from msvm.msjit.codegen.emit import INLINE_LOOP_BUDGET

    def body(f, x):
        h = x
        for _ in range(40):  # a reduction between elementwise ops: two kernels per step
            s = f.call("sum", [h], {"axis": -1, "keepdims": True})
            h = f.call("sub", [f.call("tanh", [h]), s])
        return h

    x = rand((16, 8))
    r = check(region(body, [("[16, 8]", "float32")]), x)
    llvm = r.disassemble("llvm")
    attrs = re.findall(r'define internal void @"((?:ew|red)\d+)"\([^\n]*\) (\w+)', llvm)
    merged = [name for name, attr in attrs if attr == "alwaysinline"]
    assert merged and len(merged) < len(attrs), attrs
    bodies = dict(re.findall(r'define internal void @"(\w+)"[^\n]*\n(.*?)\n}', llvm, re.S))
    instructions = sum(line.startswith("  ") for name in merged for line in bodies[name].splitlines())
    assert instructions <= INLINE_LOOP_BUDGET
