"""Every lowered op against the interpreter, float32 and float64 (and ints/bools where numpy allows), in
exact mode (all dims constants) and bucket mode (some dims run-time parameters, several sizes per compile).

Ops are grouped so that one compiled region covers many of them (a region returns a tuple), which
keeps the suite fast: a compile costs tens of milliseconds.
"""

import contextlib

import numpy as np
import pytest
from codegen_helpers import check, compiled, rand, region, run_modes

from msvm.msjit.codegen import lower_core
from msvm.ops import REGISTRY

FLOATS = ["float32", "float64"]
UNARY_ANY = ["neg", "abs", "exp", "tanh", "sin", "cos", "sigmoid", "silu", "relu", "gelu"]
UNARY_POSITIVE = ["log", "sqrt", "rsqrt"]
BINARY = [
    "add",
    "sub",
    "mul",
    "div",
    "pow",
    "maximum",
    "minimum",
    "greater",
    "less",
    "equal",
    "greater_equal",
    "less_equal",
    "not_equal",
]


@pytest.fixture(params=["exact", "bucket"])
def mode(request):
    return request.param


@pytest.mark.parametrize("dtype", FLOATS)
def test_unary_ops(dtype, mode):
    def body(f, x, p):
        outs = [f.call(op, [x]) for op in UNARY_ANY]
        outs.append(f.call("gelu", [x], {"approximate": "tanh"}))
        outs.append(f.call("clamp", [x], {"min": -0.5, "max": 0.75}))
        outs.append(f.call("clamp", [x], {"min": 0.25}))
        outs += [f.call(op, [p]) for op in UNARY_POSITIVE]
        return tuple(outs)

    def args(shapes, rng):
        x = rand(shapes[0], dtype, rng, low=-6, high=6)
        x[0, :4] = [np.nan, np.inf, -np.inf, 0.0]
        return [x, rand(shapes[1], dtype, rng, low=0.01, high=9)]

    run_modes(mode, body, [((5, 7), dtype), ((5, 7), dtype)], args, sym={"N": [(0, 0), (1, 0)]})


def test_unary_ops_on_ints_follow_numpy_dtypes():
    def body(f, x):
        return tuple(f.call(op, [x]) for op in ["neg", "abs", "exp", "relu", "sigmoid", "sqrt"])

    x = np.arange(-6, 6, dtype=np.int32).reshape(3, 4)
    check(region(body, [("[3, 4]", "int32")]), x, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "dtypes",
    [
        ("float32", "float32"),
        ("float64", "float64"),
        ("int32", "int64"),
        ("int64", "float32"),
        ("float32", "float64"),
    ],
)
def test_binary_ops_broadcast(dtypes, mode):
    ops = [op for op in BINARY if not (op == "pow" and "float" not in "".join(dtypes))]

    def body(f, a, b):
        return tuple(f.call(op, [a, b]) for op in ops)

    def args(shapes, rng):
        a = rand(shapes[0], dtypes[0], rng, low=0.1, high=3)
        b = rand(shapes[1], dtypes[1], rng, low=-2, high=2)
        if "float" in dtypes[0]:
            a[0, 0, :2] = [np.nan, 1.5]
        if "float" in dtypes[1]:
            b[0, :2] = [1.5, np.nan]
        else:
            b = np.where(b == 0, 1, b).astype(dtypes[1])
        return [a, b]

    run_modes(
        mode, body, [((3, 1, 5), dtypes[0]), ((4, 5), dtypes[1])], args, sym={"M": [(0, 0)], "K": [(1, 0)]}
    )


def test_bool_ops(mode):
    def body(f, a, b):
        return (
            f.call("add", [a, b]),
            f.call("mul", [a, b]),
            f.call("maximum", [a, b]),
            f.call("minimum", [a, b]),
            f.call("equal", [a, b]),
            f.call("where", [a, b, a]),
            f.call("cast", [a], {"dtype": "float32"}),
            f.call("sum", [a], {"axis": 0}),
            f.call("max", [a], {"axis": 1}),
            f.call("argmax", [b], {"axis": 1}),
        )

    run_modes(mode, body, [((4, 6), "bool"), ((4, 6), "bool")], sym={"N": [(0, 1), (1, 1)]})


