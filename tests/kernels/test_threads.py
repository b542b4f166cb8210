"""The job pool: chunked work is done exactly once, whatever the number of threads and callers."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from llvmlite import ir

from msvm.kernels.native import Frame, native_library
from msvm.kernels.threads import SPINS, SPINS_ALONE, JobPool
from msvm.native.irhelpers import I64, for_each_chunk, for_range, gep, i64

FRAME = Frame(
    ("hits", "items", "chunk", "counter", "threads"), pointers=("hits",), zeroed=("counter", "threads")
)


def _touch_ir() -> str:
    """The job touch(frame): hits[i] += 1 for every item i, chunk-scheduled; counts the threads it ran on."""
    module = ir.Module("touch")
    b, a = FRAME.define(module, "touch", I64.as_pointer())
    b.atomic_rmw("add", a["threads"], i64(1), "monotonic")
    with (for_each_chunk(b, a["counter"], a["items"], a["chunk"]) as (start, stop),
          for_range(b, start, stop) as i):
        slot = gep(b, a["hits"], i)
        b.store(b.add(b.load(slot), i64(1)), slot)
    b.ret_void()
    return str(module)


def _touch() -> int:
    return native_library(("test_touch",), _touch_ir).address("touch")


def _run(pool: JobPool, items: int, chunk: int, flops: float) -> int:
    hits = np.zeros(items, np.int64)
    frame = FRAME.pack(hits=hits.ctypes.data, items=items, chunk=chunk)
    pool.run(_touch(), frame, flops=flops)
    np.testing.assert_array_equal(hits, 1)
    return frame[FRAME.index["threads"]]


@pytest.mark.parametrize("threads", [1, 2, 4])
@pytest.mark.parametrize("items,chunk", [(1, 1), (1000, 7), (10_000, 64)])
def test_every_item_once(threads: int, items: int, chunk: int) -> None:
    pool = JobPool(threads)
    for _ in range(50):
        assert 1 <= _run(pool, items, chunk, 1e12) <= threads


def test_small_work_stays_on_the_calling_thread() -> None:
    assert _run(JobPool(2), 10, 1, 10) == 1


def test_a_lent_core_leaves_jobs_one_helper_short_until_returned() -> None:
    """The JIT's starved compile worker borrows a core: jobs then run without the lent helper."""
    pool = JobPool(2)
    assert not pool.lend_core()  # nothing to lend before the helpers exist
    ran_on = {_run(pool, 10_000, 64, 1e12) for _ in range(20)}
    assert ran_on <= {1, 2}
    assert pool.lend_core() and pool.lend_core()  # lent once
    assert {_run(pool, 10_000, 64, 1e12) for _ in range(20)} == {1}
    pool.return_core()
    assert max(_run(pool, 1_000_000, 256, 1e12) for _ in range(20)) == 2  # a helper joins again


def test_helpers_spin_shorter_while_the_gaps_are_shared_and_jobs_run_either_way() -> None:
    pool = JobPool(2)
    assert pool.spins == SPINS_ALONE > SPINS  # nothing else wants the cores: helpers wait longer awake
    for share, spins in ((True, SPINS), (False, SPINS_ALONE)):
        pool.share_gaps(share)
        assert pool.spins == spins
        assert max(_run(pool, 1_000_000, 256, 1e12) for _ in range(20)) == 2


def test_concurrent_callers_share_the_pool() -> None:
    """Callers that find the pool busy run their job alone; nothing is lost or done twice."""
    pool = JobPool(2)
    errors: list[BaseException] = []

    def caller() -> None:
        try:
            for _ in range(200):
                _run(pool, 500, 3, 1e12)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=caller) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_generated_code_gets_the_entry_point() -> None:
    run, state = JobPool(2).entry()
    assert run and state
