"""Large constants go to the compile worker through shared files, not through its pipe.

Why: a region's weights can be tens of megabytes (W2's two 16 MiB matrices), and encoding them into
the MS-BC sent to the worker copies them several times while holding the GIL — 130 ms for W2 —
then the pipe and the decoder copy them again. A constant of at least ``MIN_BYTES`` is instead
written once per array (the file is kept while the array lives) to a file in ``/dev/shm`` (memory,
not disk) and stands in the sent module as a one-element placeholder; the worker maps the file
read-only — pages it never reads are never touched — and puts the real array back before lowering.
Files carry the owner's pid: the first export of a process removes those of processes that are gone
(a killed kernel cannot remove its own).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import tempfile
import threading
import weakref
from dataclasses import replace
from typing import Any

import numpy as np

from ...bytecode.module import Module

MIN_BYTES = 1 << 20
_DIR = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()
_files: dict[int, tuple[weakref.ref, str]] = {}  # id(array) -> (the array, its file)
_counter = itertools.count()
_lock = threading.Lock()
_swept = False


def export(module: Module) -> tuple[Module, list[list[Any]]]:
    """``module`` with its large constants replaced by placeholders, and where they are:
    ``[index, path, dtype, shape]`` each."""
    constants, shared = list(module.constants), []
    for i, c in enumerate(constants):
        if isinstance(c, np.ndarray) and c.nbytes >= MIN_BYTES and c.dtype.kind in "fiub":
            shared.append([i, _file_of(c), c.dtype.name, list(c.shape)])
            constants[i] = np.zeros(1, c.dtype)
    return (replace(module, constants=constants) if shared else module), shared


def restore(module: Module, shared: list[list[Any]]) -> Module:
    """The worker's side: the real constants back in place, mapped read-only from their files."""
    for index, path, dtype, shape in shared:
        module.constants[index] = np.memmap(path, dtype=dtype, mode="r", shape=tuple(shape))
    return module


def _file_of(array: np.ndarray) -> str:
    global _swept
    with _lock:
        if not _swept:
            _swept = True
            _sweep()
        known = _files.get(id(array))
        if known is not None and known[0]() is array:
            return known[1]
        path = os.path.join(_DIR, f"msvm-{os.getpid()}-{next(_counter)}.const")
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        try:
            view = memoryview(np.ascontiguousarray(array)).cast("B")
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        _files[id(array)] = (weakref.ref(array), path)
        weakref.finalize(array, _forget, id(array), path)
        return path


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
        if _files.get(key, (None, path))[1] == path:
            _files.pop(key, None)
    with contextlib.suppress(OSError):
        os.unlink(path)
