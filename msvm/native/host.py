"""Facts about this machine for the capability database: CPU, cores, caches, BLAS, measured speeds.

Everything is measured or read once per process and returned as plain JSON-able dicts. Reading
is cheap (sysfs, llvmlite); the full measurements — sgemm rate per BLAS library
(``blas.rate_gflops``) and memory bandwidth (a numpy copy and triad over arrays larger than the
last-level cache) — take up to a second or two on a busy machine. The scheduler therefore takes its
yardsticks from ``quick_rates`` (a few milliseconds) and measures the bandwidth off the execution
thread.
"""

from __future__ import annotations

import functools
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from . import blas
from .llvm import binding, target_identity

_SYS_CPU = Path("/sys/devices/system/cpu")
# (M, N, K) of the quick GEMM: below OpenBLAS's threading threshold, so one core runs it and a busy
# machine cannot stall it on a descheduled helper thread (tens of ms instead of tens of µs).
QUICK_GEMM = (48, 64, 64)
QUICK_COPY_BYTES = 8 << 20


@functools.cache
def cpu() -> dict[str, Any]:
    """CPU name and enabled features as LLVM sees them, and what they mean for vector code."""
    llvm = binding()
    features = sorted(k for k, on in llvm.get_host_cpu_features().items() if on)
    vector_bits = 512 if "avx512f" in features else 256 if "avx" in features else 128
    return {"name": llvm.get_host_cpu_name(), "features": features, "vector_bits": vector_bits,
            "fma": "fma" in features, "triple": target_identity()["triple"]}


@functools.cache
def cores() -> dict[str, Any]:
    """Logical CPUs, physical cores (from sysfs topology when readable) and the CPUs we may use."""
    logical = os.cpu_count() or 1
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else logical
    pairs = set()
    for topo in _SYS_CPU.glob("cpu[0-9]*/topology"):
        try:
            package = (topo / "physical_package_id").read_text().strip()
            pairs.add((package, (topo / "core_id").read_text().strip()))
        except OSError:
            continue
    return {"logical": logical, "physical": len(pairs) or None, "usable": usable}


@functools.cache
def caches() -> list[dict[str, Any]]:
    """CPU 0's caches (level, type, size in bytes, line size, CPUs sharing it); [] when unreadable."""
    out = []
    for index in sorted(_SYS_CPU.glob("cpu0/cache/index[0-9]*")):
        try:
            read = lambda name, d=index: (d / name).read_text().strip()  # noqa: E731
            out.append({"level": int(read("level")), "type": read("type"),
                        "size_bytes": _parse_size(read("size")),
                        "line_bytes": int(read("coherency_line_size")),
                        "shared_cpus": read("shared_cpu_list")})
        except (OSError, ValueError):
            continue
    return out


def _parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


@functools.cache
def memory_bandwidth() -> dict[str, float]:
    """GB/s of a numpy copy and a triad (a = b + s·c, two numpy passes) on arrays bigger than the LLC."""
    llc = max((c["size_bytes"] for c in caches()), default=32 << 20)
    n = max(llc, 16 << 20) // 8
    a, b, c = np.zeros(n), np.ones(n), np.full(n, 2.0)

    def best(fn, moved: int) -> float:
        fn()
        seconds = min(_timed(fn) for _ in range(3))
        return round(moved / seconds / 1e9, 1)

    copy = best(lambda: np.copyto(a, b), 2 * 8 * n)
    triad = best(lambda: (np.multiply(c, 3.0, out=a), np.add(a, b, out=a)), 5 * 8 * n)
    return {"copy_gbs": copy, "triad_gbs": triad, "array_mib": round(8 * n / 2**20)}


@functools.cache
def quick_rates() -> dict[str, float]:
    """A first sgemm rate and memory bandwidth in a few milliseconds, for the scheduler's first decisions.

    One small float32 GEMM (``QUICK_GEMM``, single-threaded: below peak, but never stalled by
    BLAS threads) through numpy and one copy of ``QUICK_COPY_BYTES``, each the best of 3 timed
    runs after a warm-up. The copy may partly stay in a large last-level cache, so its bandwidth
    errs high; ``memory_bandwidth`` and ``blas.rate_gflops`` measure both properly.
    """
    m, n, k = QUICK_GEMM
    a, b = np.ones((m, k), np.float32), np.ones((k, n), np.float32)
    out = np.empty((m, n), np.float32)
    gemm = lambda: np.matmul(a, b, out=out)  # noqa: E731
    src = np.ones(QUICK_COPY_BYTES // 8)
    dst = np.empty_like(src)
    copy = lambda: np.copyto(dst, src)  # noqa: E731
    gemm(), copy()
    gemm_s = min(_timed(gemm) for _ in range(3))
    copy_s = min(_timed(copy) for _ in range(3))
    return {"sgemm_gflops": round(2.0 * m * n * k / gemm_s / 1e9, 1),
            "bandwidth_gbps": round(2 * QUICK_COPY_BYTES / copy_s / 1e9, 1)}


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def host_facts(*, measure: bool = True) -> dict[str, Any]:
    """Everything above in one JSON-able dict; ``measure=False`` skips the timed parts."""
    facts: dict[str, Any] = {"target": target_identity(), "cpu": cpu(), "cores": cores(), "caches": caches()}
    if measure:
        facts["blas"] = blas.report()
        facts["memory"] = memory_bandwidth()
    else:
        facts["blas"] = {"libraries": blas.libraries()}
    return facts
