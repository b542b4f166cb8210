"""Random shapes (hypothesis) through bucket-mode regions compiled once and reused across examples.

Each region is generic in every dim (symbols with upper bounds), so hypothesis explores shapes —
broadcast patterns, reduction axes, empty and size-1 dims — without paying a compile per example.
"""

import functools

import numpy as np
from codegen_helpers import assert_close, compiled, interpret, rand, region
from hypothesis import given, settings
from hypothesis import strategies as st

from msvm.bytecode import RegRef

BOUND = 9
SETTINGS = settings(max_examples=40, deadline=None)


@functools.cache
def broadcast_chain():
    """A fused chain over [A, B, C] with operands broadcast along different axes and a transposed view."""

    def body(f, x, row, col, t):
        y = f.call("mul", [f.call("sigmoid", [x]), row])
        y = f.call("add", [y, col])
        y = f.call("maximum", [y, f.call("transpose", [t], {"axes": (2, 1, 0)})])
        return f.call("tanh", [f.call("sub", [y, x])]), f.call("where", [f.call("greater", [x, row]), x, col])

    m = region(
        body,
        [("[A, B, C]", "float32"), ("[C]", "float32"), ("[A, B, 1]", "float32"), ("[C, B, A]", "float32")],
    )
    return m, compiled(m, bounds={"A": BOUND, "B": BOUND, "C": BOUND})


@functools.cache
def reductions(axis, keepdims):
    def body(f, x):
        e = f.call("exp", [f.call("mul", [x, f.load_const(np.float32(0.5))])])
        ops = ("sum", "mean", "max", "min")
        return tuple(f.call(op, [e], {"axis": axis, "keepdims": keepdims}) for op in ops)

    m = region(body, [("[A, B, C]", "float32")])
    return m, compiled(m, bounds={"A": BOUND, "B": BOUND, "C": BOUND})


@functools.cache
def dynamic_slices():
    def body(f, x, lo, hi):
        s = f.call("slice", [x], {"axes": (1,), "starts": (RegRef(lo),), "stops": (RegRef(hi),)})
        return f.call("neg", [s]), f.call("softmax", [s], {"axis": 0})

    m = region(body, [("[A, B]", "float64")], scalars=["LO", "HI"])
    return m, compiled(m, bounds={"A": BOUND, "B": BOUND, "LO": BOUND, "HI": 2 * BOUND})


dims = st.integers(1, BOUND)


@SETTINGS
@given(dims, dims, dims, st.integers(0, 2**31))
def test_broadcast_chain_random_shapes(a, b, c, seed):
    m, r = broadcast_chain()
    rng = np.random.default_rng(seed)
    args = [rand((a, b, c), rng=rng), rand((c,), rng=rng), rand((a, b, 1), rng=rng), rand((c, b, a), rng=rng)]
    assert_close(r.fn(*args), interpret(m, *args))


@SETTINGS
@given(
    st.integers(0, BOUND),
    dims,
    dims,
    st.sampled_from([None, 0, 1, 2, (0, 2), (1, 2)]),
    st.booleans(),
    st.integers(0, 2**31),
)
def test_reductions_random_shapes(a, b, c, axis, keepdims, seed):
    m, r = reductions(axis, keepdims)
    x = rand((a, b, c), rng=np.random.default_rng(seed))
    try:
        want = interpret(m, x)
    except Exception:  # an empty max/min: numpy raises, the compiled code reports a failed check
        assert a == 0
        return
    assert_close(r.fn(x), want)


@SETTINGS
@given(dims, dims, st.integers(0, BOUND), st.integers(0, 2 * BOUND), st.integers(0, 2**31))
def test_dynamic_slice_bounds(a, b, lo, hi, seed):
    m, r = dynamic_slices()
    x = rand((a, b), "float64", rng=np.random.default_rng(seed))
    assert_close(r.fn(x, lo, hi), interpret(m, x, lo, hi))



@functools.cache
def pool_gemms():
    """GEMMs on the job pool, generic in their rows: a constant weight (40 outputs: two panels and a
    partial one) with its bias, ReLU and a residual in the epilogue; and, every size a symbol, a
    product of two inputs reading B as rows of Bᵀ, per matrix of a batch."""
    rng = np.random.default_rng(11)
    weight = rng.standard_normal((40, 24)).astype(np.float32)
    bias = rng.standard_normal(40).astype(np.float32)

    def body(f, x, r, a, b):
        y = f.call("linear", [x, f.load_const(weight), f.load_const(bias)])
        bt = f.call("transpose", [b], {"axes": (0, 2, 1)})
        return f.call("relu", [f.call("add", [y, r])]), f.call("matmul", [a, bt])

    m = region(body, [("[M, 24]", "float32"), ("[M, 40]", "float32"), ("[B, P, Q]", "float32"),
                      ("[B, N, Q]", "float32")])
    return m, compiled(m, bounds={"M": 8 * BOUND, "B": 3, "P": 2 * BOUND, "Q": 2 * BOUND, "N": 3 * BOUND})


@SETTINGS
@given(st.integers(0, 8 * BOUND), st.integers(1, 3), st.integers(1, 2 * BOUND), st.integers(0, 2 * BOUND),
       st.integers(1, 3 * BOUND), st.integers(0, 2**31))
def test_pool_gemms_random_shapes(m_rows, batch, p, q, n, seed):
    m, r = pool_gemms()
    assert all("(pool)" in k for k in r.lowered.kernels if k.startswith("gemm")), r.lowered.kernels
    rng = np.random.default_rng(seed)
    args = [rand((m_rows, 24), rng=rng), rand((m_rows, 40), rng=rng), rand((batch, p, q), rng=rng),
            rand((batch, n, q), rng=rng)]
    assert_close(r.fn(*args), interpret(m, *args))
