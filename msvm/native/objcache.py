"""msvm's on-disk caches, and the object code of its own native kernels kept there.

Why: a blocked conv kernel takes about a second to optimise and compile, and every process (each
notebook kernel restart, each benchmark run) would pay it again at its first convolution — inside
the user's process, competing with their code for the cores. The code depends only on its IR and
on the code that generates it, so a file named by a digest of the kernel's key (dtype, stride class,
…), the code generator (``target_identity()``) and the source of the packages that write kernel IR
(``msvm/kernels``, ``msvm/native``: any edit there invalidates every file) can be loaded by any later
process instead — without even generating the IR (Numba's ``cache=True`` keys on source the same
way). Kernel IR therefore depends on its key alone: addresses (a BLAS entry, the thread pool) are
run-time arguments, never constants in it. Each file stores a digest of its object bytes, checked
before the loader sees them: a truncated or damaged file is recompiled, never loaded. A read-only or
full disk only means compiling as before; ``MSVM_KERNEL_CACHE=0`` turns the cache off.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .llvm import NativeLibrary, build_object, load_object, target_identity

MAX_FILES = 256  # a few dozen per msvm version; ~25 KB each
_MAGIC = b"MSVMOBJ1"
_DIGEST = 32  # sha256 of the object bytes, after the magic


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/msvm``, or ``~/.cache/msvm`` (read at every call: tests point it elsewhere)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "msvm"


@functools.cache
def source_digest() -> str:
    """A digest of the source that writes kernel IR (read once per process)."""
    digest = hashlib.sha256()
    root = Path(__file__).resolve().parent.parent
    for path in sorted([*root.joinpath("kernels").glob("*.py"), *root.joinpath("native").glob("*.py")]):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def object_path(key: tuple) -> Path:
    """Where the object code of the kernel library ``key``, compiled for this host, lives."""
    text = json.dumps([[str(k) for k in key], target_identity(), source_digest()], sort_keys=True)
    return cache_dir() / "kernels" / f"{hashlib.sha256(text.encode()).hexdigest()[:32]}.o"


def cached_library(key: tuple, build_ir: Callable[[], str], name: str,
                   pipeline: Mapping[str, Any] | None = None) -> NativeLibrary:
    """The kernel library ``key`` (IR from ``build_ir()``) compiled for this host (``build_object``'s
    options in ``pipeline``, O3 by default) and loaded: from the disk cache when it holds it, else
    compiled now and stored for the next process."""
    pipeline = dict(pipeline or {})
    cached = os.environ.get("MSVM_KERNEL_CACHE", "1") != "0"
    path = object_path((*key, *sorted(pipeline.items()))) if cached else None
    obj = _read(path) if path is not None else None
    if obj is not None:
        return load_object(obj, name)
    ir = build_ir()
    build = build_object(ir, name, with_asm=False, with_ir=False, **pipeline)
    if path is not None:
        _write(path, build.object_code)
    return load_object(build.object_code, name, llvm_ir=ir, times=build.times)


def _read(path: Path) -> bytes | None:
    try:
        data = path.read_bytes()
    except OSError:
        return None
    n = len(_MAGIC)
    digest, obj = data[n: n + _DIGEST], data[n + _DIGEST:]
    if data[:n] != _MAGIC or not obj or hashlib.sha256(obj).digest() != digest:
        return None
    return obj


def _write(path: Path, obj: bytes) -> None:
    """Atomically (a temporary file renamed over): a concurrent reader sees the whole file or none."""
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "wb") as out:
            out.write(_MAGIC + hashlib.sha256(obj).digest() + obj)
        os.replace(tmp, path)
    except OSError:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        return
    _prune(path.parent)


def _prune(folder: Path) -> None:
    """Delete all but the ``MAX_FILES`` most recently written object files in ``folder``."""
    with contextlib.suppress(OSError):
        files = sorted(folder.glob("*.o"), key=lambda f: f.stat().st_mtime, reverse=True)
        for old in files[MAX_FILES:]:
            with contextlib.suppress(OSError):
                old.unlink()
