"""GEMM entry points already in this process: where they are, their ABI, a safe wrapper, which one to use.

Only libraries that are *already loaded* are used — numpy's own BLAS always is, once numpy is
imported. Loading another one (scipy's bundled OpenBLAS, a system BLAS) just to use or measure it
would start a second thread pool: on a small machine its threads and numpy's then spin against each
other, and numpy's own matmul stalls (measured here: ~16 ms after each native GEMM on 2 cores).
Sources: numpy's bundled OpenBLAS (``numpy.libs``/``scipy_openblas64``: 64-bit integer symbols such
as ``scipy_cblas_sgemm64_``), scipy's bundled OpenBLAS (32-bit integers) when scipy has loaded it,
other BLAS libraries mapped into the process (``/proc/self/maps``; ``find_library`` names where there
is no /proc), and scipy's ``scipy.linalg.cython_blas`` capsules (Fortran ABI, 32-bit integers) when
``scipy.linalg`` is imported. Each is opened with ``RTLD_NOLOAD``, so nothing new is ever loaded.
When none is found ``best_sgemm()`` returns None and callers fall back to numpy.

Each ``GemmEntry`` knows its ABI (``cblas`` row-major or ``fortran`` column-major, and the width
of its integers), its function address (for generated code to call) and offers ``gemm`` on
C-contiguous arrays. ``best_gemm`` uses the library numpy uses unless another loaded one is more
than ``SWITCH_MARGIN`` faster on a quiet measurement (rounds alternating between the libraries,
the best round of each counting); ``choice`` says which and why (the capability DB records it),
``rate_gflops`` measures a library once per process, ``identity`` names the loaded libraries (part
of the key of the on-disk capability DB).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import glob
import importlib.util
import os
import re
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, CBLAS_TRANS = 101, 111, 112
# (M, N, K) measured by rate_gflops: a conv-shaped GEMM (small M and K) and an MLP-shaped one —
# the sizes the kernel variants hand to BLAS, small enough to measure in milliseconds.
RATE_SHAPES = ((64, 1024, 144), (128, 256, 256))
SWITCH_MARGIN = 1.15  # how much faster another library must be to be used instead of numpy's
QUIET_ROUNDS = 3  # alternating measurement rounds when several libraries compete
LEND_WAIT_S = 5.0  # how long a measurement waits for a lent core to come back


@dataclass(frozen=True)
class GemmEntry:
    """One ``?gemm`` function in one loaded library."""

    name: str  # "<source>:<symbol>", unique
    source: str  # "numpy", "scipy", "scipy-capsule" or "system"
    path: str  # the shared library ("" for a capsule)
    symbol: str
    dtype: str  # "float32" or "float64"
    abi: str  # "cblas" (row-major, enum args by value) or "fortran" (column-major, args by reference)
    int_bits: int  # 32 or 64: the width of M, N, K, lda… in this ABI
    address: int
    _fn: Any = field(repr=False, compare=False, default=None)

    def gemm(self, a: np.ndarray, b: np.ndarray, out: np.ndarray, *, trans_a: bool = False,
             trans_b: bool = False, alpha: float = 1.0, beta: float = 0.0) -> np.ndarray:
        """``out = alpha · op(a) @ op(b) + beta · out`` on C-contiguous 2-D arrays of this dtype.

        ``op(a)`` is ``a.T`` when ``trans_a`` (``a`` is then stored as [K, M]). Checks shapes,
        dtypes and layout, so a wrong call raises instead of corrupting memory.
        """
        for arr, what in ((a, "a"), (b, "b"), (out, "out")):
            if not isinstance(arr, np.ndarray) or arr.ndim != 2 or arr.dtype != np.dtype(self.dtype):
                raise TypeError(f"gemm: {what} must be a 2-D {self.dtype} array")
            if not arr.flags.c_contiguous:
                raise ValueError(f"gemm: {what} must be C-contiguous")
        m, k = (a.shape[1], a.shape[0]) if trans_a else a.shape
        k2, n = (b.shape[1], b.shape[0]) if trans_b else b.shape
        if k != k2 or out.shape != (m, n):
            raise ValueError(f"gemm: shapes {a.shape}{'ᵀ' if trans_a else ''} @ {b.shape}"
                             f"{'ᵀ' if trans_b else ''} -> {out.shape} do not match")
        if not out.flags.writeable:
            raise ValueError("gemm: out is read-only")
        if m == 0 or n == 0:
            return out
        if k == 0:
            if beta == 0:
                out.fill(0)
            else:
                out *= beta
            return out
        limit = 2**31 - 1 if self.int_bits == 32 else 2**63 - 1
        if max(a.shape + b.shape + out.shape) > limit:
            raise ValueError("gemm: a dimension exceeds this ABI's integer width")
        self.gemm_raw(trans_a, trans_b, m, n, k, alpha, a.ctypes.data, a.shape[1], b.ctypes.data, b.shape[1],
                      beta, out.ctypes.data, n)
        return out

    def gemm_raw(self, trans_a: bool, trans_b: bool, m: int, n: int, k: int, alpha: float, a: int, lda: int,
                 b: int, ldb: int, beta: float, c: int, ldc: int) -> None:
        """Unchecked row-major ``C = alpha·op(A)·op(B) + beta·C`` on raw addresses and leading dims.

        For kernels that have validated their operands (strided views, transposes); a wrong
        size here corrupts memory — use ``gemm`` otherwise.
        """
        if self.abi == "cblas":
            self._fn(CBLAS_ROW_MAJOR, CBLAS_TRANS if trans_a else CBLAS_NO_TRANS,
                     CBLAS_TRANS if trans_b else CBLAS_NO_TRANS, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
            return
        # Column-major: C^T = op(B)^T op(A)^T, every argument by reference.
        it = ctypes.c_int32 if self.int_bits == 32 else ctypes.c_int64
        ft = ctypes.c_float if self.dtype == "float32" else ctypes.c_double
        ref = ctypes.byref
        self._fn(ref(ctypes.c_char(b"T" if trans_b else b"N")), ref(ctypes.c_char(b"T" if trans_a else b"N")),
                 ref(it(n)), ref(it(m)), ref(it(k)), ref(ft(alpha)), b, ref(it(ldb)), a, ref(it(lda)),
                 ref(ft(beta)), c, ref(it(ldc)))

    def describe(self) -> dict[str, Any]:
        """JSON-able facts about this entry (for the capability database)."""
        return {"name": self.name, "source": self.source, "path": self.path, "symbol": self.symbol,
                "dtype": self.dtype, "abi": self.abi, "int_bits": self.int_bits}


def _prototype(abi: str, dtype: str, int_bits: int) -> Any:
    it = ctypes.c_int32 if int_bits == 32 else ctypes.c_int64
    ft = ctypes.c_float if dtype == "float32" else ctypes.c_double
    p = ctypes.c_void_p
    if abi == "cblas":
        e = ctypes.c_int  # CBLAS enums are C ints whatever the integer width
        return ctypes.CFUNCTYPE(None, e, e, e, it, it, it, ft, p, it, p, it, ft, p, it)
    return ctypes.CFUNCTYPE(None, *([p] * 13))


def _entry(source: str, path: str, symbol: str, dtype: str, abi: str, int_bits: int,
           address: int) -> GemmEntry:
    fn = _prototype(abi, dtype, int_bits)(address)
    return GemmEntry(f"{source}:{symbol}", source, path, symbol, dtype, abi, int_bits, address, fn)


def _symbols_in(source: str, path: str, lib: ctypes.CDLL, default_int_bits: int) -> list[GemmEntry]:
    """The ?gemm entries a loaded library exports under OpenBLAS's plain or scipy-prefixed names."""
    found = []
    for dtype, ch in (("float32", "s"), ("float64", "d")):
        candidates = (
            (f"scipy_cblas_{ch}gemm64_", "cblas", 64), (f"scipy_{ch}gemm_64_", "fortran", 64),
            (f"scipy_cblas_{ch}gemm", "cblas", 32), (f"scipy_{ch}gemm_", "fortran", 32),
            (f"cblas_{ch}gemm64_", "cblas", 64), (f"{ch}gemm_64_", "fortran", 64),
            (f"cblas_{ch}gemm", "cblas", default_int_bits), (f"{ch}gemm_", "fortran", default_int_bits),
        )
        for symbol, abi, bits in candidates:
            try:
                address = ctypes.cast(getattr(lib, symbol), ctypes.c_void_p).value
            except AttributeError:
                continue
            if address:
                found.append(_entry(source, path, symbol, dtype, abi, bits, address))
    return found


