"""The JIT at run time, asserted through ms.vm.jit_info(): trigger, hits, cache modes, budgets, tools."""

# ms.Tensor["N", 3] reads to linters as string forward references ("?" as a syntax error): noise here.
# ruff: noqa: F821, F722

import threading
import time
from collections.abc import Callable

import numpy as np
import pytest

import msvm as ms
import msvm.ops as ops
from msvm.frontend import Tensor, jit
from msvm.msjit.compiler import COMPILER


def rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random(shape, dtype=np.float32)


def entries(function: str) -> list[dict]:
    return [e for e in ms.vm.jit_info() if e["function"] == function]


def run_hot(fn, *args, times: int = 3) -> None:
    """Call ``fn`` often enough for its key to get hot, checking every result against plain numpy."""
    for _ in range(times):
        np.testing.assert_allclose(fn(*args), fn.py_func(*args), rtol=1e-5, atol=1e-6)


@jit
def affine(x: Tensor["N", 16]):
    return ops.relu(x * 2.0 + 1.0)


def test_region_compiles_after_the_trigger_and_is_then_hit() -> None:
    x = rand(4, 16)
    run_hot(affine, x, times=2)
    assert entries("affine") == []  # seen twice: not hot yet
    run_hot(affine, x, times=1)
    (entry,) = entries("affine")
    assert entry["status"] in ("queued", "compiling", "compiled")
    assert "first hot key" in entry["reason"] and "N=4" in entry["reason"]
    assert ms.vm.wait_for_compiles(60)
    (entry,) = entries("affine")
    assert entry["status"] == "compiled", entry["reason"]
    run_hot(affine, x, times=5)
    (entry,) = entries("affine")
    assert entry["hits"] == 5 and entry["mode"] == "exact"
    assert entry["name"].startswith("jit_cache_") and entry["name"].endswith("_N4")
    assert entry["compile_ms"] > 0 and entry["phase_ms"]["queue"] >= 0 and "install" in entry["phase_ms"]
    assert 0 < entry["compile_cpu_ms"] < entry["compile_ms"] * 1.5 + 5  # a compile uses one core at a time
    assert entry["code_bytes"] > 0 and entry["interp_ms"] > 0 and entry["native_ms"] > 0
    assert entry["saved_ms"] == pytest.approx(5 * (entry["interp_ms"] - entry["native_ms"]))
    assert ms.vm.get_jit_hit_rate() == pytest.approx(5 / 8)
    assert ms.vm.get_avg_compile_time() == pytest.approx(entry["compile_ms"])


def test_a_new_shape_gets_its_own_entry_and_says_why() -> None:
    run_hot(affine, rand(4, 16))
    run_hot(affine, rand(6, 16))
    assert ms.vm.wait_for_compiles(60)
    first, second = entries("affine")
    assert second["name"].endswith("_N6") and "N took the new value 6" in second["reason"]
    assert {first["status"], second["status"]} == {"compiled"}


@jit(cache_mode="bucket", bucket_boundaries=(8, 16))
def bucketed(x: Tensor["N", 16]):
    return ops.relu(x * 2.0 + 1.0)


def test_bucket_mode_keeps_one_entry_per_touched_bucket() -> None:
    for n in (3, 5, 7):  # three shapes, one bucket: hot at the third
        run_hot(bucketed, rand(n, 16), times=1)
    for n in (9, 12, 16):
        run_hot(bucketed, rand(n, 16), times=1)
    run_hot(bucketed, rand(40, 16))  # above the last boundary: pinned to its exact size
    assert ms.vm.wait_for_compiles(60)
    got = entries("bucketed")
    assert [e["name"].split("_")[-1] for e in got] == ["N1-8", "N9-16", "N40"]
    assert [e["status"] for e in got] == ["compiled"] * 3, [e["reason"] for e in got]
    assert got[0]["mode"] == "bucket" and got[0]["bounds"] == {"N": 8} and got[2]["bounds"] == {}
    assert "N took the new bucket 9-16" in got[1]["reason"]
    # the bucket compiled second shares the machine code of the one compiled first (the costlier one goes
    # first when both wait: ``Entry.compile_order``); the exact entry (N a constant) has its own
    first, second = (0, 1) if got[0]["code_from"] is None else (1, 0)
    assert got[first]["code_from"] is None and got[second]["code_from"] == got[first]["name"]
    assert got[2]["code_from"] is None
    for n in (1, 2, 4, 6, 8, 10, 15):  # new sizes inside compiled buckets run native at once
        run_hot(bucketed, rand(n, 16, seed=n), times=1)
    after = entries("bucketed")
    assert len(after) == 3 and after[0]["hits"] == 5 and after[1]["hits"] == 2


