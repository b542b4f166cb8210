"""Native kernels compiled once per machine, and the cheap glue to call them.

A kernel family generates its IR once per specialisation key (dtype, stride class, …) with all
sizes as run-time arguments; ``native_function`` compiles it on first use (in process: this is
our own, tested IR — the crash-isolating worker is for the JIT's generated code) or loads the
object code an earlier process left in the disk cache (``native.objcache``), keeps the library for
the life of the process and returns a ctypes function (which releases the GIL). Two threads asking
for the same key build it once.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from llvmlite import ir

from ..native import irhelpers
from ..native.llvm import NativeLibrary
from ..native.objcache import cached_library

PTR = ctypes.c_void_p
I64 = ctypes.c_int64

_LIBRARIES: dict[tuple, NativeLibrary] = {}
_FUNCTIONS: dict[tuple, Any] = {}
_KEY_LOCKS: dict[tuple, threading.Lock] = {}
_LOCK = threading.Lock()


def native_library(key: tuple, build_ir: Callable[[], str], pipeline: Mapping[str, Any] | None = None
                   ) -> NativeLibrary:
    """The library for ``key``, built from ``build_ir()`` the first time it is asked for (with
    ``llvm.build_object``'s ``pipeline`` options; O3 by default)."""
    lib = _LIBRARIES.get(key)
    if lib is not None:
        return lib
    with _LOCK:
        key_lock = _KEY_LOCKS.setdefault(key, threading.Lock())
    with key_lock:
        lib = _LIBRARIES.get(key)
        if lib is None:
            lib = cached_library(key, build_ir, "_".join(map(str, key)), pipeline)
            _LIBRARIES[key] = lib
    return lib


def native_function(key: tuple, build_ir: Callable[[], str], symbol: str, argtypes: Sequence[Any]) -> Any:
    """``symbol`` of the library for ``key`` as a ctypes function returning void."""
    fkey = (*key, symbol)
    fn = _FUNCTIONS.get(fkey)
    if fn is None:
        fn = native_library(key, build_ir).ctypes_function(symbol, None, argtypes)
        _FUNCTIONS[fkey] = fn
    return fn


def compiled_libraries() -> dict[str, NativeLibrary]:
    """Every kernel library compiled so far in this process, by name (for observability)."""
    return {lib.name: lib for lib in list(_LIBRARIES.values())}


def _probe_data_offset() -> int | None:
    """Byte offset of ``data`` in numpy's array object, checked on live arrays (None if not found)."""
    frozen = np.ones(4, np.float64)
    frozen.flags.writeable = False
    probes = [np.empty(3, np.float32), np.zeros((2, 5), np.int64)[:, 1:], frozen]
    for offset in (16, 24, 32):
        if all(ctypes.c_void_p.from_address(id(a) + offset).value == a.ctypes.data for a in probes):
            return offset
    return None


DATA_OFFSET = _probe_data_offset()
_void_at = ctypes.c_void_p.from_address


def ptr(arr: np.ndarray) -> int:
    """The address of ``arr``'s first element (the caller keeps ``arr`` alive during the call).

    Read out of the array object at ``DATA_OFFSET`` (0.13 µs, as compiled regions read it), where
    ``arr.ctypes.data`` costs ≈ 1 µs and is paid several times per kernel call — 1.6 µs for the
    read-only constants of a model, which the buffer protocol refuses; numpy's route where the
    layout is unknown.
    """
    if DATA_OFFSET is not None and isinstance(arr, np.ndarray):
        return _void_at(id(arr) + DATA_OFFSET).value or 0
    return arr.ctypes.data


DTYPE_NAMES = {np.dtype(np.float32): "float32", np.dtype(np.float64): "float64"}


def float_name(dtype: np.dtype) -> str | None:
    """"float32"/"float64" for those dtypes, else None (``dtype.name`` costs several µs)."""
    return DTYPE_NAMES.get(dtype)


def common_float_name(*arrays: np.ndarray | None) -> str | None:
    """The float dtype's name when all given arrays (None: absent) share one, else None."""
    name = float_name(arrays[0].dtype)
    if name is None or any(a is not None and a.dtype != arrays[0].dtype for a in arrays[1:]):
        return None
    return name


class Frame:
    """The argument block of a native *job* (``void job(i64* frame)``): one i64 per named field.

    Pointers travel as addresses. One definition serves the three sides: the job's IR reads its
    fields (``define``; ``unpack`` inside a function of one's own), Python fills a block for a call
    (``pack``) and generated code stores the same fields by index (``index``). Fields named in
    ``zeroed`` are work counters that every call must start at 0.
    """

    def __init__(self, fields: Sequence[str], pointers: Sequence[str], zeroed: Sequence[str] = ()) -> None:
        self.fields = tuple(fields)
        self.index = {name: i for i, name in enumerate(self.fields)}
        self.pointers = frozenset(pointers)
        self.zeroed = frozenset(zeroed)
        self._type = ctypes.c_int64 * len(self.fields)

    def unpack(self, b: ir.IRBuilder, frame: ir.Value, types: dict[str, ir.Type]) -> dict[str, ir.Value]:
        """IR: every field loaded from ``frame`` (i64*), pointer fields cast to ``types[name]``; the
        counters are their slots' addresses."""
        out = {}
        for name, i in self.index.items():
            slot = b.gep(frame, [irhelpers.i64(i)], inbounds=True)
            if name in self.zeroed:
                out[name] = slot
                continue
            value = b.load(slot)
            out[name] = b.inttoptr(value, types[name]) if name in self.pointers else value
        return out

    def define(self, module: ir.Module, name: str, pointer_type: ir.Type, *, noalias: Sequence[str] = (),
               no_builtins: bool = False) -> tuple[ir.IRBuilder, dict[str, ir.Value]]:
        """IR: the job ``void name(i64* frame)``, which unpacks the frame and calls the kernel's body;
        returns the body's builder and its arguments by field name (pointer fields of ``pointer_type``,
        counters as ``i64*``, the rest ``i64``). The body is a function of its own so that the pointers
        in ``noalias`` keep that promise (LLVM cannot see it through the loads from the frame)."""
        i64, void = irhelpers.I64, irhelpers.VOID
        types = {f: pointer_type if f in self.pointers else i64.as_pointer() if f in self.zeroed else i64
                 for f in self.fields}
        body, b, args = irhelpers.define(module, f"{name}_body", void, list(types.items()), noalias=noalias,
                                         no_builtins=no_builtins)
        body.linkage = "internal"
        _, jb, job = irhelpers.define(module, name, void, [("frame", i64.as_pointer())])
        values = self.unpack(jb, job["frame"], types)
        jb.call(body, [values[f] for f in self.fields])
        jb.ret_void()
        return b, args

    def pack(self, **values: int | None) -> Any:
        """A ctypes block for one call (``None`` pointers and omitted fields are 0)."""
        block = self._type()
        for name, value in values.items():
            block[self.index[name]] = value or 0
        return block
