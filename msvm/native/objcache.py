"""msvm's on-disk caches: sealed files in private folders, and the object code of its own native kernels.

Why kernels are cached: a blocked conv kernel takes about a second to optimise and compile, and every
process (each notebook kernel restart, each benchmark run) would pay it again at its first convolution —
inside the user's process, competing with their code for the cores. The code depends only on its IR and
on the code that generates it, so a file named by a digest of the kernel's key (dtype, stride class, …),
the code generator (``target_identity()``) and the source of the packages that write kernel IR
(``msvm/kernels``, ``msvm/native``: any edit there invalidates every file) can be loaded by any later
process instead — without even generating the IR (Numba's ``cache=True`` keys on source the same way).
Kernel IR therefore depends on its key alone: addresses (a BLAS entry, the thread pool) are
run-time arguments, never constants in it. A read-only or full disk only means compiling as before;
``MSVM_KERNEL_CACHE=0`` turns the cache off.

Why sealed files: a cache of machine code is code msvm will run, so a file must prove that msvm wrote
it. Every file (this one's and the JIT's, ``msvm.msjit.diskcache``) carries an HMAC-SHA256 of its
contents under the user's random key (``key_file``: mode 0600, outside every cache folder, so a cache
copied in from elsewhere brings no key of its own), checked before anything reads the contents: a
truncated, damaged or foreign file — another user's, another machine's, a restored CI cache's, one
edited by hand — is ignored and compiled again, never loaded (one warning per folder says so). The
folders are the user's own (created 0700); a folder or file owned by someone else, or a folder others
may write to, is refused with a warning.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import hmac
import json
import os
import stat
import tempfile
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .llvm import NativeLibrary, build_object, load_object, target_identity

MAX_FILES = 256  # a few dozen per msvm version; ~25 KB each
_MAGIC = b"MSVMOBJ2"
_MAC = 32  # HMAC-SHA256 of the contents, after the magic
_warned: set[str] = set()


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
    obj = read_sealed(path) if path is not None else None
    if obj is not None:
        return load_object(obj, name)
    ir = build_ir()
    build = build_object(ir, name, with_asm=False, with_ir=False, **pipeline)
    if path is not None:
        write_sealed(path, build.object_code)
    return load_object(build.object_code, name, llvm_ir=ir, times=build.times)


def private_dir(folder: Path) -> Path | None:
    """``folder``, created 0700 where missing, if it is safe to keep code in: a directory owned by this
    user that nobody else may write to. Otherwise None, with a warning (once per folder)."""
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = folder.stat()
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode):
        return _refuse(folder, "is not a directory")
    if hasattr(os, "geteuid") and info.st_uid != os.geteuid():
        return _refuse(folder, "is owned by another user")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return _refuse(folder, "may be written by other users (group/world-writable)")
    return folder


def _refuse(path: Path, why: str) -> None:
    if str(path) not in _warned:
        _warned.add(str(path))
        warnings.warn(f"msvm: not using the cache at {path}: it {why}; code is compiled afresh instead",
                      RuntimeWarning, stacklevel=3)
    return None


def key_file() -> Path:
    """The user's cache key: ``$MSVM_CACHE_KEY``, else ``$XDG_CONFIG_HOME/msvm/cache.key`` (default
    ``~/.config/msvm``) — outside every cache folder, so that a cache restored, shared or mounted from
    elsewhere brings no key that would make its files load."""
    chosen = os.environ.get("MSVM_CACHE_KEY")
    if chosen:
        return Path(chosen)
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "msvm" / "cache.key"


def _seal_key() -> bytes | None:
    """The user's HMAC key, made once, 0600 in a private folder (atomically: the first process to link
    its key wins)."""
    path = key_file()
    folder = private_dir(path.parent)
    if folder is None:
        return None
    for _ in range(2):
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except FileNotFoundError:
            tmp = None
            try:
                fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=folder)  # created 0600
                with os.fdopen(fd, "wb") as out:
                    out.write(os.urandom(32))
                os.link(tmp, path)
            except FileExistsError:
                pass
            except OSError:
                return None
            finally:
                if tmp is not None:
                    with contextlib.suppress(OSError):
                        os.unlink(tmp)
            continue
        except OSError:
            return None
        with os.fdopen(fd, "rb") as f:
            info = os.fstat(f.fileno())
            if hasattr(os, "geteuid") and info.st_uid != os.geteuid():
                return _refuse(path, "is owned by another user")
            if info.st_mode & 0o077:
                return _refuse(path, "may be read or written by other users")
            key = f.read(64)
        return key if len(key) == 32 else None
    return None


def read_sealed(path: Path) -> bytes | None:
    """The contents of a sealed file, or None when it is missing, not ours, or its seal does not check."""
    key = _seal_key() if private_dir(path.parent) is not None else None
    if key is None:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as f:
            if hasattr(os, "geteuid") and os.fstat(f.fileno()).st_uid != os.geteuid():
                return _refuse(path, "is owned by another user")
            data = f.read()
    except OSError:
        return None
    n = len(_MAGIC)
    mac, body = data[n: n + _MAC], data[n + _MAC:]
    if data[:n] != _MAGIC or not hmac.compare_digest(mac, hmac.new(key, body, hashlib.sha256).digest()):
        _note_unsealed(path)
        return None
    return body


def _note_unsealed(path: Path) -> None:
    """Warn once per folder that a file there was ignored: the user learns that something wrote into
    their cache (or damaged it) without a warning for every file of it."""
    where = f"unsealed:{path.parent}"
    if where not in _warned:
        _warned.add(where)
        warnings.warn(f"msvm: ignored {path}: it is damaged or was not written by msvm for this user "
                      "(its seal does not check); what it held is computed afresh and written again",
                      RuntimeWarning, stacklevel=3)


def write_sealed(path: Path, body: bytes, keep: int | None = None, suffix: str = ".o") -> bool:
    """Write ``body`` sealed, atomically (a temporary file renamed over: a concurrent reader sees the
    whole file or none), then keep only the ``keep`` (default ``MAX_FILES``) newest ``*suffix`` files of
    the folder. False when the folder refuses it (not ours, read-only, full)."""
    key = _seal_key() if private_dir(path.parent) is not None else None
    if key is None:
        return False
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "wb") as out:
            out.write(_MAGIC + hmac.new(key, body, hashlib.sha256).digest() + body)
        os.replace(tmp, path)
    except OSError:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        return False
    _prune(path.parent, MAX_FILES if keep is None else keep, suffix)
    return True


def _prune(folder: Path, keep: int, suffix: str) -> None:
    """Delete all but the ``keep`` most recently written ``*suffix`` files in ``folder``."""
    with contextlib.suppress(OSError):
        files = sorted(folder.glob(f"*{suffix}"), key=lambda f: f.stat().st_mtime, reverse=True)
        for old in files[keep:]:
            with contextlib.suppress(OSError):
                old.unlink()
