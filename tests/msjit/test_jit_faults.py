"""Fault isolation: an LLVM error, hang or crash in the compile worker ends as fallback, not a dead kernel."""

# ms.Tensor["N", 3] reads to linters as string forward references: F821 is noise here.
# ruff: noqa: F821

import numpy as np
import pytest

import msvm as ms
import msvm.ops as ops
from msvm.frontend import Tensor, jit
from msvm.msjit.compiler import COMPILER


@jit
def guarded(x: Tensor["N", 16]):
    return ops.relu(x * 2.0 + 1.0)


def run(x: np.ndarray, times: int) -> None:
    for _ in range(times):
        np.testing.assert_allclose(guarded(x), guarded.py_func(x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("fault", "words"), [("error", "injected error"), ("hang", "timed out"),
                                              ("crash", "crashed")])
def test_an_injected_fault_ends_as_fallback_and_the_worker_heals(fault: str, words: str) -> None:
    if fault == "hang":
        ms.set_context(compile_timeout_ms=1500)
    ms.vm._inject_compile_fault(fault)
    x = np.random.default_rng(1).random((4, 16), dtype=np.float32)
    run(x, 3)
    assert ms.vm.wait_for_compiles(60)
    (entry,) = ms.vm.jit_info()
    assert entry["status"] == "fallback" and words in entry["reason"], entry["reason"]
    assert [e["kind"] for e in ms.vm.jit_monitor().events() if e["kind"] == "fallback"] == ["fallback"]
    run(x, 4)  # keeps running interpreted, and is not compiled again for this key
    assert ms.vm.wait_for_compiles(60)
    (entry,) = ms.vm.jit_info()
    assert entry["status"] == "fallback" and entry["hits"] == 0
    y = np.random.default_rng(2).random((5, 16), dtype=np.float32)  # the next compile gets a fresh worker
    for _ in range(3):
        np.testing.assert_allclose(guarded(y), guarded.py_func(y), rtol=1e-5, atol=1e-6)
    assert ms.vm.wait_for_compiles(60)
    assert [e["status"] for e in ms.vm.jit_info()] == ["fallback", "compiled"]


def test_only_known_faults_can_be_injected() -> None:
    with pytest.raises(ValueError, match="crash"):
        COMPILER._inject_fault("segfault")


def test_a_region_the_verifier_refuses_ends_as_fallback_with_its_reason(monkeypatch) -> None:
    """The compiler thread does not verify the region it builds (lowering does, in the worker): a region
    function the verifier refuses still ends as fallback naming the verifier's error."""
    from msvm.bytecode import ModuleBuilder
    from msvm.msjit.runtime import RegionRuntime

    def broken(self, entry):
        mb = ModuleBuilder("broken")
        f = mb.function("f", ["x0"])
        x = f.tensor_input(0, "[4, 3]", "float32")
        f.ret(f.call("matmul", [x, x]))  # [4, 3] @ [4, 3]
        return mb.build(), "f", {}

    monkeypatch.setattr(RegionRuntime, "build", broken)
    x = np.random.default_rng(3).random((6, 16), dtype=np.float32)
    run(x, 3)
    assert ms.vm.wait_for_compiles(60)
    (entry,) = ms.vm.jit_info()
    assert entry["status"] == "fallback" and "matmul" in entry["reason"], entry["reason"]
    run(x, 2)  # still right, interpreted
