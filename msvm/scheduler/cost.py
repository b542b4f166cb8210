"""The cost model: estimated seconds of one kernel variant on concrete shapes, small enough to explain.

    seconds = overhead [+ BLAS wake] + flops / (rate × gemm_efficiency) + bytes / bandwidth

``flops`` and ``bytes`` come from the variant (``Variant.flops``/``Variant.bytes``; the reference
kernel borrows them from the op's variants — same math). ``bandwidth`` is the measured memory
bandwidth (triad) of the device. ``rate`` and ``overhead`` are per variant:

* prior (before calibration): a share of the measured sgemm rate by kind — "blas" 1.0, "native"
  0.5, "numpy" 0.15 — plus a fixed per-call cost by kind.
* calibrated (seconds per op, once per host: requested at the op's first cost decision, measured
  on the background thread — ``background`` — and kept in the on-disk cache — ``persist`` — so a
  later process starts with it): every variant that applies runs on the op's calibration cases
  (typical small-CNN and MLP layers and elementwise sizes, ``CALIBRATION`` below; best of 5 runs,
  since a busy machine only ever makes runs slower), and ``overhead`` and ``rate`` are fitted by
  non-negative least squares on relative error. The fit and its points go into the capability DB
  (``capability_db()["devices"]["cpu"]["cost_model"]``), where a patch can override them.

``gemm_efficiency`` applies to kernels that run a BLAS GEMM (kinds "blas" and "numpy": the numpy
references of conv2d/matmul/linear are GEMMs too): a GEMM with a small M, N or K runs far below
peak (here M = 16 reaches ~65 %, K = 9 ~35 %), so each dim contributes ``d / (d + d½)``. The
three half-efficiency sizes are measured on numpy's sgemm (about 0.2 s on an idle machine, a dozen
GEMMs) before the first calibration and kept in the capability DB; until then defaults stand in
(``capability.DEFAULT_GEMM_HALF``). For conv2d the GEMM is the im2col one: M = C_out/groups,
K = C_in/groups·KH·KW, N = OH·OW.

A GEMM big enough to run on OpenBLAS's own threads (``BLAS_THREADED_MACS``) also pays
``BLAS_WAKE_US``: those threads spin for about 0.1 s afterwards, holding a core the job pool's
kernels that follow want (``blas.threads_spin`` says whether the loaded BLAS does this).

An elementwise op's "flops" are its elements (``Variant.flops`` of the kernels in
``msvm.kernels.elementwise``): its rates are elements per second, fitted like any other.

The reason shown to users names the estimate of the pick and of the runner-up.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..ops.registry import REGISTRY
from .capability import DB, REFERENCE, REFERENCE_KIND, Rates, load_variants, variants_on
from .variants import VARIANTS, Shapes, Variant

# Calibration cases per op: (input shapes, attributes). Typical layers of small CNNs and MLPs, with
# 8 to 96 channels; they are deliberately not the benchmark's shapes (batch 2 and 8, 48²/24²/12²).
_CONV = {"stride": (1, 1), "padding": (1, 1), "dilation": (1, 1), "groups": 1}
CALIBRATION: dict[str, list[tuple[Shapes, dict[str, Any]]]] = {
    "conv2d": [
        (((2, 3, 48, 48), (24, 3, 3, 3), (24,)), _CONV),
        (((8, 8, 48, 48), (8, 8, 3, 3), (8,)), _CONV),
        (((2, 16, 48, 48), (16, 16, 3, 3), (16,)), _CONV),
        (((8, 16, 24, 24), (16, 16, 3, 3), (16,)), _CONV),
        (((2, 24, 48, 48), (24, 24, 3, 3), (24,)), _CONV),
        (((8, 32, 24, 24), (32, 32, 3, 3), (32,)), _CONV),
        (((2, 48, 24, 24), (48, 48, 3, 3), (48,)), _CONV),
        (((8, 96, 12, 12), (96, 96, 3, 3), (96,)), _CONV),
        (((2, 16, 48, 48), (32, 16, 3, 3), (32,)), {**_CONV, "stride": (2, 2)}),
        (((8, 24, 48, 48), (48, 24, 3, 3), (48,)), {**_CONV, "stride": (2, 2)}),
        (((8, 32, 24, 24), (64, 32, 3, 3), (64,)), {**_CONV, "stride": (2, 2)}),
        (((2, 48, 24, 24), (96, 48, 3, 3), (96,)), {**_CONV, "stride": (2, 2)}),
        (((8, 24, 48, 48), (48, 24, 1, 1), (48,)), {**_CONV, "stride": (2, 2), "padding": (0, 0)}),
        (((2, 8, 48, 48), (24, 8, 1, 1), (24,)), {**_CONV, "stride": (2, 2), "padding": (0, 0)}),
        (((2, 96, 12, 12), (96, 96, 1, 1), (96,)), {**_CONV, "padding": (0, 0)}),
        (((8, 48, 24, 24), (48, 1, 3, 3), (48,)), {**_CONV, "groups": 48}),
    ],
    "matmul": [
        (((16, 24), (24, 24)), {}),
        (((8, 16, 16), (8, 16, 16)), {}),
        (((24, 96), (96, 96)), {}),
        (((96, 384), (384, 96)), {}),
        (((384, 384), (384, 384)), {}),
        (((8, 48, 48), (8, 48, 48)), {}),
    ],
    "linear": [
        (((4, 24), (16, 24), (16,)), {}),
        (((2, 96), (10, 96), (10,)), {}),
        (((8, 384), (384, 384), (384,)), {}),
        (((96, 768), (768, 768), (768,)), {}),
    ],
    "scaled_dot_product_attention": [
        (((4, 32, 64), (4, 32, 64), (4, 32, 64)), {}),
        (((4, 128, 64), (4, 128, 64), (4, 128, 64)), {"is_causal": True}),
        (((8, 256, 32), (8, 256, 32), (8, 256, 32)), {}),
    ],
}
# Elementwise ops: from a few vectors to a tensor well beyond the last-level cache.
_ELEMENTWISE_SIZES = (((16, 16),), ((64, 128),), ((256, 512),), ((1024, 1024),))
CALIBRATION.update({op: [(shapes, {}) for shapes in _ELEMENTWISE_SIZES]
                    for op in ("exp", "log", "tanh", "sigmoid", "silu")})
CALIBRATION["gelu"] = [(shapes, {"approximate": approximate}) for shapes in _ELEMENTWISE_SIZES
                       for approximate in ("none", "tanh")]
# Row kernels: rows of a few dozen to a thousand elements, the sizes of attention scores and norms.
_ROWS = ((8, 24), (96, 96), (512, 384), (2048, 1024))
CALIBRATION["softmax"] = [(((rows, n),), {"axis": -1}) for rows, n in _ROWS]
CALIBRATION["layer_norm"] = [(((rows, n), (n,), (n,)), {"normalized_shape": (n,)}) for rows, n in _ROWS]

POSITIVE_INPUTS = frozenset({"log"})  # ops calibrated on positive inputs (representative, no NaN warnings)
GEMM_KINDS = ("blas", "numpy")
# A GEMM of at least this many multiply-adds runs on OpenBLAS's own threads (its multithreading
# threshold), which then spin for about 0.1 s and take a core from the job pool's kernels that
# follow: W1's interpreted stream ran 30 % slower in stream order than sorted by batch because
# batch-1 calls ran their two 1×1 convs through BLAS (≈ 30 µs faster each, in isolation).
BLAS_THREADED_MACS = 1 << 18
BLAS_WAKE_US = 1000.0  # what a kernel that wakes those threads is charged for the core they hold
# (M, N, K) of the GEMMs timed to measure the efficiency curve: one sweep per dim from a large base.
_GEMM_BASE = (128, 1024, 288)
_GEMM_SWEEPS = {"m": (8, 16, 32), "n": (16, 64, 256), "k": (9, 27, 72)}
_MAX_HALF = 64.0
_MIN_POINTS_TO_FIT = 2
OUTLIER_RATIO = 2.0
_calibration_locks: dict[tuple[str, str], threading.Lock] = {}
_locks_lock = threading.Lock()


@dataclass(frozen=True)
class Estimate:
    """One variant's estimated seconds on one shape, with the numbers behind it."""

    name: str
    seconds: float
    flops: float
    bytes: float
    rates: Rates
    bandwidth_gbps: float
    efficiency: float = 1.0  # the GEMM efficiency at these sizes (1 for kernels that are not GEMMs)
    wake_us: float = 0.0  # charged for waking a BLAS's spinning threads (``BLAS_WAKE_US``)

    def explain(self) -> str:
        parts = [f"{self.rates.overhead_us:.0f} µs"]
        if self.wake_us:
            parts.append(f"{self.wake_us:.0f} µs for BLAS threads left spinning")
        if self.flops:
            eff = f" × {self.efficiency:.2f} GEMM efficiency" if self.efficiency < 1 else ""
            parts.append(f"{self.flops / 1e9:.3g} GFLOP @ {self.rates.rate_gflops:.0f} GFLOP/s{eff}")
        if self.bytes:
            parts.append(f"{self.bytes / 1e6:.3g} MB @ {self.bandwidth_gbps:.0f} GB/s")
        return f"{self.name}: {fmt_seconds(self.seconds)} = " + " + ".join(parts) + f" ({self.rates.source})"


