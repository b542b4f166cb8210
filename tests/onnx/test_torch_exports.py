"""Small PyTorch models exported with dynamic axes (both exporters, several opsets) run on msvm as on
onnxruntime.

Each file is imported once (the session's ``imported``) and run interpreted at several shapes: the
answers match onnxruntime's on the same file, and one bytecode version serves them all (every dynamic
axis is a symbol). The JIT is off where it is not what is checked: its code is tested against the
interpreter elsewhere, and its compiles would take the CPU the comparisons need.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import MODELS, example

import msvm as ms

ort = pytest.importorskip("onnxruntime")


def _compare(path, model, name: str) -> None:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    _, _, dtype, shapes = MODELS[name]
    for k, shape in enumerate(shapes):
        x = example(shape, dtype, seed=k + 1)
        ours = model.run(None, {model.input_names[0]: x})[0]
        theirs = session.run(None, {session.get_inputs()[0].name: x})[0]
        np.testing.assert_allclose(ours, theirs, rtol=1e-3, atol=1e-4, err_msg=f"{path.name} {shape}")
        assert np.array_equal(model(x), ours)
    assert len(model.function.versions) == 1


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_export_matches_onnxruntime_at_every_shape_with_one_version(
    exported, imported, name, exporter, no_jit
):
    _compare(exported(name, exporter), imported(name, exporter), name)


@pytest.mark.parametrize(
    "name, opset", [("cnn", 9), ("unet", 11), ("encoder", 13), ("mobilenet", 14), ("decoder", 20)]
)
def test_torchscript_exports_at_other_opsets_match_onnxruntime(exported, imported, name, opset, no_jit):
    """Opsets 9-20 change how ops are spelled (Upsample vs Resize, Squeeze's axes as attribute or input,
    Split's sizes, HardSwish from 14): each import matches onnxruntime on its own file."""
    _compare(exported(name, "torchscript", opset), imported(name, "torchscript", opset), name)


def test_dynamic_axes_are_symbols_named_after_the_dim_params(imported):
    text = str(imported("encoder", "torchscript").bytecode)
    create = next(line for line in text.splitlines() if "TENSOR_CREATE" in line)
    assert "[batch, seq, 16]" in create


def test_shape_subgraphs_become_shape_scalars_not_tensors(imported):
    """The exporter's Shape -> Gather -> Concat -> Reshape chains leave no int64 tensor in the module:
    reshape targets are SHAPE_PROPAGATE / SCALAR_OP registers, so every tensor's shape stays symbolic."""
    model = imported("encoder", "torchscript")
    text = str(model.bytecode)
    assert "SHAPE_PROPAGATE" in text
    assert "int64[" not in text
    analysis = ms.vm.scd_analysis(model.function, example((2, 5, 16), "float32"))
    report = analysis.as_dict()
    assert report["regions"] and all(r["compilable"] and r["scd"] == 1.0 for r in report["regions"]), (
        analysis.text()
    )
    assert "seq=5" in analysis.text()
    assert report["specialised"] == []


def test_exact_gelu_of_torchscript_leaves_the_encoder_one_region(imported):
    """TorchScript writes GELU as x * 0.5 * (1 + Erf(x / sqrt 2)): erf lowers, so nothing splits."""
    model = imported("encoder", "torchscript")
    assert "OP_CALL erf" in str(model.bytecode)
    report = ms.vm.scd_analysis(model.function, example((2, 5, 16), "float32")).as_dict()
    assert len(report["regions"]) == 1 and report["regions"][0]["compilable"]


def test_bytecode_locations_name_the_onnx_nodes(imported):
    assert '"/c1/Conv"' in str(imported("cnn", "torchscript").bytecode)