def test_where_and_casts(mode):
    def body(f, c, a, b, i):
        return (
            f.call("where", [c, a, b]),
            f.call("where", [i, a, b]),
            f.call("cast", [a], {"dtype": "int32"}),
            f.call("cast", [a], {"dtype": "bool"}),
            f.call("cast", [i], {"dtype": "float64"}),
            f.call("cast", [a], {"dtype": "float16"}),
            f.call("cast", [b], {"dtype": "int64"}),
        )

    def args(shapes, rng):
        a = rand(shapes[1], "float32", rng, low=-50, high=50)
        a[0, :3] = [np.nan, 3e9, -3e9]
        return [
            rand(shapes[0], "bool", rng),
            a,
            rand(shapes[2], "float64", rng, low=-9, high=9),
            rand(shapes[3], "int64", rng),
        ]

    run_modes(
        mode,
        body,
        [((3, 4), "bool"), ((3, 4), "float32"), ((4,), "float64"), ((3, 1), "int64")],
        args,
        sym={"N": [(0, 0), (1, 0), (3, 0)]},
    )


def test_float16_elementwise(mode):
    def body(f, a, b):
        return f.call("exp", [f.call("mul", [a, b])]), f.call("add", [a, b]), f.call("sum", [a], {"axis": 1})

    def args(shapes, rng):
        return [rand(s, "float16", rng, low=-1, high=1) for s in shapes]

    run_modes(mode, body, [((4, 8), "float16"), ((8,), "float16")], args, sym={"N": [(0, 0)]})


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_extremes_propagate_nan_from_either_side_in_vector_body_and_tail(dtype):
    """maximum/minimum and max/min reductions (``llvm.maximum``/``minimum``): a NaN on either side wins, in
    the vectorised body and in the scalar tail alike; infinities and ±0 ties give numpy's values; and a
    max-reduction is vectorised (as a compare-and-select it stayed scalar, 10x slower)."""
    n = 1003
    rng = np.random.default_rng(7)
    a, c = rand((4, n), dtype, rng), rand((4, n), dtype, rng)
    a[0, [5, 600, n - 1]] = np.nan
    c[1, [6, 601, n - 2]] = np.nan
    a[2, :4], c[2, :4] = [0.0, -0.0, np.inf, -np.inf], [-0.0, 0.0, -np.inf, np.inf]
    r = compiled(region(lambda f, x, y: (
        f.call("maximum", [x, y]), f.call("minimum", [x, y]),
        f.call("max", [f.call("maximum", [x, y])], {"axis": 1}), f.call("min", [x], {"axis": 1}),
    ), [((f"[4, {n}]"), dtype)] * 2))
    got = r.fn(a, c)
    want = (np.maximum(a, c), np.minimum(a, c), np.maximum(a, c).max(axis=1), a.min(axis=1))
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)  # NaN where numpy has NaN; +0 == -0
    assert np.isnan(got[2][:2]).all() and not np.isnan(got[2][2:]).any()
    assert "llvm.vector.reduce.fmaximum" in r.disassemble("llvm-opt"), "the max-reduction is vectorised"


