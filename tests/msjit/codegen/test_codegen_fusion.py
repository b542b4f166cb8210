"""Fusion: what becomes one kernel (asserted on the plan) and that the fused code still agrees."""

import re

import numpy as np
import pytest
from codegen_helpers import assert_close, check, compiled, interpret, rand, region

from msvm.kernels import gemm_packed
from msvm.msjit.codegen import lower
from msvm.msjit.codegen.emit_elementwise import CHAIN_VECTORS
from msvm.msjit.codegen.kernels import THREADS
from msvm.native import host


def kinds(r) -> list[str]:
    return [k.split()[0].split("[")[0] for k in r.lowered.kernels]


def test_long_chain_with_broadcasts_and_views_is_one_loop_nest():
    def body(f, x, y, z):
        t = f.call("transpose", [z], {"axes": (1, 0)})  # strided view
        s = f.call("slice", [x], {"axes": (1,), "starts": (1,), "stops": (9,), "steps": (1,)})
        r = f.call("mul", [s, y])
        for i in range(30):
            r = f.call(
                ("add", "mul", "tanh", "maximum", "sigmoid")[i % 5], [r, t] if i % 5 in (0, 1, 3) else [r]
            )
        return f.call("sub", [r, f.call("unsqueeze", [y], {"axis": 0})])

    m = region(body, [("[6, 10]", "float32"), ("[8]", "float32"), ("[8, 6]", "float32")])
    r = check(m, rand((6, 10)), rand((8,)), rand((8, 6), low=-0.5, high=0.5))
    assert kinds(r) == ["elementwise"], r.lowered.kernels


def test_w5_pattern_is_one_row_kernel():
    rng = np.random.default_rng(0)

    def body(f, x):
        a, b = f.load_const(rng.standard_normal(64).astype(np.float32)), f.load_const(np.float32(0.5))
        w, c = (
            f.load_const(rng.standard_normal(64).astype(np.float32)),
            f.load_const(rng.standard_normal(64).astype(np.float32)),
        )
        h = f.call("add", [f.call("gelu", [f.call("add", [f.call("mul", [x, a]), b])]), x])
        return f.call("layer_norm", [h, w, c], {"normalized_shape": (64,)})

    r = check(region(body, [("[33, 64]", "float32")]), rand((33, 64)))
    assert kinds(r) == ["row"] and "gelu" in r.lowered.kernels[0], r.lowered.kernels


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_with_producer_and_epilogue(op):
    def body(f, x, m, y):
        p = f.call("add", [f.call("mul", [x, f.load_const(np.float32(0.125))]), m])
        s = f.call(op, [p], {"axis": -1})
        return f.call("add", [f.call("mul", [s, y]), f.load_const(np.float32(1.0))])

    r = check(
        region(body, [("[4, 5, 16]", "float32"), ("[5, 16]", "float32"), ("[4, 5, 16]", "float32")]),
        rand((4, 5, 16)),
        rand((5, 16)),
        rand((4, 5, 16)),
    )
    assert kinds(r) == ["row"], r.lowered.kernels
    assert "epilogue" in r.lowered.kernels[0]


def test_row_result_used_twice_or_broadcast_is_stored_once():
    def body(f, x):
        s = f.call("softmax", [x], {"axis": -1})
        return f.call("add", [s, f.call("transpose", [s], {"axes": (1, 0)})]), f.call("sum", [s], {"axis": 0})

    r = check(region(body, [("[8, 8]", "float32")]), rand((8, 8)))
    assert kinds(r).count("row") == 1, r.lowered.kernels


def test_linear_bias_activation_residual_epilogue_in_place():
    def body(f, x, w, b):
        return f.call("add", [f.call("gelu", [f.call("linear", [x, w, b])]), x])

    m = region(body, [("[64, 96]", "float32"), ("[96, 96]", "float32"), ("[96]", "float32")])
    r = check(m, rand((64, 96)), rand((96, 96)), rand((96,)), mem_optimize=True)
    assert kinds(r) == ["gemm", "elementwise"], r.lowered.kernels
    # The GEMM writes the output array and the epilogue runs in place: the arena holds only the pool
    # GEMM's panel of B per thread.
    assert r.lowered.planned_bytes == gemm_packed.scratch_bytes(96, "float32") * THREADS


