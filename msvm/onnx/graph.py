"""ONNX graph -> MS-BC module: values, constant folding, shape vectors, and the node loop.

Why three kinds of value: an ONNX tensor is either known at import (an initializer, a Constant, or
anything computed only from those: folded here by the op registry's own reference kernels), a *shape
vector* (the int64 results of ``Shape``, ``Gather``, ``Concat``… whose elements are ints or shape
scalars, kept as SHAPE_PROPAGATE / SCALAR_OP registers so reshape targets stay symbolic), or a tensor
register. Only the last is data; the first two become constants and symbolic attributes, so an
exporter's shape arithmetic never ends a JIT region or hides a symbol.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..bytecode.module import Module
from ..context import get_context
from ..errors import OnnxImportError, ResourceLimitError, SourceLoc
from ..frontend.emitter import EmitError, Emitter
from ..frontend.values import ScalarVal, TensorVal
from ..ops.registry import REGISTRY, InferContext, OpTypeError, TensorType
from ..shapes import Dim, ShapeSpec
from .proto import Source, msvm_dtype, tensor_array

# A folded constant above this many bytes is computed at run time instead (a ``full`` of a model whose
# weights are ConstantOfShape): the module, and any .msbc saved from it, stays small.
FOLD_LIMIT_BYTES = 64 * 2**20

Elem = int | ScalarVal  # one element of a shape vector


@dataclass(eq=False)
class ShapeVec:
    """An int64 tensor of rank 0 or 1 whose elements are ints or shape scalars (at least one scalar)."""

    elems: tuple[Elem, ...]
    rank0: bool = False
    tensor: TensorVal | None = None  # its materialisation, once a data op needed it


Value = TensorVal | np.ndarray | ShapeVec


def frozen(arr: Any, dtype: Any = None) -> np.ndarray:
    """A read-only C-contiguous array (the form constants of the module take)."""
    out = np.array(arr, dtype=dtype, order="C")
    out.setflags(write=False)
    return out


def ints_value(elems: Sequence[Elem], rank0: bool = False) -> np.ndarray | ShapeVec:
    """A shape vector, or an int64 constant when every element is an int."""
    if all(isinstance(e, int) for e in elems):
        arr = np.array(list(elems), dtype=np.int64)
        return frozen(arr.reshape(()) if rank0 else arr)
    return ShapeVec(tuple(elems), rank0)


@dataclass(frozen=True)
class Converter:
    """How one ONNX op type is imported: the function, and the attributes it understands.

    ``attrs`` maps each attribute name to the values accepted (None: any value); an attribute not
    listed, or a value not accepted, makes the node unsupported (``--check`` lists it).
    """

    fn: Callable[[NodeCtx], Any]
    attrs: Mapping[str, tuple | None]
    doc: str = ""


CONVERTERS: dict[str, Converter] = {}


def converter(*op_types: str, attrs: Mapping[str, tuple | None] | None = None, doc: str = "") -> Callable:
    """Register ``fn`` as the importer of ``op_types``."""

    def deco(fn: Callable[[NodeCtx], Any]) -> Callable[[NodeCtx], Any]:
        for op_type in op_types:
            if op_type in CONVERTERS:
                raise ValueError(f"ONNX op {op_type} has two converters")
            CONVERTERS[op_type] = Converter(fn, dict(attrs or {}), doc)
        return fn

    return deco


def attribute_values(node: Any) -> dict[str, Any]:
    """The node's attributes as Python values (tensors as arrays, strings decoded)."""
    from onnx import helper

    out = {}
    for a in node.attribute:
        if a.type == a.TENSOR:
            out[a.name] = tensor_array(a.t, None, f"node {node.name or node.op_type} attribute {a.name}")
            continue
        value = helper.get_attribute_value(a)
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        elif isinstance(value, list):
            value = [v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in value]
        out[a.name] = value
    return out


def unsupported_reason(node: Any, opset: int) -> str | None:
    """Why ``node`` cannot be imported, judged from its op type and attributes alone (None: it can)."""
    if node.domain not in ("", "ai.onnx"):
        return f"domain {node.domain!r} is not supported (only the default ONNX domain)"
    conv = CONVERTERS.get(node.op_type)
    if conv is None:
        return f"op {node.op_type} is not supported"
    for a in node.attribute:
        if a.name not in conv.attrs:
            known = ", ".join(sorted(conv.attrs)) or "none"
            return f"attribute {a.name!r} of {node.op_type} is not supported (supported: {known})"
    try:
        values = attribute_values(node)
    except OnnxImportError as exc:
        return exc.message
    for name, value in values.items():
        allowed = conv.attrs[name]
        if allowed is not None and value not in allowed:
            return (
                f"{node.op_type} attribute {name}={value!r} is not supported (supported: "
                f"{', '.join(map(repr, allowed))})"
            )
    return None


