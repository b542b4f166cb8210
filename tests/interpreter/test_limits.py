"""Every tensor an instruction makes is checked against ``max_tensor_bytes`` before it is allocated,
whatever the annotations: results whose static types the verifier could not pin down, and native code."""

# ruff: noqa: F821, UP037 - ms.Tensor["N", 64] reads to linters as string forward references

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import msvm as ms
from msvm.context import set_context
from msvm.interpreter.lowering import unsound_types
from msvm.msjit.runtime import POLICY
from msvm.scheduler import load_capability_patch, reset_capability_db

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def limits():
    yield set_context
    set_context(max_tensor_bytes=4 << 30, max_call_bytes=8 << 30, jit_enabled=True)


def _run_capped(tmp_path: Path, body: str, address_space: int = 2 << 30) -> str:
    """``body`` in a fresh process whose address space is capped: an allocation of the sizes at stake
    fails there (a MemoryError, ``E-LIMIT-MEMORY``) instead of being made."""
    script = tmp_path / "capped.py"
    script.write_text(textwrap.dedent(f"""
        import resource
        resource.setrlimit(resource.RLIMIT_AS, ({address_space}, {address_space}))
        import numpy as np
        import msvm as ms
        ms.set_context(jit_enabled=False)
    """) + textwrap.dedent(body))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_an_unannotated_broadcast_is_checked_before_allocating(tmp_path: Path) -> None:
    """(n, 1) + (1, n) is typed (n, 1) — the verifier cannot tell which side is 1 — but is (n, n):
    6.7 GiB at n = 30,000 and 74.5 GiB at 100,000 under the default 4 GiB limit."""
    out = _run_capped(tmp_path, """
        @ms.jit
        def add(a, b):
            return a + b

        for n in (30_000, 100_000):
            try:
                add(np.ones((n, 1)), np.ones((1, n)))
            except ms.ResourceLimitError as err:
                print(err.code, err.address, err.opcode, "max_tensor_bytes" in str(err))
    """)
    assert out.split("\n")[:2] == ["E-LIMIT-TENSOR 2 OP_CALL add True"] * 2


@ms.jit
def _broadcast_chain(a, b):
    c = a + b
    return ms.ops.exp(c) * 2.0


def test_results_of_an_undecided_broadcast_are_checked_where_made(limits) -> None:
    a, b = np.ones((300, 1), np.float32), np.ones((1, 300), np.float32)
    np.testing.assert_allclose(_broadcast_chain(a, b), np.exp(a + b) * 2.0, rtol=1e-6)
    program, name, _ = _broadcast_chain.program_for(a, b)
    exe = program.function(name)
    sized = {s.opname: s.runtime_sized for s in exe.steps if s.ins.name in ("TENSOR_CREATE", "OP_CALL")}
    assert sized == {"TENSOR_CREATE": False, "OP_CALL add": True, "OP_CALL exp": True, "OP_CALL mul": True}
    assert {s.address for s in exe.steps if s.ins.name == "OP_CALL"} <= unsound_types(exe.info)
    limits(max_tensor_bytes=300 * 300 * 4 - 1)
    with pytest.raises(ms.ResourceLimitError) as err:
        _broadcast_chain(a, b)
    assert err.value.code == "E-LIMIT-TENSOR" and err.value.opcode == "OP_CALL add"


@ms.jit
def _annotated(x: ms.Tensor["N", 64], y: ms.Tensor["N", 64]):
    return ms.ops.relu(x * y + 1.0)


def test_decided_shapes_stay_bounded_at_entry() -> None:
    """Nothing of a program whose shapes the verifier proved is checked again per call."""
    x = np.ones((4, 64), np.float32)
    program, name, _ = _annotated.program_for(x, x)
    assert not any(s.runtime_sized for s in program.function(name).steps)


def test_a_conv_whose_reference_workspace_is_over_the_limit_raises_before_allocating(tmp_path: Path) -> None:
    """The reference conv's column matrix for x [1, 256, 512, 512], w [4, 256, 11, 11] is 31 GB."""
    out = _run_capped(tmp_path, """
        ms.set_context(kernel_policy="reference")

        @ms.jit
        def conv(x, w):
            return ms.ops.conv2d(x, w)

        x, w = np.ones((1, 256, 512, 512), np.float32), np.ones((4, 256, 11, 11), np.float32)
        try:
            conv(x, w)
        except ms.ResourceLimitError as err:
            print(err.code, err.opcode, "31,224,303,616" in str(err))
    """, address_space=3 << 30)
    assert out.split("\n")[0] == "E-LIMIT-TENSOR OP_CALL conv2d True"


@ms.jit
def _conv_block(x: ms.Tensor["N", 8, 20, 20], w: ms.Tensor[6, 8, 5, 5], b: ms.Tensor[6],
                skip: ms.Tensor["N", 6, 20, 20]):
    return ms.ops.relu(ms.ops.conv2d(x, w, b, padding=2) + skip)


def test_a_conv_over_the_limit_computes_through_a_variant_that_fits(limits) -> None:
    """The reference, forced by a patch, runs while its workspace fits; under 80 KB its column matrix
    (640 KB) is out and im2col_gemm builds its 320 KB a band of rows at a time — inside the fused conv
    + add + ReLU line, where the site's pick is asked for."""
    load_capability_patch({"version": 1, "devices": {"cpu": {"ops": {"conv2d": {"force": "reference"}}}}})
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((2, 8, 20, 20), np.float32), rng.standard_normal((6, 8, 5, 5), np.float32)
    b, skip = rng.standard_normal(6, np.float32), rng.standard_normal((2, 6, 20, 20), np.float32)
    limits(jit_enabled=False)  # the interpreter's kernels, not a compiled region's
    program, name, _ = _conv_block.program_for(x, w, b, skip)
    conv = next(s for s in program.function(name).steps if s.opname == "OP_CALL conv2d")
    try:
        want = _conv_block(x, w, b, skip)
        assert conv.choice.variant == "reference"
        limits(max_tensor_bytes=80_000)
        got = _conv_block(x, w, b, skip)
        assert conv.choice.variant == "im2col_gemm"
    finally:
        reset_capability_db()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@ms.jit(hot_threshold=1)
def _jit_broadcast(a, b):
    return ms.ops.relu(a + b)


def test_native_code_is_not_run_where_its_outputs_are_over_the_limit(limits, monkeypatch) -> None:
    """A compiled region allocates its outputs and arena itself: the key's sizes are checked against
    the limit before its code is served, again after the limit changes, else it runs interpreted."""
    monkeypatch.setattr(POLICY, "demote", False)
    monkeypatch.setattr(POLICY, "skip_small", False)
    a, b = np.ones((300, 1), np.float32), np.ones((1, 300), np.float32)
    for _ in range(2):
        _jit_broadcast(a, b)
    assert ms.vm.wait_for_compiles(120)
    np.testing.assert_allclose(_jit_broadcast(a, b), np.full((300, 300), 2.0, np.float32))
    [entry] = [e for e in ms.vm.jit_info() if e["function"] == "_jit_broadcast"]
    assert entry["status"] == "compiled" and entry["hits"] >= 1, entry["reason"]
    limits(max_tensor_bytes=300 * 300 * 4 - 1)
    with pytest.raises(ms.ResourceLimitError) as err:
        _jit_broadcast(a, b)
    assert err.value.code == "E-LIMIT-TENSOR"
    [after] = [e for e in ms.vm.jit_info() if e["function"] == "_jit_broadcast"]
    assert after["hits"] == entry["hits"]