def fmt_seconds(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} µs"
    return f"{seconds * 1e3:.2f} ms"


def work(op: str, variant: Variant | None, shapes: Shapes, attrs: Mapping[str, Any]) -> tuple[float, float]:
    """(flops, bytes) of one call; the reference (``variant=None``) borrows the op's variants' formulas."""
    sources = [variant] if variant is not None else variants_on(op, "cpu") or list(VARIANTS.get(op, []))
    flops = next((float(v.flops(shapes, attrs)) for v in sources if v.flops is not None), 0.0)
    moved = next((float(v.bytes(shapes, attrs)) for v in sources if v.bytes is not None), None)
    if moved is None:  # inputs read once and an output about as large as the largest input written once
        sizes = [4.0 * float(np.prod(s)) for s in shapes]
        moved = sum(sizes) + max(sizes, default=0.0)
    return flops, moved


def estimate(device: str, op: str, variant: Variant | None, shapes: Shapes,
             attrs: Mapping[str, Any]) -> Estimate:
    """Estimated seconds of ``variant`` (``None``: the reference kernel) on ``shapes``."""
    name = REFERENCE if variant is None else variant.name
    kind = REFERENCE_KIND if variant is None else variant.kind
    rates = DB.variant_rates(device, op, name, kind)
    bandwidth = DB.bandwidth_gbps(device)
    flops, moved = work(op, variant, shapes, attrs)
    eff = gemm_efficiency(device, op, kind, shapes, attrs, flops)
    wake = BLAS_WAKE_US if _wakes_blas_threads(op, kind, shapes, attrs, flops) else 0.0
    seconds = (rates.overhead_us + wake) * 1e-6 + flops / (rates.rate_gflops * 1e9 * eff)
    seconds += moved / (bandwidth * 1e9)
    return Estimate(name, seconds, flops, moved, rates, bandwidth, eff, wake)


