"""The user-facing surface: annotations, ms.mutable, symbolic_mul, and the JitFunction attributes."""

# ms.Tensor["N", 3] reads to linters as string forward references: F821 is noise here. No
# `from __future__ import annotations` either: with it, ruff's UP037 "fix" unquotes the symbols.
# ruff: noqa: F821

import threading
import timeit

import numpy as np
import pytest

import msvm as ms
from msvm.frontend import JitFunction, Mutable, Tensor, TensorAnnotation, jit, mutable, symbolic_mul
from msvm.shapes import UNKNOWN, Dim


def test_tensor_annotations() -> None:
    a = Tensor["N", 3, "?", "H*2"]
    assert isinstance(a, TensorAnnotation)
    assert list(a.spec) == [Dim.sym("N"), Dim.const(3), UNKNOWN, Dim("H*2")]
    assert a.dtype is None
    assert Tensor["N", 4, "float64"].dtype == "float64"
    assert Tensor[np.int32, "N"].dtype == "int32"
    assert Tensor[()].spec.rank == 0
    assert Tensor["N"].spec.rank == 1
    assert repr(Tensor["N", 3, "bool"]) == "Tensor['N', 3, 'bool']"


@pytest.mark.parametrize("items, error", [
    (("N", -1), ValueError),
    (("N", 2.5), TypeError),
    (("N", True), TypeError),
    (("float32", "float64"), TypeError),
    (("N+",), ValueError),
    ((np.uint8,), TypeError),
])
def test_bad_tensor_annotations(items: tuple, error: type) -> None:
    with pytest.raises(error):
        Tensor[items]
    with pytest.raises(TypeError):
        Tensor()


def test_mutable_and_symbolic_mul_outside_jit() -> None:
    m = mutable(224)
    assert isinstance(m, Mutable) and isinstance(m, int) and m == 224 and repr(m) == "mutable(224)"
    assert mutable(np.int64(3)) == 3
    with pytest.raises(TypeError):
        mutable(True)
    with pytest.raises(TypeError):
        mutable(2.5)
    assert symbolic_mul(m, 2) == 448
    assert symbolic_mul(np.ones(2), 3).tolist() == [3.0, 3.0]


@jit
def scale(x: Tensor["N", "C"], y: Tensor["C"], k):
    return x * y + k


def test_jit_function_surface() -> None:
    assert isinstance(scale, JitFunction)
    assert scale.__name__ == "scale" and scale.py_func.__name__ == "scale"
    assert scale.options.cache_mode == "exact"
    assert "scale" in repr(scale)
    with pytest.raises(TypeError, match="Python functions"):
        jit(np.exp)
    with pytest.raises(TypeError):
        jit(print)


def test_signature_key_is_cheap() -> None:
    """A call's key costs an attribute read per ndarray argument (the aim is <= 2 us for 3 arguments)."""
    x, y = np.ones((4, 3), np.float32), np.ones(3, np.float32)
    args = (x, y, 2)
    scale(*args)
    best = min(timeit.repeat(lambda: scale._key(args), number=2000, repeat=7)) / 2000
    assert best < 2e-6, f"{best * 1e6:.2f} us per key"


def test_tracing_switched_on_after_warm_calls_is_seen() -> None:
    """Warm calls take the executable's fast path directly; switching tracing on must still trace them.
    (The JIT is off: earlier tests' calls of ``scale`` may have made its region hot, and native code is
    traced as one region event, not as its ops.)"""
    x, y = np.ones((4, 3), np.float32), np.ones(3, np.float32)
    ms.set_context(jit_enabled=False)
    try:
        scale(x, y, 2)
        scale(x, y, 2)
        ms.vm.clear_bc_trace()
        ms.vm.enable_bc_trace(True, path=None)
        try:
            np.testing.assert_array_equal(scale(x, y, 2), x * y + 2)
        finally:
            ms.vm.enable_bc_trace(False)
    finally:
        ms.set_context(jit_enabled=True)
    me = threading.get_ident()
    ops = [e.op for e in ms.vm.bc_trace_events() if e.thread == me and e.opcode == "OP_CALL"]
    assert ops == ["mul", "add"], ops