def test_after_a_reset_buckets_compile_afresh() -> None:
    run_hot(bucketed, rand(3, 16))
    assert ms.vm.wait_for_compiles(60)
    ms.vm.reset()  # what is measured after it must not ride on code compiled before
    run_hot(bucketed, rand(12, 16))
    assert ms.vm.wait_for_compiles(60)
    (entry,) = entries("bucketed")
    assert entry["status"] == "compiled" and entry["code_from"] is None and entry["phase_ms"]["optimise"] > 0


@jit(cache_mode="adaptive")
def adaptive(x: Tensor["N", 16]):
    return ops.relu(x * 2.0 + 1.0)


def test_adaptive_mode_bounds_its_entries_and_reports_its_buckets() -> None:
    ms.set_context(jit_adaptive_budget=2)
    seq = ms.vm.jit_monitor().events()[-1]["seq"] if ms.vm.jit_monitor().events() else 0
    for n in (2, 3, 5):
        run_hot(adaptive, rand(n, 16))
        assert ms.vm.wait_for_compiles(60)
    for n in (6, 9, 16, 2, 3):  # served by the bucket learned for 5 and the two exact entries
        run_hot(adaptive, rand(n, 16), times=1)
    got = entries("adaptive")
    assert [e["name"].split("_")[-1] for e in got] == ["N2", "N3", "N5-16"]
    assert all(e["status"] == "compiled" and e["mode"] == "adaptive" for e in got)
    assert got[2]["hits"] == 3 and got[0]["hits"] == 1
    (chosen,) = [e for e in ms.vm.jit_monitor().events(since=seq) if e["kind"] == "buckets"]
    assert chosen["buckets"] == {"N": [4, 16]} and chosen["function"] == "adaptive"


@jit
def budgeted(x: Tensor["N", 16]):
    return ops.relu(x * 2.0 + 1.0)


def test_a_full_cache_keeps_old_entries_serving_and_runs_new_keys_interpreted() -> None:
    ms.set_context(jit_cache_region_entries=2)
    for n in (2, 3, 4):
        run_hot(budgeted, rand(n, 16))
    assert ms.vm.wait_for_compiles(60)
    assert [e["name"].split("_")[-1] for e in entries("budgeted")] == ["N2", "N3"]
    for n in (2, 3, 4, 4, 4):
        run_hot(budgeted, rand(n, 16), times=1)
    n2, n3 = entries("budgeted")
    assert n2["hits"] == 1 and n3["hits"] == 1
    (full,) = [e for e in ms.vm.jit_monitor().events() if e["kind"] == "cache-full"]
    assert "run interpreted" in full["message"]


def test_the_global_budget_applies_across_functions() -> None:
    ms.set_context(jit_cache_entries=1)
    run_hot(affine, rand(2, 16))
    run_hot(budgeted, rand(2, 16))
    assert ms.vm.wait_for_compiles(60)
    assert [e["function"] for e in ms.vm.jit_info()] == ["affine"]
    run_hot(budgeted, rand(2, 16))


@jit(fallback=False)
def strict(x: Tensor["N", 16]):
    return ops.relu(x * 2.0 + 1.0)


