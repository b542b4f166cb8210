"""Buckets of one region share its object code: the bounds reach the code only through its table."""

from __future__ import annotations

from codegen_helpers import assert_close, interpret, rand, region

from msvm.msjit.codegen import compile_region


def _body(f, x, w):
    h = f.call("relu", [f.call("matmul", [x, w])])  # N×48 in the arena
    return f.call("softmax", [f.call("matmul", [f.call("transpose", [h]), h])], {"axis": -1})


def _module():
    return region(_body, [("[N, 64]", "float32"), ("[64, 48]", "float32")])


def test_the_next_bucket_shares_the_first_ones_code_with_its_own_arena():
    m = _module()
    small = compile_region(m, "f", name="shared_a", bounds={"N": 16}, mem_optimize=True, share=101)
    large = compile_region(m, "f", name="shared_b", bounds={"N": 4096}, mem_optimize=True, share=101)
    assert small.code_from is None and large.code_from == "shared_a"
    assert large.lowered.ir.replace("shared_b", "shared_a") == small.lowered.ir
    assert large.phase_ms["optimise"] == 0.0 and large.phase_ms["codegen"] == 0.0  # no LLVM build
    assert large.lowered.planned_bytes > small.lowered.planned_bytes  # each bucket's own memory plan
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
