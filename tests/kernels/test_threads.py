"""The native thread pool: chunked work is done exactly once, whatever the number of threads."""

from __future__ import annotations

import numpy as np
import pytest
from llvmlite import ir

from msvm.kernels.native import COUNTER, PTR, counter, native_function, ptr
from msvm.kernels.native import I64 as C_I64
from msvm.kernels.threads import NativePool
from msvm.native.irhelpers import I64, VOID, define, for_each_chunk, for_range, gep, i64


def _count_ir() -> str:
    """touch(hits, counter, items, chunk): hits[i] += 1 for every item i, chunk-scheduled."""
    module = ir.Module("touch")
    args = [("hits", I64.as_pointer()), ("counter", I64.as_pointer()), ("items", I64), ("chunk", I64)]
    _, b, a = define(module, "touch", VOID, args)
    with (for_each_chunk(b, a["counter"], a["items"], a["chunk"]) as (start, stop),
          for_range(b, start, stop) as i):
        slot = gep(b, a["hits"], i)
        b.store(b.add(b.load(slot), i64(1)), slot)
    b.ret_void()
    return str(module)


@pytest.mark.parametrize("threads", [1, 2, 4])
@pytest.mark.parametrize("items,chunk", [(1, 1), (1000, 7), (10_000, 64)])
def test_every_item_once(threads: int, items: int, chunk: int) -> None:
    fn = native_function(("test_touch",), _count_ir, "touch", [PTR, COUNTER, C_I64, C_I64])
    pool = NativePool(threads)
    for _ in range(20):
        hits = np.zeros(items, np.int64)
        used = pool.run(fn, (ptr(hits), counter(), items, chunk), flops=1e12)
        assert 1 <= used <= threads
        np.testing.assert_array_equal(hits, 1)


def test_small_work_stays_on_the_calling_thread() -> None:
    fn = native_function(("test_touch",), _count_ir, "touch", [PTR, COUNTER, C_I64, C_I64])
    hits = np.zeros(10, np.int64)
    assert NativePool(2).run(fn, (ptr(hits), counter(), 10, 1), flops=10) == 1
