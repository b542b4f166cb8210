"""The interpreter's use of the pool: allocations, last-use releases, safety of results and views."""

from __future__ import annotations

import threading
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import msvm.ops  # noqa: F401  (registers the ops)
from msvm.bytecode import ModuleBuilder
from msvm.context import CONTEXT, set_context
from msvm.interpreter import Program
from msvm.runtime import POOL, memory_stats

INTERPRETED = {"jit": False}  # the interpreter's own allocations, not the JIT's arena


@pytest.fixture(autouse=True)
def default_reuse():
    saved = CONTEXT.enable_mem_reuse
    set_context(enable_mem_reuse=True)
    yield
    set_context(enable_mem_reuse=saved)


def build(fn_builder, params):
    mb = ModuleBuilder("t")
    f = mb.function("f", params)
    fn_builder(f)
    return Program(mb.build(), INTERPRETED).function("f")


def chain(f):
    """((x + y) * y - y) … : 12 ops on [N, 128, 256] float32 (128 KiB and more per tensor)."""
    x = f.tensor_input(0, "[N, 128, 256]", "float32")
    y = f.tensor_input(1, "[N, 128, 256]", "float32")
    r = x
    for i in range(12):
        r = f.call(("add", "mul", "sub")[i % 3], [r, y])
    f.ret(r)


def chain_numpy(x, y):
    r = x
    for i in range(12):
        r = (np.add, np.multiply, np.subtract)[i % 3](r, y)
    return r


def test_alloc_and_create_come_from_the_pool_and_free_gives_back():
    def body(f):
        n = f.scalar_arg(0, "n")
        a = f.tensor_alloc([n, n], "float32")
        z = f.tensor_zeros("[4, 4]", "float64")
        f.free(a)
        b = f.tensor_alloc([n, n], "float32")
        f.ret(b, z)

    fn = build(body, ["n"])
    before = memory_stats()
    b, z = fn(100)
    after = memory_stats()
    assert POOL.owns(b) and POOL.owns(z) and not b.any() and not z.any()
    assert after["allocations"] - before["allocations"] == 3
    assert after["reuses"] - before["reuses"] >= 1  # b took a's buffer, freed by TENSOR_FREE


def test_without_reuse_nothing_comes_from_the_pool():
    set_context(enable_mem_reuse=False)
    fn = build(chain, ["x", "y"])
    x = np.ones((1, 128, 256), np.float32)
    before = memory_stats()["allocations"]
    out = fn(x, x)
    assert not POOL.owns(out) and memory_stats()["allocations"] == before
    assert "del " not in fn.source


def test_large_elementwise_outputs_are_pooled_and_dead_registers_released():
    fn = build(chain, ["x", "y"])
    assert "del r" in fn.source
    x = np.random.default_rng(0).random((2, 128, 256), dtype=np.float32)
    y = np.random.default_rng(1).random((2, 128, 256), dtype=np.float32) + 0.5
    before = memory_stats()
    out = fn(x, y)
    after = memory_stats()
    np.testing.assert_allclose(out, chain_numpy(x, y), rtol=1e-5)
    assert POOL.owns(out)
    assert after["allocations"] - before["allocations"] == 12
    assert after["reuses"] - before["reuses"] >= 10  # each result reuses the buffer freed two ops back


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(1, 3), min_size=2, max_size=6))
def test_results_are_never_mutated_by_later_calls(batches):
    fn = build(chain, ["x", "y"])
    rng = np.random.default_rng(len(batches))
    kept = []
    for n in batches:
        x = rng.random((n, 128, 256), dtype=np.float32)
        y = rng.random((n, 128, 256), dtype=np.float32) + 0.5
        out = fn(x, y)
        kept.append((out, out.copy(), out[:, ::2].T))  # the result, its value, and a view of it
    for out, value, view in kept:
        np.testing.assert_array_equal(out, value)
        np.testing.assert_array_equal(view, value[:, ::2].T)


def test_a_view_in_a_live_register_keeps_its_buffer():
    def body(f):
        n = f.scalar_arg(0, "n")
        a = f.tensor_alloc([n, n], "float32")
        one = f.load_const(np.float32(1.0))
        filled = f.call("add", [a, one])  # ones
        m = f.scalar_op("mul", n, n)
        flat = f.resize(filled, [m])  # a view of filled
        f.free(a)
        b = f.tensor_alloc([n, n], "float32")  # may take a's buffer, never filled's
        total = f.call("sum", [flat])
        f.ret(total, b, flat)

    fn = build(body, ["n"])
    total, b, flat = fn(200)
    assert float(total) == 200 * 200 and not b.any() and (flat == 1).all()
    assert not np.shares_memory(b, flat)


def test_peak_memory_is_lower_with_reuse():
    x = np.ones((4, 128, 256), np.float32)

    def peak(reuse: bool) -> int:
        set_context(enable_mem_reuse=reuse)
        fn = build(chain, ["x", "y"])
        fn(x, x)
        POOL.trim()
        tracemalloc.start()
        try:
            out = fn(x, x)
            return tracemalloc.get_traced_memory()[1] - out.nbytes
        finally:
            tracemalloc.stop()

    with_reuse, without = peak(True), peak(False)
    assert with_reuse < without / 3  # 12 live intermediates without, about 2 with


def test_two_threads_share_pooled_sites_safely():
    fn = build(chain, ["x", "y"])
    errors: list[BaseException] = []

    def worker(seed: int) -> None:
        try:
            rng = np.random.default_rng(seed)
            for i in range(15):
                n = 1 + (seed + i) % 3
                x = rng.random((n, 128, 256), dtype=np.float32)
                y = rng.random((n, 128, 256), dtype=np.float32) + 0.5
                np.testing.assert_allclose(fn(x, y), chain_numpy(x, y), rtol=1e-5)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_ms_vm_memory_stats_reports_the_interpreters_pool():
    import msvm as ms

    POOL.reset_stats()
    before = ms.vm.memory_stats()["in_use_bytes"]
    kept = POOL.empty((256, 256), np.float32)  # 256 KiB lent out
    stats = ms.vm.memory_stats()
    assert stats == memory_stats() and stats["in_use_bytes"] - before == kept.nbytes
    assert stats["allocations"] == 1
    assert set(stats) == {"in_use_bytes", "peak_in_use_bytes", "held_bytes", "peak_held_bytes", "idle_bytes",
                          "allocations", "reuses", "releases", "dropped", "fragmentation"}
