"""The BC-Interpreter on hand-built programs: results, control flow, errors, limits, stepping, tracing."""

import csv
import json
import threading

import numpy as np
import pytest

import msvm as ms
from msvm.bytecode import ModuleBuilder
from msvm.context import set_context
from msvm.errors import KernelError, MsvmError, ResourceLimitError, ShapeError, SourceLoc
from msvm.interpreter import Program
from msvm.observe.trace import TRACE, load_events, read_bclog, to_chrome_trace, to_csv
from msvm.ops import REGISTRY, OpDef


def program(build):
    mb = ModuleBuilder("t")
    f = mb.function("f", build.__code__.co_varnames[1 : build.__code__.co_argcount])
    build(f, *range(build.__code__.co_argcount - 1))
    return Program(mb.build()).function("f")


@pytest.fixture
def limits():
    yield set_context
    set_context(max_tensor_bytes=4 << 30, max_call_bytes=8 << 30, max_loop_iterations=1_000_000)


def _branchy(f, x, y):
    a = f.tensor_input(0, "[N, 4]", "float32")
    b = f.tensor_input(1, "[N, 4]", "float32")
    s = f.call("add", [a, b])
    n = f.shape_of(s, 0)
    c = f.cmp("gt", n, f.scalar_const(2))
    t, e, j = f.new_block(), f.new_block(), f.new_block()
    f.br(c, t, e)
    f.set_block(t)
    r1 = f.call("sum", [s], {"axis": 0, "keepdims": True})
    f.jmp(j)
    f.set_block(e)
    r2 = f.call("mul", [s, s])
    f.jmp(j)
    f.set_block(j)
    f.ret(f.tensor_phi([(t, r1), (e, r2)]), n)


def test_branches_merge_different_shapes():
    fn = program(_branchy)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    out, n = fn(x, x)
    np.testing.assert_array_equal(out, (x + x).sum(0, keepdims=True))
    assert n == 3
    out, n = fn(x[:2], x[:2])
    np.testing.assert_array_equal(out, (x[:2] * 2) ** 2)
    assert n == 2 and isinstance(n, int)


def _loop(f, x):
    """acc = x; for i in range(N): acc = concat([acc[:1], acc]) -> a tensor growing every iteration."""
    x = f.tensor_input(0, "[N, 2]", "float64")
    zero, one = f.scalar_const(0), f.scalar_const(1)
    n = f.shape_of(x, 0)
    hdr, body, out = f.new_block(), f.new_block(), f.new_block()
    f.jmp(hdr)
    f.set_block(hdr)
    i, acc, i2, acc2 = f.new_reg(), f.new_reg(), f.new_reg(), f.new_reg()
    f.emit("SCALAR_PHI", i, [(0, zero), (body, i2)])
    f.emit("TENSOR_PHI", acc, [(0, x), (body, acc2)])
    f.br(f.cmp("lt", i, n), body, out)
    f.set_block(body)
    head = f.call("slice", [acc], {"axes": (0,), "starts": (0,), "stops": (1,), "steps": (1,)})
    f.emit("OP_CALL", "concat", (acc2,), (head, acc), {"axis": 0})
    f.emit("SCALAR_OP", i2, "add", i, one)
    f.jmp(hdr)
    f.set_block(out)
    f.ret(acc, i)


def test_loop_with_tensor_and_scalar_phis(limits):
    fn = program(_loop)
    x = np.arange(6, dtype=np.float64).reshape(3, 2)
    acc, i = fn(x)
    expected = x
    for _ in range(3):
        expected = np.concatenate([expected[:1], expected])
    np.testing.assert_array_equal(acc, expected)
    assert i == 3
    limits(max_loop_iterations=2)
    with pytest.raises(ResourceLimitError) as err:
        fn(x)
    assert err.value.code == "E-LIMIT-LOOP" and err.value.address is not None


