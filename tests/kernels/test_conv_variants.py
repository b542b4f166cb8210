"""Every conv2d variant against the op's reference kernel, and every ``when`` predicate honoured."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import msvm.kernels
from msvm.kernels import conv_depthwise, conv_gemm, conv_nchwc, conv_winograd, packing
from msvm.kernels.conv_common import Epilogue, conv_geometry
from msvm.ops.registry import get_op
from msvm.runtime import mempool
from msvm.scheduler.variants import variants_for

CONV = get_op("conv2d")
VARIANTS = {v.name: v for v in variants_for("conv2d")}
NAMES = ("nchwc_direct", "im2col_gemm", "direct_1x1", "winograd_f2x3", "depthwise")

# (N, C_in, C_out, H, W, kernel, stride, padding, dilation, groups, bias)
CASES = [
    (1, 3, 16, 17, 16, (3, 3), 1, 1, 1, 1, True),  # a stem: 3 channels, odd H
    (8, 16, 16, 16, 15, (3, 3), 1, 1, 1, 1, False),
    (2, 32, 32, 9, 9, (3, 3), 2, 1, 1, 1, True),
    (1, 64, 64, 8, 8, (3, 3), 1, 1, 1, 1, True),
    (1, 16, 24, 7, 7, (3, 3), 1, 1, 1, 1, True),  # C_out not a multiple of a channel block
    (2, 16, 32, 12, 11, (1, 1), 1, 0, 1, 1, True),
    (2, 32, 64, 12, 11, (1, 1), 2, 0, 1, 1, False),
    (1, 16, 16, 13, 13, (3, 3), 1, 2, 2, 1, True),  # dilation 2
    (1, 8, 16, 9, 10, (5, 5), 1, "same", 1, 1, True),
    (1, 4, 8, 6, 7, (3, 1), (2, 1), (1, 0), 1, 1, True),  # non-square kernel and stride
    (2, 32, 64, 9, 9, (3, 3), 1, 1, 1, 4, True),  # grouped, 16 outputs per group
    (2, 32, 32, 10, 10, (3, 3), 1, 1, 1, 32, True),  # depthwise
    (1, 16, 16, 11, 21, (5, 5), 2, 2, 1, 16, False),  # depthwise 5x5, stride 2
    (1, 8, 8, 9, 19, (3, 3), 3, (0, 2), (1, 2), 8, True),  # depthwise, stride 3, dilated
    (8, 3, 16, 10, 10, (3, 3), 1, 0, 1, 1, True),
    (2, 16, 16, 5, 14, (3, 3), 1, 1, 1, 1, True),  # rows of 14 pixels: tiles of 6 + 4 + 4
]
CASES64 = [CASES[0], CASES[5], CASES[11], CASES[15], (1, 8, 12, 9, 9, (3, 3), 1, 1, 1, 1, True)]


def _inputs(case, dtype: str, seed: int = 0):
    n, c, oc, h, w, k, stride, padding, dilation, groups, bias = case
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, h, w)).astype(dtype)
    weight = rng.standard_normal((oc, c // groups, *k)).astype(dtype)
    b = rng.standard_normal(oc).astype(dtype) if bias else None
    attrs = CONV.check_attrs({"stride": stride, "padding": padding, "dilation": dilation, "groups": groups})
    return x, weight, b, attrs


def _check(out: np.ndarray, ref: np.ndarray, dtype: str) -> None:
    assert out.shape == ref.shape and out.dtype == ref.dtype
    scale = max(1.0, float(np.nanmax(np.abs(ref))))
    tol = 1e-4 if dtype == "float32" else 1e-11
    np.testing.assert_allclose(out, ref, rtol=tol, atol=tol * scale)


def _shapes(x, weight, b):
    return (x.shape, weight.shape) + ((b.shape,) if b is not None else ())


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("case", CASES, ids=str)
def test_float32_against_reference(name: str, case) -> None:
    x, weight, b, attrs = _inputs(case, "float32")
    variant = VARIANTS[name]
    ref = CONV.kernel(x, weight, b, **attrs)
    # Outside ``when`` the kernel must still be right (it delegates to the reference).
    _check(variant.make(attrs)(x, weight, b), ref, "float32")


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("case", CASES64, ids=str)
def test_float64_against_reference(name: str, case) -> None:
    x, weight, b, attrs = _inputs(case, "float64")
    _check(VARIANTS[name].make(attrs)(x, weight, b), CONV.kernel(x, weight, b, **attrs), "float64")


@pytest.mark.parametrize(("name", "index"), [("nchwc_direct", 0), ("im2col_gemm", 0), ("winograd_f2x3", 0),
                                             ("direct_1x1", 5), ("depthwise", 11)])
def test_large_native_outputs_come_from_the_memory_pool(name: str, index: int) -> None:
    """Fresh 4 MiB outputs cost W1's interpreted batch-16 calls 2,100 page faults each."""
    n, *rest = CASES[index]
    x, weight, b, attrs = _inputs((n * 16, *rest), "float32")  # outputs past POOLED_OUTPUT_MIN_BYTES
    assert VARIANTS[name].when(_shapes(x, weight, b), attrs)
    out = VARIANTS[name].make(attrs)(x, weight, b)
    assert out.nbytes >= mempool.POOLED_OUTPUT_MIN_BYTES and mempool.POOL.owns(out)
    _check(out, CONV.kernel(x, weight, b, **attrs), "float32")