def opset_of(model: Any) -> int:
    """The model's version of the default ONNX domain."""
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)


def supported_hint(node: Any) -> str:
    """What an unsupported node could have been: the ops, or this op's attributes and their values."""
    conv = CONVERTERS.get(node.op_type)
    if conv is None or node.domain not in ("", "ai.onnx"):
        return "ops " + ", ".join(sorted(CONVERTERS))
    return f"{node.op_type} attributes " + (
        ", ".join(k if v is None else f"{k} in {v}" for k, v in sorted(conv.attrs.items())) or "none"
    )


def node_label(node: Any, index: int) -> str:
    return node.name or f"{node.op_type}_{index}"


def node_error(
    node: Any,
    index: int,
    opset: int,
    message: str,
    supported: str | None = None,
    code: str = "E-ONNX-UNSUPPORTED",
) -> OnnxImportError:
    """The error for node #index: its name, op type and opset, located at the node (file = node name)."""
    label = node_label(node, index)
    return OnnxImportError(
        f"node {label!r} ({node.op_type}, opset {opset}): {message}",
        code=code,
        source=SourceLoc(label, index + 1, 0),
        hint=f"supported: {supported}" if supported else None,
    )


class NodeCtx:
    """One node being imported: its inputs as values, its attributes, and helpers to emit its outputs."""

    def __init__(self, importer: Importer, node: Any, index: int, inputs: list[Value | None]) -> None:
        self.imp = importer
        self.node = node
        self.index = index
        self.inputs = inputs
        self.attrs = attribute_values(node)
        self.opset = importer.opset
        self.label = node_label(node, index)

    # -- errors ---------------------------------------------------------------------------------
    def error(self, message: str, supported: str | None = None) -> OnnxImportError:
        return self.imp.node_error(self.node, self.index, message, supported)

    # -- attributes and inputs -------------------------------------------------------------------
    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    def has(self, i: int) -> bool:
        return i < len(self.inputs) and self.inputs[i] is not None

    def value(self, i: int) -> Value:
        if not self.has(i):
            raise self.error(f"input {i} is required")
        return self.inputs[i]

    def const(self, i: int, what: str = "input") -> np.ndarray:
        """Input ``i`` as a constant known at import (an error naming ``what`` if it is computed)."""
        v = self.value(i)
        if not isinstance(v, np.ndarray):
            raise self.error(
                f"{what} (input {i}) must be a constant known at import, it is computed by the graph",
                "constant initializers or Constant nodes",
            )
        return v

    def optional_const(self, i: int, what: str = "input") -> np.ndarray | None:
        return self.const(i, what) if self.has(i) else None

    def elems(self, i: int, what: str = "input") -> list[Elem]:
        """Input ``i`` (a 1-D int tensor known at import or a shape vector) as ints and shape scalars."""
        v = self.value(i)
        if isinstance(v, ShapeVec):
            return list(v.elems)
        if isinstance(v, np.ndarray) and v.dtype.kind in "iu" and v.ndim <= 1:
            return [int(x) for x in v.reshape(-1)]
        raise self.error(
            f"{what} (input {i}) must be integers known at import or computed from shapes, "
            "not a data-dependent tensor",
            "shape subgraphs (Shape, Gather, Concat, ...)",
        )

    def tensor(self, i: int) -> TensorVal:
        return self.imp.tensor(self.value(i))

    def rank(self, i: int) -> int:
        return self.imp.rank(self.value(i))

    def dtype(self, i: int) -> str:
        return self.imp.dtype(self.value(i))

    def dims(self, i: int) -> list[Elem]:
        """The shape of input ``i`` as ints and shape scalars."""
        return self.imp.dims(self.value(i))

    def call(self, op: str, inputs: Sequence[Value], attrs: dict[str, Any] | None = None) -> Any:
        return self.imp.call(op, inputs, attrs)


