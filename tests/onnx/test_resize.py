"""Resize and Upsample import onto the registry's resize ops and match onnxruntime, or are refused.

Only the coordinate modes whose source positions the registry computes are accepted (torch's nearest
and half-pixel/align-corners linear, half-pixel nearest at integer upscales); every other pairing is
an OnnxImportError naming what is supported, never a differently sampled picture.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import msvm as ms

ort = pytest.importorskip("onnxruntime")


def _resize_model(attrs: dict, scales=None, sizes=None, opset: int = 17, rank: int = 4):
    spatial = ["h", "w"][: rank - 2]
    inits = [helper.make_tensor("roi", TensorProto.FLOAT, [0], [])]
    inputs = ["x", "roi"]
    if scales is not None:
        inits.append(helper.make_tensor("scales", TensorProto.FLOAT, [rank], scales))
        inputs.append("scales")
    if sizes is not None:
        inits.append(helper.make_tensor("sizes", TensorProto.INT64, [rank], sizes))
        inputs += ["", "sizes"]
    node = helper.make_node("Resize", inputs, ["y"], name="up", **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        # fixed sizes name the batch too, so a model with sizes takes batch 1
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1 if sizes else "n", 3, *spatial])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


CASES = {
    "torch nearest x2": ({"mode": "nearest", "coordinate_transformation_mode": "asymmetric",
                          "nearest_mode": "floor"}, [1, 1, 2, 2], None),
    "torch nearest x1.5 by 3": ({"mode": "nearest", "coordinate_transformation_mode": "asymmetric",
                                 "nearest_mode": "floor"}, [1, 1, 1.5, 3], None),
    "onnx default nearest x3": ({"mode": "nearest"}, [1, 1, 3, 3], None),
    "half-pixel linear x2": ({"mode": "linear"}, [1, 1, 2, 2], None),
    "half-pixel linear /2": ({"mode": "linear", "coordinate_transformation_mode": "half_pixel"},
                             [1, 1, 0.5, 0.5], None),
    "pytorch-half-pixel linear x2": ({"mode": "linear",
                                      "coordinate_transformation_mode": "pytorch_half_pixel"},
                                     [1, 1, 2, 2], None),
    "align-corners linear to 9x7": ({"mode": "linear", "coordinate_transformation_mode": "align_corners"},
                                    None, [1, 3, 9, 7]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_resize_matches_onnxruntime(case):
    attrs, scales, sizes = CASES[case]
    model = _resize_model(attrs, scales, sizes)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    ours = ms.onnx.load(model)
    for shape in ((1, 3, 4, 6), (1 if sizes else 2, 3, 5, 3)):
        x = np.random.default_rng(len(shape)).standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(ours(x), session.run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)
    assert len(ours.function.versions) == 1


def test_one_dimensional_resize_and_opset_10_and_upsample():
    x = np.random.default_rng(0).standard_normal((2, 3, 5)).astype(np.float32)
    model = _resize_model({"mode": "linear"}, [1, 1, 2], rank=3)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(ms.onnx.load(model)(x), session.run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)
    x4 = np.random.default_rng(1).standard_normal((1, 3, 3, 4)).astype(np.float32)
    want = x4.repeat(2, axis=2).repeat(3, axis=3)
    for op, opset in (("Resize", 10), ("Upsample", 9)):
        scales = helper.make_tensor("s", TensorProto.FLOAT, [4], [1, 1, 2, 3])
        graph = helper.make_graph(
            [helper.make_node(op, ["x", "s"], ["y"], mode="nearest")],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, "h", "w"])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
            initializer=[scales],
        )
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        np.testing.assert_array_equal(ms.onnx.load(m)(x4), want)


@pytest.mark.parametrize(
    "attrs, scales, message",
    [
        ({"mode": "linear", "coordinate_transformation_mode": "asymmetric"}, [1, 1, 2, 2], "asymmetric"),
        ({"mode": "nearest"}, [1, 1, 1.5, 2], "nearest_mode='round_prefer_floor'"),
        ({"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"}, [1, 1, 1.5, 1.5],
         "may be 1"),
        ({"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"},
         [1, 2, 2, 2], "channel"),
        ({"mode": "cubic"}, [1, 1, 2, 2], "mode='cubic'"),
    ],
)
def test_resize_that_would_sample_elsewhere_is_refused_by_name(attrs, scales, message):
    model = _resize_model(attrs, scales)
    with pytest.raises(ms.OnnxImportError, match=message) as info:
        ms.onnx.load(model)
    assert "'up'" in info.value.message and "Resize" in info.value.message and info.value.hint
