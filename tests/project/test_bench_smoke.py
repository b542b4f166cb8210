"""The benchmark suites still run against the current API (their figures are not checked here)."""

from __future__ import annotations

import importlib

import pytest

from bench.__main__ import SUITES


@pytest.mark.parametrize("suite", SUITES)
def test_every_suite_imports_and_has_a_main(suite):
    assert callable(importlib.import_module(f"bench.{suite}").main)


def test_the_interference_table_runs():
    from bench.codegen import bench_interference

    rows = bench_interference()
    assert rows[0][0] == "nothing compiling" and len(rows) == 3
    assert all(int(r[3]) >= 1 for r in rows[1:])  # compiles really ran beside the measured calls


def test_a_blas_bound_loop_gets_its_native_code():
    """A program calling a GEMM-bound jitted function in a loop keeps OpenBLAS's threads spinning; the
    idle-priority compile worker must still get a core (it did not: W3's entry stayed queued for
    30 s). ``measure_landing`` is the benchmark's own figure for this."""
    from bench.models import workloads
    from bench.workloads import LANDING_LIMIT_S, measure_landing

    w3 = next(w for w in workloads(False) if w.name == "W3")
    seconds, calls = measure_landing(w3, {"cache_mode": "exact"})
    assert seconds < LANDING_LIMIT_S and calls >= 3


def test_steady_medians_are_taken_after_every_engine_ran_with_the_jit_warm_again():
    """Every engine's stream total and steady median are sampled in turns once all have run; the JIT
    engine's code (dropped by the resets of the engines and streams after it) is compiled again and is
    what the steady samples run."""
    import statistics
    from argparse import Namespace

    import msvm as ms
    from bench.models import workloads
    from bench.workloads import STEADY_ROUNDS, STREAM_ROUNDS, bench_workload

    w6 = next(w for w in workloads(False) if w.name == "W6")
    runs = bench_workload(w6, Namespace(torch_compile=False, skip_compile=set()), None)
    assert [r.engine for r in runs] == ["numpy eager", "msvm interp", "msvm jit exact"]
    assert all(r.steady is not None and r.steady > 0 for r in runs)
    assert runs[-1].compiles == 1 and runs[-1].max_abs_err < 1e-4
    sampled = max((e for e in ms.vm.jit_info() if e["function"] == "w6" and e["status"] == "compiled"),
                  key=lambda e: e["hits"])  # the engine's entry compiled again, which the samples ran
    assert sampled["hits"] >= STEADY_ROUNDS and sampled["waiting"] <= 2  # compiled before the samples
    # stream totals: a median of runs taken in turns, each from a fresh function and an empty cache
    assert all(len(r.stream_totals) == STREAM_ROUNDS for r in runs)
    assert all(r.stream_total == statistics.median(r.stream_totals) for r in runs)


def test_the_delivery_loop_child_reaches_native_code_in_a_fresh_process(tmp_path):
    """``python -m bench delivery``'s loop child, run as the suite runs it (a fresh process, an empty JIT
    cache dir, one JSON line back): W6's loop that never waits still gets its native code."""
    from bench.delivery import run_child

    result = run_child({"kind": "loop", "workload": "W6", "mode": "exact", "limit_s": 12.0,
                        "after_native": 20, "window_s": 0.2}, cache_dir=str(tmp_path), timeout_s=60)
    assert "error" not in result, result
    for key in ("calls", "first_call_ns", "interp_median_ns", "native_median_ns", "during_median_ns",
                "window_median_ns", "latency_ns", "calls_before_native", "hits", "cache"):
        assert key in result
    assert result["hits"] > 0 or result["latency_ns"] is not None, result  # the loop ran native code
    assert result["calls_before_native"] is not None and result["calls"] > result["calls_before_native"]
    assert result["cache"]["entries"] >= 1


def test_the_distributed_child_maps_a_tiny_data_set_as_one_process_computes_it(tmp_path):
    """``python -m bench distributed``'s child as the suite runs it (a fresh process, a JIT cache dir for
    its cluster): one-worker maps of a tiny data set whose outputs match the loop run here, and
    that worker's JIT reported."""
    pytest.importorskip("distributed")
    from bench.distributed import batch_sizes, checksum, data_set, run_child
    from bench.models import cnn_params, make_cnn

    assert batch_sizes(30, (4, 16)) == [4, 16, 4, 6]
    result = run_child({"workers": 1, "images": 12, "side": 16}, str(tmp_path), timeout_s=120)
    assert "error" not in result, result
    cnn = make_cnn(cnn_params())
    batches = data_set(12, 16)
    assert result["batches"] == len(batches) == len(batch_sizes(12))
    assert result["checksum"] == pytest.approx(checksum([cnn(b) for b in batches]), rel=1e-4)
    (worker,) = result["workers"]
    assert set(worker) == {"entries", "hits", "compiles", "disk_loads"}
    assert all(result[k] > 0 for k in ("cluster_start_s", "cold_s", "warm_s", "in_worker_s", "again_s"))