def _wakes_blas_threads(op: str, kind: str, shapes: Shapes, attrs: Mapping[str, Any], flops: float) -> bool:
    dims = gemm_dims(op, shapes, attrs, flops) if kind in GEMM_KINDS else None
    if dims is None or int(np.prod(dims)) < BLAS_THREADED_MACS:
        return False
    from ..native.blas import threads_spin

    return threads_spin()


def gemm_dims(op: str, shapes: Shapes, attrs: Mapping[str, Any], flops: float) -> tuple[int, int, int] | None:
    """(M, N, K) of the GEMM a BLAS-backed kernel of ``op`` runs (the im2col view for conv2d)."""
    if op == "conv2d" and len(shapes) >= 2 and len(shapes[1]) == 4 and flops:
        batch = shapes[0][0] if len(shapes[0]) == 4 else 1
        c_out, c_group, kh, kw = shapes[1]
        k = c_group * kh * kw
        return c_out // max(1, int(attrs.get("groups", 1))), round(flops / (2 * batch * c_out * k)), k
    if op == "matmul" and len(shapes) == 2 and shapes[0] and shapes[1]:
        a, b = shapes
        return (a[-2] if len(a) > 1 else 1), (b[-1] if len(b) > 1 else 1), a[-1]
    if op == "linear" and len(shapes) >= 2 and shapes[0] and len(shapes[1]) == 2:
        return int(np.prod(shapes[0][:-1])), shapes[1][0], shapes[1][1]
    return None


def gemm_efficiency(device: str, op: str, kind: str, shapes: Shapes, attrs: Mapping[str, Any],
                    flops: float) -> float:
    """Share of the full GEMM rate a GEMM-backed kernel reaches at these sizes (1 for other kernels)."""
    dims = gemm_dims(op, shapes, attrs, flops) if kind in GEMM_KINDS else None
    if dims is None:
        return 1.0
    half = DB.gemm_half(device)
    eff = 1.0
    for d, h in zip(dims, (half["m"], half["n"], half["k"])):
        eff *= d / (d + h) if d > 0 else 1.0
    return eff


