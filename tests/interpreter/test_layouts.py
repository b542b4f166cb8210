"""The fast path's NCHWc conv chains: which tensors stay blocked, and that results never change."""

import numpy as np
import pytest

import msvm as ms
from msvm.bytecode import ModuleBuilder
from msvm.interpreter import Program, fusion
from msvm.interpreter.layouts import Borders
from msvm.kernels import conv_nchwc
from msvm.observe.trace import TRACE
from msvm.scheduler import load_capability_patch, reset_capability_db, reset_dispatch_state

RNG = np.random.default_rng(11)


def weight(cout, cin, k, dtype):
    return (RNG.standard_normal((cout, cin, k, k)) * 0.2).astype(dtype)


def bias(cout, dtype):
    return RNG.standard_normal(cout).astype(dtype)


def block(dtype="float32", pad2=1, tail="mean", c_in=8):
    """A ResNet block: x → relu(conv 3×3) = h → relu(conv(h, pad ``pad2``) + h) = y → conv 1×1/s2 → tail."""
    mb = ModuleBuilder("t")
    f = mb.function("f", ["x"])
    x = f.tensor_input(0, f"[N, {c_in}, H, W]", dtype)
    k2 = 2 * pad2 + 1
    w1, b1 = f.load_const(weight(16, c_in, 3, dtype)), f.load_const(bias(16, dtype))
    h = f.call("relu", [f.call("conv2d", [x, w1, b1], {"padding": (1, 1)})])
    c = f.call("conv2d", [h, f.load_const(weight(16, 16, k2, dtype)), f.load_const(bias(16, dtype))],
               {"padding": (pad2, pad2)})
    y = f.call("relu", [f.call("add", [c, h])])
    z = f.call("conv2d", [y, f.load_const(weight(16, 16, 1, dtype)), f.load_const(bias(16, dtype))],
               {"stride": (2, 2)})
    if tail == "mean":
        f.ret(f.call("mean", [z], {"axis": (2, 3)}))
    else:  # y is read by something other than a conv, and returned
        f.ret(z, f.call("relu", [y]))
    return Program(mb.build()).function("f")


@pytest.fixture
def borders(monkeypatch):
    """The NCHWc operands the layout pass gives each conv unit, by its ops (as the next call plans them)."""
    seen, plan = {}, fusion.conv_borders

    def spy(info, units, region_of):
        out = plan(info, units, region_of)
        seen.update({tuple(s.ins["op"] for s in units[k]): b for k, b in out.items()})
        return out

    monkeypatch.setattr(fusion, "conv_borders", spy)
    return seen


@pytest.fixture(autouse=True)
def clean_scheduler():
    reset_dispatch_state()
    yield
    reset_capability_db()
    reset_dispatch_state()


def traced(exe, *args):
    """The traced twin runs every instruction by itself, in NCHW."""
    TRACE.clear()
    TRACE.enable(True, path=None)
    try:
        return exe(*args)
    finally:
        TRACE.enable(False)


def no_conversions(monkeypatch):
    """Make a layout conversion fail: where the kernels take the chain's layouts, none is needed."""

    def converted(*args):
        raise AssertionError("a conv chain converted a layout")

    monkeypatch.setattr(conv_nchwc, "to_nchwc", converted)
    monkeypatch.setattr(conv_nchwc, "from_nchwc", converted)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("c_in", [8, 3])  # 3: an image's channels, the output blocked all the same
def test_a_resnet_block_keeps_its_conv_outputs_in_nchwc_to_the_same_bits(dtype, c_in, borders, monkeypatch):
    exe = block(dtype, c_in=c_in)
    x = RNG.standard_normal((2, c_in, 12, 10)).astype(dtype)
    no_conversions(monkeypatch)
    out = exe(x)
    assert borders == {
        ("conv2d", "relu"): Borders(out=1),  # h: read with padding 1, as input and residual
        ("conv2d", "add", "relu"): Borders(x=1, residual=1, out=0),  # y: read by a 1×1 conv
        ("conv2d",): Borders(x=0),  # z: read by mean, NCHW
    }
    np.testing.assert_array_equal(out, traced(exe, x))


def test_the_border_is_as_wide_as_the_widest_padding_of_the_readers(borders):
    exe = block(pad2=2)
    x = RNG.standard_normal((1, 8, 9, 9)).astype(np.float32)
    out = exe(x)
    assert borders[("conv2d", "relu")] == Borders(out=2)
    np.testing.assert_array_equal(out, traced(exe, x))


