"""Compiled functions as bytes: ``.msbc`` files and loaded modules, and pickles of jitted functions.

Why a loaded module is callable by attribute: ``mod = ms.load("f.msbc"); mod.f(x)`` is the shortest way
to run shipped bytecode, and it goes through the same verifier and interpreter as a jitted call.

Why a pickled ``@ms.jit`` function (or ONNX model) is its MS-BC and plain data, never Python code: it
travels to Dask workers, process pools and Ray tasks, and what a worker unpickles must be as safe to
load as a ``.msbc`` file. The pickle names one global, ``receive``, and holds one bytes object: a magic,
a SHA-256 of the rest (a damaged or edited payload is refused before anything is decoded), a JSON
header (name, JIT options, the parameters' names, kinds, literal defaults and annotations, and per
version its key, inputs and return structure) and each version's ``.msbc`` bytes, decoded and verified
like any ``.msbc`` load. The digest only detects damage; trust rests on the verifier, as for a file.

The unpickled function serves the signatures compiled before it was pickled; a new signature raises
``CompileError`` ``E-COMPILE-SHIPPED``. Shipping the source instead would mean shipping its globals and
closure too (modules, helper functions, arbitrary objects), which is shipping Python code; every
tensor dimension an annotation names is a symbol, so one version serves every batch shape, and
``ms.distributed`` compiles each signature its batches need before it ships the function.

A process that receives the same version again reuses it, keyed by a digest of its module and record:
one verify and one warm JIT per worker, however many tasks carry the function.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import json
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable
from os import PathLike
from typing import Any

import numpy as np

from ..bytecode.binary import decode_module, encode_module, load_module, save_module
from ..bytecode.module import Module
from ..errors import BytecodeFormatError, CompileError
from ..interpreter import Executable, Program
from ..options import parse_options
from ..shapes import ShapeSpec
from .annotations import TensorAnnotation
from .jitfunction import _FLOAT, _MUTABLE, JitFunction, Version, _free_converter
from .values import NOTHING, VALUE


def save(fn_or_module: JitFunction | Module, path: str | PathLike[str]) -> None:
    """Write a jitted function's current version (``fn.bytecode``), or a Module, to ``path`` as ``.msbc``."""
    if isinstance(fn_or_module, JitFunction):
        module = fn_or_module.bytecode
    elif isinstance(fn_or_module, Module):
        module = fn_or_module
    else:
        raise TypeError(f"ms.save takes an @ms.jit function or a Module, got {type(fn_or_module).__name__}")
    save_module(module, path)


class LoadedModule:
    """A loaded ``.msbc`` module: each bytecode function is an attribute (``mod.f(x)``).

    A function takes one argument per bytecode parameter: arrays for tensors, ints for ``ms.mutable``
    parameters (values the original call specialised are already folded in).
    """

    def __init__(self, module: Module) -> None:
        self.module = module
        self.program = Program(module)

    def __getattr__(self, name: str) -> Executable:
        if name.startswith("__") or name in ("module", "program"):
            raise AttributeError(name)
        try:
            return self.program.function(name)
        except KeyError:
            raise AttributeError(f"module {self.module.name!r} has no function {name!r} (functions: "
                                 f"{', '.join(self.program.function_names)})") from None

    def __dir__(self) -> list[str]:
        return sorted({*self.program.function_names, "module", "program"})

    def __repr__(self) -> str:
        return f"<msvm module {self.module.name!r}: {', '.join(self.program.function_names)}>"


def load(path: str | PathLike[str]) -> LoadedModule:
    """Read, verify and prepare a ``.msbc`` file."""
    return LoadedModule(load_module(path))


# -- shipping (pickle) ------------------------------------------------------------------------------

