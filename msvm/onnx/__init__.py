"""``ms.onnx``: import ONNX models onto msvm — ``ms.onnx.load(path | bytes | ModelProto, **jit_options)``.

The graph becomes one MS-BC function (``msvm/onnx/graph.py``; the converters of each op family in
``convert_*.py``) that runs through the normal verify / interpret / JIT path. Imported only when
``ms.onnx`` is first used; the ``onnx`` package itself only when a model is loaded.
"""

from __future__ import annotations

from typing import Any

from ..bytecode.module import Module
from ..errors import OnnxImportError
from ..options import parse_options
from . import convert_einsum, convert_nn, convert_resize, convert_tensor  # noqa: F401  (registers the converters)
from .graph import CONVERTERS, Importer, node_error, opset_of, supported_hint, unsupported_reason
from .model import OnnxFunction, OnnxModel
from .proto import read_model


def translate(source: Any) -> tuple[Module, Importer]:
    """The MS-BC module of an ONNX model (a path, bytes or ModelProto), not yet verified, and its importer."""
    importer = Importer(read_model(source))
    return importer.build(), importer


def load(source: Any, **jit_options: Any) -> OnnxModel:
    """Import an ONNX model (a path, bytes or an ``onnx.ModelProto``) as an msvm model."""
    options = parse_options(jit_options)
    module, importer = translate(source)
    function = OnnxFunction(
        importer.fb.function.name, module, importer.input_dtypes, len(importer.output_names), options
    )
    return OnnxModel(function, [i.name for i in importer.inputs], importer.output_names, importer.symbols)


def check(source: Any) -> list[OnnxImportError]:
    """Every node whose op or attribute values are not supported (empty: the model imports).

    Op types and attribute values are judged node by node; what only the import itself finds (a 4-D
    convolution, a shape computed from data) is reported as the first node the import refuses.
    """
    src = read_model(source)
    opset = opset_of(src.model)
    problems = []
    for index, node in enumerate(src.model.graph.node):
        reason = unsupported_reason(node, opset)
        if reason is not None:
            problems.append(node_error(node, index, opset, reason, supported_hint(node)))
    if not problems:
        try:
            Importer(src).build()
        except OnnxImportError as exc:
            problems.append(exc)
    return problems


def supported_ops() -> list[str]:
    """The ONNX op types the importer translates."""
    return sorted(CONVERTERS)


__all__ = ["OnnxFunction", "OnnxModel", "check", "load", "supported_ops", "translate"]
