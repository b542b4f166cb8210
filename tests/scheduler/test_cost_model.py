"""The cost model: fitting calibrated rates, estimates and their explanation."""

from __future__ import annotations

import pytest
from scheduler_helpers import Counting

import msvm.kernels  # noqa: F401  (registers the variants)
from msvm.native import blas
from msvm.ops.registry import get_op
from msvm.scheduler import autotune, cost
from msvm.scheduler.capability import DB, Rates
from msvm.scheduler.variants import VARIANTS, variants_for

PRIOR = Rates(10.0, 5.0, "prior")
BW = 20.0


def points(rate_gflops: float, overhead_us: float, sizes: list[tuple[float, float]]) -> list[list[float]]:
    return [[f, b, overhead_us * 1e-6 + f / (rate_gflops * 1e9) + b / (BW * 1e9)] for f, b in sizes]


def test_fit_recovers_rate_and_overhead():
    fitted = cost.fit_rates(points(80.0, 30.0, [(1e6, 1e5), (1e7, 1e6), (1e8, 1e6), (5e8, 4e6)]), BW, PRIOR)
    assert fitted.source == "calibrated"
    assert fitted.rate_gflops == pytest.approx(80.0, rel=1e-3)
    assert fitted.overhead_us == pytest.approx(30.0, rel=1e-3)


def test_fit_drops_a_stalled_measurement():
    good = points(80.0, 30.0, [(1e6, 1e5), (1e7, 1e6), (1e8, 1e6), (5e8, 4e6)])
    stalled = [[1e7, 1e6, 0.030]]  # 30 ms: another process held the core
    fitted = cost.fit_rates(good + stalled, BW, PRIOR)
    assert fitted.rate_gflops == pytest.approx(80.0, rel=0.05)
    assert fitted.overhead_us == pytest.approx(30.0, rel=0.05)


def test_fit_never_goes_negative_and_keeps_the_prior_without_points():
    assert cost.fit_rates([], BW, PRIOR) == PRIOR
    fitted = cost.fit_rates([[1e6, 0.0, 1e-5]], BW, PRIOR)  # one point: only one number is fitted
    assert fitted.overhead_us >= 0 and fitted.rate_gflops > 0
    flat = cost.fit_rates([[0.0, 1e5, 2e-5], [0.0, 1e6, 6e-5]], BW, PRIOR)  # no flops: overhead only
    assert flat.rate_gflops == PRIOR.rate_gflops and flat.overhead_us >= 0


def test_estimate_adds_overhead_compute_and_traffic():
    DB.record_calibration("cpu", "matmul", {"reference": Rates(100.0, 10.0, "calibrated")}, {})
    shapes = ((256, 256), (256, 256))
    est = cost.estimate("cpu", "matmul", None, shapes, {})
    flops = 2.0 * 256**3
    assert est.flops == flops
    assert 0.3 < est.efficiency < 1.0  # the reference is a numpy (BLAS) GEMM: below peak at 256³
    wake = cost.BLAS_WAKE_US if blas.threads_spin() else 0.0  # 256³ runs on BLAS's own threads
    assert est.wake_us == wake
    traffic = est.bytes / (DB.bandwidth_gbps("cpu") * 1e9)
    expected = (10 + wake) * 1e-6 + flops / (100e9 * est.efficiency) + traffic
    assert est.seconds == pytest.approx(expected)
    text = est.explain()
    assert text.startswith("reference: ") and "GFLOP @ 100 GFLOP/s × 0." in text and "(calibrated)" in text


def test_kernels_that_wake_a_blas_threads_pay_for_the_core_they_hold(monkeypatch):
    """A threaded GEMM leaves OpenBLAS's threads spinning: a native conv wins small 1×1 convs."""
    monkeypatch.setattr(blas, "threads_spin", lambda dtype="float32": True)
    attrs = {"stride": (1, 1), "padding": (0, 0), "dilation": (1, 1), "groups": 1}
    big = ((1, 16, 32, 32), (32, 16, 1, 1))  # 32 × 1024 × 16 multiply-adds: threaded
    small = ((1, 16, 8, 8), (32, 16, 1, 1))  # 32 × 64 × 16: BLAS's calling thread only
    (variant,) = [v for v in VARIANTS["conv2d"] if v.name == "direct_1x1"]
    assert cost.estimate("cpu", "conv2d", variant, big, attrs).wake_us == cost.BLAS_WAKE_US
    assert "BLAS threads left spinning" in cost.estimate("cpu", "conv2d", variant, big, attrs).explain()
    assert cost.estimate("cpu", "conv2d", variant, small, attrs).wake_us == 0.0
    (native,) = [v for v in VARIANTS["conv2d"] if v.name == "nchwc_direct"]
    assert cost.estimate("cpu", "conv2d", native, big, attrs).wake_us == 0.0
    monkeypatch.setattr(blas, "threads_spin", lambda dtype="float32": False)
    assert cost.estimate("cpu", "conv2d", variant, big, attrs).wake_us == 0.0