def _int_bits_of(lib: ctypes.CDLL) -> int:
    """64 when an OpenBLAS says it was built with 64-bit integers (ILP64), else 32."""
    return 64 if "USE64BITINT" in _config_of(lib) else 32


def _config_of(lib: ctypes.CDLL) -> str:
    """An OpenBLAS's build configuration (version, integer width, target), "" for other libraries."""
    return _call_first(lib, ("openblas_get_config", "openblas_get_config64_", "scipy_openblas_get_config64_",
                             "scipy_openblas_get_config"), ctypes.c_char_p, b"").decode(errors="replace")


# An OpenBLAS's pool-size functions, as its builds name them ("get" or "set" filled in).
_NUM_THREADS = ("openblas_{}_num_threads", "openblas_{}_num_threads64_", "scipy_openblas_{}_num_threads64_",
                "scipy_openblas_{}_num_threads")


def _threads_of(lib: ctypes.CDLL) -> int | None:
    """The size of an OpenBLAS's thread pool, None for other libraries."""
    return _call_first(lib, (n.format("get") for n in _NUM_THREADS), ctypes.c_int, None)


def _set_threads(lib: ctypes.CDLL, n: int) -> bool:
    fn = _first(lib, (name.format("set") for name in _NUM_THREADS))
    if fn is None:
        return False
    fn.argtypes, fn.restype = [ctypes.c_int], None
    fn(n)
    return True


