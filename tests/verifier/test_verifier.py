"""The verifier on valid programs, on modules with many mistakes, and on random mutations of valid programs.

Valid programs check what the verifier proves: types, symbolic shapes through SHAPE_PROPAGATE,
SCALAR_OP, TENSOR_ALLOC and TENSOR_RESIZE, ``?`` where branches merge different shapes, loop phis, and
the run-time guards it records for equalities it cannot prove. The mutation tests take those programs
apart operand by operand: ``check_module`` must answer (diagnostics or ``[]``) and never raise, and a
mutant that still verifies must run on inputs matching its declarations without a structural failure
inside the interpreter (DESIGN §4: a module that verifies cannot make the interpreter fail on one).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from msvm.bytecode.builder import ModuleBuilder
from msvm.bytecode.module import Function, Instruction, Module, RegRef
from msvm.bytecode.opcodes import DEVICES, DTYPES, PREDICATES, SCALAR_OPS, Kind
from msvm.bytecode.text import assemble
from msvm.context import get_context, set_context
from msvm.errors import MsvmError, VerifyError
from msvm.interpreter import Program
from msvm.ops.registry import REGISTRY, TensorType
from msvm.shapes import UNKNOWN, Dim, ShapeSpec, parse_shape
from msvm.verifier import (
    BOOL,
    ModuleInfo,
    ScalarType,
    analyze_module,
    check_module,
    infer_types,
    verify_module,
)

N, H, W, K, M, B, S = (Dim.sym(s) for s in "NHWKMBS")
INVALID = Path(__file__).resolve().parent.parent / "data" / "invalid"
INTERPRETED = {"jit": False}  # the interpreter alone: its generated code and reference kernels


def shape(text: str) -> ShapeSpec:
    return parse_shape(text)


# ------------------------------------------------------------------------------------ valid programs
# Each builder returns the module and the registers the tests look at, by name.
Built = tuple[Module, dict[str, int]]


def straight_line() -> Built:
    """[N, 3, H, W] -> an allocation of [N, 3, H*2, W] from scalars, added to a concat of the same shape."""
    mb = ModuleBuilder("straight_line")
    f = mb.function("upsample", ("x", "k"))
    x = f.tensor_input(0, "[N, 3, H, W]", "float32")
    k = f.scalar_arg(1, "K")
    n, h, w = f.shape_of(x, 0), f.shape_of(x, 2), f.shape_of(x, 3)
    three, two = f.scalar_const(3), f.scalar_const(2)
    h2 = f.scalar_op("mul", h, two)
    alloc = f.tensor_alloc((n, three, h2, w), "float32")
    cat = f.call("concat", (x, x), {"axis": 2})
    total = f.call("add", (alloc, cat))
    half = f.load_const(np.float32(0.5))
    scaled = f.call("mul", (total, half))
    hk = f.scalar_op("add", h2, k)
    big = f.cmp("gt", hk, n)
    f.ret(scaled, hk)
    regs = dict(
        x=x,
        k=k,
        n=n,
        h=h,
        w=w,
        h2=h2,
        alloc=alloc,
        cat=cat,
        total=total,
        half=half,
        scaled=scaled,
        hk=hk,
        big=big,
    )
    return mb.build(), regs


def branch_merge() -> Built:
    """if N > 8: y = concat(x, x) [N*2, 4] else y = relu(x) [N, 4]; the merge is [?, 4]."""
    mb = ModuleBuilder("branch_merge")
    f = mb.function("f", ("x",))
    x = f.tensor_input(0, "[N, 4]", "float32")
    n = f.shape_of(x, 0)
    eight, two = f.scalar_const(8), f.scalar_const(2)
    cond = f.cmp("gt", n, eight)
    then, other, join = f.new_block(), f.new_block(), f.new_block()
    f.br(cond, then, other)
    f.set_block(then)
    doubled = f.call("concat", (x, x), {"axis": 0})
    n2 = f.scalar_op("mul", n, two)
    f.jmp(join)
    f.set_block(other)
    relu = f.call("relu", (x,))
    f.jmp(join)
    f.set_block(join)
    merged = f.tensor_phi([(then, doubled), (other, relu)])
    same = f.tensor_phi([(then, x), (other, relu)])
    rows = f.scalar_phi([(then, n2), (other, n)])
    equal = f.scalar_phi([(then, n), (other, n)])
    total = f.call("sum", (merged,), {"axis": 0})
    f.ret(merged, same, total, rows, equal)
    return mb.build(), dict(x=x, merged=merged, same=same, rows=rows, equal=equal, total=total)


def loops() -> Built:
    """for i in range(k): acc = -acc + x (via a freed temporary); grow = concat(grow, x): loop-header phis."""
    mb = ModuleBuilder("loops")
    f = mb.function("f", ("x", "k"))
    x = f.tensor_input(0, "[N]", "float32")
    k = f.scalar_arg(1, "K")
    zero, one = f.scalar_const(0), f.scalar_const(1)
    kept = f.call("relu", (x,))
    header, body, done = f.new_block(), f.new_block(), f.new_block()
    f.jmp(header)
    f.set_block(header)
    i, acc, grow = f.new_reg(), f.new_reg(), f.new_reg()
    i1, acc1, grow1 = f.new_reg(), f.new_reg(), f.new_reg()
    f.emit("SCALAR_PHI", i, ((0, zero), (body, i1)))
    f.emit("TENSOR_PHI", acc, ((0, x), (body, acc1)))
    f.emit("TENSOR_PHI", grow, ((0, x), (body, grow1)))
    more = f.cmp("lt", i, k)
    f.br(more, body, done)
    f.set_block(body)
    tmp = f.call("neg", (acc,))
    f.emit("OP_CALL", "add", (acc1,), (tmp, x), {})
    f.free(tmp)
    f.emit("OP_CALL", "concat", (grow1,), (grow, x), {"axis": 0})
    f.emit("SCALAR_OP", i1, "add", i, one)
    f.jmp(header)
    f.set_block(done)
    f.ret(acc, grow, i, kept)
    return mb.build(), dict(x=x, k=k, i=i, acc=acc, grow=grow, i1=i1, acc1=acc1, grow1=grow1, tmp=tmp)


def two_functions() -> Built:
    """Two independent functions in one module: a linear layer and a softmax with a free."""
    mb = ModuleBuilder("two_functions")
    f = mb.function("encode", ("x", "w", "b"))
    x = f.tensor_input(0, "[B, S, 64]", "float32")
    w = f.tensor_input(1, "[32, 64]", "float32")
    b = f.tensor_input(2, "[32]", "float32")
    y = f.call("linear", (x, w, b))
    f.ret(f.call("relu", (y,)))
    g = mb.function("decode", ("h",))
    h = g.tensor_input(0, "[B, 32]", "float32")
    e = g.call("exp", (h,))
    p = g.call("softmax", (e,), {"axis": -1})
    g.free(e)
    g.ret(p)
    return mb.build(), dict(y=y, p=p)


def resizes() -> Built:
    """TENSOR_RESIZE with -1: [B, S, 64] -> (-1, 64) is [B*S, 64]; [N, 16] -> (-1, 8) is [N*2, 8]."""
    mb = ModuleBuilder("resizes")
    f = mb.function("f", ("x", "y"))
    x = f.tensor_input(0, "[B, S, 64]", "float32")
    y = f.tensor_input(1, "[N, 16]", "float32")
    minus, c64, c8 = f.scalar_const(-1), f.scalar_const(64), f.scalar_const(8)
    flat = f.resize(x, (minus, c64))
    pairs = f.resize(y, (minus, c8))
    rows = f.shape_of(flat, 0)
    back = f.resize(flat, (f.shape_of(x, 0), f.shape_of(x, 1), c64))
    f.ret(flat, pairs, back, rows)
    return mb.build(), dict(flat=flat, pairs=pairs, back=back, rows=rows)


def guarded() -> Built:
    """Equalities only run time can decide: N vs M in a broadcast, N*4 vs K in a resize."""
    mb = ModuleBuilder("guarded")
    f = mb.function("f", ("x", "y", "k"))
    x = f.tensor_input(0, "[N, 4]", "float32")
    y = f.tensor_input(1, "[M, 4]", "float32")
    k = f.scalar_arg(2, "K")
    s = f.call("add", (x, y))
    r = f.resize(x, (k,))
    f.ret(s, r)
    return mb.build(), dict(s=s, r=r)


def data_dependent() -> Built:
    """nonzero and masked_select have ``?`` sizes; a slice bound comes from a scalar register."""
    mb = ModuleBuilder("data_dependent")
    f = mb.function("f", ("x", "n"))
    x = f.tensor_input(0, "[R, C]", "float32")
    n = f.scalar_arg(1, "L")
    zero = f.load_const(np.float32(0.0))
    mask = f.call("greater", (x, zero))
    picked = f.call("masked_select", (x, mask))
    where = f.call("nonzero", (mask,))
    head = f.call("slice", (x,), {"axes": (1,), "starts": (0,), "stops": (RegRef(n),)})
    f.ret(picked, where, head)
    return mb.build(), dict(picked=picked, where=where, head=head, mask=mask)


def op_zoo() -> Built:
    """Many ops in a row, several with attributes that name scalar registers, and zeros of an input shape."""
    mb = ModuleBuilder("op_zoo")
    f = mb.function("f", ("x",))
    x = f.tensor_input(0, "[N, 6]", "float32")
    n = f.shape_of(x, 0)
    idx = f.call("arange", (), {"stop": RegRef(n)})
    rows = f.call("take", (x, idx), {"axis": 0})
    a, b = f.call("split", (rows,), {"sections": 2, "axis": 1}, n_out=2)
    picked = f.call("where", (f.call("greater", (a, b)), a, b))
    wide = f.call("cast", (picked,), {"dtype": "float64"})
    avg = f.call("mean", (wide,), {"axis": 1, "keepdims": True})
    ones = f.call("full", (), {"shape": (RegRef(n), 1), "fill_value": 1.5, "dtype": "float64"})
    col = f.call("add", (avg, ones))
    flat = f.call("reshape", (f.call("unsqueeze", (col,), {"axis": 0}),), {"shape": (RegRef(n), -1)})
    padded = f.call("pad", (flat,), {"pads": (1, 1)})
    probs = f.call("softmax", (padded,), {"axis": -1})
    zeros = f.tensor_zeros("[N, 6]", "float32")
    both = f.call("concat", (x, zeros), {"axis": 1})
    f.ret(probs, f.call("transpose", (both,)))
    regs = dict(idx=idx, rows=rows, a=a, picked=picked, avg=avg, flat=flat, padded=padded, both=both)
    return mb.build(), regs


PROGRAMS: dict[str, Callable[[], Built]] = {
    fn.__name__: fn
    for fn in (straight_line, branch_merge, loops, two_functions, resizes, guarded, data_dependent, op_zoo)
}


def types_of(module: Module, function: str) -> list:
    return verify_module(module).functions[function].types


@pytest.mark.parametrize("name", PROGRAMS)
def test_valid_program_verifies(name: str):
    module, _ = PROGRAMS[name]()
    assert check_module(module) == []
    info = verify_module(module)
    assert list(info.functions) == [fn.name for fn in module.functions]
    for fn in module.functions:
        fi = info.functions[fn.name]
        assert fi.function is fn
        written = {r for _, _, ins in fn.instructions() for r in ins.writes()}
        assert {r for r, t in enumerate(fi.types) if t is not None} == written  # every register typed


def test_straight_line_symbolic_shapes():
    module, r = straight_line()
    t = types_of(module, "upsample")
    assert t[r["x"]] == TensorType(shape("[N, 3, H, W]"), "float32")
    assert t[r["k"]] == ScalarType(K)
    assert t[r["h"]] == ScalarType(H) and t[r["w"]] == ScalarType(W)
    assert t[r["h2"]] == ScalarType(H * 2)
    assert t[r["alloc"]] == TensorType(shape("[N, 3, H*2, W]"), "float32")
    assert t[r["cat"]] == TensorType(shape("[N, 3, H*2, W]"), "float32")
    assert t[r["total"]] == t[r["scaled"]] == TensorType(shape("[N, 3, H*2, W]"), "float32")
    assert t[r["half"]] == TensorType(shape("[]"), "float32")
    assert t[r["hk"]] == ScalarType(H * 2 + K)
    assert t[r["big"]] == BOOL
    assert verify_module(module).functions["upsample"].guards == {}  # every equality was proved


def test_branches_merging_different_shapes_give_unknown_dims():
    module, r = branch_merge()
    t = types_of(module, "f")
    assert t[r["merged"]] == TensorType(ShapeSpec.of([UNKNOWN, 4]), "float32")
    assert t[r["same"]] == TensorType(shape("[N, 4]"), "float32")  # equal shapes stay symbolic
    assert t[r["rows"]] == ScalarType(UNKNOWN)
    assert t[r["equal"]] == ScalarType(N)
    assert t[r["total"]] == TensorType(shape("[4]"), "float32")


def test_loop_phis_are_widened_to_a_fixpoint():
    module, r = loops()
    t = types_of(module, "f")
    assert t[r["i"]] == ScalarType(UNKNOWN)  # 0, 1, 2, ...
    assert t[r["acc"]] == t[r["acc1"]] == TensorType(shape("[N]"), "float32")  # the same shape every time
    assert t[r["grow"]] == TensorType(ShapeSpec.of([UNKNOWN]), "float32")  # N, N*2, N*3, ...
    assert t[r["grow1"]] == TensorType(ShapeSpec.of([UNKNOWN]), "float32")


def test_multiple_functions_have_their_own_addresses():
    module, r = two_functions()
    info = verify_module(module)
    encode, decode = info.functions["encode"], info.functions["decode"]
    assert encode.base == 0 and decode.base == module.functions[0].size
    assert decode.address(0, 1) == module.functions[0].size + 1
    assert encode.types[r["y"]] == TensorType(shape("[B, S, 32]"), "float32")
    assert decode.types[r["p"]] == TensorType(shape("[B, 32]"), "float32")


def test_resize_infers_the_minus_one_dim_symbolically():
    module, r = resizes()
    t = types_of(module, "f")
    assert t[r["flat"]] == TensorType(shape("[B*S, 64]"), "float32")
    assert t[r["pairs"]] == TensorType(shape("[N*2, 8]"), "float32")
    assert t[r["rows"]] == ScalarType(B * S)
    assert t[r["back"]] == TensorType(shape("[B, S, 64]"), "float32")


def test_data_dependent_sizes_are_unknown():
    module, r = data_dependent()
    t = types_of(module, "f")
    assert t[r["mask"]] == TensorType(shape("[R, C]"), "bool")
    assert t[r["picked"]] == TensorType(ShapeSpec.of([UNKNOWN]), "float32")
    assert t[r["where"]] == TensorType(ShapeSpec.of([UNKNOWN, 2]), "int64")


def test_unprovable_equalities_become_guards():
    module, r = guarded()
    fn = module.functions[0]
    info = verify_module(module).functions["f"]
    where = {ins.writes()[0]: info.address(bi, ii) for bi, ii, ins in fn.instructions() if ins.writes()}
    guards = {address: {frozenset((g.a, g.b)) for g in found} for address, found in info.guards.items()}
    assert guards[where[r["s"]]] == {frozenset((N, M))}  # add broadcast: N == M or one of them is 1
    assert guards[where[r["r"]]] == {frozenset((N * 4, K))}  # resize element count
    assert set(guards) == {where[r["s"]], where[r["r"]]}
    assert [g.broadcast for g in info.guards[where[r["s"]]]] == [True]
    assert [g.broadcast for g in info.guards[where[r["r"]]]] == [False]
    for found in info.guards.values():
        for g in found:
            assert isinstance(g.a, Dim) and isinstance(g.b, Dim) and g.what
    assert info.guards[where[r["r"]]][0].holds({"N": 3, "K": 12})
    assert not info.guards[where[r["r"]]][0].holds({"N": 3, "K": 11})
    assert verify_module(straight_line()[0]).functions["upsample"].guards == {}
    run = Program(module, INTERPRETED).function("f")
    x, y = np.ones((3, 4), np.float32), np.ones((1, 4), np.float32)
    assert run(x, y, 12)[1].shape == (12,)
    with pytest.raises(MsvmError):  # the guard N*4 == K fails at run time: an msvm error, not a crash
        run(x, y, 11)


def test_matmul_contracted_dims_become_a_guard():
    module = assemble("""
