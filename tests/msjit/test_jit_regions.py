"""Region formation, splits, and a region as a standalone function: native and interpreted runs agree."""

# ms.Tensor["N", 3] reads to linters as string forward references: F821 is noise here.
# ruff: noqa: F821

import numpy as np

import msvm as ms
from msvm.bytecode import ModuleBuilder, RegRef
from msvm.frontend import Tensor, jit
from msvm.interpreter import Program
from msvm.msjit.cache import CachePolicy, plan_keys
from msvm.msjit.regions import analyze_executable, build_function, def_use, region_io
from msvm.options import JitOptions
from msvm.verifier import verify_module


@jit
def int_power(x: Tensor["N", 4, "int64"], e: Tensor["N", 4, "int64"]):
    y = x * 2 + e
    z = y ** e  # integer pow: numpy raises on negative exponents, native code cannot — stays interpreted
    return z - 1


def test_an_unlowerable_op_splits_the_region_and_says_why() -> None:
    x = np.arange(8, dtype=np.int64).reshape(2, 4)
    e = np.full((2, 4), 2, np.int64)
    analysis = ms.vm.scd_analysis(int_power, x, e)
    (split,) = analysis.splits
    assert split.kind == "unlowerable" and split.opcode == "OP_CALL pow"
    assert "no native lowering" in split.reason and "negative exponents" in split.reason
    before, after = analysis.regions
    assert before.end < split.address < after.start and before.compilable and after.compilable
    for _ in range(4):
        np.testing.assert_array_equal(int_power(x, e), int_power.py_func(x, e))
    assert ms.vm.wait_for_compiles(60)
    assert sorted(e["region"] for e in ms.vm.jit_info()) == [0, 1]
    assert all(e["status"] == "compiled" for e in ms.vm.jit_info())
    np.testing.assert_array_equal(int_power(x, e), int_power.py_func(x, e))
    assert sum(e["hits"] for e in ms.vm.jit_info()) == 2


def two_regions() -> ModuleBuilder:
    """bb0: region A (mul, slice by a scalar) | CMP | region B (add, free of A's tensor, scalar math)."""
    mb = ModuleBuilder("m")
    f = mb.function("f", ["x", "h"])
    x = f.tensor_input(0, "[N, 8]", "float32")
    h = f.scalar_arg(1, "h")
    two = f.load_const(np.float32(2.0))
    y = f.call("mul", [x, two])
    s = f.call("slice", [y], {"axes": (0,), "starts": (0,), "stops": (RegRef(h),)})
    n = f.shape_of(x, 0)
    f.cmp("gt", n, h)  # a run-time bool: splits the block into two regions
    z = f.call("add", [s, two])
    f.free(y)
    m = f.scalar_op("mul", n, f.scalar_const(3))
    w = f.call("exp", [z])
    f.ret(w, m, two, z)
    return mb


def test_region_inputs_outputs_and_standalone_functions() -> None:
    exe = Program(two_regions().build()).function("f")
    analysis = analyze_executable(exe)
    a, b = analysis.regions
    assert [s.opcode for s in analysis.splits] == ["CMP"] and a.compilable and b.compilable
    facts = def_use(exe.info)
    io_a, io_b = region_io(a, exe.info, facts), region_io(b, exe.info, facts)
    assert io_a.tensor_inputs == (0,) and io_a.scalar_params == (1,) and io_a.clones == ()
    # y (freed in B), the slice and N leave A; the constant is recomputed after native code, not returned
    assert io_a.live_outs == (3, 4, 5) and [i.name for i in io_a.remat] == ["LOAD_CONST"]
    assert io_b.tensor_inputs == (4,) and io_b.outer_frees == (3,)
    assert [i.name for i in io_b.clones] == ["LOAD_CONST"]  # constants are cloned in, never passed
    # N*3 feeds no tensor op: it stays with the interpreter, so N is not a run-time scalar of B
    assert io_b.scalar_params == () and [i.name for i in io_b.detached] == ["SCALAR_CONST", "SCALAR_OP"]
    for region, io in ((a, io_a), (b, io_b)):
        plan = plan_keys(io, exe.info)
        key = tuple(((5, 8) if kind == "tensor" else 3) for kind, _ in plan.components)
        for mode in ("exact", "bucket"):
            policy = CachePolicy(JitOptions(cache_mode=mode, bucket_boundaries=(8,)), plan)
            specs, scalars, bounds = policy.parameters(policy.cache_key(key), key)
            module = build_function(region, io, exe.info, exe.program.module, specs, scalars, "r")
            verify_module(module)
            if mode == "exact":
                assert bounds == {} and all(spec.is_static for spec in specs)
            else:
                assert bounds and not all(spec.is_static for spec in specs)