def test_predicates_state_the_constraints() -> None:
    expected = {  # case index -> the variants whose ``when`` holds
        0: {"nchwc_direct", "im2col_gemm", "winograd_f2x3"},
        2: {"nchwc_direct", "im2col_gemm"},
        5: {"nchwc_direct", "im2col_gemm", "direct_1x1"},
        6: {"nchwc_direct", "im2col_gemm", "direct_1x1"},
        7: {"nchwc_direct", "im2col_gemm"},
        9: {"nchwc_direct", "im2col_gemm"},
        10: {"nchwc_direct", "im2col_gemm"},
        11: {"im2col_gemm", "depthwise"},
        12: {"im2col_gemm", "depthwise"},
        14: {"nchwc_direct", "im2col_gemm", "winograd_f2x3"},
    }
    for index, names in expected.items():
        x, weight, b, attrs = _inputs(CASES[index], "float32")
        holds = {name for name in NAMES if VARIANTS[name].when(_shapes(x, weight, b), attrs)}
        assert holds == names, CASES[index]
    bad_channels = ((1, 3, 4, 4), (8, 2, 3, 3))
    assert not VARIANTS["im2col_gemm"].when(bad_channels, CONV.check_attrs({}))


def test_unbatched_input() -> None:
    x, weight, b, attrs = _inputs(CASES[3], "float32")
    ref = CONV.kernel(x[0], weight, b, **attrs)
    for name in ("nchwc_direct", "im2col_gemm", "winograd_f2x3"):
        _check(VARIANTS[name].make(attrs)(x[0], weight, b), ref, "float32")


def test_flops_and_bytes() -> None:
    x, weight, b, attrs = _inputs(CASES[3], "float32")
    variant = VARIANTS["nchwc_direct"]
    assert variant.flops(_shapes(x, weight, b), attrs) == 2 * 64 * 64 * 9 * 8 * 8
    assert variant.bytes(_shapes(x, weight, b), attrs) == 4 * (64 * 64 + 64 * 64 * 9 + 64 * 64)


def _nan_channel(b: np.ndarray | None) -> np.ndarray | None:
    """The bias with a NaN for output channel 1: a fused ReLU must keep it (numpy's maximum does)."""
    if b is None:
        return None
    b = b.copy()
    b[1] = np.nan
    return b


