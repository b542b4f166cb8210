"""BLAS discovery: only loaded libraries, numpy's own preferred, every entry agrees with numpy."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from msvm.native import blas

ROOT = Path(__file__).resolve().parents[2]
ENTRIES = blas.discover()


def test_numpy_openblas_is_found() -> None:
    numpy_entries = [e for e in ENTRIES if e.source == "numpy"]
    if not numpy_entries:
        pytest.skip("this numpy has no bundled OpenBLAS")
    assert {e.dtype for e in numpy_entries} == {"float32", "float64"}
    assert any(e.abi == "cblas" and e.int_bits == 64 for e in numpy_entries)
    assert all(e.address for e in numpy_entries)


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.name)
def test_gemm_matches_numpy(entry: blas.GemmEntry) -> None:
    rng = np.random.default_rng(0)
    tol = 1e-4 if entry.dtype == "float32" else 1e-12
    for (m, n, k) in ((5, 3, 7), (1, 17, 4), (33, 1, 65)):
        for ta in (False, True):
            for tb in (False, True):
                a = rng.standard_normal((k, m) if ta else (m, k)).astype(entry.dtype)
                b = rng.standard_normal((n, k) if tb else (k, n)).astype(entry.dtype)
                out = rng.standard_normal((m, n)).astype(entry.dtype)
                expected = 1.5 * ((a.T if ta else a) @ (b.T if tb else b)) + 0.25 * out
                entry.gemm(a, b, out, trans_a=ta, trans_b=tb, alpha=1.5, beta=0.25)
                np.testing.assert_allclose(out, expected, rtol=tol, atol=tol)


def test_gemm_rejects_bad_operands() -> None:
    if not ENTRIES:
        pytest.skip("no BLAS found")
    entry = next(e for e in ENTRIES if e.dtype == "float32")
    a, b = np.ones((2, 3), np.float32), np.ones((3, 4), np.float32)
    with pytest.raises(ValueError, match="do not match"):
        entry.gemm(a, b, np.empty((2, 5), np.float32))
    with pytest.raises(TypeError):
        entry.gemm(a.astype(np.float64), b, np.empty((2, 4), np.float32))
    with pytest.raises(ValueError, match="contiguous"):
        entry.gemm(np.ones((3, 2), np.float32).T, b, np.empty((2, 4), np.float32))
    out = np.full((2, 4), np.nan, np.float32)
    entry.gemm(np.ones((2, 0), np.float32), np.ones((0, 4), np.float32), out)
    assert not out.any()  # K = 0 with beta = 0 gives zeros, not NaN


def test_rates_are_measured_once_per_library_and_best_is_consistent() -> None:
    """No timing is asserted: only that the pick is consistent with the recorded measurements."""
    if not ENTRIES:
        pytest.skip("no BLAS found")
    best = blas.best_sgemm()
    assert best is not None and best.dtype == "float32"
    rates = {e.name: blas.rate_gflops(e) for e in ENTRIES if e.dtype == "float32"}
    assert all(r > 0 for r in rates.values())
    for e in ENTRIES:  # one library, one measurement
        same = [o for o in ENTRIES if o.path == e.path and o.dtype == e.dtype]
        assert {blas.rate_gflops(o) for o in same} == {blas.rate_gflops(e)}
    top = max(rates.values())
    if best.source == "numpy":  # numpy's own library is kept unless another is clearly faster
        assert rates[best.name] * blas.SWITCH_MARGIN >= top
    else:
        assert rates[best.name] == top
    assert best.abi == "cblas" or not any(o.abi == "cblas" and o.path == best.path for o in ENTRIES)
    assert blas.best_dgemm().dtype == "float64"


def test_report_is_json_and_names_threading_and_the_choice() -> None:
    report = json.loads(json.dumps(blas.report()))
    assert set(report) == {"libraries", "entries", "best", "choice"}
    for lib in report["libraries"]:
        assert {"path", "int_bits", "num_threads", "threading_layer"} <= set(lib)
    for dtype in ("float32", "float64"):
        assert report["choice"][dtype]["entry"] in (report["best"][dtype], None)
        assert report["choice"][dtype]["reason"]


def test_discovery_loads_no_library_and_uses_numpys_own() -> None:
    """A second OpenBLAS (scipy's) would bring a second thread pool: it must not be loaded to be used."""
    if not Path("/proc/self/maps").exists():
        pytest.skip("needs /proc/self/maps to see what is loaded")
    code = """
import json, re
import numpy
def blas_libraries():
    with open("/proc/self/maps") as maps:
        return sorted({l.split()[-1] for l in maps if re.search(r"blas", l.split()[-1])})
before = blas_libraries()
from msvm.native import blas
entries = blas.discover()
choice = blas.choice("float32")
blas.report()
print(json.dumps({"before": before, "after": blas_libraries(), "sources": sorted({e.source for e in entries}),
                  "reason": choice.reason, "measured": choice.rates}))
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=120, check=True)
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found["after"] == found["before"]
    if found["sources"] == ["numpy"]:
        assert found["reason"] == "numpy's own BLAS, the only one loaded" and not found["measured"]


def fake_entry(source: str, path: str) -> blas.GemmEntry:
    return blas.GemmEntry(f"{source}:sgemm", source, path, "cblas_sgemm", "float32", "cblas", 32, 1)


@pytest.mark.parametrize("other_gflops, picked", [(110.0, "numpy"), (114.0, "numpy"), (120.0, "scipy")])
def test_numpys_blas_is_kept_unless_another_is_clearly_faster(monkeypatch, other_gflops, picked) -> None:
    rates = {"/numpy.so": 100.0, "/scipy.so": other_gflops}
    monkeypatch.setattr(blas, "_quiet_rates", lambda entries: {lib: rates[lib] for lib in entries})
    choice = blas._choose("float32", [fake_entry("numpy", "/numpy.so"), fake_entry("scipy", "/scipy.so")])
    assert choice.entry.source == picked and choice.rates == rates
    kept = "numpy's own BLAS (100 GFLOP/s): no other loaded library is more than 15 % faster"
    assert choice.reason.startswith(kept) == (picked == "numpy")


def test_a_single_library_is_chosen_without_measuring(monkeypatch) -> None:
    def measure(entries):
        raise AssertionError("nothing to compare: no measurement")

    monkeypatch.setattr(blas, "_quiet_rates", measure)
    choice = blas._choose("float32", [fake_entry("numpy", "/numpy.so")])
    assert choice.entry.path == "/numpy.so" and choice.reason == "numpy's own BLAS, the only one loaded"
    assert blas._choose("float64", [fake_entry("numpy", "/numpy.so")]).entry is None


def test_identity_names_the_loaded_libraries_without_measuring() -> None:
    identity = json.loads(json.dumps(blas.identity()))
    assert [lib["source"] for lib in identity["libraries"]] == [s for s, _, _ in blas._discover_libraries()]
    for lib in identity["libraries"]:
        assert lib["file"] and isinstance(lib["config"], str)


def test_scipy_capsules_when_scipy_linalg_is_loaded() -> None:
    pytest.importorskip("scipy.linalg.cython_blas")
    entries = [e for e in blas.discover() if e.source == "scipy-capsule"]
    assert {e.dtype for e in entries} == {"float32", "float64"}
    entry = next(e for e in entries if e.dtype == "float32")
    assert entry.abi == "fortran" and entry.int_bits == 32
    a, b = np.arange(6, dtype=np.float32).reshape(2, 3), np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_allclose(entry.gemm(a, b, np.empty((2, 4), np.float32)), a @ b)


def test_no_blas_found_is_graceful(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(blas, "_discover_libraries", lambda: ())
    monkeypatch.setattr(blas, "_entries", None)
    monkeypatch.setattr(blas, "_capsules_seen", True)
    assert blas.discover() == []
    assert blas.best_sgemm() is None and blas.best_dgemm() is None
    assert blas.report()["best"] == {"float32": "none found", "float64": "none found"}


def _pools() -> list[tuple[str, object, int]]:
    found = []
    for _, path, _ in blas._discover_libraries():
        lib = blas._loaded(path)
        threads = blas._threads_of(lib) if lib is not None else None
        if threads is not None and threads > 1:
            found.append((path, lib, threads))
    return found


@pytest.mark.skipif(not _pools(), reason="no OpenBLAS pool of more than one thread is loaded")
def test_lend_core_shrinks_each_pool_by_one_and_gives_it_back() -> None:
    """The JIT's starved worker borrows a core: every OpenBLAS pool runs one thread narrower meanwhile,
    while what the process reports about its BLAS (the capability DB's key) stays as the program set it."""
    pools = _pools()
    identity, spin = blas.identity(), blas.threads_spin()
    try:
        assert blas.lend_core() and blas.lend_core()  # a second lend changes nothing
        assert not blas.UNLENT.is_set()
        assert [blas._threads_of(lib) for _, lib, _ in pools] == [n - 1 for _, _, n in pools]
        assert blas.identity() == identity and blas.threads_spin() == spin
        a = np.ones((64, 64), np.float32)
        assert (a @ a == 64).all()  # numpy's GEMM keeps working on the narrower pool
    finally:
        blas.return_core()
    assert blas.UNLENT.is_set()
    assert [blas._threads_of(lib) for _, lib, _ in pools] == [n for _, _, n in pools]


@pytest.mark.skipif(not _pools(), reason="no OpenBLAS pool of more than one thread is loaded")
def test_a_pool_resized_while_lent_is_left_as_set() -> None:
    _, lib, threads = _pools()[0]
    try:
        blas.lend_core()
        blas._set_threads(lib, 1 if threads > 2 else threads)  # someone (threadpoolctl, the user) resizes it
        wanted = blas._threads_of(lib)
        blas.return_core()
        assert blas._threads_of(lib) == wanted
    finally:
        blas.return_core()
        blas._set_threads(lib, threads)