_LEND_LOCK = threading.Lock()
_lent: dict[str, tuple[ctypes.CDLL, int, int]] = {}  # path -> (library, its pool size before, lent down to)
UNLENT = threading.Event()  # set while no core is lent (what measurements of BLAS wait for)
UNLENT.set()


def lend_core() -> bool:
    """Shrink every loaded OpenBLAS pool by one thread until ``return_core``: True if one was shrunk.

    Why: the JIT's compile worker yields to the program, and an OpenBLAS pool keeps every core busy
    while a program calls it in a loop (its idle threads spin ~0.1 s after each call), so the worker
    gets little — at idle priority it never ran: a W2 loop was still waiting for its first compile
    after 30 s. Running the program's
    GEMMs one thread narrower frees a core for it; a worker at normal priority instead took cores from
    OpenBLAS's static halves mid-GEMM (W3's 100-call stream: 290–310 ms idle, 415–515 ms normal).
    """
    with _LEND_LOCK:
        if not _lent:
            for _, path, _ in _discover_libraries():
                lib = _loaded(path)
                threads = (_threads_of(lib) if lib is not None else None) or 1
                if threads > 1 and _set_threads(lib, threads - 1):
                    _lent[path] = (lib, threads, threads - 1)
            if _lent:
                UNLENT.clear()
        return bool(_lent)


def return_core() -> None:
    """Undo ``lend_core`` (a pool someone resized meanwhile is left as they set it)."""
    with _LEND_LOCK:
        for lib, before, during in _lent.values():
            if _threads_of(lib) == during:
                _set_threads(lib, before)
        _lent.clear()
        UNLENT.set()


def _pool_size(path: str, lib: ctypes.CDLL) -> int | None:
    """An OpenBLAS's pool size as the program set it (not as lent)."""
    lent = _lent.get(path)
    return lent[1] if lent is not None else _threads_of(lib)


def _first(lib: ctypes.CDLL, names: Iterable[str]) -> Any:
    """The first of ``names`` that ``lib`` defines, None if none."""
    return next((fn for fn in (getattr(lib, name, None) for name in names) if fn is not None), None)