def test_a_tensor_another_op_reads_or_the_function_returns_stays_nchw(borders):
    exe = block(tail="both")
    x = RNG.standard_normal((2, 8, 8, 8)).astype(np.float32)
    z, y = exe(x)
    # y is returned and read by a relu: NCHW; so is h, added into y (a residual is in its output's
    # layout), and with it every operand of the chain
    assert borders == {}
    assert z.shape == (2, 16, 4, 4) and y.shape == (2, 16, 8, 8)
    tz, ty = traced(exe, x)
    np.testing.assert_array_equal(z, tz)
    np.testing.assert_array_equal(y, ty)


@pytest.mark.parametrize("variant", ["im2col_gemm", "reference"])
def test_a_site_whose_pick_takes_no_nchwc_gets_nchw_copies(variant, borders):
    """The cost model (here a patch) may pick a kernel for a chain's conv that only takes NCHW: the chain
    converts its operands for it and blocks its result again, and the results agree."""
    load_capability_patch({"devices": {"cpu": {"ops": {"conv2d": {"force": variant}}}}})
    exe = block()
    x = RNG.standard_normal((2, 8, 12, 10)).astype(np.float32)
    out = exe(x)
    assert borders[("conv2d", "relu")] == Borders(out=1)
    steps = [s for s in exe.steps if s.ins.name == "OP_CALL" and s.ins["op"] == "conv2d"]
    assert {s.choice.variant for s in steps} == {variant}
    np.testing.assert_allclose(out, traced(exe, x), rtol=1e-5, atol=1e-5)


def test_results_agree_while_the_region_is_interpreted_and_once_it_is_compiled():
    mb = ModuleBuilder("t")
    f = mb.function("f", ["x"])
    x = f.tensor_input(0, "[N, 8, H, W]", "float32")
    h = f.call("relu", [f.call("conv2d", [x, f.load_const(weight(16, 8, 3, np.float32)),
                                          f.load_const(bias(16, np.float32))], {"padding": (1, 1)})])
    y = f.call("conv2d", [h, f.load_const(weight(16, 16, 3, np.float32)), f.load_const(bias(16, np.float32))],
               {"padding": (1, 1)})
    f.ret(f.call("relu", [f.call("add", [y, h])]))
    exe = Program(mb.build()).function("f")
    x = RNG.standard_normal((2, 8, 12, 10)).astype(np.float32)
    ms.vm.reset()
    first = exe(x)
    for _ in range(4):
        exe(x)
    assert ms.vm.wait_for_compiles(60)
    assert [e["status"] for e in ms.vm.jit_info() if e["function"] == "f"] == ["compiled"]
    np.testing.assert_allclose(exe(x), first, rtol=1e-5, atol=1e-5)
    assert any(e["hits"] for e in ms.vm.jit_info() if e["function"] == "f")


def test_nchwc_round_trips_and_the_kernel_takes_it_in_every_place():
    x = RNG.standard_normal((2, 16, 9, 11)).astype(np.float32)
    blocked = conv_nchwc.to_nchwc(x, 2)
    assert blocked.shape == (2, 2, 13, 15, 8)
    assert not blocked[:, :, :2].any() and not blocked[..., -2:, :].any()
    np.testing.assert_array_equal(conv_nchwc.from_nchwc(blocked, 2), x)
    assert conv_nchwc.nchw_shape(blocked, 2) == x.shape
    kernel = conv_nchwc.make({"padding": (1, 1)})
    w, b = weight(16, 16, 3, np.float32), bias(16, np.float32)
    skip = RNG.standard_normal((2, 16, 9, 11)).astype(np.float32)
    want = np.maximum(kernel(x, w, b) + skip, 0)
    for xb in (None, 1, 2):
        for ob in (None, 0, 1):
            rb = None if ob is None else 1
            res = skip if rb is None else conv_nchwc.to_nchwc(skip, rb)
            got = kernel.with_layouts(x if xb is None else conv_nchwc.to_nchwc(x, xb), w, b, residual=res,
                                      relu=True, x_border=xb, res_border=rb, out_border=ob)
            if ob is not None:  # the kernel zeroes the border it writes
                rim = got.copy()
                rim[:, :, ob:rim.shape[2] - ob, ob:rim.shape[3] - ob] = 0
                assert not rim.any()
                got = conv_nchwc.from_nchwc(got, ob)
            np.testing.assert_array_equal(got, want)
    assert kernel.with_layouts(conv_nchwc.to_nchwc(x, 0), w, b, x_border=0) is None  # padding 1 > border 0
    assert kernel.with_layouts(x, w, b, residual=skip, out_border=1) is None  # a residual in another layout
