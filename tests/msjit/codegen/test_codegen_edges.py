"""Corner cases: empty and rank-0 tensors, returned inputs and constants, the allocation opcodes."""

import numpy as np
from codegen_helpers import assert_close, check, compiled, interpret, rand, region

from msvm.bytecode import ModuleBuilder, RegRef


def test_empty_tensors():
    def body(f, x, w):
        return (
            f.call("exp", [x]),
            f.call("matmul", [x, w]),
            f.call("sum", [x], {"axis": 0}),
            f.call("softmax", [x]),
        )

    check(region(body, [("[0, 4]", "float32"), ("[4, 300]", "float32")]), rand((0, 4)), rand((4, 300)))
    m = region(body, [("[N, 4]", "float32"), ("[4, 300]", "float32")])
    r = compiled(m, bounds={"N": 40})
    for n in (0, 40):
        assert_close(r.fn(rand((n, 4)), rand((4, 300))), interpret(m, rand((n, 4)), rand((4, 300))))


def test_empty_contraction_gives_zeros():
    def body(f, a, b):
        return f.call("matmul", [a, b])

    m = region(body, [("[64, K]", "float32"), ("[K, 64]", "float32")])
    r = compiled(m, bounds={"K": 100})
    for k in (0, 100):
        assert_close(r.fn(rand((64, k)), rand((k, 64))), interpret(m, rand((64, k)), rand((k, 64))))


def test_rank_zero_values():
    def body(f, x, s):
        return f.call("add", [x, s]), f.call("sum", [s]), f.call("mul", [f.call("max", [x]), s])

    check(region(body, [("[3]", "float64"), ("[]", "float64")]), rand((3,), "float64"), np.array(2.5))


def test_returned_inputs_and_constants_are_copies():
    k = np.arange(6.0).reshape(2, 3)

    def body(f, x):
        return x, f.load_const(k), f.load_const(np.float32(3))

    m = region(body, [("[2, 3]", "float32")])
    x = rand((2, 3))
    got = compiled(m).fn(x)
    assert_close(got, interpret(m, x))
    assert got[0] is not x and got[0].flags.writeable and got[1].flags.writeable


def test_allocation_and_resize_opcodes():
    mb = ModuleBuilder("t")
    f = mb.function("f", ["x"])
    x = f.tensor_input(0, "[N, 6]", "float32")
    n = f.shape_of(x, 0)
    two = f.scalar_const(2)
    zeros = f.tensor_alloc([n, two], "float64")
    created = f.tensor_zeros("[N, 3]", "int32")
    flat = f.resize(x, [f.scalar_const(-1), f.scalar_const(3)])
    rows = f.scalar_op("mul", n, two)
    moved = f.call("reshape", [flat], {"shape": (RegRef(rows), 3)})
    f.free(flat)
    f.ret(zeros, created, f.call("add", [moved, f.load_const(np.float32(1))]))
    m = mb.build()
    r = compiled(m, bounds={"N": 16})
    for size in (1, 16):
        assert_close(r.fn(rand((size, 6))), interpret(m, rand((size, 6))))


def test_no_outputs_returns_none():
    assert compiled(region(lambda f, x: (), [("[2]", "float32")])).fn(rand((2,))) is None
