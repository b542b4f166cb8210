"""Pickled ``@ms.jit`` functions and ONNX models: MS-BC and plain data, verified, reused per process."""

# ms.Tensor["N", 8] reads to linters as a string forward reference: F821 is noise here.
# ruff: noqa: F821

import concurrent.futures
import hashlib
import multiprocessing
import pickle
import pickletools

import numpy as np
import pytest

import msvm as ms
from msvm.frontend import persist

W = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32)


@ms.jit
def head(x: ms.Tensor["N", 8], scale: float = 2.0):
    return ms.ops.relu(x @ W) * scale, x.sum()


def _batches(n: int = 6) -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    return [rng.standard_normal((1 + i % 4, 8)).astype(np.float32) for i in range(n)]


def _globals(data: bytes) -> list[tuple[str, str]]:
    """Every global a pickle names (what it would import and call)."""
    strings, found = [], []
    for op, arg, _ in pickletools.genops(data):
        if op.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE"):
            strings.append(arg)
        elif op.name == "STACK_GLOBAL":
            found.append((strings[-2], strings[-1]))
        elif op.name in ("GLOBAL", "INST"):
            found.append(tuple(arg.split(" ", 1)))
    return found


def _payload(data: bytes) -> bytes:
    (blob,) = [arg for op, arg, _ in pickletools.genops(data) if isinstance(arg, bytes)]
    return blob


def test_a_pickled_function_names_only_the_receiver_and_runs_the_same():
    x = _batches(1)[0]
    data = pickle.dumps(head)
    assert _globals(data) == [("msvm.frontend.persist", "receive")]  # no code objects, no Python callables
    assert b"def head" not in data and head.py_func.__code__.co_code not in data
    shipped = pickle.loads(data)
    for got, want in zip(shipped(x), head(x)):
        np.testing.assert_array_equal(got, want)
    assert shipped.versions.keys() == head.versions.keys()
    assert pickle.dumps(shipped) == data  # a worker passes it on unchanged


def test_a_tampered_payload_is_refused_with_an_msvm_error():
    data = pickle.dumps(head)
    blob = _payload(data)
    for at in (len(blob) // 2, len(blob) - 1, 3):
        damaged = bytearray(blob)
        damaged[at] ^= 0x40
        with pytest.raises(ms.BytecodeFormatError) as err:
            pickle.loads(data.replace(blob, bytes(damaged)))
        assert err.value.code == "E-FORMAT-SHIPPED"
    # Under a recomputed digest (damage the digest cannot see) the module still meets the decoder and
    # the verifier, and the header its checks: a bad magic, a cut module, a bad option are refused.
    _, (module,) = persist._unpack(blob)
    head_bytes = blob[len(persist.SHIP_MAGIC) + 32:-len(module)]
    bad_option = head_bytes.replace(b'"hot_threshold":3', b'"hot_threshold":0')
    assert bad_option != head_bytes
    for body in (head_bytes + b"XXXX" + module[4:], head_bytes + module[:-5],
                 bad_option + module):
        with pytest.raises(ms.MsvmError):
            persist.receive(persist.SHIP_MAGIC + hashlib.sha256(body).digest() + body)


def test_a_new_signature_on_an_unpickled_function_is_a_clear_error():
    shipped = pickle.loads(pickle.dumps(head))
    with pytest.raises(ms.CompileError) as err:
        shipped(np.ones((2, 8), np.float64))
    assert err.value.code == "E-COMPILE-SHIPPED" and "before pickling" in err.value.hint


def test_a_function_with_no_compiled_version_is_not_pickled():
    @ms.jit
    def free(x):
        return x + 1.0

    with pytest.raises(ms.CompileError, match="no compiled version"):
        pickle.dumps(free)
    free(np.ones(3, np.float32))
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(free))(np.ones(3, np.float32)), 2.0)


def test_receiving_the_same_function_again_reuses_its_verified_version():
    data = pickle.dumps(head)
    first, second = pickle.loads(data), pickle.loads(data)
    (a,), (b,) = first._versions.values(), second._versions.values()
    assert a is b and a.program is b.program  # one verify and one warm JIT per process


@pytest.mark.parametrize("pool", ["futures", "multiprocessing"])
def test_a_function_runs_in_spawned_processes(pool: str):
    batches = _batches()
    want = [head(b)[0] for b in batches]
    context = multiprocessing.get_context("spawn")
    if pool == "futures":
        with concurrent.futures.ProcessPoolExecutor(1, mp_context=context) as ex:
            got = [r[0] for r in ex.map(head, batches)]
    else:
        with context.Pool(1) as p:
            got = [r[0] for r in p.map(head, batches)]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6)


def test_an_onnx_model_pickles_as_its_module():
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"], name="relu"),
         helper.make_node("Neg", ["x"], ["n"], name="neg")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, ["N", 2]) for o in ("r", "n")])
    model = ms.onnx.load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    assert onnx is not None
    data = pickle.dumps(model)
    assert _globals(data) == [("msvm.frontend.persist", "receive")]
    copy = pickle.loads(data)
    x = np.array([[1.0, -2.0]], np.float32)
    assert [a.tolist() for a in copy.run(None, {"x": x})] == [a.tolist() for a in model.run(None, {"x": x})]
    assert copy.symbols == model.symbols and copy.output_names == ["r", "n"]
    assert pickle.loads(data).function is copy.function  # received once per process