SHIP_MAGIC = b"MSVMSHP1"
SHIP_FORMAT = 1
_LEN = struct.Struct("<I")
_MAX_RECEIVED = 256  # versions kept per process: a worker's working set of functions, not a leak
_received: OrderedDict[str, Any] = OrderedDict()  # digest of a version's module and record -> Version
_received_lock = threading.Lock()
_STATIC_TYPES = {"int": int, "bool": bool, "str": str, "none": type(None), "tuple": tuple}
_CONTAINERS = {"tuple": tuple, "list": list}
_KIND = type(inspect.Parameter.POSITIONAL_ONLY)


def _refuse(name: str, why: str, hint: str) -> CompileError:
    return CompileError(f"cannot pickle {name}: {why}", code="E-COMPILE-SHIPPED", hint=hint)


def _literal(name: str, what: str, value: Any) -> str:
    """``value`` as Python literal text that ``ast.literal_eval`` gives back equal (else refused)."""
    text = repr(value)
    try:
        same = ast.literal_eval(text)
    except (ValueError, SyntaxError, RecursionError, MemoryError):
        same = _refuse  # a sentinel that equals nothing
    if same != value or type(same) is not type(value):
        raise _refuse(name, f"{what} {text[:80]} is not a plain literal (int, float, bool, str, None or a "
                      "tuple of them)", "a pickled function carries data, never Python objects")
    return text


def _encode_part(name: str, part: Any) -> list:
    if part is None:
        return ["none"]
    if part in (_MUTABLE, _FLOAT):
        return [part]
    if isinstance(part, np.dtype):
        return ["dtype", part.name]
    kind, value = part
    if isinstance(kind, np.dtype):
        return ["array", kind.name, value]
    return ["static", kind.__name__ if kind is not type(None) else "none", _literal(name, "a value", value)]


def _decode_part(part: list) -> Any:
    tag = part[0]
    if tag == "none":
        return None
    if tag in (_MUTABLE, _FLOAT):
        return tag
    if tag == "dtype":
        return np.dtype(part[1])
    if tag == "array":
        return (np.dtype(part[1]), int(part[2]))
    if tag == "static":
        kind, value = _STATIC_TYPES[part[1]], ast.literal_eval(part[2])
        if type(value) is not kind:
            raise TypeError(f"a {part[1]} key part holds {type(value).__name__}")
        return (kind, value)
    raise ValueError(f"unknown key part {tag!r}")


def _encode_returns(shape: Any) -> Any:
    if shape in (NOTHING, VALUE):
        return shape
    kind, children = shape
    return [kind.__name__, [_encode_returns(c) for c in children]]


def _decode_returns(shape: Any) -> Any:
    if shape in (NOTHING, VALUE):
        return shape
    kind, children = shape
    return (_CONTAINERS[kind], tuple(_decode_returns(c) for c in children))


def _pack(header: dict[str, Any], modules: list[Module]) -> bytes:
    blobs = [encode_module(m) for m in modules]
    header = {**header, "format": SHIP_FORMAT, "sizes": [len(b) for b in blobs]}
    head = json.dumps(header, separators=(",", ":")).encode()
    body = _LEN.pack(len(head)) + head + b"".join(blobs)
    return SHIP_MAGIC + hashlib.sha256(body).digest() + body