class Importer(Emitter):
    """Translates one ONNX graph into one MS-BC function (``Importer(source).build()``)."""

    def __init__(self, source: Source) -> None:
        model = source.model
        graph = model.graph
        self.source = source
        self.opset = opset_of(model)
        self.env: dict[str, Value] = {}
        where = "initializer"
        for t in graph.initializer:
            self.env[t.name] = tensor_array(t, source.base_dir, f"{where} {t.name!r}")
        self.inputs = [i for i in graph.input if i.name not in self.env]
        self.symbols: dict[str, str] = {}  # dim_param -> its MS-BC symbol
        self.taken: set[str] = set()
        super().__init__(_identifier(source.name, "model"), "main", [i.name for i in self.inputs])

    # -- errors ------------------------------------------------------------------------------------
    def node_error(
        self,
        node: Any,
        index: int,
        message: str,
        supported: str | None = None,
        code: str = "E-ONNX-UNSUPPORTED",
    ) -> OnnxImportError:
        return node_error(node, index, self.opset, message, supported, code)

    # -- inputs ------------------------------------------------------------------------------------
    def _symbol(self, dim: Any, input_name: str, axis: int) -> str | int:
        if dim.HasField("dim_value") and dim.dim_value > 0:
            return int(dim.dim_value)
        if dim.HasField("dim_param") and dim.dim_param:
            name = self.symbols.get(dim.dim_param)
            if name is None:
                name = self.symbols[dim.dim_param] = self._fresh(_identifier(dim.dim_param, "dim"))
            return name
        return self._fresh(_identifier(f"{input_name}_{axis}", "dim"))

    def _fresh(self, base: str) -> str:
        name, k = base, 1
        while name in self.taken or not _valid_symbol(name):
            name, k = f"{base}_{k}", k + 1
        self.taken.add(name)
        return name

    def _declare_inputs(self) -> None:
        for arg, inp in enumerate(self.inputs):
            self.fb.loc = SourceLoc(inp.name, 1, 0)
            tt = inp.type.tensor_type if inp.type.HasField("tensor_type") else None
            if tt is None:
                raise OnnxImportError(
                    f"graph input {inp.name!r} is not a tensor (sequences, maps and optionals "
                    "are not supported)",
                    code="E-ONNX-UNSUPPORTED",
                )
            dtype = msvm_dtype(tt.elem_type, f"graph input {inp.name!r}")
            if tt.elem_type in (2, 3, 4, 5, 12):  # narrow ints: callers' arrays would need a silent widening
                raise OnnxImportError(
                    f"graph input {inp.name!r} has ONNX element type {tt.elem_type}, which msvm "
                    "has no dtype for",
                    code="E-ONNX-DTYPE",
                    hint="supported inputs: float16, float32, float64, int32, int64, bool",
                )
            if not tt.HasField("shape"):
                raise OnnxImportError(
                    f"graph input {inp.name!r} declares no shape (not even its rank)",
                    code="E-ONNX-UNSUPPORTED",
                    hint="export with a known rank",
                )
            spec = ShapeSpec([self._symbol(d, inp.name, axis) for axis, d in enumerate(tt.shape.dim)])
            reg = self.fb.tensor_input(arg, spec, dtype)
            self.env[inp.name] = TensorVal(reg, TensorType(spec, dtype))
            self.input_dtypes.append(dtype)
        self.entry_end = len(self.fb.function.blocks[0].instructions)

    # -- values ------------------------------------------------------------------------------------
    def tensor(self, v: Value) -> TensorVal:
        """A value as a tensor register: constants become LOAD_CONSTs, shape vectors small int tensors."""
        if isinstance(v, TensorVal):
            return v
        if isinstance(v, np.ndarray):
            return self.captured_array(v)
        if v.tensor is None:
            parts = [
                np.array([e], dtype=np.int64)
                if isinstance(e, int)
                else self.call("full", [], {"shape": (1,), "fill_value": e, "dtype": "int64"})
                for e in v.elems
            ]
            out = self.call("concat", parts, {"axis": 0}) if len(parts) > 1 else self.tensor(parts[0])
            v.tensor = self.call("reshape", [out], {"shape": ()}) if v.rank0 else out
        return v.tensor

    def rank(self, v: Value) -> int:
        if isinstance(v, ShapeVec):
            return 0 if v.rank0 else 1
        return v.ndim if isinstance(v, np.ndarray) else v.rank

    def dtype(self, v: Value) -> str:
        if isinstance(v, ShapeVec):
            return "int64"
        return v.dtype.name if isinstance(v, np.ndarray) else v.dtype

    def dims(self, v: Value) -> list[Elem]:
        if isinstance(v, np.ndarray):
            return [int(d) for d in v.shape]
        if isinstance(v, ShapeVec):
            return [] if v.rank0 else [len(v.elems)]
        return [self.dim(v, axis) for axis in range(v.rank)]

    def call(self, op: str, inputs: Sequence[Value], attrs: dict[str, Any] | None = None) -> Any:
        """An op on values: folded by its reference kernel when every input is known, else an OP_CALL."""
        attrs = attrs or {}
        opdef = REGISTRY[op]
        if all(isinstance(v, np.ndarray) for v in inputs) and not _has_scalar(attrs):
            checked = opdef.check_attrs(attrs)
            out = opdef.infer(
                InferContext(), *[TensorType(ShapeSpec(a.shape), a.dtype.name) for a in inputs], **checked
            )
            types = [out] if isinstance(out, TensorType) else list(out)
            size = sum(_static_bytes(t) for t in types)
            if size <= FOLD_LIMIT_BYTES:
                result = opdef.kernel(*inputs, **checked)
                if isinstance(result, tuple):
                    return tuple(frozen(r) for r in result)
                return frozen(result)
        return super().call(opdef, [self.tensor(v) for v in inputs], attrs)

    # -- the graph ---------------------------------------------------------------------------------
    def build(self) -> Module:
        graph = self.source.model.graph
        self.input_dtypes: list[str] = []
        self._declare_inputs()
        self.used = {name for node in graph.node for name in node.input} | {o.name for o in graph.output}
        for index, node in enumerate(graph.node):
            self.fb.loc = SourceLoc(node_label(node, index), index + 1, 0)
            self._import_node(node, index)
        outs = []
        self.output_names = []
        for o in graph.output:
            if o.name not in self.env:
                raise OnnxImportError(f"graph output {o.name!r} is computed by no node", code="E-ONNX-FORMAT")
            self.fb.loc = SourceLoc(o.name, 1, 0)
            outs.append(self.tensor(self.env[o.name]).reg)
            self.output_names.append(o.name)
        self.fb.ret(*outs)
        return self.mb.build()

    def _import_node(self, node: Any, index: int) -> None:
        reason = unsupported_reason(node, self.opset)
        if reason is not None:
            raise self.node_error(node, index, reason, supported_hint(node))
        inputs: list[Value | None] = []
        for name in node.input:
            if not name:
                inputs.append(None)
                continue
            if name not in self.env:
                raise self.node_error(
                    node, index, f"input {name!r} is not defined before this node", code="E-ONNX-FORMAT"
                )
            inputs.append(self.env[name])
        ctx = NodeCtx(self, node, index, inputs)
        try:
            result = CONVERTERS[node.op_type].fn(ctx)
        except OnnxImportError:
            raise
        except (OpTypeError, EmitError) as exc:
            raise self.node_error(node, index, exc.message, exc.hint, code="E-ONNX-OP") from None
        except ResourceLimitError:
            raise
        results = result if isinstance(result, tuple) else (result,)
        for k, name in enumerate(node.output):
            if not name or (k > 0 and name not in self.used):  # an extra output nothing reads
                continue
            if k >= len(results) or results[k] is None:
                raise self.node_error(
                    node,
                    index,
                    f"output {k} ({name!r}) is not supported",
                    "only the first output(s) of this op",
                )
            self.env[name] = results[k]


