"""The launcher: calling convention, guards, bucket mode, layouts, concurrency, refusals, disassembly."""

import gc
import json
import os
import threading

import numpy as np
import pytest
from codegen_helpers import assert_close, check, compiled, interpret, rand, region

from msvm.bytecode import RegRef
from msvm.errors import ShapeError
from msvm.msjit.codegen import LoweringError, can_lower, lower
from msvm.msjit.codegen.emit import BAD_ARITY, DATA_OFFSET
from msvm.msjit.codegen.launcher import LaunchSpec, builtin
from msvm.native.worker import CompileWorker
from msvm.ops import REGISTRY, TensorType
from msvm.shapes import parse_shape


def _chain(f, x, y):
    return f.call("add", [f.call("mul", [x, y]), f.call("tanh", [x])])


@pytest.fixture(scope="module")
def exact():
    m = region(_chain, [("[4, 6]", "float32"), ("[6]", "float32")])
    return m, compiled(m)


@pytest.fixture(scope="module")
def bucket():
    def body(f, x, y):
        return f.call("sum", [f.call("mul", [x, y])], {"axis": 1}), f.call("softmax", [x], {"axis": -1})

    m = region(body, [("[N, M]", "float32"), ("[N, M]", "float32")])
    return m, compiled(m, bounds={"N": 64, "M": 40})


def guard_error(excinfo):
    assert excinfo.value.code == "E-SHAPE-GUARD", excinfo.value
    return str(excinfo.value)


def test_exact_mode_rejects_other_shapes_and_dtypes(exact):
    _, exact = exact
    with pytest.raises(ShapeError) as e:
        exact.fn(rand((5, 6)), rand((6,)))
    assert "shape" in guard_error(e)
    with pytest.raises(ShapeError) as e:
        exact.fn(rand((4, 6), "float64"), rand((6,)))
    assert "dtype" in guard_error(e)
    with pytest.raises(ShapeError) as e:
        exact.fn([[1.0] * 6] * 4, rand((6,)))
    guard_error(e)


def test_non_contiguous_and_foreign_layouts_are_copied(exact):
    m, r = exact
    x = rand((8, 12))[::2, ::2]  # strided
    y = rand((6, 2))[:, 1]
    assert_close(r.fn(x, y), interpret(m, x, y))
    big_endian = rand((4, 6)).astype(">f4")
    assert_close(r.fn(big_endian, y), interpret(m, big_endian, y))
    fortran = np.asfortranarray(rand((4, 6)))
    assert_close(r.fn(fortran, y), interpret(m, fortran, y))


def test_bucket_mode_one_compile_many_shapes(bucket):
    m, r = bucket
    assert r.lowered.params == ["N", "M"]
    for n, k in [(1, 1), (3, 40), (64, 7), (0, 5)]:
        x, y = rand((n, k)), rand((n, k), rng=np.random.default_rng(n))
        assert_close(r.fn(x, y), interpret(m, x, y))


def test_bucket_mode_guards(bucket):
    _, r = bucket
    with pytest.raises(ShapeError) as e:
        r.fn(rand((65, 4)), rand((65, 4)))  # above the bucket bound
    assert "bound" in guard_error(e)
    with pytest.raises(ShapeError) as e:
        r.fn(rand((3, 4)), rand((2, 4)))  # N bound by x, y disagrees
    guard_error(e)
    with pytest.raises(ShapeError) as e:
        r.fn(rand((3, 4, 1)), rand((3, 4)))
    assert "rank" in guard_error(e)


def test_bucket_mode_needs_bounds_for_arena_sizes():
    def body(f, x):
        return f.call("matmul", [f.call("exp", [x]), f.call("transpose", [x], {"axes": (1, 0)})])

    with pytest.raises(LoweringError, match="upper bound"):
        lower(region(body, [("[N, 64]", "float32")]), "f")
    m = region(body, [("[N, 64]", "float32")])
    r = compiled(m, bounds={"N": 200}, mem_optimize=True)
    assert r.lowered.planned_bytes >= 200 * 64 * 4
    for n in (1, 130, 200):
        x = rand((n, 64))
        assert_close(r.fn(x), interpret(m, x))


