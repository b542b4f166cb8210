"""Large results of row kernels are written with non-temporal stores, through the row scratch."""

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
