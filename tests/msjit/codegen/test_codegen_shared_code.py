"""Buckets of one region share its IR and object code: the bounds reach the code only through its table."""

from __future__ import annotations

import pytest
from codegen_helpers import assert_close, interpret, rand, region
from test_codegen_conv import _resnet, _resnet_params

from msvm.msjit.codegen import compile_region
from msvm.msjit.codegen.region import lower


def _gemms(f, x, w):
    h = f.call("relu", [f.call("matmul", [x, w])])  # N×48 in the arena, a per-thread panel scratch
    return f.call("softmax", [f.call("matmul", [f.call("transpose", [h]), h])], {"axis": -1})


def _rows(f, x, w):
    y = f.call("layer_norm", [f.call("gelu", [f.call("add", [x, w])])], {"normalized_shape": (64,)})
    return f.call("sub", [y, f.call("sum", [y], {"axis": 0})])


_PARAMS = _resnet_params("float32")
REGIONS = {
    "gemms": (_gemms, [("[N, 64]", "float32"), ("[64, 48]", "float32")], {"N": 16}, {"N": 4096}),
    "rows": (_rows, [("[N, 64]", "float32"), ("[64]", "float32")], {"N": 16}, {"N": 50000}),
    "resnet": (lambda f, x: _resnet(_PARAMS, f, x), [("[N, 3, H, W]", "float32")],
               {"N": 1, "H": 16, "W": 16}, {"N": 16, "H": 64, "W": 64}),
}


@pytest.mark.parametrize("case", REGIONS)
def test_a_region_lowers_to_one_ir_for_every_bucket(case):
    body, inputs, small, large = REGIONS[case]
    m = region(body, inputs)
    a = lower(m, "f", name="bucket_a", bounds=small, mem_optimize=True)
    b = lower(m, "f", name="bucket_b", bounds=large, mem_optimize=True)
    assert b.ir.replace("bucket_b", "bucket_a") == a.ir  # the contract the shared code relies on
    if case != "rows":  # (whose row kernels need no more arena for more rows)
        assert b.planned_bytes > a.planned_bytes and a.numbers() != b.numbers()  # each bucket's own plan


def _module():
    return region(_gemms, REGIONS["gemms"][1])


def test_the_next_bucket_shares_the_first_ones_code_with_its_own_arena():
    m = _module()
    small = compile_region(m, "f", name="shared_a", bounds={"N": 16}, mem_optimize=True, share=101)
    large = compile_region(m, "f", name="shared_b", bounds={"N": 4096}, mem_optimize=True, share=101)
    assert small.code_from is None and large.code_from == "shared_a"
    assert large.phase_ms["optimise"] == 0.0 and large.phase_ms["codegen"] == 0.0  # no LLVM build
    assert large.lowered.planned_bytes > small.lowered.planned_bytes
    w = rand((64, 48))
    for r, n in ((small, 16), (large, 3000), (small, 5), (large, 17)):
        x = rand((n, 64))
        assert_close(r.fn(x, w), interpret(m, x, w))


def test_another_share_generation_builds_its_own_code():
    m = _module()
    first = compile_region(m, "f", name="gen_a", bounds={"N": 16}, share=102)
    again = compile_region(m, "f", name="gen_b", bounds={"N": 64}, share=103)
    assert first.code_from is None and again.code_from is None
    assert again.phase_ms["optimise"] > 0.0
