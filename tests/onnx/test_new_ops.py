"""ConvTranspose, 3-D Conv and pooling, Trilu, CumSum, GatherElements, ReduceProd, Einsum against onnxruntime.

Each node is built with onnx.helper over inputs with a symbolic batch (so the import cannot fold the
shapes away) and compared with onnxruntime on the same model, once with the batch at 1 and once at
3; the Einsum forms the import lowers and the forms it refuses by name are both checked.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import msvm as ms

ort = pytest.importorskip("onnxruntime")
RNG = np.random.default_rng(2727)
ONNX_TYPE = {"float32": TensorProto.FLOAT, "int64": TensorProto.INT64, "int32": TensorProto.INT32}


def _model(op: str, inputs: dict[str, tuple[str, list]], consts: dict[str, np.ndarray], opset: int,
           **attrs):
    """A one-node model: ``inputs`` are graph inputs (dtype, dims), ``consts`` initializers."""
    node = helper.make_node(op, [*inputs, *consts], ["y"], name=op.lower(), **attrs)
    declared = [helper.make_tensor_value_info(k, ONNX_TYPE[dt], dims) for k, (dt, dims) in inputs.items()]
    graph = helper.make_graph([node], "g", declared, [helper.make_empty_tensor_value_info("y")],
                              initializer=[numpy_helper.from_array(v, k) for k, v in consts.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _check(model, feeds_for_batch, rtol=1e-5, atol=1e-5) -> None:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    imported = ms.onnx.load(model)
    for batch in (1, 3):
        feeds = feeds_for_batch(batch)
        expected = session.run(None, feeds)[0]
        got = imported.run(None, feeds)[0]
        assert (got.dtype, got.shape) == (expected.dtype, expected.shape)
        np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol)


def _floats(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


CONV_TRANSPOSE = [  # weight shape, bias, attributes
    ((4, 3, 3, 3), True, {}),
    ((4, 3, 3, 3), True, {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]}),
    ((4, 2, 2, 2), False, {"strides": [2, 2]}),
    ((4, 3, 3, 3), True, {"strides": [2, 1], "pads": [0, 1, 2, 1]}),  # asymmetric pads
    ((4, 3, 3, 3), True, {"strides": [2, 2], "pads": [1, 0, 0, 2], "output_padding": [1, 1]}),
    ((4, 3, 3, 3), True, {"strides": [2, 2], "output_padding": [1, 1], "output_shape": [11, 13]}),
    ((4, 1, 3, 3), True, {"group": 2, "strides": [2, 2], "pads": [1, 1, 1, 1], "dilations": [2, 1]}),
    ((4, 3, 3, 3), True, {"strides": [2, 2], "output_shape": [10, 12]}),
    ((4, 3, 3, 3), True, {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((4, 3, 3, 3), True, {"strides": [2, 2], "auto_pad": "SAME_LOWER"}),
    ((4, 3, 3), True, {"strides": [2], "pads": [1, 0]}),  # 1-D
]


@pytest.mark.parametrize("wshape, bias, attrs", CONV_TRANSPOSE, ids=[str(c[2]) for c in CONV_TRANSPOSE])
def test_conv_transpose_matches_onnxruntime(wshape, bias, attrs):
    spatial = [5, 6][: len(wshape) - 2]
    consts = {"w": _floats(*wshape)}
    if bias:
        consts["b"] = _floats(wshape[1] * attrs.get("group", 1))
    model = _model("ConvTranspose", {"x": ("float32", ["N", 4, *spatial])}, consts, 17, **attrs)
    _check(model, lambda n: {"x": _floats(n, 4, *spatial)})


VOLUME = [  # op, weight shape (Conv), attributes
    ("Conv", (6, 4, 3, 3, 3), {}),
    ("Conv", (6, 2, 2, 3, 2),
     {"group": 2, "strides": [2, 1, 2], "pads": [1, 0, 1, 1, 0, 1], "dilations": [1, 2, 1]}),
    ("Conv", (6, 4, 3, 3, 3), {"pads": [1, 1, 0, 0, 1, 1]}),  # asymmetric: an explicit pad
    ("Conv", (6, 4, 3, 3, 3), {"auto_pad": "SAME_UPPER"}),
    ("MaxPool", None, {"kernel_shape": [2, 2, 2], "strides": [2, 2, 2]}),
    ("MaxPool", None,
     {"kernel_shape": [3, 3, 2], "strides": [2, 2, 1], "pads": [1, 1, 0, 1, 1, 1], "ceil_mode": 1}),
    ("MaxPool", None, {"kernel_shape": [2, 2, 2], "dilations": [2, 1, 1]}),
    ("AveragePool", None, {"kernel_shape": [3, 3, 3], "strides": [2, 2, 2], "pads": [1, 1, 1, 1, 1, 1]}),
    ("AveragePool", None, {"kernel_shape": [3, 2, 3], "pads": [1, 1, 1, 1, 1, 1], "count_include_pad": 1}),
    ("AveragePool", None, {"kernel_shape": [2, 3, 3], "pads": [0, 1, 1, 1, 0, 1]}),  # asymmetric
]


@pytest.mark.parametrize("op, wshape, attrs", VOLUME, ids=[f"{c[0]}{c[2]}" for c in VOLUME])
def test_3d_conv_and_pooling_match_onnxruntime(op, wshape, attrs):
    consts = {} if wshape is None else {"w": _floats(*wshape), "b": _floats(wshape[0])}
    model = _model(op, {"x": ("float32", ["N", 4, 5, 6, 7])}, consts, 17, **attrs)
    _check(model, lambda n: {"x": _floats(n, 4, 5, 6, 7)}, rtol=1e-4)


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [None, -1, 0, 2])
def test_trilu_matches_onnxruntime(upper, k):
    consts = {} if k is None else {"k": np.array(k, np.int64)}
    model = _model("Trilu", {"x": ("float32", ["N", 4, 5])}, consts, 14, upper=upper)
    _check(model, lambda n: {"x": _floats(n, 4, 5)})


@pytest.mark.parametrize("exclusive, reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("axis, dtype", [(1, "float32"), (-1, "int32"), (0, "int64")])
def test_cumsum_matches_onnxruntime(exclusive, reverse, axis, dtype):
    model = _model("CumSum", {"x": (dtype, ["N", 4, 5])}, {"axis": np.array(axis, np.int64)}, 14,
                   exclusive=exclusive, reverse=reverse)
    _check(model, lambda n: {"x": (RNG.standard_normal((n, 4, 5)) * 10).astype(dtype)})


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_elements_matches_onnxruntime_with_negative_indices(axis):
    model = _model("GatherElements", {"x": ("float32", ["N", 4, 5]), "i": ("int64", ["N", 4, 3])}, {}, 13,
                   axis=axis)

    def feeds(n):
        size = (n, 4, 5)[axis]
        return {"x": _floats(n, 4, 5), "i": RNG.integers(-size, size, size=(n, 4, 3)).astype(np.int64)}

    if axis == -1:
        _check(model, feeds)
    else:  # along an axis of the index tensor's own extent: index it within the x's size there
        model = _model("GatherElements", {"x": ("float32", ["N", 4, 5]), "i": ("int64", ["N", 4, 5])}, {}, 13,
                       axis=axis)
        _check(model, lambda n: {"x": _floats(n, 4, 5), "i": RNG.integers(
            -(n, 4)[axis], (n, 4)[axis], size=(n, 4, 5)).astype(np.int64)})


@pytest.mark.parametrize("opset, axes, keepdims", [(13, [1], 1), (13, None, 0), (18, [0, 2], 0),
                                                   (18, [-1], 1)])
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_reduce_prod_matches_onnxruntime_and_keeps_the_dtype(opset, axes, keepdims, dtype):
    consts, attrs = {}, {"keepdims": keepdims}
    if axes is not None and opset >= 18:
        consts["axes"] = np.array(axes, np.int64)
    elif axes is not None:
        attrs["axes"] = axes
    model = _model("ReduceProd", {"x": (dtype, ["N", 3, 4])}, consts, opset, **attrs)
    _check(model, lambda n: {"x": RNG.uniform(0.5, 2.0, (n, 3, 4)).astype(dtype) + (dtype == "int32")})


EINSUM = [  # equation, shapes (N the symbolic batch)
    ("bij,bjk->bik", [["N", 3, 4], ["N", 4, 5]]),
    ("bhid,bhjd->bhij", [["N", 2, 3, 4], ["N", 2, 5, 4]]),
    ("bhij,bhjd->bhid", [["N", 2, 3, 5], ["N", 2, 5, 4]]),
    ("ij,njk->nik", [[3, 4], ["N", 4, 5]]),
    ("nij,jk", [["N", 3, 4], [4, 5]]),  # implicit output: ink
    ("...ij,...jk->...ik", [["N", 2, 3, 4], [1, 2, 4, 5]]),
    ("nchw->nhwc", [["N", 3, 4, 5]]),
    ("nij->nj", [["N", 3, 4]]),
    ("ni,nj->nij", [["N", 3], ["N", 4]]),  # outer product
    ("nij,nij->n", [["N", 3, 4], ["N", 3, 4]]),  # contraction over two letters
    ("bn,anm,bm->ba", None),  # three operands: refused
    ("nii->ni", [["N", 3, 3]]),  # a diagonal: refused
]


@pytest.mark.parametrize("equation, shapes", EINSUM, ids=[e for e, _ in EINSUM])
def test_einsum_lowers_matmul_forms_and_refuses_the_others_by_name(equation, shapes):
    if shapes is None or "ii" in equation:
        shapes = shapes or [["N", 3], [4, 3, 5], ["N", 5]]
        names = [f"x{i}" for i in range(len(shapes))]
        model = _model("Einsum", {k: ("float32", s) for k, s in zip(names, shapes)}, {}, 12,
                       equation=equation)
        with pytest.raises(ms.OnnxImportError, match=r"Einsum .* not supported") as info:
            ms.onnx.load(model)
        assert "einsum" in str(info.value)  # the node's name
        return
    names = [f"x{i}" for i in range(len(shapes))]
    model = _model("Einsum", {k: ("float32", s) for k, s in zip(names, shapes)}, {}, 12, equation=equation)
    _check(model, lambda n: {k: _floats(*[n if d == "N" else d for d in s]) for k, s in zip(names, shapes)},
           rtol=1e-4)
    assert len(ms.onnx.load(model).function.versions) <= 1


def test_conv_transpose_output_padding_beyond_the_stride_is_refused_like_onnxruntime():
    model = _model("ConvTranspose", {"x": ("float32", ["N", 4, 5, 6])}, {"w": _floats(4, 3, 3, 3)}, 17,
                   strides=[2, 2], output_padding=[2, 0])
    with pytest.raises(ms.OnnxImportError, match=r"output_padding \[2, 0\] with strides \[2, 2\]"):
        ms.onnx.load(model)


def test_conv_transpose_with_a_symbolic_size_and_output_shape_is_refused_by_name():
    model = _model("ConvTranspose", {"x": ("float32", ["N", 4, "H", 6])}, {"w": _floats(4, 3, 3, 3)}, 17,
                   strides=[2, 2], output_shape=[10, 12])
    with pytest.raises(ms.OnnxImportError, match="output_shape or auto_pad SAME over a symbolic"):
        ms.onnx.load(model)


def test_attention_einsum_is_one_matmul_of_views_with_no_reshape():
    shapes = [["N", 2, "L", 4], ["N", 2, "L", 4]]
    model = _model("Einsum", {"q": ("float32", shapes[0]), "k": ("float32", shapes[1])}, {}, 12,
                   equation="bhid,bhjd->bhij")
    text = str(ms.onnx.load(model).bytecode)
    assert text.count("OP_CALL matmul") == 1 and text.count("OP_CALL transpose") == 1
    assert "OP_CALL reshape" not in text and "float32[N, 2, L, L]" in text