def test_verifier_guards_are_checked_before_native_code():
    def body(f, x, y):  # broadcast of [N] against [M]: the verifier can only check N == M (or 1) at run time
        return f.call("add", [f.call("reshape", [x], {"shape": (-1, 4)}), y])

    m = region(body, [("[N]", "float32"), ("[M]", "float32")])
    r = compiled(m, bounds={"N": 64, "M": 4})
    assert_close(r.fn(rand((8,)), rand((4,))), interpret(m, rand((8,)), rand((4,))))
    with pytest.raises(ShapeError) as e:
        r.fn(rand((6,)), rand((4,)))  # 6 is not divisible by 4
    guard_error(e)
    with pytest.raises(ShapeError) as e:
        r.fn(rand((8,)), rand((1,)))  # numpy would broadcast; the compiled code assumes equal sizes
    guard_error(e)


def test_scalar_arguments_and_scalar_results():
    def body(f, x, s):
        n = f.shape_of(x, 0)
        t = f.call("slice", [x], {"axes": (0,), "starts": (1,), "stops": (RegRef(s),)})
        return f.call("mul", [t, t]), f.scalar_op("mul", n, f.scalar_const(3)), s

    m = region(body, [("[N, 3]", "float64")], scalars=["S"])
    r = compiled(m, bounds={"N": 32})
    assert r.lowered.params == ["N", "S"]
    for n, s in [(10, 4), (10, 40), (5, 0), (7, np.int64(3))]:
        x = rand((n, 3), "float64")
        assert_close(r.fn(x, s), interpret(m, x, s))
    with pytest.raises(ShapeError):
        r.fn(rand((4, 3), "float64"), 2.5)


@pytest.mark.skipif(DATA_OFFSET is None, reason="numpy's array layout is unknown: the launcher uses ctypes")
def test_native_entry_is_a_fastcall_builtin():
    """The launcher calls the code as a builtin; it checks its arity and its int arguments itself."""
    m = region(lambda f, x, s: f.call("mul", [x, x]), [("[N, 3]", "float32")], scalars=["S"])
    r = compiled(m, bounds={"N": 16})
    fn, _definition = builtin(r.library.address(r.lowered.entry + "_fast"), "t")
    x, out = rand((4, 3)), np.empty((4, 3), np.float32)
    arena = np.empty(r.lowered.planned_bytes + 64, np.uint8)
    assert type(fn).__name__ == "builtin_function_or_method"
    assert fn(x, out, arena, 4, 7) == 0
    assert_close(out, x * x)
    assert fn(x, out, arena, 4) == BAD_ARITY  # a status, not a crash
    with pytest.raises(TypeError):
        fn(x, out, arena, "4", 7)
    with pytest.raises(OverflowError):
        fn(x, out, arena, 4, 1 << 70)
    with pytest.raises(OverflowError):  # through the launcher: the Python error, nothing native ran
        r.fn(x, 1 << 70)


def test_only_regions_with_large_work_release_the_gil():
    """Handing the GIL over costs ~0.1 µs: a region of small loops keeps it, one with BLAS or a loop
    that may be large releases it (so other Python threads run meanwhile). Whether a loop of symbolic
    size may be large depends on the bucket's bounds, which the code reads from its table."""

    def releases(r):
        if ("py", "PyEval_SaveThread") not in r.lowered.externs:
            return False
        return ("gil",) not in r.lowered.externs or r.lowered.numbers()[("gil",)] == 1

    assert not releases(compiled(region(_chain, [("[4, 6]", "float32"), ("[6]", "float32")])))
    big = region(_chain, [("[N, 600]", "float32"), ("[600]", "float32")])
    assert not releases(compiled(big, bounds={"N": 8}))
    assert releases(compiled(big, bounds={"N": 4096}))
    gemm = region(lambda f, x, w: f.call("matmul", [x, w]),
                  [("[N, 256]", "float32"), ("[256, 256]", "float32")])
    assert releases(compiled(gemm, bounds={"N": 512}))