def test_gemm_dims_of_the_gemm_backed_ops():
    conv_attrs = {"stride": (1, 1), "padding": (1, 1), "groups": 2}
    shapes = ((4, 16, 32, 32), (32, 8, 3, 3), (32,))
    flops = 2.0 * 4 * 32 * 32 * 32 * 8 * 9
    assert cost.gemm_dims("conv2d", shapes, conv_attrs, flops) == (16, 1024, 72)
    assert cost.gemm_dims("matmul", ((5, 7, 3), (3, 9)), {}, 0) == (7, 9, 3)
    assert cost.gemm_dims("matmul", ((3,), (3, 9)), {}, 0) == (1, 9, 3)
    assert cost.gemm_dims("linear", ((2, 5, 64), (10, 64)), {}, 0) == (10, 10, 64)
    assert cost.gemm_dims("relu", ((2, 5),), {}, 0) is None


def test_gemm_curve_is_measured_once_and_a_patch_overrides_it():
    from msvm.scheduler import load_capability_patch

    half = cost.measure_gemm_curve("cpu")
    assert set(half) == {"m", "n", "k"} and all(v >= 0 for v in half.values())
    assert DB.gemm_half("cpu") == half
    load_capability_patch({"devices": {"cpu": {"gemm_half": {"m": 0, "n": 0, "k": 0}}}})
    assert cost.gemm_efficiency("cpu", "matmul", "blas", ((4, 4), (4, 4)), {}, 128.0) == 1.0
    assert cost.gemm_efficiency("cpu", "matmul", "native", ((4, 4), (4, 4)), {}, 128.0) == 1.0


def test_calibration_times_pool_variants_before_anything_that_may_call_openblas(fake_variants, monkeypatch):
    """OpenBLAS's threads spin after a call and would take the core from a pool kernel timed next."""
    order = []
    ref = get_op("linear").kernel
    kinds_of = {"b1": "blas", "n1": "native", "np1": "numpy", "n2": "native"}
    fakes = [Counting("linear", name, ref, kind=kind, when=lambda shapes, attrs: len(shapes[1]) == 2)
             for name, kind in kinds_of.items()]
    fake_variants("linear", fakes)
    monkeypatch.setattr(autotune, "time_kernel", lambda run, **kw: order.append(run) or 1e-3)
    fitted = cost.calibrate("cpu", "linear")
    assert set(fitted) == {*kinds_of, "reference"}
    kinds = []
    for run in order:  # which kernel each timed run called: the fakes count their calls
        before = [f.calls for f in fakes]
        run()
        hit = [f.name for f, b in zip(fakes, before) if f.calls > b]
        kinds.append(kinds_of[hit[0]] if hit else "reference")
    first_other = next(i for i, k in enumerate(kinds) if k != "native")
    assert set(kinds[:first_other]) == {"native"} and "native" not in kinds[first_other:], kinds


def test_calibration_fits_every_applicable_variant_and_records_points():
    fitted = cost.calibrate("cpu", "linear")
    names = {v.name for v in variants_for("linear", "cpu", "float32")} | {"reference"}
    assert set(fitted) == names
    assert all(r.rate_gflops > 0 and r.overhead_us >= 0 for r in fitted.values())
    assert DB.is_calibrated("cpu", "linear")
    state = DB.device("cpu")
    assert all(state.calibration_points[f"linear/{n}"] for n in names)
    DB.device("cpu").calibrated.clear()  # the next estimate must not re-measure: the op is marked
    cost.ensure_calibrated("cpu", "linear")
    assert not DB.device("cpu").calibrated