def test_mlp_block_matches_w2_shape():
    rng = np.random.default_rng(1)

    def body(f, x):
        w1 = f.load_const((rng.standard_normal((128, 64)) * 0.1).astype(np.float32))
        b1 = f.load_const(rng.standard_normal(128).astype(np.float32))
        w2 = f.load_const((rng.standard_normal((64, 128)) * 0.1).astype(np.float32))
        b2 = f.load_const(rng.standard_normal(64).astype(np.float32))
        h = f.call("gelu", [f.call("linear", [x, w1, b1])])
        y = f.call("add", [f.call("linear", [h, w2, b2]), x])
        return f.call("layer_norm", [y], {"normalized_shape": (64,)})

    r = check(region(body, [("[48, 64]", "float32")]), rand((48, 64)), mem_optimize=True)
    assert kinds(r) == ["gemm", "elementwise", "gemm", "row"], r.lowered.kernels
    assert all("packed" in k for k in r.lowered.kernels if k.startswith("gemm")), r.lowered.kernels


def test_conv_bias_relu_residual():
    def body(f, x, w, b):
        return f.call("add", [f.call("relu", [f.call("conv2d", [x, w, b], {"padding": (1, 1)})]), x])

    r = check(
        region(body, [("[2, 16, 12, 12]", "float32"), ("[16, 16, 3, 3]", "float32"), ("[16]", "float32")]),
        rand((2, 16, 12, 12)),
        rand((16, 16, 3, 3)),
        rand((16,)),
    )
    assert kinds(r) == ["conv2d", "elementwise"], r.lowered.kernels


def test_reduction_inlines_its_producer():
    def body(f, x, y):
        return f.call("sum", [f.call("mul", [f.call("exp", [x]), y])], {"axis": (0, 2), "keepdims": True})

    r = check(region(body, [("[3, 4, 5]", "float32"), ("[5]", "float32")]), rand((3, 4, 5)), rand((5,)))
    assert kinds(r) == ["reduce"] and "exp" in r.lowered.kernels[0]


def test_shared_computed_value_is_materialised_once():
    def body(f, x):
        e = f.call("exp", [x])
        return f.call("add", [e, f.call("mul", [e, e])]), f.call("neg", [e])

    r = check(region(body, [("[4, 4]", "float32")]), rand((4, 4)))
    assert len(r.lowered.kernels) == 3  # exp stored once (into the first output's reads), two consumers


def test_contiguous_slice_is_a_memcpy():
    def body(f, x):
        return f.call("slice", [x], {"axes": (0,), "starts": (2,), "stops": (5,), "steps": (1,)})

    r = check(region(body, [("[8, 16]", "float32")]), rand((8, 16)))
    assert "llvm.memcpy" in r.disassemble("llvm") and "copy" in r.lowered.kernels[0]


def test_row_slice_copies_rows_with_memcpy():
    def body(f, x):
        return f.call("slice", [x], {"axes": (1,), "starts": (4,), "stops": (12,), "steps": (1,)})

    r = check(region(body, [("[5, 16]", "float64")]), rand((5, 16), "float64"))
    assert "llvm.memcpy" in r.disassemble("llvm")


def test_expensive_broadcast_operand_is_stored_not_recomputed():
    def body(f, x, y):
        return f.call("mul", [f.call("exp", [y]), x])  # exp(y) [16] would be recomputed for every row

    lowered = lower(region(body, [("[64, 16]", "float32"), ("[16]", "float32")]), "f")
    assert [k.split("[")[0] for k in lowered.kernels] == ["elementwise", "elementwise"]


def test_constant_subexpressions_are_folded():
    w = np.arange(12, dtype=np.float32).reshape(3, 4)

    def body(f, x):
        wt = f.call(
            "transpose", [f.call("mul", [f.load_const(w), f.load_const(np.float32(2))])], {"axes": (1, 0)}
        )
        return f.call("add", [x, wt])

    r = check(region(body, [("[4, 3]", "float32")]), rand((4, 3)))
    assert len(r.lowered.kernels) == 1 and r.lowered.kernels[0].endswith("= add"), r.lowered.kernels


def test_value_read_by_several_elementwise_ops_fuses_into_one_kernel():
    rng = np.random.default_rng(3)

    def body(f, x):  # W6: each step reads x twice; 40 steps are one loop nest, not 40 kernels
        for _ in range(40):
            c = f.load_const((rng.standard_normal((8, 8)) * 0.1 + 0.95).astype(np.float32))
            x = f.call(
                "maximum",
                [
                    f.call("add", [f.call("mul", [x, c]), f.load_const(np.float32(0.1))]),
                    f.call("sub", [x, f.load_const(np.float32(0.05))]),
                ],
            )
        return x

    r = check(region(body, [("[8, 8]", "float32")]), rand((8, 8)))
    assert kinds(r) == ["elementwise"], r.lowered.kernels


