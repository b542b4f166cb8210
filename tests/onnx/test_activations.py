"""ONNX's activation ops against onnxruntime: each imports through the registry op or torch function of
the same meaning, with its attributes, at values on both sides of every kink and past softplus's
threshold."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import msvm as ms

ort = pytest.importorskip("onnxruntime")

CASES = [
    ("LeakyRelu", {}, 17), ("LeakyRelu", {"alpha": 0.2}, 17),
    ("Elu", {}, 17), ("Elu", {"alpha": 0.5}, 17),
    ("HardSigmoid", {}, 17), ("HardSigmoid", {"alpha": 1 / 6, "beta": 0.5}, 17),
    ("HardSwish", {}, 17), ("Softplus", {}, 17), ("Mish", {}, 18),
]


@pytest.mark.parametrize("op, attrs, opset", CASES, ids=[f"{c[0]}{c[1] or ''}" for c in CASES])
def test_an_activation_matches_onnxruntime(op, attrs, opset):
    node = helper.make_node(op, ["x"], ["y"], name=op.lower(), **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 7])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 7])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    x = np.array([[-30, -4, -3, -0.5, 0, 0.5, 3], [4, 19.5, 20.5, 25, -1e-3, 1e-3, 2.5]], np.float32)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, {"x": x})[0]
    got = ms.onnx.load(model)(x)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
