"""Kernel variants against the reference kernel and PyTorch: ``python -m bench.ops_variants [options]``.

For ResNet-style conv stages (3×3 and 1×1; 16/32/64 channels at 64², 32², 16²; batch 1/8/32) plus
a strided and a depthwise conv, and for MLP/attention GEMMs, every applicable variant's median
time, its GFLOP/s and its ratio to the best variant; the numpy reference and torch (if installed)
are measured in the same run. The header gives this machine's measured sgemm peak.

Options: ``--quick`` runs batch 1 and 8 only. ``--single-thread`` limits msvm's pool, BLAS and
torch to one thread and times by the thread's CPU time, which a loaded, shared machine does not
inflate (wall-clock medians there mostly measure the other tenants).
"""

from __future__ import annotations

import functools
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import msvm.kernels  # noqa: F401  (registers the variants)
from bench.harness import fmt_ratio, fmt_time, measure, optional_import, table
from msvm.native import blas, host
from msvm.ops.registry import get_op
from msvm.scheduler.variants import variants_for

RNG = np.random.default_rng(0)
TIMER = {"measure": measure}


def _measure(fn: Callable[[], Any], *, repeat: int = 5) -> float:
    return TIMER["measure"](fn, repeat=repeat, min_time=0.03)


def _cpu_measure(fn: Callable[[], Any], *, repeat: int = 5, min_time: float = 0.03) -> float:
    """Median CPU seconds of the calling thread per call (single-threaded runs only)."""
    fn()
    samples = []
    for _ in range(max(repeat, 5)):
        number, start, spent = 0, time.thread_time(), 0.0
        while spent < min_time / 3 or number == 0:
            fn()
            number += 1
            spent = time.thread_time() - start
        samples.append(spent / number)
    return statistics.median(samples)


def _sgemm_peak() -> float:
    """GFLOP/s of numpy's float32 matmul on 1024³, best of 20: the BLAS ceiling of this machine
    (the best run is the one the other tenants disturbed least)."""
    a = RNG.standard_normal((1024, 1024)).astype(np.float32)
    a @ a
    clock = time.thread_time if TIMER["measure"] is _cpu_measure else time.perf_counter
    best = float("inf")
    for _ in range(20):
        t0 = clock()
        a @ a
        best = min(best, clock() - t0)
    return 2 * 1024**3 / best / 1e9


def _row(label: str, flops: float, names: Sequence[str], timings: dict[str, float],
         baselines: dict[str, float | None]) -> list[str]:
    """One table row: each variant's median, GFLOP/s and ratio to the best; the baselines likewise."""
    best_name = min(timings, key=timings.get) if timings else None
    best = timings[best_name] if best_name else None

    def cell(seconds: float | None) -> str:
        return "-" if seconds is None else f"{fmt_time(seconds)} {flops / seconds / 1e9:.0f} GF/s"

    cells = [label, f"{flops / 1e9:.3f}"]
    for name in names:
        seconds = timings.get(name)
        cells.append("-" if seconds is None else f"{cell(seconds)} {fmt_ratio(seconds / best)}")
    cells.append(best_name or "-")
    cells += [cell(seconds) for seconds in baselines.values()]
    cells += ["-" if s is None or best is None else fmt_ratio(s / best) for s in baselines.values()]
    return cells


def _time_variants(op: str, args: Sequence[np.ndarray], attrs: dict[str, Any],
                   dtype: str) -> dict[str, float]:
    """Median seconds of every variant of ``op`` whose ``when`` holds for ``args``."""
    shapes = tuple(a.shape for a in args)
    out = {}
    for variant in variants_for(op, dtype=dtype):
        if variant.when(shapes, attrs):
            kernel = variant.make(attrs)
            out[variant.name] = _measure(functools.partial(kernel, *args))
    return out


def conv_cases(quick: bool) -> list[tuple[int, int, int, int, int, int]]:
    """(batch, C_in, C_out, H=W, kernel, stride, groups) of the benchmarked convolutions."""
    cases = []
    for batch in (1, 8) if quick else (1, 8, 32):
        for channels, size in ((16, 64), (32, 32), (64, 16)):
            for k in (3, 1):
                cases.append((batch, channels, channels, size, k, 1, 1))
        cases.append((batch, 32, 64, 32, 3, 2, 1))  # a downsampling conv
        cases.append((batch, 64, 64, 32, 3, 1, 64))  # depthwise
    return cases