def test_fallback_false_raises_jit_error_at_the_next_run() -> None:
    ms.vm._inject_compile_fault("error")
    x = rand(4, 16)
    run_hot(strict, x)
    assert ms.vm.wait_for_compiles(60)
    (entry,) = entries("strict")
    assert entry["status"] == "fallback" and "injected error" in entry["reason"]
    with pytest.raises(ms.JitError, match="injected error") as err:
        strict(x)
    assert err.value.code == "E-JIT" and "fallback=True" in err.value.hint
    run_hot(strict, rand(5, 16), times=2)  # other keys still run


def test_disassemble_an_entry_in_all_four_kinds() -> None:
    run_hot(affine, rand(4, 16))
    assert ms.vm.wait_for_compiles(60)
    (entry,) = entries("affine")
    bytecode = ms.vm.disassemble(entry, "bytecode")
    assert "TENSOR_CREATE 0, [4, 16], float32" in bytecode and "OP_CALL relu" in bytecode
    assert "RET" in bytecode
    assert "define" in ms.vm.disassemble(entry["name"], "llvm")
    assert "define" in ms.vm.disassemble(entry, "llvm-opt")
    assert ms.vm.disassemble(entry, "asm").strip()
    with pytest.raises(ValueError, match="kind must be one of"):
        ms.vm.disassemble(entry, "pdf")
    with pytest.raises(KeyError, match="no JIT cache entry"):
        ms.vm.disassemble("jit_cache_nope")


def test_reset_drops_entries_counters_and_events() -> None:
    x = rand(4, 16)
    run_hot(affine, x, times=4)
    assert ms.vm.wait_for_compiles(60)
    run_hot(affine, x, times=2)
    assert ms.vm.get_jit_hit_rate() > 0 and ms.vm.jit_monitor().events()
    ms.vm.reset()
    assert ms.vm.jit_info() == [] and ms.vm.get_jit_hit_rate() == 0.0 and ms.vm.jit_monitor().events() == []
    run_hot(affine, x, times=2)
    assert entries("affine") == []  # counting starts again
    run_hot(affine, x, times=1)
    assert ms.vm.wait_for_compiles(60)
    (entry,) = entries("affine")
    assert entry["status"] == "compiled" and entry["hits"] == 0


def test_monitor_sees_the_queue_the_active_compile_and_events_on_the_compiler_thread() -> None:
    from msvm.msjit.codegen import compile_region

    release = threading.Event()

    def slow(*args, **kwargs):
        release.wait(30)
        return compile_region(*args, **kwargs)

    got: list[dict] = []
    threads: set[str] = set()

    def listen(event: dict) -> None:
        got.append(event)
        threads.add(threading.current_thread().name)

    monitor = ms.vm.jit_monitor()
    monitor.subscribe(listen)
    COMPILER._use_backend(slow)
    try:
        run_hot(affine, rand(2, 16))
        run_hot(affine, rand(3, 16))  # the execution thread never waits for the blocked compiler
        assert not ms.vm.wait_for_compiles(0.2)
        active = monitor.active()
        assert active is not None and active["phase"] == "compile"
        waiting = [e["name"].split("_")[-1] for e in monitor.queue()]
        # whichever the compiler took first (N2 if it was idle; the costlier N3 if both were queued)
        assert len(waiting) == 1 and {active["name"].split("_")[-1], *waiting} == {"N2", "N3"}
    finally:
        release.set()
        COMPILER._use_backend(None)
    assert ms.vm.wait_for_compiles(60)
    monitor.unsubscribe(listen)
    kinds = [e["kind"] for e in got]
    assert kinds.index("queued") < kinds.index("started") < kinds.index("installed")
    assert kinds.count("installed") == 2 and threads == {"msvm-jit-compiler"}
    assert monitor.queue() == [] and monitor.active() is None
    last = got[-1]["seq"]
    assert all(e["seq"] > last for e in monitor.events(since=last))