def measure_gemm_curve(device: str) -> dict[str, float]:
    """Time numpy's sgemm shrinking one dim at a time; fit each dim's half-efficiency size d½.

    With ``r(d) = peak · d / (d + d½)``, every point gives ``d½ = d · (peak / r − 1)``; the median
    of a dim's points is kept, capped at ``_MAX_HALF`` (another process stalling BLAS's threads can
    make small GEMMs look arbitrarily slow). Stored in the capability DB (a patch may override it).
    """
    from .autotune import time_kernel

    def rate(m: int, n: int, k: int) -> float:
        a = np.ones((m, k), np.float32)
        b = np.ones((k, n), np.float32)
        out = np.empty((m, n), np.float32)
        seconds = time_kernel(lambda: np.matmul(a, b, out=out), repeats=5, statistic=min, warmup=3)
        return 2.0 * m * n * k / seconds

    rates = {}
    for axis, sizes in enumerate(_GEMM_SWEEPS.values()):
        for d in sizes:
            mnk = list(_GEMM_BASE)
            mnk[axis] = d
            rates[tuple(mnk)] = rate(*mnk)
    peak = max(rate(*_GEMM_BASE), rate(*_GEMM_BASE))  # after the sweeps too: BLAS threads are awake
    half = {}
    for axis, (dim, sizes) in enumerate(_GEMM_SWEEPS.items()):
        estimates = []
        for d in sizes:
            mnk = list(_GEMM_BASE)
            mnk[axis] = d
            estimates.append(max(0.0, d * (peak / rates[tuple(mnk)] - 1.0)))
        half[dim] = min(float(np.median(estimates)), _MAX_HALF)
    DB.record_gemm_curve(device, half)
    return DB.gemm_half(device)


# -- calibration ----------------------------------------------------------------------------------


def prepare_host(device: str) -> None:
    """Take what calibration builds on, unless known: the full host rates and the GEMM curve."""
    if DB.host_rates()["source"] == "quick":
        DB.measure_host_rates()
    if not DB.has_gemm_curve(device):
        measure_gemm_curve(device)


def ensure_calibrated(device: str, op: str) -> None:
    """Calibrate ``op``'s variants on ``device`` now, unless done (in this process or on disk)."""
    if DB.is_calibrated(device, op):
        return
    with _locks_lock:
        lock = _calibration_locks.setdefault((device, op), threading.Lock())
    with lock:
        if not DB.is_calibrated(device, op):
            calibrate(device, op)


def calibrate(device: str, op: str) -> dict[str, Rates]:
    """Measure ``op``'s variants (and its reference, on the host) on the calibration cases; fit rates.

    A point is [effective flops (flops / GEMM efficiency), bytes, best-of-5 seconds].
    """
    from .autotune import time_kernel

    candidates: list[Variant | None] = list(variants_on(op, device))
    if device == "cpu":
        candidates.append(None)
    kinds = {_name(c): REFERENCE_KIND if c is None else c.kind for c in candidates}
    # Variants that may call OpenBLAS last: its threads spin after a call and would take the core the
    # job pool's kernels timed next need (attention's pool variant measured 29 GFLOP/s after BLAS
    # runs, 100-135 alone).
    candidates.sort(key=lambda c: kinds[_name(c)] in GEMM_KINDS or c is None)
    points: dict[str, list[list[float]]] = {}
    rng = np.random.default_rng(0)
    cases = []
    for shapes, attrs in CALIBRATION.get(op, []):
        arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
        if op in POSITIVE_INPUTS:
            arrays = [np.abs(a) + np.float32(0.5) for a in arrays]
        cases.append((shapes, REGISTRY[op].check_attrs(attrs), arrays))
    for variant, (shapes, full, arrays) in ((v, case) for v in candidates for case in cases):
        if variant is not None and ("float32" not in variant.dtypes or not variant.when(shapes, full)):
            continue
        kernel = REGISTRY[op].kernel if variant is None else variant.make(full)
        run = _bound(kernel, arrays, full if variant is None else {})
        seconds = time_kernel(run, repeats=5, statistic=min, warmup=2)  # a busy machine only slows
        flops, moved = work(op, variant, shapes, full)
        effective = flops / gemm_efficiency(device, op, kinds[_name(variant)], shapes, full, flops)
        points.setdefault(_name(variant), []).append([effective, moved, seconds])
    bandwidth = DB.bandwidth_gbps(device)
    fitted = {name: fit_rates(pts, bandwidth, DB.kind_rates(device, kinds[name]))
              for name, pts in points.items()}
    DB.record_calibration(device, op, fitted, points, measured=True)
    return fitted