def test_fused_relu_epilogues() -> None:
    x, weight, b, attrs = _inputs(CASES[2], "float32")
    b = _nan_channel(b)
    geo = conv_geometry(_shapes(x, weight, b), attrs)
    ref = np.maximum(CONV.kernel(x, weight, b, **attrs), 0)
    entry = msvm.native.blas.best_sgemm()
    _check(conv_gemm.conv2d_gemm(x, weight, b, geo, entry, relu=True), ref, "float32")
    x, weight, b, attrs = _inputs(CASES[3], "float32")
    b = _nan_channel(b)
    geo = conv_geometry(_shapes(x, weight, b), attrs)
    ref = np.maximum(CONV.kernel(x, weight, b, **attrs), 0)
    _check(conv_winograd.conv2d_winograd(x, weight, b, geo, entry, relu=True), ref, "float32")


EPILOGUES = [Epilogue(relu=True), Epilogue(residual=True), Epilogue(residual=True, relu_out=True),
             Epilogue(relu=True, residual=True, relu_out=True)]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("epilogue", EPILOGUES, ids=str)
@pytest.mark.parametrize("case", [CASES[i] for i in (0, 1, 2, 4, 7, 10, 11, 12, 13, 15)], ids=str)
def test_direct_kernels_fuse_their_epilogue(case, epilogue: Epilogue, dtype: str) -> None:
    """bias → ReLU → + residual → ReLU in the tile pass, as the JIT asks for it (a NaN kept throughout)."""
    x, weight, b, attrs = _inputs(case, dtype)
    b = _nan_channel(b)
    geo = conv_geometry(_shapes(x, weight, b), attrs)
    y = CONV.kernel(x, weight, b, **attrs)
    residual = np.random.default_rng(1).standard_normal(y.shape).astype(dtype) if epilogue.residual else None
    if epilogue.relu:
        y = np.maximum(y, 0)
    if residual is not None:
        y = y + residual
    if epilogue.relu_out:
        y = np.maximum(y, 0)
    direct = conv_depthwise.conv2d_depthwise if conv_depthwise.is_depthwise(geo) else conv_nchwc.conv2d_nchwc
    _check(direct(x, weight, b, geo, epilogue=epilogue, residual=residual), y, dtype)


def test_packed_weights_are_cached_only_for_constants() -> None:
    packing.clear()
    x, weight, b, attrs = _inputs(CASES[4], "float32")
    kernel = VARIANTS["nchwc_direct"].make(attrs)
    kernel(x, weight, b)
    assert packing.stats()["entries"] == 0  # writeable weights are repacked every call
    weight *= -1  # and a change shows up at once
    _check(kernel(x, weight, b), CONV.kernel(x, weight, b, **attrs), "float32")
    weight.setflags(write=False)
    b.setflags(write=False)
    first = kernel(x, weight, b)
    assert packing.stats()["entries"] == 1
    second = kernel(x, weight, b)
    assert packing.stats()["entries"] == 1
    np.testing.assert_array_equal(first, second)
    view = np.ones((16, 16, 3, 3), np.float32)
    ro_view = view[:]
    ro_view.setflags(write=False)
    assert not packing.is_constant(ro_view)  # read-only view of writeable memory


def test_the_packing_cache_never_keeps_a_dropped_weight_alive() -> None:
    import gc
    import weakref

    packing.clear()
    x, weight, b, attrs = _inputs(CASES[4], "float32")
    weight.setflags(write=False)
    b.setflags(write=False)
    kernel = VARIANTS["nchwc_direct"].make(attrs)
    expect = kernel(x, weight, b)
    assert packing.stats()["entries"] == 1
    gone = weakref.ref(weight)
    del weight
    gc.collect()
    assert gone() is None and packing.stats() == {"entries": 0, "bytes": 0}  # the entry went with it
    _, w2, b2, _ = _inputs(CASES[4], "float32", seed=1)  # may reuse the old identity: packed anew
    w2.setflags(write=False)
    b2.setflags(write=False)
    _check(kernel(x, w2, b2), CONV.kernel(x, w2, b2, **attrs), "float32")
    assert not np.array_equal(kernel(x, w2, b2), expect)