def _call_first(lib: ctypes.CDLL, names: Iterable[str], restype: Any, default: Any) -> Any:
    fn = _first(lib, names)
    if fn is None:
        return default
    fn.restype = restype
    value = fn()
    return default if value is None else value


def _package_libraries(package: str, patterns: Iterable[str]) -> list[str]:
    """Shared libraries bundled with an installed package, located without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return []
    root = os.path.dirname(next(iter(spec.submodule_search_locations)))
    paths: list[str] = []
    for pattern in patterns:
        paths += sorted(glob.glob(os.path.join(root, pattern)))
    return paths


_BLAS_NAME = re.compile(r"lib(scipy_)?openblas|libcblas|libblas|libblis|libmkl_rt|libflexiblas")


def _mapped_libraries() -> list[str]:
    """BLAS-looking shared libraries mapped into this process (Linux); find_library's answers elsewhere."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            paths = {line.split(None, 5)[5].strip() for line in maps if line.count(" ") >= 5 and "/" in line}
    except OSError:
        found = (ctypes.util.find_library(n) for n in ("openblas", "blas", "cblas", "blis", "mkl_rt"))
        return [p for p in found if p]
    return sorted(p for p in paths if _BLAS_NAME.search(os.path.basename(p)))


def _loaded(path: str) -> ctypes.CDLL | None:
    """A handle on ``path`` if it is already loaded in this process; never loads it."""
    try:
        return ctypes.CDLL(path, mode=os.RTLD_NOLOAD)
    except OSError:
        return None


def _scipy_capsule_entries() -> list[GemmEntry]:
    """scipy.linalg.cython_blas's sgemm/dgemm (Fortran ABI, 32-bit ints), if scipy.linalg is loaded."""
    module = sys.modules.get("scipy.linalg.cython_blas")
    if module is None:
        return []
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype, get_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype, get_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    found = []
    for dtype, symbol in (("float32", "sgemm"), ("float64", "dgemm")):
        capsule = module.__pyx_capi__.get(symbol)
        if capsule is not None:
            address = get_pointer(capsule, get_name(capsule))
            found.append(_entry("scipy-capsule", "", symbol, dtype, "fortran", 32, address))
    return found


_DISCOVER_LOCK = threading.Lock()


@functools.cache
def _discover_libraries() -> tuple[tuple[str, str, int], ...]:
    """(source, path, int bits) of every BLAS library already loaded in this process."""
    bundled = (("numpy", "numpy", ("numpy.libs/*openblas*.so*", "numpy/.dylibs/*openblas*")),
               ("numpy", "scipy_openblas64", ("scipy_openblas64/lib/*openblas*.so*",)),
               ("scipy", "scipy", ("scipy.libs/*openblas*.so*",)))
    found = [(source, path) for source, package, patterns in bundled
             for path in _package_libraries(package, patterns)]
    found += [("system", p) for p in _mapped_libraries()]
    result, seen = [], set()
    for source, path in found:
        real = os.path.realpath(path) if os.path.exists(path) else path
        if real in seen:
            continue
        seen.add(real)
        lib = _loaded(path)
        if lib is not None:
            result.append((source, path, _int_bits_of(lib)))
    return tuple(result)


_entries: list[GemmEntry] | None = None
_capsules_seen = False


def discover() -> list[GemmEntry]:
    """Every ?gemm entry point available in this process (cached; re-checks scipy's capsules)."""
    global _entries, _capsules_seen
    if _entries is not None and (_capsules_seen or "scipy.linalg.cython_blas" not in sys.modules):
        return list(_entries)
    with _DISCOVER_LOCK:
        if _entries is None:
            entries = []
            for source, path, bits in _discover_libraries():
                lib = _loaded(path)
                if lib is not None:
                    entries += _symbols_in(source, path, lib, bits)
            _entries = entries
        if not _capsules_seen and "scipy.linalg.cython_blas" in sys.modules:
            _entries = _entries + _scipy_capsule_entries()
            _capsules_seen = True
        return list(_entries)


