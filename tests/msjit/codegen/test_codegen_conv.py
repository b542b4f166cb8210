"""conv2d in compiled regions: the native direct kernels, their fused epilogues and NCHWc chains.

Every configuration is compiled and compared with the interpreter (the reference kernels), in exact
mode and in bucket mode (N, H and W run-time sizes, called below and at the bucket's bound).
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from codegen_helpers import assert_close, check, compiled, interpret, rand, region, run_modes

FLOATS = ["float32", "float64"]

# (N, C_in, C_out, H, W, kernel, stride, padding, dilation, groups, bias)
CASES = [
    (1, 3, 16, 17, 16, 3, 1, 1, 1, 1, True),  # a stem: 3 channels, odd H
    (8, 16, 16, 12, 11, 3, 1, 1, 1, 1, False),  # batch 8, odd W
    (1, 16, 32, 16, 16, 3, 2, 1, 1, 1, True),  # downsampling
    (8, 32, 64, 9, 10, 1, 2, 0, 1, 1, True),  # a 1x1 projection at stride 2
    (1, 64, 64, 8, 8, 3, 1, "same", 1, 1, True),
    (1, 16, 16, 13, 12, 3, 1, 2, 2, 1, True),  # dilation 2
    (1, 8, 24, 9, 9, 5, 1, "same", 1, 1, False),  # 5x5; C_out not a multiple of a register tile
    (2, 32, 64, 9, 9, 3, 1, 1, 1, 4, True),  # grouped
    (2, 32, 32, 10, 11, 3, 1, 1, 1, 32, True),  # depthwise
    (1, 16, 16, 11, 21, 5, 2, 2, 1, 16, False),  # depthwise 5x5, stride 2
    (1, 8, 8, 9, 19, 3, 3, (0, 2), (1, 2), 8, True),  # depthwise, stride 3, dilated, asymmetric padding
    (1, 4, 6, 7, 7, (3, 1), (2, 1), (1, 0), 1, 1, True),  # non-square kernel and stride, C_out < 8
    (1, 6, 12, 8, 8, 3, 1, 1, 1, 3, True),  # 4 output channels per group
    (1, 8, 16, 6, 7, 3, 1, 4, 1, 1, True),  # padding larger than the kernel
]
BUCKET = {"N": [(0, 0)], "H": [(0, 2)], "W": [(0, 3)]}


def _pair(v):
    return tuple(v) if isinstance(v, tuple) else (v, v)


def _conv_attrs(case) -> dict:
    *_, stride, padding, dilation, groups, _bias = case
    pad = padding if isinstance(padding, str) else _pair(padding)
    return {"stride": _pair(stride), "padding": pad, "dilation": _pair(dilation), "groups": groups}


def _params(case, dtype: str, seed: int = 1):
    n, c, oc, h, w, k, *_, groups, bias = case
    rng = np.random.default_rng(seed)
    weight = (rng.standard_normal((oc, c // groups, *_pair(k))) * 0.3).astype(dtype)
    b = rng.standard_normal(oc).astype(dtype) if bias else None
    return (n, c, h, w), weight, b


def _conv(f, x, weight, bias, attrs):
    srcs = [x, f.load_const(weight)] + ([f.load_const(bias)] if bias is not None else [])
    return f.call("conv2d", srcs, attrs)


def _native(r) -> list[str]:
    return [k for k in r.lowered.kernels if k.startswith("conv2d") and ("nchwc" in k or "depthwise" in k)]


@pytest.fixture(params=["exact", "bucket"])
def mode(request):
    return request.param


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("case", CASES, ids=str)
def test_conv_matches_the_interpreter(case, dtype, mode):
    x_shape, weight, bias = _params(case, dtype)
    attrs = _conv_attrs(case)
    r = run_modes(mode, lambda f, x: _conv(f, x, weight, bias, attrs), [(x_shape, dtype)], sym=BUCKET)
    assert len(_native(r)) == 1, r.lowered.kernels
    depthwise = case[9] > 1 and case[9] == case[1] == case[2]
    assert ("depthwise" in r.lowered.kernels[0]) == depthwise


def _relu(f, v):
    return f.call("relu", [v])


def _add(f, a, b):
    return f.call("add", [a, b])


# name -> (y = epilogue(f, conv, x, other_conv), fused into the conv kernel?)
EPILOGUES = {
    "relu": (lambda f, c, x, d: _relu(f, c), True),
    "residual": (lambda f, c, x, d: _add(f, c, x), True),
    "residual-first": (lambda f, c, x, d: _add(f, x, c), True),
    "residual-relu": (lambda f, c, x, d: _relu(f, _add(f, c, x)), True),
    "relu-residual": (lambda f, c, x, d: _add(f, _relu(f, c), x), True),
    "relu-residual-relu": (lambda f, c, x, d: _relu(f, _add(f, _relu(f, c), x)), True),
    "two-convs-relu": (lambda f, c, x, d: _relu(f, _add(f, c, d)), True),
    "sigmoid": (lambda f, c, x, d: f.call("sigmoid", [c]), False),
    "scaled-residual": (lambda f, c, x, d: _add(f, c, f.call("mul", [x, x])), False),
}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", list(EPILOGUES))
@pytest.mark.parametrize("channels", [16, 32])
def test_epilogues_fuse_into_the_conv(name, channels, dtype, mode):
    """ReLU and residual adds run in the conv's output pass; anything else stays a pass of its own."""
    epilogue, fused = EPILOGUES[name]
    case = (2, channels, channels, 9, 10, 3, 1, 1, 1, 1, True)
    x_shape, weight, bias = _params(case, dtype)
    _, w2, b2 = _params(case, dtype, seed=2)
    w2 = w2[:, :, 1:2, 1:2].copy()  # a 1x1 conv as the second branch

    def body(f, x):
        c = _conv(f, x, weight, bias, _conv_attrs(case))
        d = _conv(f, x, w2, b2, {"stride": (1, 1), "padding": (0, 0), "dilation": (1, 1), "groups": 1})
        y = epilogue(f, c, x, d)
        return _conv(f, y, weight, None, _conv_attrs(case))  # read by a conv: y must be materialised

    r = run_modes(mode, body, [(x_shape, dtype)], sym=BUCKET, atol=1e-4 if dtype == "float32" else None)
    kinds = [k.split()[0] for k in r.lowered.kernels]
    convs = 3 if name == "two-convs-relu" else 2
    assert kinds.count("conv2d") == convs, r.lowered.kernels
    assert (kinds == ["conv2d"] * convs) == fused, r.lowered.kernels


