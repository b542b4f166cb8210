"""The fast path's conv epilogue fusion: what fuses, what must not, and that results never change."""

from types import SimpleNamespace

import numpy as np
import pytest

from msvm.bytecode import ModuleBuilder
from msvm.context import CONTEXT, set_context
from msvm.interpreter import Program
from msvm.interpreter.fusion import fuse_epilogues
from msvm.observe.trace import TRACE
from msvm.ops import REGISTRY

RNG = np.random.default_rng(7)
X = RNG.standard_normal((2, 8, 10, 12)).astype(np.float32)
W = (RNG.standard_normal((16, 8, 3, 3)) * 0.2).astype(np.float32)
B = RNG.standard_normal(16).astype(np.float32)
SKIP = RNG.standard_normal((2, 16, 10, 12)).astype(np.float32)


def build(tail, weight=W, skip_spec="[N, 16, H, W]"):
    """f(x, skip) = tail(f, conv(x), skip): a padded 3×3 conv with a bias, and what follows it."""
    mb = ModuleBuilder("t")
    f = mb.function("f", ["x", "skip"])
    x = f.tensor_input(0, "[N, 8, H, W]", "float32")
    skip = f.tensor_input(1, skip_spec, "float32")
    conv = f.call("conv2d", [x, f.load_const(weight), f.load_const(B)], {"padding": (1, 1)})
    out = tail(f, conv, skip)
    f.ret(*out) if isinstance(out, tuple) else f.ret(out)
    return Program(mb.build()).function("f")


def expected(tail_np, weight=W, skip=SKIP):
    conv = REGISTRY["conv2d"].kernel(X, weight, B, padding=(1, 1))
    return tail_np(conv, skip)


def fused_lines(exe):
    return [line.strip() for line in exe.generated().source.splitlines() if " = F" in line]


def traced(exe, *args):
    TRACE.clear()
    TRACE.enable(True, path=None)
    try:
        return exe(*args), [e.op for e in TRACE.recent() if e.opcode == "OP_CALL"]  # (compiles may land)
    finally:
        TRACE.enable(False)


CHAINS = {
    "add then relu": (lambda f, c, s: f.call("relu", [f.call("add", [c, s])]),
                      lambda c, s: np.maximum(c + s, 0), "residual="),
    "add then relu, skip first": (lambda f, c, s: f.call("relu", [f.call("add", [s, c])]),
                   lambda c, s: np.maximum(s + c, 0), "residual="),
    "relu": (lambda f, c, s: f.call("relu", [c]), lambda c, s: np.maximum(c, 0), ""),
    "add": (lambda f, c, s: f.call("add", [c, s]), lambda c, s: c + s, "residual="),
}


@pytest.mark.parametrize("chain", CHAINS)
def test_a_conv_and_the_ops_that_alone_read_it_run_as_one_step(chain):
    tail, tail_np, residual = CHAINS[chain]
    exe = build(tail)
    out = exe(X, SKIP)
    lines = fused_lines(exe)
    assert len(lines) == 1 and residual in lines[0], exe.generated().source
    np.testing.assert_allclose(out, expected(tail_np), rtol=1e-5, atol=1e-5)
    again, ops = traced(exe, X, SKIP)  # the traced twin runs every instruction by itself, to the same bits
    np.testing.assert_array_equal(out, again)
    assert ops == ["conv2d", *[op for op in ("add", "relu") if op in chain]]


