"""Addresses a region's code needs from the process that runs it, bound after the code is loaded.

Why not bake them in as constants: the region may be lowered and compiled in the compile worker
(``msvm.native.worker``), a different process, where the constants' data, the BLAS entry point, the
native conv jobs and the thread pool live at other addresses, or nowhere. So the code reads every
such address from a table, ``@msvm_externs`` (an ``i64*`` defined in the region's module); each
function loads the entries it uses once, in its entry block. The process that runs the code
resolves the table's keys — what each address is, never an address — and stores the table's
address into the global after loading (``install``).

Keys are tuples: ``("const", k)`` the plan's constant k, ``("gemm", entry name)``, ``("pool", "run" |
"state")``, ``("py", name)`` a function of CPython's C API, ``(job, dtype, …)`` for the native conv
and packed-GEMM jobs, as ``job_address`` takes them, and ``("rows", kind, dtype)`` for the row jobs of
``msvm.kernels.rows``.

Some entries are numbers, not addresses: ``("arena", buffer)`` the buffer's offset in the arena,
``("slot", buffer)`` the bytes of one thread's part of a per-thread scratch, ``("gil",)`` whether the
code releases the GIL. They depend on a bucket's bounds (the memory plan is sized for them); read from
the table, they leave the code the same for every bucket of a region, so that one object code serves
them all (``region.build_region``).
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

GLOBAL = "msvm_externs"
Key = tuple


def resolve(key: Key, constants: Sequence[np.ndarray]) -> int:
    """The address ``key`` names in this process."""
    kind, *args = key
    if kind == "const":
        return constants[args[0]].ctypes.data
    if kind == "gemm":
        from ...native.blas import discover

        for entry in discover():
            if entry.name == args[0]:
                return entry.address
        raise LookupError(f"BLAS entry {args[0]} is not loaded in this process")
    if kind == "py":
        return ctypes.cast(getattr(ctypes.pythonapi, args[0]), ctypes.c_void_p).value
    if kind == "pool":
        from ...kernels.threads import POOL

        run, state = POOL.entry()
        return run if args[0] == "run" else state
    if kind == "conv_nchwc":
        from ...kernels import conv_nchwc

        return conv_nchwc.job_address(*args)
    if kind == "conv_depthwise":
        from ...kernels import conv_depthwise

        return conv_depthwise.job_address(*args)
    if kind == "gemm_packed":
        from ...kernels import gemm_packed

        return gemm_packed.job_address(*args)
    if kind == "rows":
        from ...kernels import rows

        return rows.job_address(*args)
    if kind == "unary":
        from ...kernels import elementwise

        return elementwise.job_address(*args)
    raise LookupError(f"unknown extern {key!r}")


def install(global_address: int, keys: Sequence[Key], constants: Sequence[np.ndarray],
            numbers: Mapping[Key, int]) -> np.ndarray:
    """Resolve ``keys`` (those in ``numbers`` to their number there) into a table and point the loaded
    code's ``@msvm_externs`` (at ``global_address``) at it; the caller keeps the table alive as long as
    the code."""
    table = np.array([numbers[k] if k in numbers else resolve(k, constants) for k in keys] or [0], np.int64)
    ctypes.c_int64.from_address(global_address).value = table.ctypes.data
    return table


def to_json(keys: Sequence[Key]) -> list[list[Any]]:
    return [list(k) for k in keys]


def from_json(items: Sequence[Sequence[Any]]) -> list[Key]:
    return [tuple(k) for k in items]