def libraries() -> list[dict[str, Any]]:
    """The BLAS libraries in use, with their threading as threadpoolctl reports it."""
    found = _discover_libraries()
    try:
        from threadpoolctl import threadpool_info

        pools = {os.path.realpath(p["filepath"]): p for p in threadpool_info() if p.get("user_api") == "blas"}
    except Exception:  # threadpoolctl missing or failing: report without threading facts
        pools = {}
    out = []
    for source, path, bits in found:
        pool = pools.get(os.path.realpath(path), {})
        out.append({"source": source, "path": path, "int_bits": bits,
                     "num_threads": pool.get("num_threads"), "threading_layer": pool.get("threading_layer"),
                     "internal_api": pool.get("internal_api"), "architecture": pool.get("architecture"),
                     "version": pool.get("version")})
    return out


_rates: dict[tuple[str, str], float] = {}
_RATE_LOCK = threading.Lock()


def _library(entry: GemmEntry) -> str:
    """What entries of one library share (its CBLAS and Fortran symbols run the same code)."""
    return entry.path or entry.source


def rate_gflops(entry: GemmEntry, *, budget_s: float = 0.05) -> float:
    """Measured GFLOP/s of ``entry``'s library for its dtype over ``RATE_SHAPES`` (cached per process).

    Entry points of one library share one measurement. Each shape gets a warm-up call and then up
    to 3 timed calls (the best counts) until it has spent its share of ``budget_s``: a loaded
    machine makes the number lower, not the measurement longer.
    """
    key = (_library(entry), entry.dtype)
    with _RATE_LOCK:
        cached = _rates.get(key)
        if cached is None:
            cached = _rates[key] = _measure(entry, budget_s)
        return cached


def _measure(entry: GemmEntry, budget_s: float) -> float:
    rng = np.random.default_rng(0)
    flops = seconds = 0.0
    share = budget_s / len(RATE_SHAPES)
    for m, n, k in RATE_SHAPES:
        a = rng.standard_normal((m, k)).astype(entry.dtype)
        b = rng.standard_normal((k, n)).astype(entry.dtype)
        out = np.zeros((m, n), entry.dtype)
        UNLENT.wait(LEND_WAIT_S)  # not while the JIT's worker has a core of ours
        t_start = time.perf_counter()
        entry.gemm(a, b, out)  # warm up (threads, caches)
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            entry.gemm(a, b, out)
            t1 = time.perf_counter()
            best = min(best, t1 - t0)
            if t1 - t_start > share:
                break
        flops += 2.0 * m * n * k
        seconds += best
    return flops / seconds / 1e9


def _quiet_rates(entries: dict[str, GemmEntry]) -> dict[str, float]:
    """GFLOP/s per library, measured in ``QUIET_ROUNDS`` rounds that alternate between the libraries.

    A busy machine only ever makes a run slower, so each library's best round counts, and a stall
    that hits one library's only turn cannot decide the comparison. The results are kept as each
    library's ``rate_gflops``.
    """
    best = dict.fromkeys(entries, 0.0)
    for _ in range(QUIET_ROUNDS):
        for library, entry in entries.items():
            best[library] = max(best[library], _measure(entry, budget_s=0.02))
    with _RATE_LOCK:
        for library, entry in entries.items():
            _rates[(library, entry.dtype)] = best[library]
    return best


@dataclass(frozen=True)
class Choice:
    """The GEMM entry used for one dtype, and why (the capability DB records it)."""

    dtype: str
    entry: GemmEntry | None
    reason: str
    rates: dict[str, float] = field(default_factory=dict)  # GFLOP/s per library, when measured to choose

    def describe(self) -> dict[str, Any]:
        return {"entry": self.entry.name if self.entry else None,
                "library": self.entry.path if self.entry else None, "reason": self.reason,
                "measured_gflops": {lib: round(rate, 1) for lib, rate in self.rates.items()}}


_choices: dict[str, tuple[int, Choice]] = {}
_CHOICE_LOCK = threading.Lock()