def test_run_time_checks_inside_native_code():
    def body(f, i, w):
        return f.call("embedding", [i, w])

    m = region(body, [("[3]", "int64"), ("[5, 4]", "float32")])
    r = check(m, np.array([0, 4, 2]), rand((5, 4)))
    with pytest.raises(ShapeError) as e:
        r.fn(np.array([0, 5, 2]), rand((5, 4)))
    guard_error(e)


def test_empty_max_reduction_fails_like_numpy():
    m = region(lambda f, x: f.call("max", [x], {"axis": 0}), [("[N, 3]", "float32")])
    r = compiled(m, bounds={"N": 8})
    assert_close(r.fn(rand((2, 3))), interpret(m, rand((2, 3))))
    with pytest.raises(ShapeError):
        r.fn(rand((0, 3)))


def test_return_conventions():
    def body(f, x):
        e = f.call("exp", [x])
        return e, e, f.shape_of(x, 1)

    r = compiled(region(body, [("[2, 3]", "float32")]))
    a, b, n = r.fn(rand((2, 3)))
    assert a is b and n == 3 and type(n) is int


def test_concurrent_calls_from_two_threads(bucket):
    m, r = bucket
    errors = []

    def work(seed):
        rng = np.random.default_rng(seed)
        for _ in range(150):
            n = int(rng.integers(1, 64))
            x, y = rand((n, 33), rng=rng), rand((n, 33), rng=rng)
            got = r.fn(x, y)
            want = (np.sum(x * y, axis=1), interpret(m, x, y)[1])
            try:
                assert_close(got[0], want[0].astype(np.float32))
                assert_close(got[1], want[1])
            except AssertionError as exc:
                errors.append(exc)

    threads = [threading.Thread(target=work, args=(s,)) for s in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_can_lower_reasons():
    t = TensorType(parse_shape("[4, 4]"), "float32")
    assert can_lower(REGISTRY["add"], {}, [t, t]) is None
    assert "data-dependent" in can_lower(REGISTRY["nonzero"], {}, [t])
    assert "data-dependent" in can_lower(REGISTRY["masked_select"], {}, [t, TensorType(t.shape, "bool")])
    ints = TensorType(t.shape, "int64")
    assert "integer pow" in can_lower(REGISTRY["pow"], {}, [ints, ints])
    weights = TensorType(parse_shape("[8, 4, K, 3]"), "float32")
    assert "kernel sizes" in can_lower(
        REGISTRY["conv2d"], {}, [TensorType(parse_shape("[1, 4, 9, 9]"), "float32"), weights]
    )


def test_lowering_errors_name_the_reason():
    def body(f, x):
        return f.call("nonzero", [x])

    with pytest.raises(LoweringError, match="data-dependent") as e:
        lower(region(body, [("[4]", "float32")]), "f")
    assert e.value.address is not None


def test_disassembly_kinds_and_vector_code():
    def body(f, x, a, b):
        return f.call("add", [f.call("mul", [x, a]), b])

    r = compiled(region(body, [("[64, 64]", "float32"), ("[64]", "float32"), ("[64, 64]", "float32")]))
    for kind in ("llvm", "llvm-opt", "asm"):
        assert r.disassemble(kind).strip()
    asm = r.disassemble("asm")
    assert ("ymm" in asm or "zmm" in asm) and "vfmadd" in asm  # AVX2, or AVX-512 where the host has it
    assert set(r.phase_ms) == {"lower", "optimise", "codegen", "load"} and r.code_bytes > 0
    with pytest.raises(ValueError):
        r.disassemble("bytecode")


def _net(f, x):
    """A conv and a linear (their packed weights: constants made while lowering; the linear's weight
    folded while lowering), in bucket mode (guards, symbolic output shapes)."""
    rng = np.random.default_rng(3)
    weight = f.load_const((rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32))
    bias = f.load_const(rng.standard_normal(8).astype(np.float32))
    y = f.call("relu", [f.call("conv2d", [x, weight, bias], {"padding": (1, 1)})])
    y = f.call("mean", [y], {"axis": (2, 3)})
    folded = f.call("mul", [f.load_const(rng.standard_normal((4, 8)).astype(np.float32)),
                            f.load_const(np.float32(0.5))])
    return f.call("linear", [y, folded])


def test_compile_in_the_worker_process(monkeypatch):
    """Lowering and LLVM both run in the worker: this process only loads the object code, binds the
    addresses the code reads from its extern table, and builds the launcher from the plain-data spec."""
    m = region(_net, [("[N, 3, H, W]", "float32")])
    bounds = {"N": 8, "H": 16, "W": 16}
    local = compiled(m, bounds=bounds)
    from msvm.msjit.codegen import plan

    def no_lowering_here(self):
        raise AssertionError("the region was lowered in the user's process")

    monkeypatch.setattr(plan.Planner, "run", no_lowering_here)
    worker = CompileWorker()
    try:
        remote = compiled(m, bounds=bounds, via_worker=worker)
    finally:
        worker.close()
    assert remote.lowered.launch == local.lowered.launch
    assert remote.lowered.externs == local.lowered.externs
    assert {k[0] for k in remote.lowered.externs} >= {"const", "gemm_packed", "pool", "conv_nchwc"}
    assert remote.lowered.ir == local.lowered.ir and remote.lowered.kernels == local.lowered.kernels
    for a, b in zip(remote.lowered.constants, local.lowered.constants, strict=True):
        np.testing.assert_array_equal(a, b)
    for shape in [(1, 3, 16, 16), (5, 3, 9, 12), (8, 3, 16, 7)]:
        x = rand(shape, rng=np.random.default_rng(sum(shape)))
        assert_close(remote.fn(x), interpret(m, x))
    assert any(r in remote.disassemble("asm") for r in ("ymm", "zmm"))  # AVX2 or AVX-512 vectors


def test_packed_weights_are_packed_again_here_not_sent(monkeypatch):
    """The worker describes a weight it packed from the region's own constants by its recipe, and this
    process packs it again — from its pack cache, where the interpreter left it — rather than receive
    it through the pipe; a weight computed while lowering (the folded linear's) still travels."""
    from msvm.kernels import conv_nchwc

    m = region(_net, [("[N, 3, H, W]", "float32")])
    results = []
    call = CompileWorker.call
    monkeypatch.setattr(CompileWorker, "call", lambda *a, **k: results.append(call(*a, **k)) or results[-1])
    worker = CompileWorker()
    try:
        remote = compiled(m, bounds={"N": 8, "H": 16, "W": 16}, via_worker=worker)
    finally:
        worker.close()
    reply, payload = results[-1].reply, results[-1].payload
    weight, bias = m.constants[0], m.constants[1]
    cached = conv_nchwc.packed(weight, bias, 1)
    recipes = {i: c[3] for i, c in enumerate(reply["constants"]) if c[3] is not None}
    assert sorted(recipes.values()) == [["nchwc", [0, 1], [1], 0], ["nchwc", [0, 1], [1], 1]]
    for i, (_, _, _, part) in recipes.items():
        assert remote.lowered.constants[i] is cached[part]
    sent = [c for c in reply["constants"] if c[0] is None and c[3] is None]
    assert [shape for _, _, shape, _ in sent] == [[4, 8], [1, 8, 16]]  # the folded weight, its panels
    code = reply["ir_len"] + reply["loop_ir_len"] + sum(reply["object_lens"])
    assert len(payload) == code + sum(np.prod(shape) * 4 for _, _, shape, _ in sent)
    x = rand((2, 3, 16, 16))
    assert_close(remote.fn(x), interpret(m, x))


def _wide_linear(f, x):
    """A linear whose constant weight (4.3 MB) does not stay in L2: the job pool's GEMM by big row blocks."""
    rng = np.random.default_rng(4)
    weight = f.load_const((rng.standard_normal((1100, 1024)) * 0.03).astype(np.float32))
    bias = f.load_const(rng.standard_normal(1100).astype(np.float32))
    return f.call("linear", [x, weight, bias])


def test_a_large_constant_weight_runs_on_the_pool_packed_here_once(monkeypatch):
    """W2's weights: the pool packs them once (OpenBLAS would pack them on every call); the worker
    describes the panels by their recipe and this process takes them from its pack cache."""
    from msvm.kernels import gemm_packed

    m = region(_wide_linear, [("[N, 1024]", "float32")])
    assert m.constants[0].nbytes > gemm_packed.BIG_B_BYTES
    results = []
    call = CompileWorker.call
    monkeypatch.setattr(CompileWorker, "call", lambda *a, **k: results.append(call(*a, **k)) or results[-1])
    worker = CompileWorker()
    try:
        remote = compiled(m, bounds={"N": 64}, via_worker=worker)
    finally:
        worker.close()
    gemms = [k for k in remote.lowered.kernels if "gemm" in k]
    assert gemms == ["gemm Nx1100x1024 packed -> out0 (pool) (bias)"]
    recipes = [c[3] for c in results[-1].reply["constants"] if c[3] is not None]
    assert recipes == [["gemm", [0, 1], [], 0], ["gemm", [0, 1], [], 1]]
    panels, bias = gemm_packed.packed(m.constants[0], m.constants[1])
    here = remote.lowered.constants
    assert any(c is panels for c in here) and any(c is bias for c in here)
    for n in (1, 3, 64):
        x = rand((n, 1024))
        assert_close(remote.fn(x), interpret(m, x), rtol=1e-4, atol=1e-4)


def test_a_packing_that_differs_here_is_a_compile_error(monkeypatch):
    from msvm.msjit.codegen import lower_nn

    m = region(_net, [("[N, 3, H, W]", "float32")])
    monkeypatch.setitem(lower_nn.PACKS, "nchwc", lambda w, b, groups: (np.zeros(3, w.dtype),) * 2)
    worker = CompileWorker()
    try:
        with pytest.raises(LoweringError, match=r"nchwc packing made float32\[3\] here"):
            compiled(m, bounds={"N": 8, "H": 16, "W": 16}, via_worker=worker)
    finally:
        worker.close()


def test_large_constants_reach_the_worker_through_shared_files():
    from msvm.msjit.codegen import shared

    weight = np.random.default_rng(0).standard_normal((640, 512)).astype(np.float32)  # 1.25 MiB

    def body(f, x):
        return f.call("linear", [x, f.load_const(weight)])

    m = region(body, [("[N, 512]", "float32")])
    sent, files = shared.export(m)
    assert len(files) == 1 and sent.constants[files[0][0]].size == 1 and os.path.exists(files[0][1])
    assert shared.export(m)[1] == files  # written once per array
    worker = CompileWorker()
    try:
        x = rand((3, 512))
        assert_close(compiled(m, bounds={"N": 8}, via_worker=worker).fn(x), interpret(m, x))
    finally:
        worker.close()
    path = files[0][1]
    del m, sent, files
    gc.collect()
    assert not os.path.exists(path)  # the file goes with the array


def test_shared_files_stay_within_their_budget(monkeypatch):
    from msvm.bytecode import Module
    from msvm.msjit.codegen import shared

    monkeypatch.setattr(shared, "BUDGET", 2 * shared.MIN_BYTES)
    arrays = [np.full(shared.MIN_BYTES // 4, i, np.float32) for i in range(3)]
    paths = [shared.export(Module("m", [], [a]))[1][0][1] for a in arrays]
    assert [os.path.exists(p) for p in paths] == [False, True, True]  # least recently sent out first
    shared.export(Module("m", [], [arrays[1]]))  # sent again: most recent now
    again = shared.export(Module("m", [], [arrays[0]]))[1][0][1]  # evicted: written anew
    assert again != paths[0]
    assert [os.path.exists(p) for p in (again, paths[1], paths[2])] == [True, True, False]


def test_the_worker_keeps_its_mapped_constants_for_the_next_compile(monkeypatch):
    """The same plain array for the same file, compile after compile, so what the worker packed from it
    is found in its pack cache; its maps stay within the budget too."""
    from msvm.bytecode import Module
    from msvm.kernels import gemm_packed, packing
    from msvm.msjit.codegen import shared

    monkeypatch.setattr(shared, "_maps", type(shared._maps)())
    arrays = [np.full((shared.MIN_BYTES // 256, 64), i, np.float32) for i in range(3)]
    wheres = [shared.export(Module("m", [], [a]))[1] for a in arrays]
    monkeypatch.setattr(shared, "BUDGET", 2 * shared.MIN_BYTES)  # (the files are written: two maps fit)

    def restored(i):
        return shared.restore(Module("m", [], [np.zeros(1, np.float32)]), wheres[i]).constants[0]

    first = restored(0)
    assert type(first) is np.ndarray and not first.flags.writeable and packing.is_constant(first)
    np.testing.assert_array_equal(first, arrays[0])
    assert restored(0) is first
    assert gemm_packed.packed(restored(0), None)[0] is gemm_packed.packed(first, None)[0]  # packed once
    restored(1), restored(2)
    assert list(shared._maps) == [wheres[1][0][1], wheres[2][0][1]]  # the least recently used went
    assert restored(0) is not first


def test_a_file_the_collector_forgets_during_an_eviction_does_not_deadlock(monkeypatch):
    """Any allocation in a locked section may run the cyclic collector, and with it the finalizer of an
    array whose file is listed: it takes the same lock (a benchmark hung there, every thread waiting)."""
    from msvm.bytecode import Module
    from msvm.msjit.codegen import shared

    class Holder:
        pass

    garbage = Holder()
    garbage.cycle, garbage.array = garbage, np.ones(shared.MIN_BYTES // 4 + 1, np.float32)
    path = shared._file_of(garbage.array)
    del garbage  # only the collector frees it now
    unlink = os.unlink

    def collecting_unlink(p):
        gc.collect()
        unlink(p)

    monkeypatch.setattr(shared, "BUDGET", 0)  # every file but the one sent goes
    monkeypatch.setattr(os, "unlink", collecting_unlink)
    fresh = np.ones(shared.MIN_BYTES // 4 + 1, np.float32)
    sent = []
    module = Module("m", [], [fresh])
    exporter = threading.Thread(target=lambda: sent.append(shared.export(module)), daemon=True)
    exporter.start()
    exporter.join(10)
    assert sent, "export deadlocked"
    assert not os.path.exists(path) and os.path.exists(sent[0][1][0][1])


def test_files_of_processes_that_are_gone_are_swept(monkeypatch):
    import subprocess

    from msvm.msjit.codegen import shared

    gone = subprocess.Popen(["true"])
    gone.wait()
    stale = os.path.join(shared._DIR, f"msvm-{gone.pid}-0.const")
    ours = os.path.join(shared._DIR, f"msvm-{os.getpid()}-999999.const")
    for path in (stale, ours):
        open(path, "w").close()
    monkeypatch.setattr(shared, "_swept", False)
    try:
        weight = np.ones((1 << 18) + 1, np.float32)
        shared._file_of(weight)
        assert not os.path.exists(stale) and os.path.exists(ours)
    finally:
        os.unlink(ours)


def test_a_lowering_error_in_the_worker_names_its_reason():
    def body(f, x):
        return f.call("nonzero", [x])

    worker = CompileWorker()
    try:
        with pytest.raises(LoweringError, match="nonzero"):
            compiled(region(body, [("[4]", "float32")]), via_worker=worker)
    finally:
        worker.close()


def test_launch_spec_survives_json():
    m = region(_net, [("[N, 3, H, W]", "float32")])
    spec = lower(m, "f", bounds={"N": 8, "H": 16, "W": 16}).launch
    assert spec.guards and not spec.exact
    assert LaunchSpec.from_json(json.loads(json.dumps(spec.to_json()))) == spec


def test_scalar_argument_binds_before_input_dims():
    def body(f, x, s):
        return f.call("mul", [x, x])

    m = region(body, [("[S, 2]", "float32")], scalars=["S"])
    r = compiled(m, bounds={"S": 8})
    assert_close(r.fn(rand((3, 2)), 3), interpret(m, rand((3, 2)), 3))
    with pytest.raises(ShapeError):  # the interpreter rejects it as well
        interpret(m, rand((3, 2)), 4)
    with pytest.raises(ShapeError) as e:
        r.fn(rand((3, 2)), 4)
    guard_error(e)
