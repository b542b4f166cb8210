"""Bad ONNX input ends in one clear msvm error before anything is allocated or read outside the model.

Unsupported ops and attribute values name the node, its op type and opset and what is supported; a
truncated or foreign file, external data pointing outside the model's folder, and sizes no machine
holds are refused by name.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import msvm as ms


def _model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _vi(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def test_unsupported_op_names_node_op_type_opset_and_the_supported_ops():
    model = _model(
        [helper.make_node("Hardmax", ["x"], ["y"], name="my_hardmax")],
        [_vi("x", [2, 3])],
        [_vi("y", [2, 3])],
        opset=13,
    )
    with pytest.raises(ms.OnnxImportError) as info:
        ms.onnx.load(model)
    err = info.value
    assert "'my_hardmax'" in err.message and "Hardmax" in err.message and "opset 13" in err.message
    assert err.code == "E-ONNX-UNSUPPORTED" and "Conv" in err.hint
    assert str(err.source).startswith("my_hardmax:1")


def test_unsupported_attribute_value_names_the_accepted_values():
    node = helper.make_node("Pad", ["x", "p"], ["y"], name="pad0", mode="wrap")
    pads = helper.make_tensor("p", TensorProto.INT64, [4], [0, 1, 0, 1])
    model = _model([node], [_vi("x", [2, 3])], [_vi("y", [2, 5])], [pads])
    with pytest.raises(ms.OnnxImportError, match=r"mode='wrap' is not supported") as info:
        ms.onnx.load(model)
    assert "'edge'" in info.value.message
    assert [p.message for p in ms.onnx.check(model)] == [info.value.message]


def test_truncated_and_foreign_files_are_format_errors(tmp_path):
    node = helper.make_node("Relu", ["x"], ["y"])
    data = _model([node], [_vi("x", ["N", 3])], [_vi("y", ["N", 3])]).SerializeToString()
    assert ms.onnx.load(data)(np.ones((2, 3), np.float32)).shape == (2, 3)
    for bad in (data[: len(data) // 2], b"\x00\xff" * 50, b""):
        with pytest.raises(ms.OnnxImportError) as info:
            ms.onnx.load(bad)
        assert info.value.code == "E-ONNX-FORMAT"
    with pytest.raises(ms.OnnxImportError, match="cannot read"):
        ms.onnx.load(tmp_path / "missing.onnx")


def _external_model(tmp_path, location: str):
    weight = helper.make_tensor("w", TensorProto.FLOAT, [4], [0.0] * 4)
    weight.ClearField("float_data")
    weight.data_location = TensorProto.EXTERNAL
    weight.external_data.add(key="location", value=location)
    node = helper.make_node("Add", ["x", "w"], ["y"])
    path = tmp_path / "model" / "m.onnx"
    path.parent.mkdir()
    path.write_bytes(_model([node], [_vi("x", [4])], [_vi("y", [4])], [weight]).SerializeToString())
    return path


@pytest.mark.parametrize("location", ["../secret.bin", "/etc/passwd", "sub/../../secret.bin"])
def test_external_data_outside_the_model_folder_is_refused_by_name(tmp_path, location):
    (tmp_path / "secret.bin").write_bytes(b"\0" * 16)
    path = _external_model(tmp_path, location)
    with pytest.raises(ms.OnnxImportError, match="outside the model's directory") as info:
        ms.onnx.load(path)
    assert location in info.value.message and info.value.code == "E-ONNX-EXTERNAL"


def test_external_data_inside_the_folder_loads_and_a_short_file_is_refused(tmp_path):
    path = _external_model(tmp_path, "w.bin")
    (path.parent / "w.bin").write_bytes(np.arange(4, dtype="<f4").tobytes())
    np.testing.assert_array_equal(ms.onnx.load(path)(np.ones(4, np.float32)), np.arange(4) + 1)
    (path.parent / "w.bin").write_bytes(b"\0" * 8)
    with pytest.raises(ms.OnnxImportError, match="truncated"):
        ms.onnx.load(path)
    with pytest.raises(ms.OnnxImportError, match="not loaded from a file"):
        ms.onnx.load(path.read_bytes())


def _raw_tensor(name: str, dims: list[int], raw: bytes) -> TensorProto:
    t = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=dims)
    t.raw_data = raw
    return t


def test_absurd_declared_sizes_are_refused_before_allocating():
    huge = _raw_tensor("w", [10**6, 10**6], b"\0" * 16)
    model = _model([helper.make_node("Add", ["x", "w"], ["y"])], [_vi("x", [1])], [_vi("y", [1])], [huge])
    with pytest.raises(ms.ResourceLimitError, match="max_tensor_bytes"):
        ms.onnx.load(model)
    short = _raw_tensor("w", [1000], b"\0" * 16)
    model = _model([helper.make_node("Add", ["x", "w"], ["y"])], [_vi("x", [1])], [_vi("y", [1])], [short])
    with pytest.raises(ms.OnnxImportError, match=r"declares dims \[1000\]"):
        ms.onnx.load(model)
    shape = helper.make_tensor("s", TensorProto.INT64, [2], [10**6, 10**6])
    model = _model(
        [helper.make_node("ConstantOfShape", ["s"], ["y"], name="fill")], [], [_vi("y", [1])], [shape]
    )
    with pytest.raises(ms.ResourceLimitError, match="max_tensor_bytes"):
        ms.onnx.load(model)


def test_cli_onnx_saves_a_verified_msbc_and_check_lists_unsupported_nodes(tmp_path, capsys):
    from msvm.cli import main

    good = tmp_path / "relu.onnx"
    good.write_bytes(
        _model(
            [helper.make_node("Relu", ["x"], ["y"])], [_vi("x", ["N", 3])], [_vi("y", ["N", 3])]
        ).SerializeToString()
    )
    assert main(["onnx", str(good), "-o", str(tmp_path / "relu.msbc")]) == 0
    module = ms.load_module(tmp_path / "relu.msbc")
    assert "[N, 3]" in str(module)
    assert main(["onnx", "--check", str(good)]) == 0
    bad = tmp_path / "bad.onnx"
    nodes = [
        helper.make_node("Hardmax", ["x"], ["h"], name="h1"),
        helper.make_node("Celu", ["h"], ["y"], name="c1"),
    ]
    bad.write_bytes(_model(nodes, [_vi("x", [2])], [_vi("y", [2])]).SerializeToString())
    capsys.readouterr()
    assert main(["onnx", "--check", str(bad)]) == 1
    out = capsys.readouterr().out
    assert "'h1' (Hardmax" in out and "'c1' (Celu" in out and "2 unsupported node(s)" in out
    assert main(["onnx", str(bad)]) == 1