def choice(dtype: str) -> Choice:
    """The entry to use for ``dtype`` and why, decided once per process (again if scipy's capsules appear).

    numpy's own BLAS is kept unless another loaded library is more than ``SWITCH_MARGIN`` faster on
    a quiet measurement; with a single library loaded nothing is measured. Within the chosen
    library the CBLAS entry is used.
    """
    entries = discover()
    cached = _choices.get(dtype)
    if cached is not None and cached[0] == len(entries):
        return cached[1]
    with _CHOICE_LOCK:
        cached = _choices.get(dtype)
        if cached is None or cached[0] != len(entries):
            cached = _choices[dtype] = (len(entries), _choose(dtype, entries))
        return cached[1]


def _choose(dtype: str, entries: list[GemmEntry]) -> Choice:
    libraries: dict[str, list[GemmEntry]] = {}
    for e in entries:
        if e.dtype == dtype:
            libraries.setdefault(_library(e), []).append(e)
    if not libraries:
        return Choice(dtype, None, f"no {dtype} GEMM in any loaded BLAS library")
    home = next((lib for lib, es in libraries.items() if es[0].source == "numpy"), None)
    if len(libraries) == 1:
        only = next(iter(libraries.values()))
        why = "numpy's own BLAS, the only one loaded" if home else f"the only BLAS loaded ({only[0].source})"
        return Choice(dtype, _cblas_first(only), why)
    rates = _quiet_rates({lib: es[0] for lib, es in libraries.items()})
    fastest = max(rates, key=rates.__getitem__)
    margin = f"{(SWITCH_MARGIN - 1) * 100:.0f} %"
    if home is None:
        pick, why = fastest, f"the fastest of {len(rates)} loaded libraries (numpy's own BLAS was not found)"
    elif fastest != home and rates[fastest] > rates[home] * SWITCH_MARGIN:
        pick, why = fastest, (f"{rates[fastest]:.0f} GFLOP/s against numpy's own {rates[home]:.0f}: "
                              f"more than {margin} faster")
    else:
        pick, why = home, (f"numpy's own BLAS ({rates[home]:.0f} GFLOP/s): no other loaded library is more "
                           f"than {margin} faster (a second BLAS's threads would fight numpy's)")
    return Choice(dtype, _cblas_first(libraries[pick]), why, rates)


def _cblas_first(entries: list[GemmEntry]) -> GemmEntry:
    return next((e for e in entries if e.abi == "cblas"), entries[0])


def best_gemm(dtype: str) -> GemmEntry | None:
    """The entry to use for ``dtype`` (see ``choice``); None if no loaded library has one."""
    return choice(dtype).entry


@functools.cache
def threads_spin(dtype: str = "float32") -> bool:
    """Does ``dtype``'s GEMM run on threads of the library's own that spin once done? (OpenBLAS with
    more than one thread: its idle threads spin for about 0.1 s before they sleep; the pool size is
    read once per process.)"""
    entry = best_gemm(dtype)
    lib = _loaded(entry.path) if entry is not None and entry.path else None
    return lib is not None and (_pool_size(entry.path, lib) or 1) > 1


def best_sgemm() -> GemmEntry | None:
    return best_gemm("float32")


def best_dgemm() -> GemmEntry | None:
    return best_gemm("float64")


def identity() -> dict[str, Any]:
    """The loaded BLAS libraries — file, build configuration, pool size — without measuring anything.

    Calibrated rates are only valid for the same libraries, so this is part of the key of the
    on-disk capability DB.
    """
    out = []
    for source, path, _ in _discover_libraries():
        lib = _loaded(path)
        out.append({"source": source, "file": os.path.basename(os.path.realpath(path)),
                    "config": _config_of(lib) if lib is not None else "",
                    "threads": _pool_size(path, lib) if lib is not None else None})
    return {"libraries": out}


def report() -> dict[str, Any]:
    """JSON-able summary: libraries with threading, every entry with its measured rate, the choices."""
    entries = discover()
    choices = {dtype: choice(dtype) for dtype in ("float32", "float64")}
    return {"libraries": libraries(),
            "entries": [{**e.describe(), "gflops": round(rate_gflops(e), 1)} for e in entries],
            "best": {dtype: c.entry.name if c.entry else "none found" for dtype, c in choices.items()},
            "choice": {dtype: c.describe() for dtype, c in choices.items()}}
