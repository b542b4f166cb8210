"""erf lowers into native code: alone, fused with the ops around it (TorchScript's exact GELU,
``x * 0.5 * (1 + erf(x / sqrt(2)))``), on ints (as float64, numpy's dtype), in exact and bucket mode."""

import math

import numpy as np
import pytest
from codegen_helpers import check, rand, region, run_modes

from msvm.msjit.codegen.registry import LOWERINGS


@pytest.fixture(params=["exact", "bucket"])
def mode(request):
    return request.param


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_erf_matches_the_interpreter_specials_included(dtype, mode):
    def body(f, x):
        return f.call("erf", [x])

    def args(shapes, rng):
        x = rand(shapes[0], dtype, rng, low=-7, high=7)
        x[0, :5] = [np.nan, np.inf, -np.inf, 0.0, -0.0]
        return [x]

    run_modes(mode, body, [((5, 9), dtype)], args, sym={"N": [(0, 0)]})


def test_erf_of_ints_is_float64_as_numpy_would_make_it():
    def body(f, x):
        return f.call("erf", [x])

    x = np.arange(-6, 6, dtype=np.int64).reshape(3, 4)
    check(region(body, [("[3, 4]", "int64")]), x, rtol=1e-12, atol=1e-12)


def test_exported_erf_gelu_is_one_fused_kernel():
    """The GELU TorchScript exports: erf in the middle of the chain no longer ends the compiled code."""

    def body(f, x):
        half = f.call("mul", [x, f.load_const(np.float32(0.5))])
        e = f.call("erf", [f.call("div", [x, f.load_const(np.float32(math.sqrt(2.0)))])])
        return f.call("mul", [half, f.call("add", [e, f.load_const(np.float32(1.0))])])

    assert "erf" in LOWERINGS
    m = region(body, [("[64, 33]", "float32")])
    r = check(m, rand((64, 33), low=-5, high=5))
    assert len(r.lowered.kernels) == 1, r.lowered.kernels
    x = np.tile(np.linspace(-5, 5, 33, dtype=np.float32), (64, 1))
    exact = x * 0.5 * (1 + np.vectorize(math.erf)(x.astype(np.float64) / math.sqrt(2)))
    np.testing.assert_allclose(r.fn(x), exact, rtol=1e-5, atol=1e-6)
