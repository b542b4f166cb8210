"""Memory planning: planned ≤ naive, no two live buffers share bytes, and results do not depend on it."""

import numpy as np
import pytest
from codegen_helpers import assert_close, compiled, interpret, rand, region

from msvm.msjit.codegen import lower
from msvm.msjit.codegen.memplan import ALIGN


def _pipeline(f, x, w):
    """Several intermediates that must live in memory, with staggered lifetimes."""
    e = f.call("exp", [f.call("mul", [x, f.load_const(np.float32(0.1))])])
    a = f.call("matmul", [e, w])  # GEMM operand e and result a
    s = f.call("softmax", [a], {"axis": -1})
    b = f.call("matmul", [s, f.call("transpose", [w], {"axes": (1, 0)})])
    c = f.call("add", [b, e])  # e lives until here
    d = f.call("matmul", [f.call("relu", [c]), w])
    return f.call("add", [f.call("sum", [d], {"axis": 0}), f.call("max", [a], {"axis": 0})])


def _check_plan(lowered):
    placements = lowered.placements
    assert lowered.planned_bytes <= lowered.naive_bytes
    for p in placements:
        assert p.offset % ALIGN == 0 and p.size % ALIGN == 0
        assert p.offset + p.size <= lowered.planned_bytes
    for i, p in enumerate(placements):
        for q in placements[i + 1 :]:
            assert not p.overlaps(q), (p, q)


@pytest.mark.parametrize("spec,bounds", [("[48, 64]", None), ("[N, 64]", {"N": 80})])
def test_plan_is_valid_and_smaller(spec, bounds):
    m = region(_pipeline, [(spec, "float32"), ("[64, 64]", "float32")])
    naive = lower(m, "f", bounds=bounds)
    planned = lower(m, "f", bounds=bounds, mem_optimize=True)
    _check_plan(naive)
    _check_plan(planned)
    assert naive.planned_bytes == naive.naive_bytes
    assert planned.naive_bytes == naive.naive_bytes
    assert planned.planned_bytes < naive.naive_bytes
    assert len(planned.placements) >= 4


@pytest.mark.parametrize("spec,bounds,rows", [("[48, 64]", None, [48]), ("[N, 64]", {"N": 80}, [1, 47, 80])])
def test_results_do_not_depend_on_the_plan(spec, bounds, rows):
    m = region(_pipeline, [(spec, "float32"), ("[64, 64]", "float32")])
    plain = compiled(m, bounds=bounds)
    packed = compiled(m, bounds=bounds, mem_optimize=True)
    w = rand((64, 64), low=-0.2, high=0.2)
    for n in rows:
        x = rand((n, 64), rng=np.random.default_rng(n))
        want = interpret(m, x, w)
        assert_close(plain.fn(x, w), want)
        assert_close(packed.fn(x, w), want)


def test_scratch_lives_only_during_its_kernel():
    def body(f, x, w):  # an im2col scratch, then a row kernel with a row scratch
        c = f.call("conv2d", [x, w], {"padding": (1, 1)})
        return f.call("layer_norm", [f.call("gelu", [c])], {"normalized_shape": (8,)})

    lowered = lower(
        region(body, [("[2, 16, 8, 8]", "float32"), ("[16, 16, 3, 3]", "float32")]), "f", mem_optimize=True
    )
    _check_plan(lowered)
    spans = {p.name: (p.first, p.last) for p in lowered.placements}
    cols = [s for name, s in spans.items() if name.startswith("cols")]
    assert cols and all(first == last for first, last in cols)
