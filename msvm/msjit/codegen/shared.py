"""Large constants go to the compile worker through shared files, not through its pipe.

Why: a region's weights can be tens of megabytes (W2's two 16 MiB matrices), and encoding them into
the MS-BC sent to the worker copies them several times while holding the GIL (a tenth of a second
for W2's) — then the pipe and the decoder copy them again. A constant of at least ``MIN_BYTES`` is instead
written once per array to a file in ``/dev/shm`` (memory, not disk; kept while the array lives and
the budget below allows) and stands in the sent module as a one-element placeholder; the worker maps the file
read-only — pages it never reads are never touched — and puts the real array back before lowering.
Files carry the owner's pid: the first export of a process removes those of processes that are gone
(a killed kernel cannot remove its own). The files kept are bounded (``BUDGET`` bytes, least recently
sent first out): a large model's weights are not held twice in memory for as long as they live —
once sent, the worker has them mapped, and a later compile writes an evicted array again. The
worker keeps its maps (the same budget, least recently used out), so a later compile of the same
model gets the very same arrays, and finds the weights it packed from them in its pack cache.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import tempfile
import threading
import weakref
from collections import OrderedDict
from dataclasses import replace
from typing import Any

import numpy as np

from ...bytecode.module import Module

MIN_BYTES = 64 << 10  # a transformer layer's weights are well under 1 MiB each, and still worth it
BUDGET = 256 << 20
_DIR = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()
_files: dict[int, tuple[weakref.ref, str, int]] = {}  # id(array) -> (the array, its file, bytes), LRU order
_counter = itertools.count()
_maps: OrderedDict[str, np.ndarray] = OrderedDict()  # the worker's: path -> its array, LRU order
_lock = threading.RLock()  # reentrant: a finalizer (_forget) may run in a GC inside a locked section
_swept = False


def export(module: Module) -> tuple[Module, list[list[Any]]]:
    """``module`` with its large constants replaced by placeholders, and where they are:
    ``[index, path, dtype, shape]`` each."""
    constants, shared = list(module.constants), []
    for i, c in enumerate(constants):
        if isinstance(c, np.ndarray) and c.nbytes >= MIN_BYTES and c.dtype.kind in "fiub":
            shared.append([i, _file_of(c), c.dtype.name, list(c.shape)])
            constants[i] = np.zeros(1, c.dtype)
    if shared:
        _evict({path for _, path, _, _ in shared})
    return (replace(module, constants=constants) if shared else module), shared


def restore(module: Module, shared: list[list[Any]]) -> Module:
    """The worker's side: the real constants back in place, mapped read-only from their files."""
    for index, path, dtype, shape in shared:
        module.constants[index] = _mapped(path, np.dtype(dtype), tuple(shape))
    return module


def _mapped(path: str, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """The array of ``path``: the one mapped for an earlier compile while it is kept (a file's name is
    never reused, nor its content changed), else a new map — a plain ndarray, which lowering uses as it
    is (of a memmap, ``np.ascontiguousarray`` makes a new view each time: no pack cache hit)."""
    with _lock:
        array = _maps.pop(path, None)
        if array is None or array.dtype != dtype or array.shape != shape:
            array = np.memmap(path, dtype=dtype, mode="r", shape=shape).view(np.ndarray)
        _maps[path] = array
        total = sum(a.nbytes for a in _maps.values())
        while total > BUDGET and len(_maps) > 1:
            total -= _maps.popitem(last=False)[1].nbytes
        return array


def _file_of(array: np.ndarray) -> str:
    global _swept
    with _lock:
        if not _swept:
            _swept = True
            _sweep()
        known = _files.pop(id(array), None)
        if known is not None and known[0]() is array:
            _files[id(array)] = known  # most recently used: last
            return known[1]
        path = os.path.join(_DIR, f"msvm-{os.getpid()}-{next(_counter)}.const")
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        try:
            view = memoryview(np.ascontiguousarray(array)).cast("B")
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        _files[id(array)] = (weakref.ref(array), path, array.nbytes)
        weakref.finalize(array, _forget, id(array), path)
        return path


def _evict(keep: set[str]) -> None:
    """Remove the least recently sent files (not those in ``keep``) while the kept ones exceed ``BUDGET``."""
    with _lock:
        total = sum(n for _, _, n in _files.values())
        for key, (_, path, n) in list(_files.items()):
            if total <= BUDGET:
                break
            if path in keep:
                continue
            _files.pop(key, None)  # (a finalizer run by a collection in here may have dropped it)
            total -= n
            with contextlib.suppress(OSError):
                os.unlink(path)


def _sweep() -> None:
    """Remove the files of processes that no longer exist."""
    for name in os.listdir(_DIR):
        parts = name.split("-")
        if len(parts) != 3 or parts[0] != "msvm" or not name.endswith(".const") or not parts[1].isdigit():
            continue
        try:
            os.kill(int(parts[1]), 0)
        except ProcessLookupError:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(_DIR, name))
        except OSError:  # alive, owned by someone else
            pass


def _forget(key: int, path: str) -> None:
    with _lock:
        if _files.get(key, (None, path, 0))[1] == path:
            _files.pop(key, None)
    with contextlib.suppress(OSError):
        os.unlink(path)
