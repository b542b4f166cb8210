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
    assert b.ir.replace("bucket_b", "bucket_a") == a.ir and b.loop_ir == a.loop_ir  # what sharing relies on
    if case != "rows":  # (whose row kernels need no more arena for more rows)
        assert b.planned_bytes > a.planned_bytes and a.numbers() != b.numbers()  # each bucket's own plan


def _module():
    return region(_gemms, REGIONS["gemms"][1])


SHAPES = {  # inputs within the small bucket, then within the large one
    "gemms": ([(9, 64), (64, 48)], [(3000, 64), (64, 48)]),
    "rows": ([(11, 64), (64,)], [(20000, 64), (64,)]),
    "resnet": ([(1, 3, 16, 13)], [(9, 3, 40, 64)]),
}


@pytest.mark.parametrize("case", REGIONS)
def test_the_next_bucket_shares_the_first_ones_code_with_its_own_arena(case):
    body, inputs, small, large = REGIONS[case]
    m = region(body, inputs)
    share = 100 + list(REGIONS).index(case)
    first = compile_region(m, "f", name="shared_a", bounds=small, mem_optimize=True, share=share)
    second = compile_region(m, "f", name="shared_b", bounds=large, mem_optimize=True, share=share)
    assert first.code_from is None and second.code_from == "shared_a"
    assert second.phase_ms["optimise"] == 0.0 and second.phase_ms["codegen"] == 0.0  # no LLVM build
    for r, shapes in zip((first, second), SHAPES[case]):
        args = [rand(shape) for shape in shapes]
        assert_close(r.fn(*args), interpret(m, *args))


def test_another_share_generation_builds_its_own_code():
    m = _module()
    first = compile_region(m, "f", name="gen_a", bounds={"N": 16}, share=102)
    again = compile_region(m, "f", name="gen_b", bounds={"N": 64}, share=103)
    assert first.code_from is None and again.code_from is None
    assert again.phase_ms["optimise"] > 0.0