def test_shape_error_names_address_opcode_source_and_shapes():
    def build(f, x, y):
        a = f.tensor_input(0, "[N, K]", "float32")
        b = f.tensor_input(1, "[M, K]", "float32")
        f.loc = SourceLoc("model.py", 7, 4)
        f.ret(f.call("add", [a, b]))

    fn = program(build)
    x, y = np.ones((3, 2), np.float32), np.ones((4, 2), np.float32)
    with pytest.raises(ShapeError) as err:
        fn(x, y)
    e = err.value
    assert e.code == "E-SHAPE-RUNTIME"
    assert e.address == 2 and e.opcode == "OP_CALL add" and str(e.source) == "model.py:7:5"
    assert "(3, 2)" in str(e) and "(4, 2)" in str(e)
    np.testing.assert_array_equal(x, 1)  # inputs untouched


def test_input_validation_errors():
    def build(f, x, n):
        a = f.tensor_input(0, "[N, 3]", "float32")
        f.scalar_arg(1, "n")
        f.ret(a)

    fn = program(build)
    with pytest.raises(ShapeError, match=r"dim 1: expected 3, got 4") as err:
        fn(np.ones((2, 4), np.float32), 1)
    assert err.value.address == 0
    with pytest.raises(ShapeError, match="dtype float32, got float64"):
        fn(np.ones((2, 3)), 1)
    with pytest.raises(TypeError, match="must be a numpy array"):
        fn([[1.0, 2.0, 3.0]], 1)
    with pytest.raises(TypeError, match="must be an int"):
        fn(np.ones((2, 3), np.float32), 1.5)
    with pytest.raises(TypeError, match="takes 2 argument"):
        fn(np.ones((2, 3), np.float32))


