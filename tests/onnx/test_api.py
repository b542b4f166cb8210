"""The model object's conventions (onnxruntime's ``run``, positional calls) and the lazy import."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper

import msvm as ms


def _two_outputs():
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Neg", ["x"], ["n"], name="neg"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, ["N", 2]) for o in ("r", "n")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_run_follows_onnxruntime_and_calls_return_a_tuple_for_several_outputs():
    model = ms.onnx.load(_two_outputs())
    x = np.array([[1.0, -2.0]], np.float32)
    relu, _neg = model(x)
    np.testing.assert_array_equal(relu, [[1, 0]])
    assert [a.tolist() for a in model.run(["n"], {"x": x})] == [[[-1.0, 2.0]]]
    assert len(model.run(None, {"x": x})) == 2
    with pytest.raises(ValueError, match="missing"):
        model.run(None, {})
    with pytest.raises(ValueError, match="unknown output"):
        model.run(["nope"], {"x": x})
    assert model.symbols == {"N": "N"} and model.output_names == ["r", "n"]


def test_import_msvm_leaves_the_onnx_importer_and_package_unloaded():
    code = "import sys, msvm; print('msvm.onnx' in sys.modules, 'onnx' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]
