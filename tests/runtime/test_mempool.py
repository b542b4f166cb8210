"""The memory pool: size classes, reuse only of unreferenced buffers, statistics, threads."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from msvm.runtime.mempool import MIN_CLASS, MemoryPool, _Lease, size_class


@given(st.integers(min_value=1, max_value=1 << 34))
def test_size_class_covers_the_request_with_at_most_20_percent_waste(nbytes):
    cls = size_class(nbytes)
    assert cls >= nbytes and cls >= MIN_CLASS
    if nbytes > MIN_CLASS:
        assert cls < 1.25 * nbytes
    assert size_class(cls) == cls


def test_a_freed_buffer_is_reused_for_the_same_class():
    pool = MemoryPool()
    a = pool.empty((64, 64), np.float32)
    address = a.ctypes.data
    del a
    b = pool.empty((4096,), np.float32)
    assert b.ctypes.data == address and pool.stats().reuses == 1
    assert b.ctypes.data % 64 == 0 and pool.owns(b) and not pool.owns(np.ones(3))


def test_a_view_keeps_the_buffer_out_of_the_pool():
    pool = MemoryPool()
    a = pool.empty((1000,), np.float64)
    view = a.reshape(10, 100)[2:5].T
    del a
    assert pool.stats().releases == 0
    b = pool.empty((1000,), np.float64)
    assert not np.shares_memory(b, view)
    del view
    assert pool.stats().releases == 1


def test_zeros_are_zero_even_on_a_reused_buffer():
    pool = MemoryPool()
    a = pool.empty((500,), np.int32)
    a.fill(7)
    del a
    z = pool.zeros((500,), np.int32)
    assert pool.stats().reuses == 1 and not z.any()


def test_empty_and_object_arrays_are_not_pooled():
    pool = MemoryPool()
    assert pool.empty((0, 4), np.float32).shape == (0, 4)
    obj = pool.empty((3,), object)
    assert obj.dtype == object and not pool.owns(obj)
    assert pool.stats().allocations == 0


def test_stats_are_consistent():
    pool = MemoryPool()
    a = pool.empty((1000,), np.float32)  # 4000 B in a 4096 B class
    b = pool.empty((300,), np.uint8)  # 300 B in a 320 B class
    s = pool.stats()
    assert s.in_use_bytes == 4300 and s.held_bytes == 4096 + 320 and s.idle_bytes == 0
    assert s.fragmentation == pytest.approx(1 - 4300 / 4416)
    del a
    s = pool.stats()
    assert s.in_use_bytes == 300 and s.idle_bytes == 4096 and s.held_bytes == 4416
    assert s.peak_in_use_bytes == 4300 and s.releases == 1
    assert pool.trim() == 4096 and pool.stats().held_bytes == 320
    del b
    pool.reset_stats()
    s = pool.stats()
    assert s.allocations == s.releases == 0 and s.held_bytes == s.idle_bytes == s.peak_held_bytes == 320
    assert s.in_use_bytes == s.peak_in_use_bytes == 0


def test_idle_cache_is_bounded():
    pool = MemoryPool(max_idle_bytes=10_000)
    arrays = [pool.empty((1000,), np.float32) for _ in range(4)]
    del arrays
    s = pool.stats()
    assert s.idle_bytes <= 10_000 and s.dropped == 2


def test_a_lease_copied_by_numpy_is_not_a_loan():
    pool = MemoryPool()
    a = pool.empty((100,), np.float32)
    copy = a.base.copy()  # numpy makes a new array of the lease type: it must not give anything back
    del copy
    gc.collect()
    assert pool.stats().releases == 0
    del a
    assert pool.stats().releases == 1


# -- randomized: nothing referenced is ever handed out again -----------------------------------------

ACTIONS = st.lists(
    st.tuples(st.sampled_from(["alloc", "view", "drop", "keep"]), st.integers(0, 1 << 16),
              st.integers(0, 50)),
    min_size=1, max_size=80,
)


@settings(max_examples=150, deadline=None)
@given(ACTIONS)
def test_no_buffer_is_handed_out_while_referenced(actions):
    pool = MemoryPool(max_idle_bytes=1 << 20)
    _play(pool, actions)  # everything it held is gone when it returns
    s = pool.stats()
    assert s.in_use_bytes == 0 and s.releases == s.allocations and s.held_bytes == s.idle_bytes


def _play(pool: MemoryPool, actions) -> None:
    live: list[tuple[np.ndarray, int]] = []  # (array or view, the value its owner wrote)
    kept: list[tuple[np.ndarray, int]] = []  # "results returned to the user": never dropped
    stamp = 0
    for action, size, pick in actions:
        if action == "alloc":
            stamp += 1
            arr = pool.empty((size % 3000 + 1,), np.int32)
            assert not any(np.shares_memory(arr, other) for other, _ in live + kept)
            arr.fill(stamp)
            live.append((arr, stamp))
        elif live:
            arr, value = live[pick % len(live)]
            if action == "view":
                live.append((arr[::2].reshape(-1), value))
            elif action == "drop":
                live.pop(pick % len(live))
            else:
                kept.append(live.pop(pick % len(live)))
        arr = None  # the loop must not keep the last array alive
        _check(pool, live + kept)


def _check(pool: MemoryPool, held: list[tuple[np.ndarray, int]]) -> None:
    """Every held array still has its value; the pool counts exactly the loans still referenced."""
    for arr, value in held:
        assert (arr == value).all()
    leases = {id(lease): lease for lease in (_lease_of(a) for a, _ in held)}
    assert pool.stats().in_use_bytes == sum(lease.requested for lease in leases.values())


def _lease_of(arr: np.ndarray) -> _Lease:
    while not isinstance(arr, _Lease):
        arr = arr.base
    return arr


def test_threads_allocating_and_dropping_concurrently():
    pool = MemoryPool(max_idle_bytes=1 << 22)
    errors: list[BaseException] = []

    def worker(seed: int) -> None:
        try:
            rng = np.random.default_rng(seed)
            held = []
            for i in range(2000):
                arr = pool.empty((int(rng.integers(1, 5000)),), np.float32)
                arr.fill(seed * 10_000 + i)
                held.append((arr, seed * 10_000 + i))
                if len(held) > 8:
                    a, v = held.pop(int(rng.integers(0, len(held))))
                    assert (a == v).all()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    s = pool.stats()
    assert s.in_use_bytes == 0 and s.allocations == 8000 and s.reuses > 0


def test_kernel_outputs_are_pooled_from_the_threshold_up():
    from msvm.runtime import mempool

    big = mempool.kernel_empty((mempool.POOLED_OUTPUT_MIN_BYTES // 4,), np.float32)
    small = mempool.kernel_empty((mempool.POOLED_OUTPUT_MIN_BYTES // 4 - 1,), np.float32)
    assert mempool.POOL.owns(big) and not mempool.POOL.owns(small)


def test_native_kernels_take_their_large_outputs_from_the_pool():
    """malloc handed large freed blocks back to the kernel, and every call faulted them in again."""
    from msvm.kernels import elementwise, gemm_packed, matmul, rows
    from msvm.native.blas import best_sgemm
    from msvm.runtime import mempool

    rng = np.random.default_rng(0)
    x = rng.standard_normal((256, 512)).astype(np.float32)  # 512 KiB: past the threshold
    w = rng.standard_normal((512, 512)).astype(np.float32)
    outputs = {
        "linear": gemm_packed.linear(x, w, None),
        "matmul": gemm_packed.matmul(x, w),
        "matmul_blas": matmul.matmul_blas(x, w, best_sgemm()),
        "linear_blas": matmul.linear_blas(x, w, None, best_sgemm()),
        "softmax": rows.softmax_rows(x),
        "layer_norm": rows.layer_norm_rows(x, None, None, 512, 1e-5),
        "unary": elementwise.unary("exp", x),
    }
    assert {name: mempool.POOL.owns(out) for name, out in outputs.items()} == dict.fromkeys(outputs, True)
    np.testing.assert_allclose(outputs["matmul"], x @ w, rtol=1e-4, atol=1e-3)
