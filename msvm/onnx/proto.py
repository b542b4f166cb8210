"""Reading ONNX protobufs safely: the model from a path, bytes or ModelProto, and tensors as numpy arrays.

Why we check before onnx does the work: a model file is input from anywhere. A truncated or malformed
protobuf, a tensor whose declared dims promise terabytes, or external data naming ``../../etc/passwd``
(the path-traversal bugs onnx and onnxruntime fixed) must each end in one clear ``OnnxImportError``
before anything is allocated or any file outside the model's directory is opened.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..context import get_context
from ..errors import OnnxImportError, ResourceLimitError

# Protobuf's own hard limit: a model above it cannot be one message.
MAX_MODEL_BYTES = 2**31 - 1

# TensorProto.DataType -> the numpy dtype of its elements (the ONNX types msvm can hold or widen).
ONNX_DTYPES: dict[int, str] = {
    1: "float32",
    2: "uint8",
    3: "int8",
    4: "uint16",
    5: "int16",
    6: "int32",
    7: "int64",
    9: "bool",
    10: "float16",
    11: "float64",
    12: "uint32",
    13: "uint64",
}
# Which repeated field holds a tensor's elements when it has no raw_data (the protobuf's layout).
_FIELD = {
    1: "float_data",
    2: "int32_data",
    3: "int32_data",
    4: "int32_data",
    5: "int32_data",
    6: "int32_data",
    7: "int64_data",
    9: "int32_data",
    10: "int32_data",
    11: "double_data",
    12: "uint64_data",
    13: "uint64_data",
}
# Integer types msvm has no dtype for are widened to int64 (their values all fit).
_WIDEN = {"uint8": "int64", "int8": "int64", "uint16": "int64", "int16": "int64", "uint32": "int64"}


@dataclass(frozen=True)
class Source:
    """A parsed model and where it came from: ``base_dir`` resolves external data (None: none allowed)."""

    model: Any  # onnx.ModelProto
    base_dir: Path | None
    name: str


def _onnx():
    try:
        import onnx
    except ImportError:  # pragma: no cover - the extra is installed wherever the tests run
        raise OnnxImportError(
            "the onnx package is not installed", code="E-ONNX-MISSING", hint="pip install 'msvm[onnx]'"
        ) from None
    return onnx


def read_model(source: Any) -> Source:
    """The ModelProto of a path, bytes or ModelProto, parsed and checked for structure."""
    onnx = _onnx()
    if isinstance(source, onnx.ModelProto):
        return Source(source, None, source.graph.name or "model")
    if isinstance(source, (bytes, bytearray, memoryview)):
        return Source(_parse(bytes(source), "<bytes>"), None, "model")
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        try:
            size = path.stat().st_size
            if size > MAX_MODEL_BYTES:
                raise OnnxImportError(
                    f"{path} is {size} bytes, above protobuf's 2 GiB message limit",
                    code="E-ONNX-SIZE",
                    hint="keep the weights as external data",
                )
            data = path.read_bytes()
        except OSError as exc:
            raise OnnxImportError(f"cannot read {path}: {exc.strerror or exc}", code="E-ONNX-IO") from None
        return Source(_parse(data, str(path)), path.resolve().parent, path.stem)
    raise TypeError(f"ms.onnx.load takes a path, bytes or an onnx.ModelProto, got {type(source).__name__}")


def _parse(data: bytes, name: str):
    onnx = _onnx()
    from google.protobuf.message import DecodeError

    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise OnnxImportError(
            f"{name} is not a valid ONNX protobuf ({exc})",
            code="E-ONNX-FORMAT",
            hint="the file is truncated or not an ONNX model",
        ) from None
    if not model.HasField("graph") or not model.graph.output:
        raise OnnxImportError(
            f"{name} holds no ONNX graph with outputs ({len(data)} bytes parsed)",
            code="E-ONNX-FORMAT",
            hint="the file is truncated or not an ONNX model",
        )
    return model


def msvm_dtype(data_type: int, where: str) -> str:
    """The msvm dtype of ONNX element type ``data_type`` (narrow integers widen to int64)."""
    name = ONNX_DTYPES.get(data_type)
    if name is None:
        raise OnnxImportError(
            f"{where}: ONNX element type {data_type} is not supported",
            code="E-ONNX-DTYPE",
            hint="supported: " + ", ".join(sorted(set(ONNX_DTYPES.values()))),
        )
    return _WIDEN.get(name, name)


def tensor_array(t: Any, base_dir: Path | None, where: str) -> np.ndarray:
    """A TensorProto as a read-only numpy array in an msvm dtype, every size checked before reading."""
    from onnx import numpy_helper

    name = ONNX_DTYPES.get(t.data_type)
    if name is None:
        msvm_dtype(t.data_type, where)  # raises, naming the type
    dims = list(t.dims)
    if any(d < 0 for d in dims):
        raise OnnxImportError(f"{where}: tensor {t.name!r} has negative dims {dims}", code="E-ONNX-FORMAT")
    count = math.prod(dims)
    itemsize = np.dtype(name).itemsize
    limit = get_context().max_tensor_bytes
    if count * itemsize > limit:
        raise ResourceLimitError(
            f"{where}: tensor {t.name!r} declares dims {dims}, {count * itemsize} bytes, "
            f"above max_tensor_bytes={limit}",
            code="E-LIMIT-TENSOR",
            hint="raise it with ms.set_context(max_tensor_bytes=...) if the model is real",
        )
    if t.data_location == 1:  # EXTERNAL
        raw = _external_bytes(t, base_dir, count * itemsize, where)
        arr = np.frombuffer(raw, dtype=np.dtype(name).newbyteorder("<")).reshape(dims)
    else:
        if t.HasField("raw_data"):
            have, what = len(t.raw_data), f"{len(t.raw_data)} bytes of raw_data"
            need = count * itemsize
        else:
            have = len(getattr(t, _FIELD[t.data_type]))
            need, what = count, f"{have} elements in {_FIELD[t.data_type]}"
        if have != need:
            raise OnnxImportError(
                f"{where}: tensor {t.name!r} declares dims {dims} ({count} elements) but holds {what}",
                code="E-ONNX-FORMAT",
                hint="the file is truncated or corrupt",
            )
        arr = numpy_helper.to_array(t)
    target = _WIDEN.get(name, name)
    out = np.array(arr, dtype=np.dtype(target), order="C")
    out.setflags(write=False)
    return out


def _external_bytes(t: Any, base_dir: Path | None, need: int, where: str) -> bytes:
    """The bytes of an external tensor, read only from a regular file inside the model's directory."""
    info = {e.key: e.value for e in t.external_data}
    location = info.get("location", "")
    if base_dir is None:
        raise OnnxImportError(
            f"{where}: tensor {t.name!r} keeps its data in external file {location!r}, "
            "but the model was not loaded from a file",
            code="E-ONNX-EXTERNAL",
            hint="load the model by its path so its directory is known",
        )
    target = (base_dir / location).resolve()
    if not location or os.path.isabs(location) or not target.is_relative_to(base_dir):
        raise OnnxImportError(
            f"{where}: tensor {t.name!r} names external data file {location!r}, which is "
            f"outside the model's directory {base_dir}: refused",
            code="E-ONNX-EXTERNAL",
            hint="external data must be a relative path inside the model's directory",
        )
    try:
        offset = int(info.get("offset", 0))
        length = int(info.get("length", need))
    except ValueError:
        raise OnnxImportError(
            f"{where}: tensor {t.name!r} has a non-integer offset or length for {location!r}",
            code="E-ONNX-EXTERNAL",
        ) from None
    if length != need or offset < 0:
        raise OnnxImportError(
            f"{where}: tensor {t.name!r} needs {need} bytes but its external data "
            f"{location!r} gives offset {offset}, length {length}",
            code="E-ONNX-EXTERNAL",
        )
    try:
        if not target.is_file():
            raise OnnxImportError(
                f"{where}: external data file {location!r} of tensor {t.name!r} does not "
                "exist or is not a regular file",
                code="E-ONNX-EXTERNAL",
            )
        size = target.stat().st_size
        if offset + length > size:
            raise OnnxImportError(
                f"{where}: tensor {t.name!r} reads bytes {offset}..{offset + length} of "
                f"{location!r}, which has {size}",
                code="E-ONNX-EXTERNAL",
                hint="the data file is truncated",
            )
        with open(target, "rb") as f:
            f.seek(offset)
            return f.read(length)
    except OSError as exc:
        raise OnnxImportError(
            f"{where}: cannot read external data {location!r}: {exc.strerror or exc}", code="E-ONNX-IO"
        ) from None


__all__ = ["ONNX_DTYPES", "Source", "msvm_dtype", "read_model", "tensor_array"]
