"""The persistent code cache: region code kept on disk, which a later process runs from a key's first call.

Why: a notebook's kernel restarts, a script runs again, a Dask worker starts — and each would
interpret its regions until the compile worker had started and compiled them again (0.3–1 s of a
loop that never pauses). What the compile worker answers for a region (``codegen.region
.lower_in_worker``: object code and the lowering as plain data) depends only on the region function,
its bounds, the code generator and the host, so it is kept in ``$MSVM_JIT_CACHE_DIR`` (default
``$XDG_CACHE_HOME/msvm/jit``; ``MSVM_JIT_CACHE=0`` turns it off) and loaded instead: no interpreted
warm-up, no LLVM, ``jit_info()``'s ``source`` says ``"disk"``.

A file is named by what is known without building anything: a digest of the function, the region's
digest (``cache.region_digest``), the cache mode, the msvm sources that generate or call the code
(``code_version``), the host (CPU model and flags, llvmlite) and the thread count the code was planned
for (``kernels.threads.default_threads``), then one of the cache key. So a key's
first call costs a set lookup when nothing is there, and a function being prepared finds its regions'
files by the first part (``keys``) and loads them in the background before its first call (the file
keeps the cache key and the run-time key for that). Inside, checked before
any code is loaded: the seal (``native.objcache.read_sealed``: written by msvm for this user, whole
and unaltered), then a digest of the whole region function as encoded (every constant's bytes, not
the region digest's sample), its bounds, the target LLVM reports (triple, CPU, features, version) and
the BLAS entries the code calls. Any mismatch means compiling as before, and the new code replaces
the file. Writes are atomic; the folder keeps at most ``jit_disk_cache_max_mb`` of files, the least
recently used going first (a load touches its file).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import platform
import struct
import threading
import weakref
from pathlib import Path
from typing import Any

from ..bytecode.binary import encode_module
from ..bytecode.module import Module
from ..context import CONTEXT
from ..native.objcache import cache_dir, private_dir, read_sealed, write_sealed
from .cache import Entry

FORMAT = 1
SUFFIX = ".jit"
Read = tuple[dict[str, Any], bytes]  # a sealed file of ours: its header and payload
_HEAD = struct.Struct("<I")
_lock = threading.Lock()
_index: dict[str, set[str]] = {}  # folder -> names of its files, listed once per process
_prefixes: weakref.WeakKeyDictionary[Any, tuple[tuple[str, str], str]] = weakref.WeakKeyDictionary()
# region -> (the code version and host it was made for, its ``_prefix``)


def enabled() -> bool:
    return os.environ.get("MSVM_JIT_CACHE", "1") != "0"


def folder() -> Path:
    """``$MSVM_JIT_CACHE_DIR``, else ``$XDG_CACHE_HOME/msvm/jit`` (read at every call)."""
    chosen = os.environ.get("MSVM_JIT_CACHE_DIR")
    return Path(chosen) if chosen else cache_dir() / "jit"


@functools.cache
def code_version() -> str:
    """msvm's version and a digest of the sources that generate region code or are called by it."""
    from .. import __version__

    digest = hashlib.sha256(__version__.encode())
    root = Path(__file__).resolve().parent.parent
    sources = [*root.glob("msjit/codegen/*.py"), *root.glob("native/*.py"), *root.glob("kernels/*.py")]
    for path in sorted(sources):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:32]


@functools.cache
def host() -> str:
    """The host as far as it can be told without loading LLVM: machine, CPU model and flags, llvmlite."""
    cpu = ""
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            lines = [line for line in f.read(1 << 16).splitlines()
                     if line.startswith(("model name", "flags", "Features", "CPU part"))]
        cpu = "\n".join(dict.fromkeys(lines))
    import llvmlite  # its version only: not llvmlite.binding (importlib.metadata cost 0.3 s here)

    return f"{platform.machine()}\n{platform.system()}\n{cpu}\n{llvmlite.__version__}"