def test_trace_records_compiles_and_native_runs_on_their_own_lanes(tmp_path) -> None:
    ms.vm.enable_bc_trace(True, path=None)
    try:
        ms.vm.clear_bc_trace()
        x = rand(4, 16)
        run_hot(affine, x)
        assert ms.vm.wait_for_compiles(60)
        run_hot(affine, x, times=2)
    finally:
        ms.vm.enable_bc_trace(False)
    events = ms.vm.bc_trace_events()
    (entry,) = entries("affine")
    native = [e for e in events if e.mode == "jit"]
    assert len(native) == 2 and {e.op for e in native} == {entry["name"]} and native[0].opcode == "REGION"
    phases = [e.op for e in events if e.mode == "compile"]
    assert {"region", "compile", "install"} <= set(phases)
    trace = ms.vm.bc_trace_to_chrome(tmp_path / "t.json").read_text()
    assert '"compiler"' in trace


@jit(mem_optimize=True, cache_mode="bucket", bucket_boundaries=(8,))
def tuned(x: Tensor["N", 16]):
    return ops.relu(x * 2.0 + 1.0)


def compile_tuned(observe: Callable[[dict], None]) -> None:
    """Make ``tuned`` hot and let its compile land, calling ``observe(kwargs)`` as the compile starts."""
    from msvm.msjit.codegen import compile_region

    def record(*args, **kwargs):
        observe(kwargs)
        return compile_region(*args, **kwargs)

    COMPILER._use_backend(record)
    try:
        run_hot(tuned, rand(5, 16))
        assert ms.vm.wait_for_compiles(60)
    finally:
        COMPILER._use_backend(None)


def test_jit_options_reach_the_code_generator() -> None:
    seen: list[dict] = []
    compile_tuned(seen.append)
    (entry,) = entries("tuned")
    (kwargs,) = seen
    assert kwargs["mem_optimize"] is True and kwargs["bounds"] == {"N": 8} and kwargs["name"] == entry["name"]
    assert entry["planned_bytes"] <= entry["naive_bytes"]


def test_the_job_pool_spins_short_only_while_a_compile_runs_in_its_gaps() -> None:
    """The idle-priority worker lives on the gaps between the program's jobs: helpers sleep sooner while
    it compiles, and wait awake longer for the next job (an interpreted program's) once it is done."""
    from msvm.kernels.threads import POOL, SPINS, SPINS_ALONE

    during: list[int] = []
    compile_tuned(lambda kwargs: during.append(POOL.spins))
    assert during == [SPINS] and POOL.spins == SPINS_ALONE


@jit(scd_threshold=0.5)
def upsample_loose(x: Tensor["N", 3, "H", "W"], like: Tensor["?", "?"]):
    return ops.relu(ops.resize_nearest(x, size=(like.shape[0], like.shape[1])) + 1.0)


def test_a_lower_scd_threshold_lets_a_half_anchored_region_compile() -> None:
    x, like = rand(1, 3, 4, 4), np.zeros((8, 8), np.float32)
    (region,) = ms.vm.scd_analysis(upsample_loose, x, like).regions
    assert region.scd == 0.5 and region.compilable
    run_hot(upsample_loose, x, like, times=4)
    assert ms.vm.wait_for_compiles(60)
    run_hot(upsample_loose, x, like, times=2)
    (entry,) = entries("upsample_loose")
    assert entry["status"] == "compiled" and entry["hits"] == 2
    assert entry["symbols"]["R1d0"] == 8  # the ? dims are keyed under fresh symbols


def test_the_jit_can_be_switched_off_and_on() -> None:
    x = rand(4, 16)
    run_hot(affine, x)
    assert ms.vm.wait_for_compiles(60)
    ms.set_context(jit_enabled=False)
    run_hot(affine, x, times=3)
    run_hot(affine, rand(7, 16), times=3)
    assert [(e["name"].split("_")[-1], e["hits"]) for e in entries("affine")] == [("N4", 0)]
    ms.set_context(jit_enabled=True)
    run_hot(affine, x, times=2)
    assert entries("affine")[0]["hits"] == 2


@jit
def churning(x: Tensor["N", 16]):
    return ops.relu(x * 2.0 + 1.0)