def test_shared_value_with_a_non_elementwise_reader_is_stored():
    def body(f, x):
        d = f.call("sub", [x, f.load_const(np.float32(0.5))])
        return f.call("add", [d, f.call("sum", [d], {"axis": -1, "keepdims": True})])

    r = check(region(body, [("[6, 16]", "float32")]), rand((6, 16)))
    assert kinds(r) == ["elementwise", "reduce", "elementwise"], r.lowered.kernels


def test_freeing_a_value_is_not_a_second_read():
    def body(f, x):
        e = f.call("mul", [x, x])
        y = f.call("add", [e, x])
        f.free(e)
        return y

    r = check(region(body, [("[5, 7]", "float32")]), rand((5, 7)))
    assert kinds(r) == ["elementwise"], r.lowered.kernels


def test_shared_chain_then_transpose_relayouts_each_node_once():
    def body(f, x):  # 30 doublings of a shared DAG: a transpose of it must not walk 2**30 paths
        for _ in range(30):
            x = f.call("add", [x, f.call("mul", [x, x])])
        return f.call("transpose", [x], {"axes": (1, 0)})

    r = check(region(body, [("[4, 6]", "float32")]), rand((4, 6), low=-0.01, high=0.01))
    assert kinds(r) == ["elementwise"], r.lowered.kernels


def test_attention_heads_are_written_in_place_of_the_transpose():
    rng = np.random.default_rng(4)

    def body(f, x):
        heads = []
        for _ in range(3):  # large enough for BLAS GEMMs
            w = f.load_const((rng.standard_normal((64, 64)) / 8).astype(np.float32))
            y = f.call("reshape", [f.call("matmul", [x, w])], {"shape": (-1, 4, 16)})
            heads.append(f.call("transpose", [y], {"axes": (1, 0, 2)}))
        a = f.call("scaled_dot_product_attention", heads)
        return f.call("reshape", [f.call("transpose", [a], {"axes": (1, 0, 2)})], {"shape": (-1, 64)})

    r = check(region(body, [("[48, 64]", "float32")]), rand((48, 64)))
    assert kinds(r) == ["gemm"] * 3 + ["gemm", "row", "gemm"], r.lowered.kernels  # no [4, L, 16] copy


def test_symbolic_rows_split_into_heads_stay_views():
    rng = np.random.default_rng(5)

    def body(f, x):
        qkv = f.call("matmul", [x, f.load_const((rng.standard_normal((64, 192)) / 8).astype(np.float32))])
        heads = []
        for i in range(3):  # [L, 64] column slices of [L, 192] as [4, L, 16] heads: views, not copies
            part = f.call("slice", [qkv], {"axes": (1,), "starts": (64 * i,), "stops": (64 * i + 64,)})
            heads.append(
                f.call("transpose", [f.call("reshape", [part], {"shape": (-1, 4, 16)})], {"axes": (1, 0, 2)})
            )
        return f.call("scaled_dot_product_attention", heads)

    m = region(body, [("[L, 64]", "float32")])
    r = compiled(m, bounds={"L": 80})
    for n in (80, 33, 1):
        x = rand((n, 64), rng=np.random.default_rng(n))
        assert_close(r.fn(x), interpret(m, x))
    assert kinds(r) == ["gemm", "gemm", "row", "gemm"], r.lowered.kernels


LANES = host.cpu()["vector_bits"] // 32  # float32 lanes of a vector register


@pytest.mark.parametrize(
    "steps, n, registers",
    [(3, 8 * LANES, None), (12, 8 * LANES, CHAIN_VECTORS), (12, 6 * LANES + 1, 2), (12, 2 * LANES - 1, None),
     (80, 8 * LANES, 2)],
)
def test_long_chains_run_vectors_side_by_side_within_a_compile_budget(steps, n, registers):
    """A chain deep enough to be latency-bound is vectorised several registers wide, but never so wide
    for a very long chain that compile time explodes, nor wider than a short constant loop fits."""

    def body(f, x):
        for _ in range(steps):
            x = f.call("maximum", [f.call("mul", [x, x]), f.call("sub", [x, f.load_const(np.float32(0.5))])])
        return x

    m = region(body, [(f"[{n}]", "float32")])
    width = re.search(r'"llvm.loop.vectorize.width", i32 (\d+)', lower(m, "f").ir)
    assert (int(width.group(1)) if width else None) == (registers and registers * LANES)
    x = rand((n,), low=-0.9, high=0.9)
    assert_close(compiled(m).fn(x), interpret(m, x))