def _prefix(region: Any) -> str:
    """What names every file of ``region`` (a ``runtime.RegionRuntime``): the part before the key's
    (made once per region: every new key of a region asks for it)."""
    from ..kernels.threads import default_threads  # generated code's per-thread scratch is sized for it

    made = (code_version(), host())
    known = _prefixes.get(region)
    if known is None or known[0] != made:
        settings = region.settings
        key = [FORMAT, *made, region.exe_name, region.region.start, region.digest, settings.cache_mode,
               settings.mem_optimize, default_threads()]
        known = _prefixes[region] = (made, hashlib.sha256(json.dumps(key).encode()).hexdigest()[:24])
    return known[1]


def file_name(region: Any, cache_key: tuple) -> str:
    """The file of the code of ``region`` for ``cache_key``."""
    return f"{_prefix(region)}-{hashlib.sha256(repr(cache_key).encode()).hexdigest()[:16]}{SUFFIX}"


def _names(where: Path) -> set[str]:
    with _lock:
        names = _index.get(str(where))
        if names is None:
            try:
                names = {p.name for p in where.glob(f"*{SUFFIX}")}
            except OSError:
                names = set()
            _index[str(where)] = names
        return names


def has(region: Any, cache_key: tuple) -> bool:
    """Is there a file for ``region``'s ``cache_key``? (A set lookup: the folder is listed once.)"""
    return enabled() and file_name(region, cache_key) in _names(folder())


def known(region: Any) -> bool:
    """Does the persistent code cache have any file of ``region``? (A look at the folder's names.)"""
    if not enabled():
        return False
    prefix = _prefix(region) + "-"
    return any(n.startswith(prefix) for n in list(_names(folder())))


def keys(region: Any) -> list[tuple[tuple, tuple, Read]]:
    """(cache key, run-time key, what was read) of every sealed file ``region`` has, so that a function
    being prepared can load its code before its first call (``load``'s ``read``: no second read)."""
    if not enabled():
        return []
    where = folder()
    prefix = _prefix(region) + "-"
    found = []
    for name in sorted(n for n in list(_names(where)) if n.startswith(prefix)):
        read = _read(where / name)
        if read is not None:
            head = read[0]
            with contextlib.suppress(KeyError, TypeError):
                found.append((_tuple(head["cache_key"]), _tuple(head["key"]), read))
    return found


def _tuple(value: Any) -> Any:
    """A key as JSON gave it back: its lists were tuples."""
    return tuple(_tuple(v) for v in value) if isinstance(value, list) else value


def _content(module: Module, bounds: dict[str, int] | None) -> dict[str, Any]:
    """What the code was made from, compared before it is loaded."""
    from ..native.llvm import target_identity
    from .codegen.region import gemm_entries

    digest = hashlib.blake2b(encode_module(module), digest_size=32).hexdigest()
    return {"module": digest, "bounds": dict(sorted((bounds or {}).items())), "target": target_identity(),
            "gemm": gemm_entries(module)}


def _read(path: Path) -> Read | None:
    """(header, payload) of a sealed file of ours, or None."""
    body = read_sealed(path)
    if body is None:
        return None
    try:
        (n,) = _HEAD.unpack_from(body)
        head = json.loads(body[_HEAD.size:_HEAD.size + n])
    except (ValueError, struct.error, RecursionError):
        return None
    if not isinstance(head, dict) or head.get("format") != FORMAT:
        return None
    return head, body[_HEAD.size + n:]