def test_scalar_ops_and_cmp():
    def build(f, a, b):
        ra, rb = f.scalar_arg(0, "a"), f.scalar_arg(1, "b")
        outs = [
            f.scalar_op(op, ra, rb)
            for op in ("add", "sub", "mul", "floordiv", "ceildiv", "mod", "min", "max")
        ]
        f.ret(*outs)

    fn = program(build)
    for a, b in [(7, 2), (-7, 2), (5, -3), (0, 4)]:
        assert fn(a, b) == (a + b, a - b, a * b, a // b, -(-a // b), a % b, min(a, b), max(a, b))
    with pytest.raises(ShapeError) as err:
        fn(1, 0)
    assert err.value.code == "E-SHAPE-ZERODIV" and err.value.opcode == "SCALAR_OP"


def test_alloc_resize_free_and_zeros():
    def build(f, x):
        a = f.tensor_input(0, "[N, 6]", "float32")
        n = f.shape_of(a, 0)
        buf = f.tensor_alloc([n, f.scalar_const(6)], "float32")
        s = f.call("add", [a, buf])
        f.free(buf)
        r = f.resize(s, [f.scalar_const(-1), f.scalar_const(3)])
        z = f.tensor_zeros("[N, 2]", "int64")
        f.ret(r, z)

    fn = program(build)
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    r, z = fn(x)
    np.testing.assert_array_equal(r, x.reshape(-1, 3))
    assert z.shape == (2, 2) and z.dtype == np.int64 and not z.any()


def test_resource_limits_checked_before_allocating(limits):
    def build(f, x):
        a = f.tensor_input(0, "[N]", "float32")
        n = f.shape_of(a, 0)
        f.ret(f.tensor_alloc([n, n], "float64"))

    fn = program(build)
    limits(max_tensor_bytes=1000)
    with pytest.raises(ResourceLimitError) as err:
        fn(np.ones(100, np.float32))  # 100*100*8 bytes
    assert err.value.code == "E-LIMIT-TENSOR" and "(100, 100)" in str(err.value)
    assert fn(np.ones(10, np.float32)).shape == (10, 10)
    limits(max_tensor_bytes=1 << 30, max_call_bytes=500)
    with pytest.raises(ResourceLimitError) as err:
        fn(np.ones(100, np.float32))
    assert err.value.code == "E-LIMIT-CALL"


def test_registers_of_one_shape_are_checked_once_and_each_counted(limits):
    def build(f, x):
        a = f.tensor_input(0, "[N]", "float32")
        n = f.shape_of(a, 0)
        b1 = f.tensor_alloc([n, n], "float64")
        b2 = f.tensor_alloc([n, n], "float64")
        f.ret(f.call("add", [b1, b2]))

    fn = program(build)
    first = next(s.address for s in fn.steps if s.opname == "TENSOR_ALLOC")
    limits(max_tensor_bytes=700)
    with pytest.raises(ResourceLimitError) as err:
        fn(np.ones(10, np.float32))  # three [10, 10] float64 registers, 800 bytes each
    assert err.value.code == "E-LIMIT-TENSOR" and err.value.address == first
    limits(max_tensor_bytes=1 << 30, max_call_bytes=2000)
    with pytest.raises(ResourceLimitError) as err:
        fn(np.ones(10, np.float32))  # 40 + 3 × 800 bytes: over, though one of each shape is not
    assert err.value.code == "E-LIMIT-CALL"
    limits(max_call_bytes=3000)
    assert fn(np.ones(10, np.float32)).shape == (10, 10)


def test_constant_shapes_are_checked_again_when_the_limits_change(limits):
    def build(f, x):
        f.tensor_input(0, "[N]", "float32")
        c = f.load_const(np.ones(100))
        f.ret(f.call("add", [c, c]))  # a [100] float64 output: sized by the entry check alone

    fn = program(build)
    assert fn(np.ones(3, np.float32)).shape == (100,)
    limits(max_tensor_bytes=500)  # 800 bytes each, now over
    with pytest.raises(ResourceLimitError) as err:
        fn(np.ones(3, np.float32))
    assert err.value.code == "E-LIMIT-TENSOR"


def test_runtime_sized_ops_are_checked(limits):
    def build(f, x, n):
        f.tensor_input(0, "[N]", "float32")
        rn = f.scalar_arg(1, "n")
        sq = f.scalar_op("mul", rn, rn)
        loop_free = f.call("zeros", [], {"shape": (RegRef(sq),), "dtype": "float64"})
        f.ret(loop_free)

    from msvm.bytecode import RegRef

    fn = program(build)
    limits(max_tensor_bytes=10_000)
    assert fn(np.ones(1, np.float32), 10).shape == (100,)
    with pytest.raises(ResourceLimitError):
        fn(np.ones(1, np.float32), 1000)  # 10**6 float64 = 8 MB


def test_returned_constants_are_writable_copies():
    mb = ModuleBuilder("t")
    f = mb.function("f")
    f.ret(f.load_const(np.arange(3, dtype=np.int32)))
    fn = Program(mb.build()).function("f")
    out = fn()
    out[0] = 7
    np.testing.assert_array_equal(fn(), [0, 1, 2])


def test_stepping_reaches_the_same_result_and_shows_registers():
    fn = program(_branchy)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    ex = fn.debug(x, x)
    assert ex.pc == 0 and ex.current_instruction.name == "TENSOR_CREATE"
    ex.add_breakpoint(4)
    ex.run()
    assert ex.pc == 4 and not ex.finished
    regs = ex.registers
    assert regs[2].shape == (3, 4) and regs[2].symbolic == "float32[N, 4]" and regs[2].producer == 2
    assert regs[2].kind == "tensor" and regs[2].nbytes == 48 and regs[2].data_address
    assert regs[4].kind == "empty"
    ex.breakpoints.clear()
    ex.run()
    assert ex.finished
    ref = fn(x, x)
    np.testing.assert_array_equal(ex.result[0], ref[0])
    assert ex.result[1] == ref[1]


def test_stepping_run_until_and_loop():
    fn = program(_loop)
    x = np.arange(4, dtype=np.float64).reshape(2, 2)
    ex = fn.debug(x)
    while not ex.finished:
        ex.step()
    np.testing.assert_array_equal(ex.result[0], fn(x)[0])
    ex = fn.debug(x)
    ex.run(until=9)
    assert ex.pc == 9


def test_trace_events_and_exports(tmp_path):
    fn = program(_branchy)
    x = np.ones((3, 4), np.float32)
    TRACE.clear()
    fn(x, x)
    assert not TRACE.recent(), "tracing is off by default"
    path = TRACE.enable(True, tmp_path / "trace")
    try:
        fn(x, x)
    finally:
        TRACE.enable(False)
    # only this thread's events: a background thread left by an earlier test may trace too
    me = threading.get_ident()
    events = [e for e in TRACE.recent() if e.thread == me]
    ops = [e.op for e in events if e.opcode == "OP_CALL"]
    assert ops == ["add", "sum"]
    add = next(e for e in events if e.op == "add")
    assert add.shape == [3, 4] and add.mode == "interp" and add.dur_ns >= 0 and add.variant == "reference"
    assert add.reason == fn.by_address[add.address].choice.reason and add.reason
    assert all(e.reason is None for e in events if e.opcode != "OP_CALL")
    logged = [e for e in read_bclog(path) if e.thread == me]
    assert [e.address for e in logged] == [e.address for e in events]
    assert [e.reason for e in logged] == [e.reason for e in events]
    csv_text = to_csv(tmp_path / "t.csv", path).read_text().splitlines()
    assert csv_text[0] == "function,address,opcode,op,variant,start_ns,dur_ns,thread,mode,shape,reason"
    rows = [r for r in csv.DictReader(csv_text) if r["thread"] == str(me)]
    assert len(rows) == len(events)
    assert [r["reason"] for r in rows if r["op"] == "add"] == [add.reason]
    chrome = json.loads(to_chrome_trace(tmp_path / "t.json", events).read_text())
    (add_event,) = [ev for ev in chrome["traceEvents"] if ev.get("ph") == "X" and ev["name"] == "add"]
    assert add_event["args"]["reason"] == add.reason
    assert len([e for e in load_events(tmp_path / "trace") if e.thread == me]) == len(events)


def test_bclog_files_written_before_reason_still_read(tmp_path):
    old = {"function": "f", "address": 2, "opcode": "OP_CALL", "op": "add", "variant": "reference",
           "start_ns": 5, "dur_ns": 7, "thread": 1, "mode": "interp", "shape": [3, 4]}
    path = tmp_path / "old.bclog"
    path.write_text(json.dumps(old) + "\n", encoding="utf-8")
    (event,) = read_bclog(path)
    assert event.op == "add" and event.shape == [3, 4] and event.reason is None
    assert to_csv(tmp_path / "old.csv", path).read_text().splitlines()[1].endswith(",3x4,")


def test_kernel_failures_become_msvm_errors():
    def build(f, x, i):
        a = f.tensor_input(0, "[N]", "float32")
        idx = f.tensor_input(1, "[K]", "int64")
        f.ret(f.call("take", [a, idx], {"axis": 0}))

    fn = program(build)
    with pytest.raises(MsvmError) as err:
        fn(np.ones(3, np.float32), np.array([5]))
    assert err.value.address == 2 and "take" in err.value.opcode


def test_a_kernel_failing_for_another_reason_is_a_kernel_error(monkeypatch):
    """Not a shape problem (those are ShapeErrors): a KernelError (E-RUNTIME) naming the inputs."""

    def boom(x):
        raise RuntimeError("kernel bug")

    neg = REGISTRY["neg"]
    monkeypatch.setitem(REGISTRY, "t_boom", OpDef("t_boom", ("x",), {}, neg.infer, boom, doc="fails"))

    def build(f, x):
        f.ret(f.call("t_boom", [f.tensor_input(0, "[N]", "float32")]))

    with pytest.raises(KernelError) as err:
        program(build)(np.ones(3, np.float32))
    e = err.value
    assert e.code == "E-RUNTIME" and e.address == 1 and e.opcode == "OP_CALL t_boom"
    assert "RuntimeError: kernel bug" in e.message and e.hint == "inputs R0: (3,) float32"
    assert ms.KernelError is KernelError and not isinstance(e, (ShapeError, ResourceLimitError))


def test_a_later_input_may_bind_a_symbol_an_earlier_one_uses():
    def build(f, x, y):
        a = f.tensor_input(0, "[H*2, 3]", "float32")
        b = f.tensor_input(1, "[H, 3]", "float32")
        f.ret(f.call("concat", [a, b], {"axis": 0}))

    fn = program(build)
    assert fn(np.ones((4, 3), np.float32), np.ones((2, 3), np.float32)).shape == (6, 3)
    with pytest.raises(ShapeError, match=r"H\*2 = 4, got 5") as err:
        fn(np.ones((5, 3), np.float32), np.ones((2, 3), np.float32))
    assert err.value.address == 0
