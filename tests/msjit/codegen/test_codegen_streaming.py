"""Large results of row kernels are written with non-temporal stores: a one-dim row as it is computed,
a wider one through the row scratch."""

import re

import pytest
from codegen_helpers import assert_close, check, compiled, interpret, rand, region

from msvm.msjit.codegen.emit_reduce import STREAM_MIN_BYTES


def _norm(f, x, w):
    return f.call("layer_norm", [f.call("add", [f.call("gelu", [x]), x]), w], {"normalized_shape": (1003,)})


def test_large_result_streams_rows_of_every_alignment():
    rows = STREAM_MIN_BYTES // (4 * 1003) + 5  # 1003 floats a row: every row starts at another offset
    r = check(
        region(_norm, [(f"[{rows}, 1003]", "float32"), ("[1003]", "float32")]),
        rand((rows, 1003)),
        rand((1003,)),
    )
    assert "!nontemporal" in r.disassemble("llvm")


def test_plain_layer_norm_of_an_input_gets_a_scratch_to_stream_from():
    rows = STREAM_MIN_BYTES // (8 * 512) + 1

    def body(f, x):
        return f.call("layer_norm", [x], {"normalized_shape": (512,)})

    r = check(region(body, [(f"[{rows}, 512]", "float64")]), rand((rows, 512), "float64"))
    assert "!nontemporal" in r.disassemble("llvm")


def test_small_or_symbolic_results_are_stored_plainly():
    r = check(
        region(_norm, [("[16, 1003]", "float32"), ("[1003]", "float32")]), rand((16, 1003)), rand((1003,))
    )
    assert "!nontemporal" not in r.disassemble("llvm")
    m = region(_norm, [("[N, 1003]", "float32"), ("[1003]", "float32")])
    r = compiled(m, bounds={"N": 4096})
    x, w = rand((1500, 1003)), rand((1003,))
    assert_close(r.fn(x, w), interpret(m, x, w))
    assert "!nontemporal" not in r.disassemble("llvm")


def test_one_dim_rows_are_computed_a_vector_at_a_time_as_they_stream():
    rows = STREAM_MIN_BYTES // (4 * 1003) + 5
    r = check(
        region(_norm, [(f"[{rows}, 1003]", "float32"), ("[1003]", "float32")]),
        rand((rows, 1003)),
        rand((1003,)),
    )
    assert r.lowered.slp  # the lanes the final sweep builds one by one ...
    optimised = r.disassemble("llvm-opt")
    assert not re.search(r"insertelement <8 x float> %\S+, float %\S+, i64 [1-7]", optimised)  # ... became
    assert re.search(r"store <8 x float> .*!nontemporal", optimised)  # vector code stored as it is computed


def test_wider_rows_stream_out_of_the_scratch():
    rows = STREAM_MIN_BYTES // (4 * 4 * 251) + 3

    def body(f, x):
        return f.call("layer_norm", [f.call("gelu", [x])], {"normalized_shape": (4, 251)})

    r = check(region(body, [(f"[{rows}, 4, 251]", "float32")]), rand((rows, 4, 251)))
    assert not r.lowered.slp
    assert "!nontemporal" in r.disassemble("llvm")


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_streamed_softmax_rows_of_every_alignment(op):
    rows = STREAM_MIN_BYTES // (4 * 1003) + 5

    def body(f, x):
        # a producer and an epilogue fused: not the native job
        return f.call("mul", [f.call(op, [f.call("mul", [x, x])], {"axis": -1}), x])

    r = check(region(body, [(f"[{rows}, 1003]", "float32")]), rand((rows, 1003)))
    assert r.lowered.slp and "!nontemporal" in r.disassemble("llvm")