def _resnet(params, f, x):
    """The W1 benchmark's network: stem, three residual stages (stride-2 projections), mean pool."""
    stem, blocks = params
    same = {"stride": (1, 1), "padding": (1, 1), "dilation": (1, 1), "groups": 1}
    y = _relu(f, _conv(f, x, *stem, same))
    for b in blocks:
        down = {**same, "stride": (b["stride"],) * 2}
        h = _relu(f, _conv(f, y, b["w1"], b["b1"], down))
        main = _conv(f, h, b["w2"], b["b2"], same)
        skip = y if "wp" not in b else _conv(f, y, b["wp"], b["bp"], {**down, "padding": (0, 0)})
        y = _relu(f, _add(f, main, skip))
    return f.call("mean", [y], {"axis": (2, 3)})


def _resnet_params(dtype: str, widths=(16, 32, 64)):
    rng = np.random.default_rng(0)

    def w(*shape):
        return (rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(dtype)

    stem = (w(widths[0], 3, 3, 3), w(widths[0]))
    blocks, cin = [], widths[0]
    for i, cout in enumerate(widths):
        b = {
            "w1": w(cout, cin, 3, 3),
            "b1": w(cout),
            "w2": w(cout, cout, 3, 3),
            "b2": w(cout),
            "stride": 1 + (i > 0),
        }
        if i > 0:
            b["wp"], b["bp"] = w(cout, cin, 1, 1), w(cout)
        blocks.append(b)
        cin = cout
    return stem, blocks


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("batch", [1, 8])
def test_resnet_chains_convs_in_nchwc(batch, dtype, mode):
    """Tensors only convs read stay in NCHWc between them, with a zero border for the 3x3 convs that
    read them (no padding copy); the last ones are NCHW for the mean."""
    params = _resnet_params(dtype)
    r = run_modes(mode, lambda f, x: _resnet(params, f, x), [((batch, 3, 16, 15), dtype)], sym=BUCKET)
    convs = _native(r)
    assert len(convs) == 9 and len(r.lowered.kernels) == 10, r.lowered.kernels
    assert convs[0].endswith("NCHWc out+1")  # reads the region's NCHW input
    assert all("NCHWc in" in k and "NCHWc out" in k for k in convs[1:7]), convs
    assert "NCHWc in+1" in convs[1] and "NCHWc in+1" in convs[3], convs  # 3x3 convs read bordered inputs
    assert all("NCHWc in" in k and "NCHWc out" not in k for k in convs[7:]), convs  # the mean reads NCHW


def test_channels_that_do_not_fill_blocks_stay_nchw():
    params = _resnet_params("float32", widths=(12, 20, 36))
    r = run_modes("exact", lambda f, x: _resnet(params, f, x), [((2, 3, 12, 12), "float32")])
    assert not any("NCHWc" in k for k in _native(r)), r.lowered.kernels


def test_a_returned_conv_output_is_not_taken_over():
    case = (2, 16, 16, 8, 8, 3, 1, 1, 1, 1, True)
    x_shape, weight, bias = _params(case, "float32")

    def body(f, x):
        c = _conv(f, x, weight, bias, _conv_attrs(case))
        y = _relu(f, _add(f, c, x))
        return c, _conv(f, y, weight, bias, _conv_attrs(case))

    r = run_modes("exact", body, [(x_shape, "float32")])
    kinds = [k.split()[0].split("[")[0] for k in r.lowered.kernels]
    assert kinds == ["conv2d", "elementwise", "conv2d"], r.lowered.kernels
    assert not any("NCHWc" in k for k in r.lowered.kernels)


def test_unbatched_input():
    case = (1, 16, 16, 9, 7, 3, 1, 1, 1, 1, True)
    _, weight, bias = _params(case, "float32")
    r = run_modes(
        "exact",
        lambda f, x: _relu(f, _conv(f, x, weight, bias, _conv_attrs(case))),
        [((16, 9, 7), "float32")],
    )
    assert _native(r) and len(r.lowered.kernels) == 1


@pytest.mark.parametrize("dtype", FLOATS)
def test_weights_computed_in_the_region_use_generated_code(dtype, mode):
    """Only constant weights can be packed when the region is lowered; others take im2col + GEMM."""

    def body(f, x, w, b):
        return _relu(f, f.call("conv2d", [x, w, b], {"padding": (1, 1)}))

    inputs = [((2, 16, 10, 9), dtype), ((16, 16, 3, 3), dtype), ((16,), dtype)]
    r = run_modes(mode, body, inputs, sym={"H": [(0, 2)], "W": [(0, 3)]})
    assert not _native(r), r.lowered.kernels


def test_a_bias_computed_in_the_region_is_added_after():
    """The kernel adds constant biases only (padded to whole register tiles when the region is lowered)."""
    case = (2, 16, 16, 8, 9, 3, 1, 1, 1, 1, False)
    x_shape, weight, _ = _params(case, "float32")

    def body(f, x, b):
        return _relu(f, f.call("conv2d", [x, f.load_const(weight), f.call("neg", [b])], _conv_attrs(case)))

    r = run_modes("exact", body, [(x_shape, "float32"), ((16,), "float32")])
    assert len(_native(r)) == 1 and "add,relu" in r.lowered.kernels[-1], r.lowered.kernels


def test_concurrent_calls_share_the_job_pool():
    """Callers that find the pool busy run their convolution alone; every result is right."""
    params = _resnet_params("float32")
    m = region(lambda f, x: _resnet(params, f, x), [("[4, 3, 32, 32]", "float32")])
    r = check(m, rand((4, 3, 32, 32)))
    inputs = [rand((4, 3, 32, 32), rng=np.random.default_rng(i)) for i in range(4)]
    wants = [interpret(m, x) for x in inputs]
    errors: list[BaseException] = []

    def caller(i: int) -> None:
        try:
            for _ in range(10):
                assert_close(r.fn(inputs[i]), wants[i])
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_bucket_mode_calls_one_kernel_for_every_size():
    params = _resnet_params("float32")
    m = region(lambda f, x: _resnet(params, f, x), [("[N, 3, H, W]", "float32")])
    r = compiled(m, bounds={"N": 4, "H": 40, "W": 40}, mem_optimize=True)
    for shape in [(1, 3, 40, 40), (4, 3, 17, 33), (3, 3, 8, 5), (2, 3, 1, 1)]:
        x = rand(shape, rng=np.random.default_rng(sum(shape)))
        assert_close(r.fn(x), interpret(m, x))


def test_concatenated_conv_outputs(mode):
    """Two convs feeding one tensor (a concat) and a conv reading a slice of another: NCHW stays."""
    case = (2, 16, 16, 9, 8, 3, 1, 1, 1, 1, True)
    x_shape, weight, bias = _params(case, "float32")
    _, w2, b2 = _params(case, "float32", seed=3)
    attrs = _conv_attrs(case)

    def body(f, x):
        both = f.call("concat", [_conv(f, x, weight, bias, attrs), _conv(f, x, w2, b2, attrs)], {"axis": 1})
        half = f.call("slice", [both], {"axes": (1,), "starts": (8,), "stops": (24,)})
        return _conv(f, _relu(f, half), weight, bias, attrs)

    run_modes(mode, body, [(x_shape, "float32")], sym=BUCKET)


def test_a_reshaped_conv_output_stays_nchw():
    """A conv reading another conv's output under another shape reads it in the layout it was written."""
    first = (2, 8, 16, 8, 8, 3, 1, 1, 1, 1, True)
    second = (2, 8, 8, 16, 8, 3, 1, 1, 1, 1, True)
    x_shape, w1, b1 = _params(first, "float32")
    _, w2, b2 = _params(second, "float32", seed=2)

    def body(f, x):
        y = f.call("reshape", [_relu(f, _conv(f, x, w1, b1, _conv_attrs(first)))], {"shape": (2, 8, 16, 8)})
        return _conv(f, y, w2, b2, _conv_attrs(second))

    r = run_modes("exact", body, [(x_shape, "float32")])
    assert len(_native(r)) == 2 and not any("NCHWc" in k for k in r.lowered.kernels), r.lowered.kernels