def _unpack(payload: Any) -> tuple[dict[str, Any], list[bytes]]:
    """The header and module blobs of a shipped payload; anything damaged is a BytecodeFormatError."""
    if not isinstance(payload, bytes) or not payload.startswith(SHIP_MAGIC):
        raise BytecodeFormatError("not a shipped msvm function (bad magic)", code="E-FORMAT-SHIPPED")
    digest, body = payload[len(SHIP_MAGIC):len(SHIP_MAGIC) + 32], payload[len(SHIP_MAGIC) + 32:]
    if hashlib.sha256(body).digest() != digest:
        raise BytecodeFormatError("a shipped msvm function does not match its digest: the payload was "
                                  "damaged or altered", code="E-FORMAT-SHIPPED", offset=len(SHIP_MAGIC))
    try:
        (n,) = _LEN.unpack_from(body)
        header = json.loads(body[_LEN.size:_LEN.size + n])
        sizes = [int(size) for size in header["sizes"]]
        if header.get("format") != SHIP_FORMAT or min(sizes, default=0) < 0:
            raise ValueError(f"format {header.get('format')!r}, expected {SHIP_FORMAT}")
    except (struct.error, ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
        raise BytecodeFormatError(f"a shipped msvm function has an unreadable header: {exc}",
                                  code="E-FORMAT-SHIPPED") from None
    blobs, at = [], _LEN.size + n
    for size in sizes:
        blobs.append(body[at:at + size])
        at += size
    if at != len(body):
        raise BytecodeFormatError(f"a shipped msvm function's modules take {at} bytes of {len(body)}",
                                  code="E-FORMAT-SHIPPED")
    return header, blobs


def _received_version(record: Any, blob: bytes, build: Callable[[Module], Any]) -> Any:
    """The version built from ``blob`` and ``record``, once per process (``build`` verifies it)."""
    digest = hashlib.sha256(json.dumps(record, sort_keys=True).encode() + blob).hexdigest()
    with _received_lock:
        version = _received.get(digest)
        if version is not None:
            _received.move_to_end(digest)
            return version
    version = build(decode_module(blob))
    with _received_lock:
        _received[digest] = version
        while len(_received) > _MAX_RECEIVED:
            _received.popitem(last=False)
    return version


def _parameters(fn: JitFunction) -> list[dict[str, Any]]:
    params = []
    for p in fn._signature.parameters.values():
        entry: dict[str, Any] = {"name": p.name, "kind": int(p.kind)}
        if p.default is not inspect.Parameter.empty:
            entry["default"] = _literal(fn.__name__, f"the default of {p.name!r}", p.default)
        annotation = fn.parsed.annotations.get(p.name)
        if annotation is not None:
            entry["spec"], entry["dtype"] = str(annotation.spec), annotation.dtype
        params.append(entry)
    return params


def ship(obj: Any) -> bytes:
    """The bytes a pickle of ``obj`` (an ``@ms.jit`` function or an ONNX model) carries."""
    if isinstance(obj, ShippedFunction):
        return obj.payload
    if isinstance(obj, JitFunction):
        with obj._lock:
            versions = list(obj._versions.values())
        if not versions:
            raise _refuse(obj.__name__, "it has no compiled version (its arguments' dtypes are not known "
                          "yet)", "call it once, or annotate every tensor parameter with ms.Tensor[...], "
                          "before pickling it: a pickled function serves the signatures compiled into it")
        name = obj.__name__
        header = {"kind": "jit", "name": name, "qualname": obj.__qualname__,
                  "options": obj.options.as_dict(), "params": _parameters(obj),
                  "versions": [{"key": [_encode_part(name, part) for part in v.key],
                                "inputs": [[index, tensor] for index, _, tensor in v.inputs],
                                "returns": _encode_returns(v.returns)} for v in versions]}
        return _pack(header, [v.module for v in versions])
    from ..onnx.model import OnnxModel

    if isinstance(obj, OnnxModel):
        fn = obj.function
        (key,) = fn.versions
        header = {"kind": "onnx", "name": fn.__name__, "options": fn.options.as_dict(),
                  "input_dtypes": [d.name for d in key], "inputs": obj.input_names,
                  "outputs": obj.output_names, "symbols": obj.symbols}
        return _pack(header, [fn.bytecode])
    raise TypeError(f"ship() takes an @ms.jit function or an ONNX model, got {type(obj).__name__}")


def receive(payload: bytes) -> Any:
    """Unpickle what ``ship`` made: checked, decoded and verified, each version once per process."""
    header, blobs = _unpack(payload)
    try:
        options = parse_options(dict(header["options"]))
        if header["kind"] == "onnx":
            return _receive_onnx(header, blobs, options)
        if header["kind"] == "jit":
            return ShippedFunction(payload, header, blobs, options)
        raise ValueError(f"unknown kind {header['kind']!r}")
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, SyntaxError, RecursionError,
            MemoryError) as exc:
        raise BytecodeFormatError(f"a shipped msvm function has a malformed header: {type(exc).__name__}: "
                                  f"{exc}", code="E-FORMAT-SHIPPED") from None


