"""Native kernels compiled once per process, and the cheap glue to call them.

A kernel family generates its IR once per specialisation key (dtype, stride class, …) with all
sizes as run-time arguments; ``native_function`` compiles it on first use (in process: this is
our own, tested IR — the crash-isolating worker is for the JIT's generated code), caches the
library for the life of the process and returns a ctypes function (which releases the GIL).
Two threads asking for the same key compile it once.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..native.llvm import NativeLibrary, compile_ir

PTR = ctypes.c_void_p
I64 = ctypes.c_int64

_LIBRARIES: dict[tuple, NativeLibrary] = {}
_FUNCTIONS: dict[tuple, Any] = {}
_KEY_LOCKS: dict[tuple, threading.Lock] = {}
_LOCK = threading.Lock()


def native_library(key: tuple, build_ir: Callable[[], str]) -> NativeLibrary:
    """The library for ``key``, built from ``build_ir()`` the first time it is asked for."""
    lib = _LIBRARIES.get(key)
    if lib is not None:
        return lib
    with _LOCK:
        key_lock = _KEY_LOCKS.setdefault(key, threading.Lock())
    with key_lock:
        lib = _LIBRARIES.get(key)
        if lib is None:
            lib = compile_ir(build_ir(), name="_".join(map(str, key)))
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


_addressof = ctypes.addressof
_from_buffer = ctypes.c_char.from_buffer


def ptr(arr: np.ndarray) -> int:
    """The address of ``arr``'s first element (the caller keeps ``arr`` alive during the call).

    Through the buffer protocol when it can (≈3× cheaper than ``arr.ctypes.data``, which costs
    ≈1 µs and is paid several times per kernel call); read-only, non-C-contiguous or empty
    arrays take the numpy route.
    """
    try:
        return _addressof(_from_buffer(arr))
    except (TypeError, ValueError, BufferError):
        return arr.ctypes.data


COUNTER = ctypes.POINTER(ctypes.c_int64)  # argtype of a chunk-scheduled kernel's work counter


def counter() -> Any:
    """A fresh work counter for one call of a chunk-scheduled kernel (see ``threads``), by reference."""
    return ctypes.byref(ctypes.c_int64(0))


DTYPE_NAMES = {np.dtype(np.float32): "float32", np.dtype(np.float64): "float64"}


def float_name(dtype: np.dtype) -> str | None:
    """"float32"/"float64" for those dtypes, else None (``dtype.name`` costs several µs)."""
    return DTYPE_NAMES.get(dtype)
