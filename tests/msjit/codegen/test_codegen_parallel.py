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
    jobs = re.findall(r'define void @"\w+_chunks"\(i64\*', r.lowered.loop_ir)
    assert len(jobs) >= 2  # both kernels run as jobs of the pool


def test_loop_kernels_are_the_loop_modules_and_split_ones_have_a_chunk_runner():
    """Every loop kernel is a function of the loop module, which the entry calls through its ``_whole``
    twin, and, when split over threads, hands to the pool as its ``_chunks`` job."""
    rows = PARALLEL_MIN // 512 + 77

    def body(f, x, w):
        head = f.call("slice", [x], {"axes": (0,), "starts": (0,), "stops": (4,)})
        return f.call("relu", [x]), f.call("add", [head, w])

    m = region(body, [(f"[{rows}, 512]", "float32"), ("[512]", "float32")])
    r = check(m, rand((rows, 512)), rand((512,)))
    kernels = set(re.findall(r'define internal void @"(ew\d+)"', r.lowered.loop_ir))
    assert len(kernels) == 2 and not re.search(r'define [^@]*@"ew', r.lowered.ir)
    assert {f"{k}_whole" for k in kernels} <= set(re.findall(r'declare void @"(\w+)"', r.lowered.ir))
    jobs = re.findall(r'define void @"ew\d+_chunks"', r.lowered.loop_ir)
    assert len(jobs) == 1  # relu's (4 rows of add are too few to split)