def _receive_onnx(header: dict[str, Any], blobs: list[bytes], options: Any) -> Any:
    from ..onnx.model import OnnxFunction, OnnxModel

    dtypes, outputs = [str(d) for d in header["input_dtypes"]], [str(n) for n in header["outputs"]]
    function = _received_version(
        {k: header[k] for k in ("kind", "name", "options", "input_dtypes", "outputs")}, blobs[0],
        lambda module: OnnxFunction(str(header["name"]), module, dtypes, len(outputs), options))
    return OnnxModel(function, [str(n) for n in header["inputs"]], outputs,
                     {str(k): str(v) for k, v in dict(header["symbols"]).items()})


class ShippedFunction(JitFunction):
    """An unpickled ``@ms.jit`` function: the versions it was shipped with, no Python source.

    It is called, bound, inspected (``bytecode``, ``versions``, ``debug``) and pickled again like the
    original; a signature it was not shipped with raises ``E-COMPILE-SHIPPED``.
    """

    def __init__(self, payload: bytes, header: dict[str, Any], blobs: list[bytes], options: Any) -> None:
        self.payload = payload
        self.__name__, self.__qualname__ = str(header["name"]), str(header["qualname"])
        self.options = options
        self._deferred = None
        params, annotations = [], {}
        for p in header["params"]:
            default = ast.literal_eval(p["default"]) if "default" in p else inspect.Parameter.empty
            params.append(inspect.Parameter(p["name"], _KIND(p["kind"]), default=default))
            if "spec" in p:
                annotations[p["name"]] = TensorAnnotation(ShapeSpec(p["spec"]), p["dtype"])
        self._set_signature(self.__name__, inspect.Signature(params), annotations)
        record = {k: header[k] for k in ("name", "options", "params")}
        self._versions = {}
        for shipped, blob in zip(header["versions"], blobs, strict=True):
            key = tuple(_decode_part(part) for part in shipped["key"])
            inputs = [(int(i), self._input_converter(int(i), key[int(i)]), bool(t))
                      for i, t in shipped["inputs"]]
            returns = _decode_returns(shipped["returns"])
            self._versions[key] = _received_version(
                {**record, "version": shipped}, blob,
                lambda module, key=key, inputs=inputs, returns=returns: Version(key, module, inputs, returns,
                                                                               options))
        self._latest = next(reversed(self._versions.values()), None)

    def _input_converter(self, index: int, part: Any) -> Callable[[Any], Any]:
        name = self._names[index]
        convert = self._converters.get(name) or _free_converter(self.__name__, name, part)
        if convert is None:
            raise ValueError(f"input {index} ({name!r}) is a folded value, not an input")
        return convert

    def _compile(self, key: tuple) -> Version:
        version = self._versions.get(key)
        if version is None:
            raise CompileError(
                f"{self.__name__} was unpickled with {len(self._versions)} compiled signature(s) and this "
                "call needs another one: an unpickled function carries MS-BC, not Python source",
                code="E-COMPILE-SHIPPED",
                hint="call the function once with arguments of this signature (dtypes, ranks, "
                     "specialised values) before pickling it, or annotate its tensors with ms.Tensor[...]")
        self._latest = version
        return version

    def __repr__(self) -> str:
        return f"<ms.jit function {self.__qualname__} (shipped, {len(self._versions)} version(s))>"


__all__ = ["LoadedModule", "ShippedFunction", "load", "receive", "save", "ship"]