def _has_scalar(attrs: Mapping[str, Any]) -> bool:
    return any(
        isinstance(v, ScalarVal) or (isinstance(v, (tuple, list)) and _has_scalar(dict(enumerate(v))))
        for v in attrs.values()
    )


def _static_bytes(t: TensorType) -> int:
    n = 1
    for d in t.shape:
        if not d.is_const:
            return FOLD_LIMIT_BYTES + 1
        n *= d.value
    size = n * np.dtype(t.dtype).itemsize
    limit = get_context().max_tensor_bytes
    if size > limit:
        raise ResourceLimitError(
            f"a constant of shape {t.shape} ({size} bytes) is above max_tensor_bytes={limit}",
            code="E-LIMIT-TENSOR",
            hint="ms.set_context(max_tensor_bytes=...) if it is real",
        )
    return size


def _identifier(text: str, fallback: str) -> str:
    name = re.sub(r"\W", "_", text).strip("_") or fallback
    return name if name[0].isalpha() else f"{fallback}_{name}"


def _valid_symbol(name: str) -> bool:
    try:
        Dim.sym(name)
    except ValueError:
        return False
    return True


__all__ = [
    "CONVERTERS",
    "Converter",
    "Importer",
    "NodeCtx",
    "ShapeVec",
    "converter",
    "frozen",
    "ints_value",
    "unsupported_reason",
]