func @f(a, b) regs=3 {
bb0:
  R0 = TENSOR_CREATE 0, [N, K], float32, cpu
  R1 = TENSOR_CREATE 1, [J, 8], float32, cpu
  R2 = OP_CALL matmul, (R0, R1), {}
  RET (R2)
}
""")
    info = verify_module(module).functions["f"]
    assert {frozenset((g.a, g.b)) for g in info.guards[2]} == {frozenset((K, Dim.sym("J")))}
    assert info.types[2] == TensorType(shape("[N, 8]"), "float32")


def test_infer_types_names_every_register():
    module, r = straight_line()
    types = infer_types(module)
    assert types[("upsample", r["x"])] == "float32[N, 3, H, W]"
    assert types[("upsample", r["alloc"])] == "float32[N, 3, H*2, W]"
    assert types[("upsample", r["h2"])] == "i64 = H*2"
    assert types[("upsample", r["big"])] == "bool"
    assert len(types) == module.functions[0].num_regs
    module, r = branch_merge()
    assert infer_types(module)[("f", r["merged"])] == "float32[?, 4]"


def test_infer_types_of_a_broken_module_keeps_what_it_could_type():
    module = assemble("""
func @f(x) regs=3 {
bb0:
  R0 = TENSOR_CREATE 0, [N, 4], float32, cpu
  R1 = OP_CALL relu, (R0), {}
  R2 = OP_CALL nope, (R1), {}
  RET (R2)
}
""")
    assert infer_types(module) == {("f", 0): "float32[N, 4]", ("f", 1): "float32[N, 4]"}


# ------------------------------------------------------------------------- several mistakes at once
MANY_MISTAKES = """
module "many"