def load(region: Any, cache_key: tuple, module: Module, bounds: dict[str, int] | None,
         read: Read | None = None) -> tuple[dict[str, Any], bytes] | None:
    """The worker's answer kept for ``region``'s ``cache_key`` (compiled from ``module`` with ``bounds``),
    or None when there is none or it does not check (then the next compile replaces it). ``read``: the
    file as ``keys`` read it already."""
    if not enabled():
        return None
    where = folder()
    path = where / file_name(region, cache_key)
    if path.name not in _names(where):
        # Another process sharing the folder (a Dask worker) may have written it since it was listed: a
        # compile about to start looks (one stat), so a key is compiled once for all of them.
        if not path.is_file():
            return None
        _names(where).add(path.name)
    read = read or _read(path)
    if read is None or read[0].get("content") != _content(module, bounds) or "reply" not in read[0]:
        return None
    with contextlib.suppress(OSError):
        os.utime(path)  # recently used: evicted last
    return read[0]["reply"], read[1]


def load_code(region: Any, cache_key: tuple, module: Module, bounds: dict[str, int] | None, name: str,
              read: Read | None = None) -> Any | None:
    """``load``'s answer as code of this process (a ``codegen.region.CompiledRegion``); None when there
    is none, or when it does not load — then it is compiled again, and the new code replaces it."""
    from .codegen.region import load_region

    try:
        found = load(region, cache_key, module, bounds, read)
        return load_region(*found, module, name) if found is not None else None
    except Exception:  # a file that does not fit is compiled over, never an entry's fallback
        return None


def store(entry: Entry, module: Module, bounds: dict[str, int] | None, reply: dict[str, Any],
          payload: bytes) -> bool:
    """Keep the worker's answer for ``entry``; False when the cache is off or the folder refuses it."""
    if not enabled():
        return False
    where = folder()
    try:
        head = json.dumps({"format": FORMAT, "entry": entry.name, "cache_key": entry.cache_key,
                           "key": entry.key, "content": _content(module, bounds), "reply": reply}).encode()
    except (TypeError, ValueError):  # a key of something JSON does not hold: not kept
        return False
    path = where / file_name(entry.owner, entry.cache_key)
    if not write_sealed(path, _HEAD.pack(len(head)) + head + payload, keep=1 << 30, suffix=SUFFIX):
        return False
    _names(where).add(path.name)
    _prune(where, CONTEXT.jit_disk_cache_max_mb << 20)
    return True


def forget(entry: Entry) -> None:
    """Remove ``entry``'s file (its code was demoted: a later process compiles and judges it afresh)."""
    where = folder()
    path = where / file_name(entry.owner, entry.cache_key)
    with contextlib.suppress(OSError):
        path.unlink()
    _names(where).discard(path.name)


def _prune(where: Path, max_bytes: int) -> None:
    """Delete the least recently used files until the folder holds at most ``max_bytes``."""
    with contextlib.suppress(OSError):
        files = []
        for p in where.glob(f"*{SUFFIX}"):
            with contextlib.suppress(OSError):
                info = p.stat()
                files.append((info.st_mtime, info.st_size, p))
        total = sum(size for _, size, _ in files)
        for _, size, p in sorted(files, key=lambda f: f[0]):
            if total <= max_bytes:
                break
            with contextlib.suppress(OSError):
                p.unlink()
                total -= size
                _names(where).discard(p.name)


def clear() -> int:
    """Delete every file of the cache folder; returns how many."""
    where = folder()
    removed = 0
    if private_dir(where) is None:
        return 0
    for p in where.glob(f"*{SUFFIX}"):
        with contextlib.suppress(OSError):
            p.unlink()
            removed += 1
    with _lock:
        _index.pop(str(where), None)
    return removed


def stats() -> dict[str, Any]:
    """The folder, whether the cache is on, its files and bytes."""
    where = folder()
    files = list(where.glob(f"*{SUFFIX}")) if where.is_dir() else []
    size = 0
    for p in files:
        with contextlib.suppress(OSError):
            size += p.stat().st_size
    return {"enabled": enabled(), "dir": str(where), "files": len(files), "bytes": size,
            "max_bytes": CONTEXT.jit_disk_cache_max_mb << 20}


__all__ = ["clear", "code_version", "enabled", "file_name", "folder", "forget", "has", "keys", "known",
           "load", "load_code", "stats", "store"]