def _name(variant: Variant | None) -> str:
    return REFERENCE if variant is None else variant.name


def calibrate_all(device: str = "cpu") -> None:
    """Calibrate now every op with variants on ``device`` that is not calibrated yet, and save the
    results to the on-disk cache (e.g. before dumping the capability DB)."""
    from .persist import save_db

    load_variants()
    ops = [op for op in sorted(VARIANTS) if variants_on(op, device) and not DB.is_calibrated(device, op)]
    if ops:
        prepare_host(device)
        for op in ops:
            ensure_calibrated(device, op)
        save_db()


def _bound(kernel: Callable[..., Any], arrays: Sequence[np.ndarray],
           attrs: Mapping[str, Any]) -> Callable[[], Any]:
    return lambda: kernel(*arrays, **attrs)


def fit_rates(points: Sequence[Sequence[float]], bandwidth_gbps: float, prior: Rates) -> Rates:
    """Fit ``overhead + flops/rate = t − bytes/bandwidth`` to measured ``[flops, bytes, t]`` points.

    Least squares on relative error, with both numbers non-negative: the best of fitting both, only
    the overhead (rate from the prior) or only the rate (overhead from the prior). A point measured
    over ``OUTLIER_RATIO`` × the fit (a run stalled by another process — busy machines only ever
    make runs slower) is dropped and the rest refitted. Too few or unusable points give the prior.
    """
    fitted = _fit(points, bandwidth_gbps, prior)
    kept = [p for p in points if p[2] <= OUTLIER_RATIO * _predict(fitted, p, bandwidth_gbps)]
    if len(points) > len(kept) >= _MIN_POINTS_TO_FIT:
        fitted = _fit(kept, bandwidth_gbps, prior)
    return fitted


def _predict(rates: Rates, point: Sequence[float], bandwidth_gbps: float) -> float:
    flops, moved, _ = point
    return rates.overhead_us * 1e-6 + flops / (rates.rate_gflops * 1e9) + moved / (bandwidth_gbps * 1e9)


def _fit(points: Sequence[Sequence[float]], bandwidth_gbps: float, prior: Rates) -> Rates:
    prior_c0, prior_x = prior.overhead_us * 1e-6, 1.0 / (prior.rate_gflops * 1e9)
    fits = []
    for free in ("both", "overhead", "rate"):
        solved = _solve(points, bandwidth_gbps, free, prior_c0, prior_x)
        if solved is not None and solved[0] >= 0 and solved[1] > 0:
            c0, x = solved
            loss = sum(((c0 + x * f + b / (bandwidth_gbps * 1e9)) / t - 1.0) ** 2 for f, b, t in points)
            fits.append((loss, c0, x))
    if not fits:
        return prior
    _, c0, x = min(fits)
    return Rates(1.0 / (x * 1e9), c0 * 1e6, "calibrated")


def _solve(points: Sequence[Sequence[float]], bandwidth_gbps: float, free: str, prior_c0: float,
           prior_x: float) -> tuple[float, float] | None:
    """(overhead s, s per flop) minimising sum(((c0 + x·f + b/bw) / t − 1)²) with ``free`` unknowns."""
    if len(points) < (_MIN_POINTS_TO_FIT if free == "both" else 1):
        return None
    if free == "rate" and not any(f for f, _, _ in points):
        return None
    z = np.array([1.0 - b / (bandwidth_gbps * 1e9 * t) for f, b, t in points])
    inv_t = np.array([1.0 / t for _, _, t in points])
    f_t = np.array([f / t for f, _, t in points])
    if free == "both":
        (c0, x), *_ = np.linalg.lstsq(np.stack([inv_t, f_t], axis=1), z, rcond=None)
    elif free == "overhead":
        x = prior_x
        c0 = float(np.dot(inv_t, z - x * f_t) / np.dot(inv_t, inv_t))
    else:
        c0 = prior_c0
        x = float(np.dot(f_t, z - c0 * inv_t) / np.dot(f_t, f_t))
    return float(c0), float(x)


def rank(estimates: Sequence[Estimate]) -> list[Estimate]:
    """Cheapest first; the order of ``estimates`` (variants before the reference) breaks ties."""
    return sorted(estimates, key=lambda e: e.seconds)