func @first(x) regs=3 {
bb0:
  R0 = TENSOR_CREATE 0, [N, 4], float32, cpu
  R1 = OP_CALL relu, (R0), {}
  R2 = OP_CALL nope, (R0), {}
  RET (R1)
}

func @second(x, y) regs=12 {
bb0:
  R0 = TENSOR_CREATE 0, [N, 4], float32, cpu
  R1 = TENSOR_CREATE 1, [N, 5], float32, cpu
  R2 = OP_CALL add, (R0, R1), {}
  R3 = OP_CALL softmax, (R0), {dim=1}
  R4 = SHAPE_PROPAGATE R0, 0
  R5 = OP_CALL relu, (R11), {}
  R6 = OP_CALL neg, (R0), {}
  TENSOR_FREE R6
  R7 = OP_CALL exp, (R6), {}
  BR R4, bb1, bb2
bb1:
  RET (R0)
bb2:
  RET (R1)
}

func @third() regs=0 {
}

func @fourth(x) regs=2 {
bb0:
  R0 = TENSOR_CREATE 0, [N], float64, cpu
  RET (R0)
  R1 = OP_CALL relu, (R0), {}
  RET (R1)
}
"""


def test_every_mistake_is_reported_not_only_the_first():
    diags = check_module(assemble(MANY_MISTAKES))
    found = sorted(((d.code.removeprefix("E-VERIFY-"), d.address, d.function) for d in diags), key=str)
    assert found == sorted(
        [
            ("UNKNOWN-OP", 0x02, "first"),
            ("SHAPE-MISMATCH", 0x06, "second"),
            ("ATTR-UNKNOWN", 0x07, "second"),
            ("REG-UNDEFINED", 0x09, "second"),
            ("USE-AFTER-FREE", 0x0C, "second"),
            ("EXPECTED-BOOL", 0x0D, "second"),
            ("EMPTY-FUNCTION", None, "third"),
            ("TERMINATOR-MID-BLOCK", 0x11, "fourth"),
        ],
        key=str,
    )
    with pytest.raises(VerifyError) as err:
        verify_module(assemble(MANY_MISTAKES))
    assert len(err.value.diagnostics) == 8
    assert "8 errors" in str(err.value)


def test_analyze_module_keeps_the_functions_that_verified():
    info, diags = analyze_module(assemble(MANY_MISTAKES))
    assert diags
    assert set(info.functions) == {"first", "second"}  # third and fourth fail their structure check


# ----------------------------------------------------------------------------------------- mutations
# A mutation replaces one operand (or moves, copies or drops one instruction) of a valid program. Values
# are drawn per operand kind: mostly plausible (in range, the right type), sometimes garbage.
SHAPES = [
    "[N]",
    "[N, 4]",
    "[4, N]",
    "[?, 4]",
    "[M, 4]",
    "[N, 3, H, W]",
    "[H*2, W]",
    "[]",
    "[0]",
    "[N, N]",
    "[B, S, 64]",
    "[K]",
    "[1, 4]",
    "[32, 64]",
]
ATTR_KEYS = [
    "axis",
    "axes",
    "shape",
    "dims",
    "starts",
    "stops",
    "steps",
    "dtype",
    "keepdims",
    "sections",
    "sizes",
    "start_dim",
    "end_dim",
    "pads",
    "mode",
    "value",
    "min",
    "max",
    "fill_value",
    "approximate",
    "stop",
    "bogus",
]
INTS = [-3, -2, -1, 0, 1, 2, 3, 4, 8, 64, 2**62, -(2**63)]


def _attr_value(data: st.DataObject, num_regs: int, depth: int = 0) -> Any:
    reg = st.integers(-1, num_regs).map(RegRef)
    leaf = st.one_of(
        st.sampled_from(INTS),
        st.floats(-4, 4),
        st.booleans(),
        st.none(),
        reg,
        st.sampled_from(["tanh", "none", "float64", "int32", "reflect", "x"]),
    )
    if depth < 2:
        return data.draw(
            st.one_of(
                leaf,
                st.lists(leaf, max_size=4).map(tuple),
                st.lists(st.sampled_from(INTS), max_size=4).map(tuple),
            )
        )
    return data.draw(leaf)


def _operand_value(data: st.DataObject, kind: Kind, old: Any, module: Module, fn: Function) -> Any:
    """A new value for an operand of ``kind``; about one draw in eight is garbage of the wrong type."""
    if data.draw(st.integers(0, 7)) == 0:
        return data.draw(st.sampled_from(["R1", 1.5, None, True, -1, (0, 1), 2**70, "float128", "bb0"]))
    regs = st.integers(0, max(fn.num_regs - 1, 0))
    if kind in (Kind.DST, Kind.SRC):
        return data.draw(st.one_of(regs, st.integers(-1, fn.num_regs + 1)))
    if kind in (Kind.DSTS, Kind.SRCS):
        items = list(old) if isinstance(old, tuple) else []
        choice = data.draw(st.integers(0, 2))
        if choice == 0 or not items:
            items.append(data.draw(regs))
        elif choice == 1:
            items.pop(data.draw(st.integers(0, len(items) - 1)))
        else:
            items[data.draw(st.integers(0, len(items) - 1))] = data.draw(regs)
        return tuple(items)
    if kind is Kind.IMM:
        near = [old + 1, old - 1] if isinstance(old, int) else []
        return data.draw(st.sampled_from([*INTS, *near, 2**63]))
    if kind is Kind.SHAPE:
        return parse_shape(data.draw(st.sampled_from(SHAPES)))
    if kind is Kind.DTYPE:
        return data.draw(st.sampled_from([*DTYPES, "float128"]))
    if kind is Kind.DEVICE:
        return data.draw(st.sampled_from([*DEVICES, "gpu"]))
    if kind is Kind.CONST:
        return data.draw(st.integers(-1, len(module.constants)))
    if kind is Kind.SYMBOL:
        return data.draw(st.sampled_from(["N", "H", "W", "K", "M", "B", "S", "bad-sym", ""]))
    if kind is Kind.SCALAR_OP:
        return data.draw(st.sampled_from([*SCALAR_OPS, "pow"]))
    if kind is Kind.PRED:
        return data.draw(st.sampled_from([*PREDICATES, "lte"]))
    if kind is Kind.OP:
        return data.draw(st.sampled_from([*sorted(REGISTRY), "no_such_op"]))
    if kind is Kind.ATTRS:
        attrs = dict(old) if isinstance(old, dict) else {}
        if attrs and data.draw(st.booleans()):
            del attrs[data.draw(st.sampled_from(sorted(attrs)))]
        else:
            attrs[data.draw(st.sampled_from(ATTR_KEYS))] = _attr_value(data, fn.num_regs)
        return attrs
    if kind is Kind.BLOCK:
        return data.draw(st.integers(-1, len(fn.blocks)))
    if kind is Kind.PHI:
        pairs = [p for p in old if isinstance(p, tuple) and len(p) == 2] if isinstance(old, tuple) else []
        block, reg = st.integers(0, len(fn.blocks)), st.integers(0, max(fn.num_regs - 1, 0))
        choice = data.draw(st.integers(0, 3))
        if choice == 0 or not pairs:
            pairs.append((data.draw(block), data.draw(reg)))
        elif choice == 1:
            pairs.pop(data.draw(st.integers(0, len(pairs) - 1)))
        else:
            i = data.draw(st.integers(0, len(pairs) - 1))
            b, r = pairs[i]
            pairs[i] = (data.draw(block), r) if choice == 2 else (b, data.draw(reg))
        return tuple(pairs)
    raise AssertionError(kind)


def mutate(module: Module, data: st.DataObject) -> str:
    """Apply one random mutation to ``module`` in place; returns a description (for failure reports)."""
    fn = module.functions[data.draw(st.integers(0, len(module.functions) - 1))]
    sites = [(bi, ii) for bi, ii, _ in fn.instructions()]
    if not sites:
        return f"{fn.name} is empty"
    bi, ii = data.draw(st.sampled_from(sites))
    block = fn.blocks[bi].instructions
    ins = block[ii]
    what = data.draw(st.sampled_from(["operand"] * 6 + ["drop", "copy", "move", "regs"]))
    if what == "operand" and ins.opcode.operands:
        pos = data.draw(st.integers(0, len(ins.opcode.operands) - 1))
        operand = ins.opcode.operands[pos]
        value = _operand_value(data, operand.kind, ins.args[pos], module, fn)
        ins.args = (*ins.args[:pos], value, *ins.args[pos + 1 :])
        return f"{fn.name} bb{bi}[{ii}] {ins.name}.{operand.name} = {value!r}"
    if what == "drop":
        del block[ii]
        return f"{fn.name} bb{bi}[{ii}] dropped"
    if what == "copy":
        block.insert(ii, Instruction(ins.opcode, ins.args, ins.loc))
        return f"{fn.name} bb{bi}[{ii}] copied"
    if what == "move":
        del block[ii]
        to = data.draw(st.integers(0, len(fn.blocks) - 1))
        fn.blocks[to].instructions.insert(data.draw(st.integers(0, len(fn.blocks[to].instructions))), ins)
        return f"{fn.name} bb{bi}[{ii}] moved to bb{to}"
    fn.num_regs = data.draw(st.integers(0, fn.num_regs + 2))
    return f"{fn.name} regs={fn.num_regs}"


def mutant(data: st.DataObject, max_mutations: int) -> tuple[Module, list[str]]:
    module, _ = PROGRAMS[data.draw(st.sampled_from(sorted(PROGRAMS)))]()
    steps = [mutate(module, data) for _ in range(data.draw(st.integers(1, max_mutations)))]
    return module, steps


FUZZ = settings(
    max_examples=int(os.environ.get("MSVM_FUZZ_EXAMPLES", "300")),  # raise it for a longer hunt
    deadline=None,
    derandomize=True,  # the same mutants on every run: CI stays reproducible
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@FUZZ
@given(st.data())
def test_check_module_never_raises_on_mutants(data: st.DataObject):
    module, steps = mutant(data, max_mutations=4)
    diags = check_module(module)
    assert isinstance(diags, list)
    size = sum(fn.size for fn in module.functions)
    for d in diags:
        assert d.code.startswith("E-VERIFY-") and d.message, steps
        assert d.address is None or 0 <= d.address < size, steps
    located = [(d.code, d.address) for d in diags if d.address is not None]
    assert len(located) == len(set(located)), f"one diagnostic per problem kind per instruction: {steps}"
    infer_types(module)
    if diags:
        with pytest.raises(VerifyError):
            verify_module(module)


def test_huge_scalar_arithmetic_is_unknown_not_a_crash():
    """Products beyond the shape algebra's limits make the scalar ``?`` (checked at run time)."""
    module = assemble("""
func @f(x) regs=9 {
bb0:
  R0 = TENSOR_CREATE 0, [N, 4], float32, cpu
  R1 = SCALAR_CONST 4611686018427387904
  R2 = SCALAR_OP mul, R1, R1
  R3 = SCALAR_OP mul, R2, R2
  R4 = SCALAR_OP mul, R3, R3
  R5 = SCALAR_OP mul, R4, R4
  R6 = SCALAR_CONST -1
  R7 = TENSOR_RESIZE R0, (R5, R6)
  R8 = TENSOR_ALLOC (R5), float32, cpu
  RET (R7, R8)
}
""")
    info = verify_module(module).functions["f"]
    assert info.types[3] == ScalarType(Dim.const(2**248))
    assert info.types[4] == info.types[5] == ScalarType(UNKNOWN)
    assert info.types[7] == TensorType(ShapeSpec.of([UNKNOWN, UNKNOWN]), "float32")
    assert info.types[8] == TensorType(ShapeSpec.of([UNKNOWN]), "float32")