def bench_conv(quick: bool, torch: Any) -> str:
    conv = get_op("conv2d")
    variants = [v.name for v in variants_for("conv2d", dtype="float32")]
    rows = []
    for n, c, oc, size, k, stride, groups in conv_cases(quick):
        x = RNG.standard_normal((n, c, size, size)).astype(np.float32)
        w = RNG.standard_normal((oc, c // groups, k, k)).astype(np.float32)
        b = RNG.standard_normal(oc).astype(np.float32)
        w.setflags(write=False)  # constants, as the VM hands them out: packed weights are cached
        b.setflags(write=False)
        attrs = conv.check_attrs({"stride": stride, "padding": k // 2, "groups": groups})
        flops = 2.0 * n * oc * (c // groups) * k * k * (size // stride) ** 2
        timings = _time_variants("conv2d", (x, w, b), attrs, "float32")
        ref = functools.partial(conv.kernel, x, w, b, **attrs)
        baselines: dict[str, float | None] = {"reference": _measure(ref, repeat=3)}
        if torch is not None:
            xt, wt, bt = (torch.from_numpy(np.array(a)) for a in (x, w, b))
            call = functools.partial(torch.nn.functional.conv2d, xt, wt, bt, stride=stride, padding=k // 2,
                                     groups=groups)
            baselines["torch"] = _measure(call)
        kind = "dw" if groups > 1 else f"{k}x{k}" + (f"/s{stride}" if stride > 1 else "")
        rows.append(_row(f"N{n} C{c}->{oc} {size}² {kind}", flops, variants, timings, baselines))
    names = ["reference"] + (["torch"] if torch is not None else [])
    header = ["conv2d float32", "GFLOP", *variants, "best", *names, *(f"{name}/best" for name in names)]
    return table("conv2d variants (NCHW, padding k//2)", header, rows)


def gemm_cases(quick: bool) -> list[tuple[str, str, tuple[tuple[int, ...], ...]]]:
    """(label, op, input shapes): MLP layers, attention products and tiny batched products."""
    batches = (1, 32) if quick else (1, 32, 256)
    cases = [(f"linear B{bt} 512->2048", "linear", ((bt, 512), (2048, 512), (2048,))) for bt in batches]
    cases += [(f"linear B{bt} 2048->512", "linear", ((bt, 2048), (512, 2048), (512,))) for bt in batches]
    cases += [
        ("attn QK^T 8x8 heads S128 D64", "matmul", ((8, 8, 128, 64), (8, 8, 64, 128))),
        ("attn PV 8x8 heads S128 D64", "matmul", ((8, 8, 128, 128), (8, 8, 128, 64))),
        ("matmul 256x256x256", "matmul", ((256, 256), (256, 256))),
        ("tiny batched 512x(4x4 @ 4x4)", "matmul", ((512, 4, 4), (512, 4, 4))),
        ("tiny 16x16 @ 16x16", "matmul", ((16, 16), (16, 16))),
        ("linear B8 16->16", "linear", ((8, 16), (16, 16), (16,))),
    ]
    return cases


def bench_gemm(quick: bool, torch: Any) -> str:
    variants = sorted({v.name for op in ("matmul", "linear") for v in variants_for(op, dtype="float32")})
    rows = []
    for label, op, shapes in gemm_cases(quick):
        args = tuple(RNG.standard_normal(s).astype(np.float32) for s in shapes)
        variant = variants_for(op, dtype="float32")[0]
        flops = variant.flops(shapes, {})
        timings = _time_variants(op, args, {}, "float32")
        ref = functools.partial(get_op(op).kernel, *args)
        baselines: dict[str, float | None] = {"reference": _measure(ref)}
        if torch is not None:
            fn: Callable = torch.nn.functional.linear if op == "linear" else torch.matmul
            baselines["torch"] = _measure(functools.partial(fn, *(torch.from_numpy(a) for a in args)))
        rows.append(_row(label, flops, variants, timings, baselines))
    names = ["reference"] + (["torch"] if torch is not None else [])
    header = ["GEMM float32", "GFLOP", *variants, "best", *names, *(f"{name}/best" for name in names)]
    return table("matmul / linear variants", header, rows)


def main(argv: Sequence[str] = ()) -> None:
    quick = "--quick" in argv
    torch = optional_import("torch")
    mode = "2 threads where available, wall-clock medians"
    if "--single-thread" in argv:
        from threadpoolctl import threadpool_limits

        from msvm.kernels.threads import POOL

        POOL.threads = 1
        threadpool_limits(1)
        if torch is not None:
            torch.set_num_threads(1)
        TIMER["measure"] = _cpu_measure
        mode = "single thread, medians of thread CPU time"
    best = blas.best_sgemm()
    cores = host.cores()
    entry = "none found"
    if best is not None:
        entry = f"{best.name} ({blas.rate_gflops(best):.0f} GFLOP/s on conv/MLP-sized GEMMs)"
    baseline = "torch not installed"
    if torch is not None:
        baseline = f"torch {torch.__version__}, {torch.get_num_threads()} threads"
    print(f"machine: {host.cpu()['name']}, {cores['usable']} usable cores; sgemm peak (numpy 1024³) "
          f"{_sgemm_peak():.0f} GFLOP/s; best sgemm entry: {entry}; {baseline}; "
          f"{mode}; load average {os.getloadavg()[0]:.1f} (wall-clock numbers from a loaded machine "
          "are not comparable)")
    print(bench_conv(quick, torch))
    print(bench_gemm(quick, torch))
    print(f"\nload average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main(sys.argv[1:])