@pytest.mark.parametrize("op", ["sum", "mean", "max", "min"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
def test_reductions_every_axis_combination(op, dtype, mode):
    combos = [None, 0, 1, 2, -1, (0, 1), (0, 2), (1, 2), (0, 1, 2)]

    def body(f, x):
        return tuple(
            f.call(op, [x], {"axis": axis, "keepdims": keep}) for axis in combos for keep in (False, True)
        )

    def args(shapes, rng):
        x = rand(shapes[0], dtype, rng)
        if dtype != "int32":
            x[1, 2, 3] = np.nan
        return [x]

    run_modes(mode, body, [((3, 4, 5), dtype)], args, sym={"C": [(0, 1)]})


@pytest.mark.parametrize("dtype", FLOATS)
def test_trailing_sums_of_loads_call_the_native_row_job(dtype, mode):
    """A CNN's head — the mean over H, W of its last block's residual add and ReLU — and a plain trailing
    sum call ``msvm.kernels.rows``' job, so the region needs no loop module; a NaN reaches the mean
    through the ReLU. A sum over a leading axis, or of a transposed input, is generated."""

    def body(f, a, b):
        z = f.call("relu", [f.call("add", [a, b])])
        bt = f.call("transpose", [b], {"axes": (0, 1, 3, 2)})
        return (
            f.call("mean", [z], {"axis": (2, 3), "keepdims": False}),
            f.call("sum", [a], {"axis": -1, "keepdims": True}),
            f.call("sum", [a], {"axis": 0, "keepdims": False}),
            f.call("mean", [bt], {"axis": 3, "keepdims": False}),
        )

    def args(shapes, rng):
        a, b = (rand(s, dtype, rng) for s in shapes)
        a[1, 2, 3, 4] = np.nan
        return [a, b]

    shapes = [((2, 5, 6, 7), dtype), ((2, 5, 6, 7), dtype)]
    r = run_modes(mode, body, shapes, args, sym={"N": [(0, 1), (1, 1)]})
    natives = [k for k in r.lowered.kernels if k.endswith("(native sum)")]
    assert len(natives) == 2 and "add,relu" in natives[0], r.lowered.kernels
    assert len([k for k in r.lowered.kernels if k.startswith("reduce")]) == 4


def test_a_small_linear_with_a_constant_weight_needs_no_loop_module():
    """W1's classifier (16 × 64 → 10): the job pool's GEMM with its bias, not a fused contraction — LLVM's
    O2 pipeline costs a loop module ~10 ms however small its loops."""
    rng = np.random.default_rng(3)
    w, b = rng.standard_normal((10, 64)).astype("float32"), rng.standard_normal(10).astype("float32")

    def body(f, x):
        return f.call("linear", [x, f.load_const(w), f.load_const(b)])

    r = run_modes("exact", body, [((16, 64), "float32")])
    assert r.lowered.kernels == ["gemm 16x10x64 packed -> out0 (pool) (bias)"] and not r.lowered.loop_ir


def test_argmax_every_axis(mode):
    def body(f, x):
        return tuple(
            f.call("argmax", [x], {"axis": axis, "keepdims": keep})
            for axis in (None, 0, 1, 2)
            for keep in (False, True)
        )

    def args(shapes, rng):
        x = rand(shapes[0], "float32", rng)
        x[0, 1, :] = 7.0  # ties: the first one wins
        x[2, 3, 1] = np.nan
        return [x]

    run_modes(mode, body, [((3, 4, 5), "float32")], args, sym={"W": [(0, 2)]})


def test_mean_of_ints_and_float16(mode):
    def body(f, x, h):
        return (
            f.call("mean", [x], {"axis": 0}),
            f.call("mean", [h], {"axis": 0}),
            f.call("mean", [h], {"axis": 1}),
        )

    def args(shapes, rng):
        return [rand(shapes[0], "int64", rng), rand(shapes[1], "float16", rng, low=-1, high=1)]

    run_modes(mode, body, [((6, 3), "int64"), ((6, 3), "float16")], args, sym={"N": [(0, 0), (1, 0)]})


@pytest.mark.parametrize("dtype", FLOATS)
def test_softmax_family_every_axis(dtype, mode):
    def body(f, x):
        return tuple(f.call(op, [x], {"axis": a}) for op in ("softmax", "log_softmax") for a in (0, 1, 2, -1))

    def args(shapes, rng):
        x = rand(shapes[0], dtype, rng, low=-5, high=5)
        x[0, 0, :] = -np.inf  # a fully masked row: NaN like the reference
        return [x]

    run_modes(mode, body, [((3, 4, 6), dtype)], args, sym={"L": [(0, 2)]})


@pytest.mark.parametrize("dtype", FLOATS)
def test_layout_ops(dtype, mode):
    from msvm.bytecode import RegRef

    def body(f, x):
        width = RegRef(f.shape_of(x, 2))
        return (
            f.call("reshape", [x], {"shape": (4, -1)}),
            f.call("flatten", [x], {"start_dim": 1}),
            f.call("transpose", [x], {"axes": None}),
            f.call("permute", [x], {"dims": (1, 2, 0)}),
            f.call(
                "slice", [x], {"axes": (1, 2), "starts": (-3, 1), "stops": (2**63 - 1, 6), "steps": (1, 2)}
            ),
            f.call("slice", [x], {"axes": (2,), "starts": (-1,), "stops": (-(2**63),), "steps": (-2,)}),
            f.call("broadcast_to", [f.call("unsqueeze", [x], {"axis": 1})], {"shape": (2, 3, 4, width)}),
            f.call("squeeze", [f.call("unsqueeze", [x], {"axis": -1})], {"axis": 3}),
            f.call("pad", [x], {"pads": (2, 1, 0, 3), "mode": "constant", "value": -1.5}),
            f.call("pad", [x], {"pads": (7, 7), "mode": "reflect"}),
            f.call("pad", [x], {"pads": (2, 3, 1, 0), "mode": "replicate"}),
        )

    run_modes(mode, body, [((2, 4, 6), dtype)], sym={"W": [(0, 2)]})


def test_concat_split_take(mode):
    def body(f, a, b, i):
        parts = f.call("split", [a], {"sizes": (1, 3, 2), "axis": 1}, n_out=3)
        halves = f.call("split", [b], {"sections": 2, "axis": 0}, n_out=2)
        return (
            f.call("concat", [a, f.call("exp", [b]), a], {"axis": 0}),
            *parts,
            *halves,
            f.call("concat", [parts[2], parts[0]], {"axis": 1}),
            f.call("take", [a, i], {"axis": 1}),
            f.call("take", [a, i], {"axis": None}),
            f.call("take", [b, i], {"axis": 0}),
        )

    def args(shapes, rng):
        idx = rng.integers(-4, 4, size=shapes[2])
        return [rand(shapes[0], "float32", rng), rand(shapes[1], "float64", rng), idx]

    run_modes(
        mode, body, [((4, 6), "float32"), ((4, 6), "float64"), ((2, 2), "int64")], args, sym={"K": [(2, 1)]}
    )


def test_creation_ops():
    def body(f, x):
        return (
            f.call("zeros", [], {"shape": (2, 3), "dtype": "int32"}),
            f.call("ones", [], {"shape": (3,), "dtype": "bool"}),
            f.call("full", [], {"shape": (2, 2), "fill_value": 2.7, "dtype": "int64"}),
            f.call("arange", [], {"start": 3, "stop": -7, "step": -3, "dtype": "float64"}),
            f.call("add", [x, f.call("arange", [], {"stop": 4, "dtype": "float32"})]),
        )

    check(region(body, [("[3, 4]", "float32")]), rand((3, 4)))


def test_creation_from_scalar_registers():
    from msvm.bytecode import RegRef

    def body(f, x, s):
        n = f.shape_of(x, 0)
        return (
            f.call("full", [], {"shape": (RegRef(n), 2), "fill_value": RegRef(s), "dtype": "float32"}),
            f.call(
                "arange", [], {"start": RegRef(s), "stop": RegRef(f.scalar_op("add", s, n)), "dtype": "int64"}
            ),
            f.call("zeros", [], {"shape": (RegRef(n),), "dtype": "float64"}),
        )

    from codegen_helpers import assert_close, compiled, interpret

    m = region(body, [("[N]", "float32")], scalars=["S"])
    r = compiled(m, bounds={"N": 9})
    for n, s in [(3, 2), (9, -4)]:
        assert_close(r.fn(rand((n,)), s), interpret(m, rand((n,)), s))


@pytest.mark.parametrize("dtype", FLOATS)
def test_matmul_shapes(dtype, mode):
    shapes = [
        ((70, 90), (90, 60)),
        ((2, 40, 50), (50, 30)),
        ((3, 5), (5, 4)),
        ((2, 1, 20, 30), (3, 30, 25)),
        ((50,), (50, 70)),
        ((40, 50), (50,)),
        ((6,), (6,)),
        ((2, 33, 64), (2, 64, 48)),
    ]

    def body(f, *xs):
        return tuple(f.call("matmul", [xs[2 * i], xs[2 * i + 1]]) for i in range(len(shapes)))

    inputs = [(s, dtype) for pair in shapes for s in pair]
    run_modes(mode, body, inputs, sym={"M": [(0, 0), (2, 1), (14, 1)], "K": [(4, 1), (5, 0), (6, 3), (7, 1)]})


def test_matmul_mixed_and_int_dtypes():
    def body(f, a, b, i, j):
        return f.call("matmul", [a, b]), f.call("matmul", [i, j]), f.call("matmul", [i, b])

    check(
        region(
            body, [("[8, 9]", "float32"), ("[9, 7]", "float64"), ("[8, 9]", "int32"), ("[9, 7]", "int64")]
        ),
        rand((8, 9)),
        rand((9, 7), "float64"),
        rand((8, 9), "int32"),
        rand((9, 7), "int64"),
    )


@pytest.mark.parametrize("dtype", FLOATS)
def test_linear_with_and_without_bias(dtype, mode):
    def body(f, x, w, b):
        return (
            f.call("linear", [x, w, b]),
            f.call("linear", [x, w]),
            f.call("linear", [x, w, f.call("neg", [b])]),
        )

    run_modes(mode, body, [((2, 40, 64), dtype), ((48, 64), dtype), ((48,), dtype)], sym={"T": [(0, 1)]})


@pytest.mark.parametrize("dtype", FLOATS)
def test_linear_with_a_constant_weight_runs_on_the_job_pool(dtype, mode):
    """The weight packed while lowering (40 outputs: a partial panel), its constant bias and a ReLU or a
    residual add in the kernel's epilogue; a bias computed in the region stays a lazy add."""
    rng = np.random.default_rng(7)
    w = (rng.standard_normal((40, 64)) * 0.2).astype(dtype)
    b = rng.standard_normal(40).astype(dtype)

    def body(f, x, r, c):
        wc, bc = f.load_const(w), f.load_const(b)
        return (
            f.call("relu", [f.call("linear", [x, wc, bc])]),
            f.call("add", [f.call("linear", [x, wc]), r]),
            f.call("linear", [x, wc, f.call("neg", [c])]),
        )

    r = run_modes(mode, body, [((2, 30, 64), dtype), ((2, 30, 40), dtype), ((40,), dtype)],
                  sym={"T": [(0, 1), (1, 1)]})
    gemms = [k for k in r.lowered.kernels if k.startswith("gemm")]
    assert len(gemms) == 3 and all("packed" in k and "(pool)" in k for k in gemms), r.lowered.kernels
    assert any(k.endswith("(bias,relu)") for k in gemms) and any("(+in1)" in k for k in gemms), gemms


def test_attention_gemms_run_on_the_job_pool(mode):
    """Q·Kᵀ reads K as rows of Bᵀ and P·V reads V as rows of B, both per head (a batch), from slices of one
    [L, 3·D] tensor; in bucket mode the panel scratch is sized for L's bound."""

    def body(f, qkv):
        heads = []
        for i in range(3):
            part = f.call("slice", [qkv], {"axes": (1,), "starts": (32 * i,), "stops": (32 * (i + 1),)})
            part = f.call("reshape", [part], {"shape": (-1, 2, 16)})
            heads.append(f.call("transpose", [part], {"axes": (1, 0, 2)}))
        return f.call("scaled_dot_product_attention", heads)

    r = run_modes(mode, body, [((37, 96), "float32")], sym={"L": [(0, 0)]})
    gemms = [k for k in r.lowered.kernels if k.startswith("gemm")]
    assert len(gemms) == 2 and all("batch 2" in k and "(pool)" in k for k in gemms), r.lowered.kernels
    assert "Bᵀ" in gemms[0] and " B " in gemms[1]


CONVS = [
    ((2, 8, 10, 10), (16, 8, 3, 3), {"padding": (1, 1)}),
    ((1, 6, 9, 9), (6, 1, 3, 3), {"groups": 6, "stride": (2, 2), "padding": (1, 1)}),
    ((2, 16, 8, 8), (32, 16, 1, 1), {}),
    ((1, 8, 11, 9), (12, 4, 3, 2), {"groups": 2, "dilation": (2, 1), "stride": (1, 2)}),
    ((8, 12, 12), (10, 8, 5, 5), {"padding": "same"}),
    ((1, 4, 7, 7), (6, 4, 2, 2), {"padding": "same"}),
]


@pytest.mark.parametrize("dtype", FLOATS)
def test_conv2d_variants(dtype, mode):
    def body(f, *xs):
        outs = []
        for i, (_, _, attrs) in enumerate(CONVS):
            x, w, b = xs[3 * i : 3 * i + 3]
            outs.append(f.call("conv2d", [x, w, b], attrs))
        outs.append(f.call("conv2d", [xs[0], xs[1]], CONVS[0][2]))
        return tuple(outs)

    inputs = []
    for xs, ws, _ in CONVS:
        inputs += [(xs, dtype), (ws, dtype), ((ws[0],), dtype)]
    run_modes(mode, body, inputs, sym={"H": [(0, 2), (3, 2), (6, 2), (9, 3)], "W": [(12, 2), (15, 3)]})


def test_conv_with_fused_relu_keeps_nan():
    """conv → relu (→ + residual → relu) with constant weights fuse into the packed conv kernel's epilogue;
    a NaN reaching it stays NaN as in the interpreter (an IEEE maxNum in the epilogue made it 0)."""
    rng = np.random.default_rng(5)
    w, b = rand((16, 8, 3, 3), rng=rng), rand((16,), rng=rng)

    def body(f, x, r):
        conv = f.call("conv2d", [x, f.load_const(w), f.load_const(b)], {"padding": (1, 1)})
        y = f.call("relu", [conv])
        return y, f.call("relu", [f.call("add", [y, r])])

    x, r = rand((2, 8, 9, 9), rng=rng), rand((2, 16, 9, 9), rng=rng)
    x[0, 3, 4, 4] = np.nan
    r[1, 2, 0, 0] = np.nan
    got = check(region(body, [("[2, 8, 9, 9]", "float32"), ("[2, 16, 9, 9]", "float32")]), x, r).fn(x, r)
    assert np.isnan(got[0]).sum() == 16 * 9 and np.isnan(got[1]).sum() == 16 * 9 + 1


@pytest.mark.parametrize("dtype", FLOATS)
def test_pooling(dtype, mode):
    def body(f, x, u):
        return (
            f.call("max_pool2d", [x], {"kernel_size": 3, "stride": 2, "padding": 1}),
            f.call("max_pool2d", [x], {"kernel_size": (2, 3), "dilation": (2, 1), "ceil_mode": True}),
            f.call("avg_pool2d", [x], {"kernel_size": 2}),
            f.call(
                "avg_pool2d",
                [x],
                {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True, "count_include_pad": False},
            ),
            f.call("avg_pool2d", [x], {"kernel_size": 3, "padding": 1, "divisor_override": 5}),
            f.call("adaptive_avg_pool2d", [x], {"output_size": (3, 5)}),
            f.call("adaptive_avg_pool2d", [x], {"output_size": (13, 2)}),
            f.call("max_pool2d", [u], {"kernel_size": 2}),
        )

    def args(shapes, rng):
        u = rand(shapes[1], dtype, rng)
        u[1, 2, 3] = np.nan  # max pooling propagates NaN like the reference
        return [rand(shapes[0], dtype, rng), u]

    run_modes(
        mode, body, [((2, 3, 9, 11), dtype), ((3, 6, 6), dtype)], args, sym={"H": [(0, 2)], "W": [(0, 3)]}
    )


@pytest.mark.parametrize("dtype", FLOATS)
def test_resize(dtype, mode):
    def body(f, x):
        return (
            f.call("resize_nearest", [x], {"size": (7, 13)}),
            f.call("resize_nearest", [x], {"scale_factor": (2.0, 1.5)}),
            f.call("resize_nearest", [x], {"size": (9, 22)}),
            f.call("resize_bilinear", [x], {"size": (7, 13)}),
            f.call("resize_bilinear", [x], {"size": (7, 13), "align_corners": True}),
            f.call("resize_bilinear", [x], {"size": (1, 1), "align_corners": True}),
            f.call("resize_bilinear", [x], {"scale_factor": (0.5, 1.75)}),
        )

    run_modes(mode, body, [((2, 3, 9, 11), dtype)], sym={"H": [(0, 2)], "W": [(0, 3)]})


@pytest.mark.parametrize("dtype", FLOATS)
def test_norms(dtype, mode):
    def body(f, x, m, v, w, b, y, lw, lb):
        return (
            f.call("batch_norm", [x, m, v, w, b], {"eps": 1e-3}),
            f.call("batch_norm", [x, m, v]),
            f.call("group_norm", [x, w, b], {"num_groups": 2}),
            f.call("group_norm", [x], {"num_groups": 4}),
            f.call("layer_norm", [y, lw, lb], {"normalized_shape": (5, 6)}),
            f.call("layer_norm", [y], {"normalized_shape": 6}),
        )

    def args(shapes, rng):
        out = [rand(s, dtype, rng) for s in shapes]
        out[2] = rand(shapes[2], dtype, rng, low=0.5)
        return out

    inputs = [
        ((2, 4, 5, 6), dtype),
        ((4,), dtype),
        ((4,), dtype),
        ((4,), dtype),
        ((4,), dtype),
        ((3, 5, 6), dtype),
        ((5, 6), dtype),
        ((5, 6), dtype),
    ]
    run_modes(mode, body, inputs, args, sym={"N": [(0, 0), (5, 0)], "H": [(0, 2)]})


def test_batch_norm_with_constant_statistics():
    rng = np.random.default_rng(3)
    stats = [rng.standard_normal(4).astype(np.float32) for _ in range(4)]
    stats[1] = np.abs(stats[1]) + 0.1

    def body(f, x):
        return f.call("relu", [f.call("batch_norm", [x, *(f.load_const(s) for s in stats)])])

    check(region(body, [("[2, 4, 3, 3]", "float32")]), rand((2, 4, 3, 3)))


@pytest.mark.parametrize("dtype", FLOATS)
def test_embedding_and_roi_align(dtype, mode):
    boxes = np.array(
        [
            [0, 1.0, 1.5, 6.0, 7.0],
            [1, 0.0, 0.0, 3.0, 4.5],
            [1, -2.0, 3.0, 30.0, 8.0],
            [0, 4.2, 4.2, 4.3, 4.3],
            [1, 2.0, 2.0, 2.0, 9.0],
        ],
        dtype,
    )

    def body(f, i, w, x, bx):
        return (
            f.call("embedding", [i, w]),
            f.call("roi_align", [x, bx], {"output_size": (3, 2), "spatial_scale": 0.5, "sampling_ratio": -1}),
            f.call("roi_align", [x, bx], {"output_size": 2, "sampling_ratio": 2, "aligned": True}),
        )

    def args(shapes, rng):
        return [
            rng.integers(0, 6, size=shapes[0]).astype(np.int32),
            rand(shapes[1], dtype, rng),
            rand(shapes[2], dtype, rng),
            boxes[: shapes[3][0]],
        ]

    run_modes(
        mode,
        body,
        [((2, 3), "int32"), ((6, 5), dtype), ((2, 3, 9, 11), dtype), ((4, 5), dtype)],
        args,
        sym={"K": [(3, 0)], "L": [(0, 1)]},
    )


@pytest.mark.parametrize("dtype", FLOATS)
def test_attention(dtype, mode):
    def body(f, q, k, v, bm, fm):
        return (
            f.call("scaled_dot_product_attention", [q, k, v]),
            f.call("scaled_dot_product_attention", [q, k, v], {"is_causal": True}),
            f.call("scaled_dot_product_attention", [q, k, v, bm], {"scale": 0.3}),
            f.call("scaled_dot_product_attention", [q, k, v, fm]),
        )

    def args(shapes, rng):
        out = [rand(s, dtype, rng) for s in shapes]
        out[3] = rand(shapes[3], "bool", rng)
        out[3][0] = False  # a fully masked row gives zeros (torch's safe softmax)
        return out

    inputs = [
        ((2, 3, 6, 8), dtype),
        ((2, 3, 10, 8), dtype),
        ((2, 3, 10, 5), dtype),
        ((6, 10), "bool"),
        ((3, 6, 10), dtype),
    ]
    run_modes(
        mode, body, inputs, args, sym={"S": [(1, 2), (2, 2), (3, 1), (4, 2)], "L": [(0, 2), (3, 0), (4, 1)]}
    )


def test_large_attention_uses_gemm():
    def body(f, q, k, v):
        return f.call("scaled_dot_product_attention", [q, k, v], {"is_causal": True})

    shape = (2, 64, 64)
    r = check(
        region(body, [(str(list(shape)), "float32")] * 3),
        *[rand(shape, rng=np.random.default_rng(i)) for i in range(3)],
    )
    kinds = [k.split()[0] for k in r.lowered.kernels]
    assert kinds == ["gemm", "row", "gemm"], r.lowered.kernels


def test_unfused_row_kernels_call_the_native_jobs(mode):
    """A transformer's layer norms and attention softmax fuse nothing: they call ``msvm.kernels.rows``'
    jobs (compiled once per process) instead of generating row code; results agree in every mode."""

    def body(f, x, w, b, q, k, v):
        h = f.call("layer_norm", [x, w, b], {"normalized_shape": (64,)})
        return h, f.call("scaled_dot_product_attention", [q, k, v])

    inputs = [((37, 64), "float32"), ((64,), "float32"), ((64,), "float32")] + [((4, 37, 16), "float32")] * 3
    r = run_modes(mode, body, inputs, sym={"L": [(0, 0), (3, 1), (4, 1), (5, 1)]})
    rows_ = sorted(k.rsplit(" (", 1)[-1] for k in r.lowered.kernels if k.startswith("row"))
    assert rows_ == ["native layer_norm)", "native softmax)"], r.lowered.kernels


@pytest.mark.parametrize("op, attrs", [("gelu", {}), ("gelu", {"approximate": "tanh"}), ("exp", {}),
                                       ("tanh", {}), ("sigmoid", {}), ("silu", {})])
def test_a_lone_transcendental_calls_the_native_job(mode, op, attrs):
    """One of ``kernels.elementwise``'s ops on a dense array fuses nothing: it calls the interpreter's job
    (no loop of its own to compile: the region is one unoptimised module), to the same bits."""
    from codegen_helpers import compiled, interpret

    def body(f, x):
        return f.call(op, [x], attrs)

    r = run_modes(mode, body, [((37, 64), "float32")], sym={"L": [(0, 0), (0, 1)]})
    native = [k for k in r.lowered.kernels if "(native" in k]
    form = "gelu_tanh" if attrs else op
    assert len(native) == 1 and native[0].endswith(f"(native {form})") and r.lowered.loop_ir == ""
    m = region(body, [("[300, 64]", "float32")])
    x = rand((300, 64))
    np.testing.assert_array_equal(compiled(m).fn(x), interpret(m, x))  # the interpreter's simd variant


def test_a_transcendental_in_place_on_a_gemm_result_calls_the_native_job():
    """A transformer's FFN: the GELU on the first GEMM's output, in place."""

    def body(f, x, w):
        return f.call("matmul", [f.call("gelu", [f.call("matmul", [x, w])]), f.call("transpose", [w])])

    m = region(body, [("[40, 64]", "float32"), ("[64, 96]", "float32")])
    r = check(m, rand((40, 64)), rand((64, 96)))
    assert any(k.endswith("(native gelu)") for k in r.lowered.kernels), r.lowered.kernels


def test_a_strided_or_fused_transcendental_is_generated():
    def body(f, x, y):
        return f.call("exp", [f.call("transpose", [x])]), f.call("tanh", [f.call("add", [x, y])])

    m = region(body, [("[24, 40]", "float32"), ("[24, 40]", "float32")])
    r = check(m, rand((24, 40)), rand((24, 40)))
    assert not any("native" in k for k in r.lowered.kernels), r.lowered.kernels


def test_fused_row_kernels_are_generated():
    def body(f, x, w, b):
        return f.call("layer_norm", [f.call("gelu", [x]), w, b], {"normalized_shape": (64,)})

    r = check(region(body, [("[9, 64]", "float32"), ("[64]", "float32"), ("[64]", "float32")]),
              rand((9, 64)), rand((64,)), rand((64,)))
    assert [k for k in r.lowered.kernels if "native" in k] == [], r.lowered.kernels


def test_vector_matmuls_through_blas_write_the_callers_array():
    from codegen_helpers import assert_close, compiled, interpret

    def body(f, v, w, a):
        return f.call("matmul", [v, w]), f.call("matmul", [a, v])

    m = region(body, [("[K]", "float32"), ("[K, 70]", "float32"), ("[40, K]", "float32")])
    r = compiled(m, bounds={"K": 64})
    assert [k.split()[0] for k in r.lowered.kernels] == ["gemm", "gemm"]
    for k in (50, 64):
        args = [rand((k,)), rand((k, 70)), rand((40, k))]
        assert_close(r.fn(*args), interpret(m, *args))


def test_float32_gelu_accuracy_and_special_values():
    """gelu's rational form (folded constants, Estrin): within 2e-6 of the float64 reference on [-12, 12],
    and inf, NaN, signed zeros and huge inputs as the exact form gives them (-inf: NaN, as 0·inf)."""
    grid = np.linspace(-12, 12, 200_001, dtype=np.float32)
    special = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-30, -1e-30, 3e38, -3e38, -30.0], np.float32)
    x = np.concatenate([grid, special])
    r = compiled(region(lambda f, v: f.call("gelu", [v]), [(f"[{x.size}]", "float32")]))
    got = r.fn(x)
    with np.errstate(invalid="ignore"):
        want = REGISTRY["gelu"].kernel(x.astype(np.float64))
    assert np.abs(got[: grid.size] - want[: grid.size]).max() <= 2e-6
    tail, expected = got[grid.size:], want[grid.size:].astype(np.float32)
    np.testing.assert_array_equal(tail, expected)
    assert (np.signbit(tail) == np.signbit(expected)).all(), (tail, expected)