def test_an_unbatched_conv_fuses_too():
    mb = ModuleBuilder("t")
    f = mb.function("f", ["x", "skip"])
    x, skip = f.tensor_input(0, "[8, H, W]", "float32"), f.tensor_input(1, "[16, H, W]", "float32")
    conv = f.call("conv2d", [x, f.load_const(W), f.load_const(B)], {"padding": (1, 1)})
    f.ret(f.call("relu", [f.call("add", [conv, skip])]))
    exe = Program(mb.build()).function("f")
    out = exe(X[0], SKIP[0])
    assert len(fused_lines(exe)) == 1
    np.testing.assert_allclose(out, expected(lambda c, s: np.maximum(c + s, 0))[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", ["the conv is returned too", "the sum is read twice", "a broadcast skip"])
def test_what_another_instruction_reads_or_a_broadcast_keeps_its_own_steps(case):
    skip_spec = "[16, 1, 1]" if case == "a broadcast skip" else "[N, 16, H, W]"
    skip = SKIP[0, :, :1, :1] if case == "a broadcast skip" else SKIP

    def tail(f, c, s):
        total = f.call("add", [c, s])
        if case == "the conv is returned too":
            return f.call("relu", [total]), c
        if case == "the sum is read twice":
            return f.call("relu", [total]), total
        return f.call("relu", [total])

    exe = build(tail, skip_spec=skip_spec)
    out = exe(X, skip)
    conv = REGISTRY["conv2d"].kernel(X, W, B, padding=(1, 1))
    first = out[0] if isinstance(out, tuple) else out
    np.testing.assert_allclose(first, np.maximum(conv + skip, 0), rtol=1e-5, atol=1e-5)
    lines = fused_lines(exe)
    if case == "the sum is read twice":  # the conv and the add still fuse; the relu reads the sum
        assert len(lines) == 1 and "residual=" in lines[0]
        np.testing.assert_allclose(out[1], conv + skip, rtol=1e-5, atol=1e-5)
    else:
        assert lines == []


@pytest.mark.parametrize("how", ["the reference policy", "too few output channels"])
def test_a_kernel_without_an_epilogue_runs_the_ops_one_after_another(how):
    """The fused step asks the conv's site which kernel it runs; one that takes no epilogue (or declines
    these operands) runs, then the add and the relu sites' own kernels."""
    weight = W[:4] if how == "too few output channels" else W
    bias = B[:4] if how == "too few output channels" else B
    saved = CONTEXT.kernel_policy
    if how == "the reference policy":
        set_context(kernel_policy="reference")
    try:
        mb = ModuleBuilder("t")
        f = mb.function("f", ["x", "skip"])
        x = f.tensor_input(0, "[N, 8, H, W]", "float32")
        skip = f.tensor_input(1, f"[N, {len(bias)}, H, W]", "float32")
        conv = f.call("conv2d", [x, f.load_const(weight), f.load_const(bias)], {"padding": (1, 1)})
        f.ret(f.call("relu", [f.call("add", [conv, skip])]))
        exe = Program(mb.build()).function("f")
        out = exe(X, SKIP[:, :len(bias)])
        assert len(fused_lines(exe)) == 1
    finally:
        set_context(kernel_policy=saved)
    conv = REGISTRY["conv2d"].kernel(X, weight, bias, padding=(1, 1))
    np.testing.assert_allclose(out, np.maximum(conv + SKIP[:, :len(bias)], 0), rtol=1e-5, atol=1e-5)


def test_no_fusion_across_the_edge_of_a_jit_region():
    exe = build(CHAINS["add then relu"][0])
    conv = next(s for s in exe.steps if s.ins.name == "OP_CALL" and s.ins["op"] == "conv2d")
    inside = SimpleNamespace(addresses=frozenset({conv.address, conv.address + 1, conv.address + 2}))
    edge = SimpleNamespace(addresses=frozenset({conv.address, conv.address + 1}))
    assert len(fuse_epilogues(exe.info, exe.steps, [inside])) == len(exe.steps) - 2
    assert fuse_epilogues(exe.info, exe.steps, [edge]) == exe.steps


@pytest.mark.parametrize("relu", [False, True])
def test_a_linear_and_its_residual_add_run_as_one_step(relu):
    """A transformer's projection + skip connection; the job pool's GEMM applies the add (and ReLU)."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((64, 256)).astype(np.float32)
    skip = rng.standard_normal((64, 128)).astype(np.float32)
    weight = (rng.standard_normal((128, 256)) * 0.1).astype(np.float32)
    bias = rng.standard_normal(128).astype(np.float32)
    mb = ModuleBuilder("t")
    f = mb.function("f", ["x", "skip"])
    xr, sr = f.tensor_input(0, "[L, 256]", "float32"), f.tensor_input(1, "[L, 128]", "float32")
    y = f.call("add", [sr, f.call("linear", [xr, f.load_const(weight), f.load_const(bias)])])
    f.ret(f.call("relu", [y]) if relu else y)
    exe = Program(mb.build()).function("f")
    out = exe(x, skip)
    producer = next(s for s in exe.steps if s.ins.name == "OP_CALL" and s.ins["op"] == "linear")
    assert len(fused_lines(exe)) == 1 and producer.choice.variant == "pool"  # it takes the epilogue
    want = skip + (x @ weight.T + bias)
    np.testing.assert_allclose(out, np.maximum(want, 0) if relu else want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(out, traced(exe, x, skip)[0])
