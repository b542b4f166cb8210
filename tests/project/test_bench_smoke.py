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
    """Every engine's steady median is sampled in turns once all have run; the JIT engine's code (dropped
    by the resets of the engines after it) is compiled again and is what those samples run."""
    from argparse import Namespace

    import msvm as ms
    from bench.models import workloads
    from bench.workloads import bench_workload

    w6 = next(w for w in workloads(False) if w.name == "W6")
    runs = bench_workload(w6, Namespace(torch_compile=False, skip_compile=set()), None)
    assert [r.engine for r in runs] == ["numpy eager", "msvm interp", "msvm jit exact"]
    assert all(r.steady is not None and r.steady > 0 for r in runs)
    assert runs[-1].compiles == 1 and runs[-1].max_abs_err < 1e-4
    warm = [e for e in ms.vm.jit_info() if e["function"] == "w6" and e["status"] == "compiled"]
    assert len(warm) == 2 and all(e["hits"] > 0 for e in warm)  # the landing loop's, and the engine's again
    assert min(e["waiting"] for e in warm) <= 2  # compiled before the samples, not while they ran