def test_float16_transcendentals():
    def body(f, x):
        return tuple(f.call(op, [x]) for op in ("gelu", "silu", "tanh", "sigmoid", "exp", "softmax"))

    check(region(body, [("[4, 8]", "float16")]), rand((4, 8), "float16", low=-3, high=3))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gemms_through_every_blas_abi(dtype, monkeypatch):
    """Each loaded ?gemm entry — row-major cblas or column-major Fortran, 32- or 64-bit integers — called
    from a region: plain, transposed (linear's weight), batched and with a sliced operand (GEMMs of any B
    size: none runs on the job pool)."""
    monkeypatch.setattr(lower_core, "POOL_GEMM_MAX_BYTES", 0)
    with contextlib.suppress(ImportError):  # scipy's capsules add Fortran-ABI entries with 32-bit integers
        import scipy.linalg.cython_blas  # noqa: F401
    from codegen_helpers import assert_close, interpret

    from msvm.msjit.codegen.region import build_region, lower
    from msvm.native import blas
    from msvm.native.llvm import load_object

    def body(f, x, w, y):
        s = f.call("slice", [y], {"axes": (1,), "starts": (2,), "stops": (42,)})
        return f.call("linear", [x, w]), f.call("matmul", [x, f.call("transpose", [w], {"axes": (1, 0)})]), \
            f.call("matmul", [s, x])

    module = region(body, [("[2, 40, 64]", dtype), ("[48, 64]", dtype), ("[2, 50, 40]", dtype)])
    args = rand((2, 40, 64), dtype), rand((48, 64), dtype), rand((2, 50, 40), dtype, np.random.default_rng(1))
    entries = [e for e in blas.discover() if e.dtype == dtype]
    assert {e.abi for e in entries} == {"cblas", "fortran"}
    for entry in entries:
        lowered = lower(module, "f", gemm={dtype: entry})
        assert sum(entry.name in k for k in lowered.kernels) == 3, lowered.kernels
        library = load_object(build_region(lowered)[0])
        assert_close(lowered.bind(library)(*args), interpret(module, *args))