def _status_becomes(name: str, status: str, calls: Callable[[], None] = lambda: None) -> bool:
    """Poll (making ``calls`` between looks) until the entry ``name`` has ``status``, 60 s at most."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if any(e["name"] == name and e["status"] == status for e in ms.vm.jit_info()):
            return True
        calls()
        time.sleep(0.01)
    return False


def test_an_exact_key_of_a_churning_region_compiles_when_asked_again_idle_or_waited_for(monkeypatch) -> None:
    """Past ``jit_adaptive_budget`` distinct keys, a key hot for the first time is queued but left for
    later (a "deferred" event says why) while the program runs other shapes: it compiles once asked for
    again, once the program pauses, or when compiles are waited for."""
    from msvm.msjit import cache

    monkeypatch.setattr(cache, "DEFER_IDLE_NS", 600 * 10**9)  # "recently" is ten minutes: no pause
    fresh = iter(range(100, 400))
    for n in range(1, 12):  # 11 distinct keys: over the budget of 8
        churning(rand(n, 16))
    assert ms.vm.wait_for_compiles(60)  # the compile worker has started (nothing is queued yet)
    for n in (20, 21, 22):
        run_hot(churning, rand(n, 16))
    time.sleep(0.1)  # the compiler looks at its queue every 10 ms
    churning(rand(next(fresh), 16))
    assert {e["name"][-3:]: e["status"] for e in entries("churning")} == dict.fromkeys(("N20", "N21", "N22"),
                                                                                         "queued")
    deferred = [e["entry"][-3:] for e in ms.vm.jit_monitor().events() if e["kind"] == "deferred"]
    assert sorted(deferred) == ["N20", "N21", "N22"]

    (n20,) = [e["name"] for e in entries("churning") if e["name"].endswith("N20")]
    churning(rand(20, 16))  # asked for again
    assert _status_becomes(n20, "compiled", lambda: churning(rand(next(fresh), 16)))
    run_hot(churning, rand(20, 16), times=2)
    assert [e["hits"] for e in entries("churning") if e["name"] == n20] == [2]

    monkeypatch.setattr(cache, "DEFER_IDLE_NS", 10**6)  # the program pauses for more than 1 ms
    (n21,) = [e["name"] for e in entries("churning") if e["name"].endswith("N21")]
    assert _status_becomes(n21, "compiled")
    monkeypatch.setattr(cache, "DEFER_IDLE_NS", 600 * 10**9)
    churning(rand(next(fresh), 16))
    assert ms.vm.wait_for_compiles(60)  # waiting for compiles does not wait for a pause
    assert {e["status"] for e in entries("churning")} == {"compiled"}


def test_the_compiler_takes_the_costliest_region_first() -> None:
    """Queued entries compile in order of their region's interpreted time per run (the most saved
    first), then oldest first; the monitor lists the queue in that order."""
    from msvm.msjit.cache import Entry
    from msvm.msjit.compiler import CompilerThread

    class Owner:
        last_miss_ns = 0

        def __init__(self, ms_per_run: float | None) -> None:
            self.ms = ms_per_run

        def interp_ms(self, entry: Entry) -> float | None:
            return self.ms

        def churns(self) -> bool:
            return False

    def entry(name: str, ms_per_run: float | None) -> Entry:
        return Entry(name, "f", 0, 0, "exact", (), (), {}, "test", owner=Owner(ms_per_run))

    cheap, unknown = entry("cheap", 1.0), entry("unknown", None)
    costly, costly_later = entry("costly", 9.0), entry("costly_later", 9.0)
    compiler = CompilerThread()  # never started: the queue is driven by hand
    compiler._queue.extend([cheap, unknown, costly, costly_later])
    order = []
    while (taken := compiler._take(list(compiler._queue))) is not None:
        order.append(taken.name)
    assert order == ["costly", "costly_later", "cheap", "unknown"]
    assert sorted([cheap, unknown, costly], key=Entry.compile_order) == [costly, cheap, unknown]