def test_kernels_are_reentrant_across_threads() -> None:
    cases = [CASES[1], CASES[4], CASES[11], CASES[5]]
    inputs = [_inputs(case, "float32", seed=i) for i, case in enumerate(cases)]
    refs = [CONV.kernel(x, w, b, **attrs) for x, w, b, attrs in inputs]
    names = ["nchwc_direct", "nchwc_direct", "depthwise", "im2col_gemm"]
    errors: list[BaseException] = []

    def work(i: int) -> None:
        x, w, b, attrs = inputs[i]
        kernel = VARIANTS[names[i]].make(attrs)
        try:
            for _ in range(5):
                _check(kernel(x, w, b), refs[i], "float32")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(cases))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_mixed_dtypes_fall_back_to_the_reference() -> None:
    x, weight, b, attrs = _inputs(CASES[3], "float32")
    b64 = b.astype(np.float64)
    ref = CONV.kernel(x, weight, b64, **attrs)
    for name in NAMES:
        out = VARIANTS[name].make(attrs)(x, weight, b64)
        assert out.dtype == ref.dtype
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-4)


BANDED = [("im2col_gemm", CASES[i]) for i in (0, 2, 5, 7, 8, 9, 10)] + [
    ("direct_1x1", CASES[5]), ("direct_1x1", CASES[6])]  # stride 1 reads x itself; stride 2 gathers it


@pytest.mark.parametrize(("name", "case"), BANDED, ids=str)
def test_the_column_matrix_is_built_in_bands_of_output_rows(name: str, case, monkeypatch) -> None:
    """Bands of two output rows (the padding above each band shifts, the stride included) give the
    whole matrix's result, bias and fused ReLU too; and the column matrix allocated is the workspace
    the variant declares."""
    x, weight, b, attrs = _inputs(case, "float32")
    shapes = _shapes(x, weight, b)
    geo = conv_geometry(shapes, attrs)
    assert VARIANTS[name].when(shapes, attrs)
    row = geo.c_group * geo.kh * geo.kw * geo.ow * x.itemsize
    monkeypatch.setattr(conv_gemm, "COL_MAX_BYTES", 2 * row)
    assert conv_gemm.band_rows(geo, x.itemsize) == min(2, geo.oh)
    made: list[int] = []
    real = mempool.kernel_empty
    monkeypatch.setattr(mempool, "kernel_empty", lambda shape, dtype: made.append(int(np.prod(shape))) or
                        real(shape, dtype))
    ref = CONV.kernel(x, weight, b, **attrs)
    _check(VARIANTS[name].make(attrs)(x, weight, b), ref, "float32")
    columns = [n * x.itemsize for n in made if n != ref.size]
    assert columns == ([VARIANTS[name].workspace(shapes, attrs, x.itemsize)] if columns else [])
    direct = name == "direct_1x1" and geo.sh == geo.sw == 1
    gemm = conv_gemm.blas.best_gemm("float32")
    relu = conv_gemm.conv2d_gemm(x, weight, b, geo, gemm, direct=direct, relu=True)
    _check(relu, np.maximum(ref, 0), "float32")


def test_a_column_matrix_over_the_tensor_limit_is_banded_to_fit(monkeypatch) -> None:
    from msvm.context import set_context

    x, weight, b, attrs = _inputs((2, 8, 6, 20, 20, (5, 5), 1, 2, 1, 1, True), "float32")
    shapes = _shapes(x, weight, b)
    whole = 8 * 25 * 20 * 20 * 4  # one image's column matrix: 320 KB
    ref = CONV.kernel(x, weight, b, **attrs)
    try:
        set_context(max_tensor_bytes=whole // 4)
        assert VARIANTS["im2col_gemm"].workspace(shapes, attrs, 4) <= whole // 4
        _check(VARIANTS["im2col_gemm"].make(attrs)(x, weight, b), ref, "float32")
    finally:
        set_context(max_tensor_bytes=4 << 30)
    assert VARIANTS["im2col_gemm"].workspace(shapes, attrs, 4) == whole
