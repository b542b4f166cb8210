"""BLAS discovery: every ?gemm entry point agrees with numpy, rates are measured, absence is graceful."""

from __future__ import annotations

import json

import numpy as np
import pytest

from msvm.native import blas

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


def test_report_is_json_and_names_threading() -> None:
    report = json.loads(json.dumps(blas.report()))
    assert set(report) == {"libraries", "entries", "best"}
    for lib in report["libraries"]:
        assert {"path", "int_bits", "num_threads", "threading_layer"} <= set(lib)


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