# ----------------------------------------------------------------- verified mutants run structurally
# A Python error of these kinds raised by the interpreter's own machinery (generated code or
# msvm/interpreter) rather than by a kernel means the verifier let a structural mistake through.
STRUCTURAL = (NameError, KeyError, IndexError, AttributeError, TypeError)
INTERPRETER_DIR = os.path.join("msvm", "interpreter") + os.sep


@pytest.fixture(scope="module", autouse=True)
def interpreter_settings():
    """Reference kernels (no host calibration), and cheap limits: mutants may allocate huge tensors or
    loop forever. The settings are restored afterwards."""
    saved = dataclasses.asdict(get_context())
    set_context(
        kernel_policy="reference", max_tensor_bytes=1 << 20, max_call_bytes=1 << 22, max_loop_iterations=64
    )
    yield
    set_context(**saved)


def inputs_for(fn: Function, seed: int) -> tuple | None:
    """Arguments matching ``fn``'s declarations (one size per symbol), or None if none can match."""
    rng = np.random.default_rng(seed)
    declared: dict[int, Instruction] = {}
    symbols: set[str] = set()
    for _, _, ins in fn.instructions():
        if ins.name == "SCALAR_ARG":
            declared[ins["arg"]] = ins
            symbols.add(ins["symbol"])
        elif ins.name == "TENSOR_CREATE" and ins["arg"] >= 0:
            declared[ins["arg"]] = ins
            symbols |= {s for d in ins["shape"] for s in d.free_symbols}
    bindings = {s: int(rng.integers(1, 5)) for s in sorted(symbols)}
    args = []
    for arg in range(len(fn.params)):
        ins = declared[arg]
        if ins.name == "SCALAR_ARG":
            args.append(bindings[ins["symbol"]])
            continue
        dims = [int(rng.integers(1, 4)) if d.is_unknown else d.evaluate(bindings) for d in ins["shape"]]
        if any(d < 0 for d in dims):
            return None
        dtype = np.dtype(ins["dtype"])
        if dtype.kind == "f":
            value = rng.standard_normal(dims).astype(dtype)
        elif dtype.kind == "b":
            value = rng.random(dims) < 0.5
        else:
            value = rng.integers(0, 2, dims).astype(dtype)
        args.append(value)
    return tuple(args)