def test_native_and_interpreted_runs_agree_across_regions_and_shapes() -> None:
    jitted = Program(two_regions().build()).function("f")
    oracle = Program(two_regions().build(), {"jit": False}).function("f")
    assert oracle.jit.dispatch == [] and len(jitted.jit.dispatch) == 2
    rng = np.random.default_rng(3)
    for n, h in [(5, 3), (5, 3), (5, 3), (6, 2), (6, 2), (6, 2), (5, 3), (6, 2), (5, 3)]:
        if n == 6 and h == 2:
            ms.vm.wait_for_compiles(60)
        x = rng.random((n, 8), dtype=np.float32)
        got, want = jitted(x, h), oracle(x, h)
        assert isinstance(got[1], int) and got[1] == want[1]
        for g, w in zip(got[::2] + got[3:], want[::2] + want[3:]):
            np.testing.assert_allclose(g, w, rtol=1e-6)
    assert ms.vm.wait_for_compiles(60)
    info = ms.vm.jit_info()
    assert len(info) == 4 and all(e["status"] == "compiled" for e in info), [e["reason"] for e in info]
    assert sum(e["hits"] for e in info) >= 4
    assert "h3" in info[0]["name"] and "N5" in info[0]["name"]


def loop_module() -> ModuleBuilder:
    """A loop whose body is one region: acc = relu(acc * x + 1) for i in range(k)."""
    mb = ModuleBuilder("loop")
    f = mb.function("f", ["x", "k"])
    x = f.tensor_input(0, "[N, 4]", "float32")
    k = f.scalar_arg(1, "k")
    zero = f.scalar_const(0)
    one_s = f.scalar_const(1)
    one = f.load_const(np.float32(1.0))
    head, body, done = f.new_block(), f.new_block(), f.new_block()
    f.jmp(head)
    f.set_block(head)
    i = f.new_reg()
    acc = f.new_reg()
    f.emit("SCALAR_PHI", i, [(0, zero), (body, 0)])
    f.emit("TENSOR_PHI", acc, [(0, x), (body, 0)])
    f.br(f.cmp("lt", i, k), body, done)
    f.set_block(body)
    nxt = f.call("relu", [f.call("add", [f.call("mul", [acc, x]), one])])
    i2 = f.scalar_op("add", i, one_s)
    f.jmp(head)
    block = f.function.blocks
    block[head].instructions[0].args = (i, ((0, zero), (body, i2)))
    block[head].instructions[1].args = (acc, ((0, x), (body, nxt)))
    f.set_block(done)
    f.ret(acc)
    return mb


def test_a_region_in_a_loop_body_compiles_and_runs_native_on_later_iterations() -> None:
    jitted = Program(loop_module().build()).function("f")
    oracle = Program(loop_module().build(), {"jit": False}).function("f")
    x = np.random.default_rng(4).random((3, 4), dtype=np.float32) * 0.5
    np.testing.assert_allclose(jitted(x, 5), oracle(x, 5), rtol=1e-5)
    assert ms.vm.wait_for_compiles(60)
    np.testing.assert_allclose(jitted(x, 5), oracle(x, 5), rtol=1e-5)
    (entry,) = ms.vm.jit_info()
    assert entry["status"] == "compiled" and entry["hits"] == 5
