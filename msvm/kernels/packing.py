"""A cache of repacked constant weights (NCHWc blocks, GEMM panels, Winograd transforms, …), shared by
the variants and by the JIT's lowering.

Constants are read-only and stable (the module's constant pool hands the same read-only array to
every call), so a repacked form can be kept and reused. It is keyed on the arrays' identities
and shapes — no pointer is read on the hot path. The entry holds only weak references to the
originals: a hit must find the very arrays still alive (an identity reused by a new array is a
miss), and an entry goes as soon as its weight does — the cache never keeps a dropped model's
weights, nor the shared-memory files the compile worker maps them from, alive. A writeable array
(or a read-only view of writeable memory) may change between calls; it is repacked every time. The
cache is an LRU bounded by bytes and safe to use from several threads.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")
MAX_BYTES = 256 << 20

_entries: OrderedDict[tuple, tuple[tuple[Any, Any], Any, int]] = OrderedDict()  # key -> (refs, packed, bytes)
_bytes = 0
_lock = threading.RLock()  # reentrant: a finalizer (_forget) may run in a GC inside a locked section


def is_constant(arr: np.ndarray | None) -> bool:
    """True when neither ``arr`` nor any array it views is writeable."""
    while isinstance(arr, np.ndarray):
        if arr.flags.writeable:
            return False
        arr = arr.base
    return True


def _nbytes(value: Any) -> int:
    if isinstance(value, np.ndarray):
        return value.nbytes
    if isinstance(value, (tuple, list)):
        return sum(_nbytes(v) for v in value)
    return 0


def cached_pack(kind: str, weight: np.ndarray, bias: np.ndarray | None, build: Callable[[], T]) -> T:
    """``build()`` (a repacking of ``weight``/``bias``), cached while both are constants and alive.

    ``kind`` names the packing and everything else it depends on (e.g. ``"nchwc/g1"``).
    """
    if not (is_constant(weight) and is_constant(bias)):
        return build()
    key = (kind, id(weight), weight.shape, id(bias), None if bias is None else bias.shape)
    with _lock:
        hit = _entries.get(key)
        if hit is not None and _alive(hit[0], weight, bias):
            _entries.move_to_end(key)
            return hit[1]
    packed = build()
    refs = (weakref.ref(weight), None if bias is None else weakref.ref(bias))
    with _lock:
        hit = _entries.get(key)
        if hit is not None and _alive(hit[0], weight, bias):
            return hit[1]
        _drop(key)
        _entries[key] = (refs, packed, _nbytes(packed))
        _add(_entries[key][2])
        while _bytes > MAX_BYTES and len(_entries) > 1:
            _drop(next(iter(_entries)))
    for original in (weight, bias):
        if original is not None:
            weakref.finalize(original, _forget, key, refs)
    return packed


def _alive(refs: tuple[Any, Any], weight: np.ndarray, bias: np.ndarray | None) -> bool:
    """Are the entry's originals these very arrays?"""
    if refs[0]() is not weight:
        return False
    return refs[1] is None if bias is None else refs[1] is not None and refs[1]() is bias


def _add(size: int) -> None:
    global _bytes
    _bytes += size


def _drop(key: tuple) -> None:
    """Remove ``key``'s entry, if any (lock held)."""
    entry = _entries.pop(key, None)
    if entry is not None:
        _add(-entry[2])


def _forget(key: tuple, refs: tuple[Any, Any]) -> None:
    """An original died: drop its entry (unless the key holds a newer one by now)."""
    with _lock:
        entry = _entries.get(key)
        if entry is not None and entry[0] is refs:
            _drop(key)


def clear() -> None:
    """Forget every packed weight (tests, or memory pressure)."""
    global _bytes
    with _lock:
        _entries.clear()
        _bytes = 0


def stats() -> dict[str, int]:
    with _lock:
        return {"entries": len(_entries), "bytes": _bytes}