def machinery_failure(exc: BaseException) -> BaseException | None:
    """The root cause of ``exc`` if it is a structural Python error raised by the interpreter itself."""
    root = exc
    while root.__cause__ is not None:
        root = root.__cause__
    if isinstance(root, MsvmError) or not isinstance(root, STRUCTURAL):
        return None
    tb = root.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    where = tb.tb_frame.f_code.co_filename if tb is not None else ""
    if isinstance(root, (NameError, KeyError, AttributeError)):
        return root  # never a kernel's way to reject its inputs
    return root if where.startswith("<msvm ") or INTERPRETER_DIR in where else None


def run_all(module: Module, seed: int, info: ModuleInfo | None = None) -> list[str]:
    """Run every function of a verified module on matching inputs; returns the structural failures."""
    program = Program(module, INTERPRETED, info)  # preparing a verified module must never fail
    failures = []
    for fn in module.functions:
        args = inputs_for(fn, seed)
        if args is None:
            continue
        exe = program.function(fn.name)
        try:
            with np.errstate(all="ignore"):
                exe(*args)
        except MsvmError as exc:
            bad = machinery_failure(exc)
            if bad is not None:
                failures.append(f"{fn.name}: {type(bad).__name__}: {bad}\n{exe.source}")
        except Exception as exc:  # anything not an msvm error escaped the interpreter
            failures.append(f"{fn.name}: {type(exc).__name__}: {exc}\n{exe.source}")
    return failures


@pytest.mark.parametrize("name", ["double-free-loop", "phi-predecessors-entry"])
def test_what_the_verifier_rejects_would_break_the_interpreter(name: str):
    """The property's detector at work: two holes the verifier once had, run as if they had verified."""
    module = assemble((INVALID / f"{name}.msbc.txt").read_text(encoding="utf-8"))
    assert check_module(module)
    info, _ = analyze_module(module)
    try:
        failures = [f for seed in range(4) for f in run_all(module, seed, info)]
    except Exception as exc:  # lowering the module fails already
        failures = [f"{type(exc).__name__}: {exc}"]
    assert failures


@pytest.mark.parametrize("name", PROGRAMS)
def test_valid_programs_run(name: str):
    module, _ = PROGRAMS[name]()
    assert run_all(module, seed=0) == []


@FUZZ
@given(st.data())
def test_verified_mutants_fail_only_with_msvm_errors(data: st.DataObject):
    module, steps = mutant(data, max_mutations=2)
    if check_module(module):
        return
    failures = run_all(module, seed=data.draw(st.integers(0, 3)))
    assert not failures, "\n".join(steps) + "\n" + str(module) + "\n" + "\n".join(failures)
