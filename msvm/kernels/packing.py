"""A cache of repacked constant weights (NCHWc blocks, Winograd transforms, …), shared by the variants.

Constants are read-only and stable (the module's constant pool hands the same read-only array to
every call), so a repacked form can be kept and reused. It is keyed on the arrays' identities
and shapes — no pointer is read on the hot path — and the entry holds references to the
originals, so that an identity cannot be reused by another array while the entry lives. A
writeable array (or a read-only view of writeable memory) may change between calls; it is
repacked every time. The cache is an LRU bounded by bytes and safe to use from several threads.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")
MAX_BYTES = 256 << 20

_entries: OrderedDict[tuple, tuple[Any, Any, int]] = OrderedDict()
_bytes = 0
_lock = threading.Lock()


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
    """``build()`` (a repacking of ``weight``/``bias``), cached while both are constants.

    ``kind`` names the packing and everything else it depends on (e.g. ``"nchwc/g1"``).
    """
    global _bytes
    if not (is_constant(weight) and is_constant(bias)):
        return build()
    key = (kind, id(weight), weight.shape, id(bias), None if bias is None else bias.shape)
    with _lock:
        hit = _entries.get(key)
        if hit is not None:
            _entries.move_to_end(key)
            return hit[1]
    packed = build()
    size = _nbytes(packed)
    with _lock:
        if key not in _entries:
            _entries[key] = ((weight, bias), packed, size)
            _bytes += size
            while _bytes > MAX_BYTES and len(_entries) > 1:
                _, (_, _, dropped) = _entries.popitem(last=False)
                _bytes -= dropped
        return _entries[key][1]


def clear() -> None:
    """Forget every packed weight (tests, or memory pressure)."""
    global _bytes
    with _lock:
        _entries.clear()
        _bytes = 0


def stats() -> dict[str, int]:
    with _lock:
        return {"entries": len(_entries), "bytes": _bytes}
