"""The capability DB's on-disk cache: what calibration measured on this host, kept across processes.

Why: calibrating the cost model takes seconds, a notebook's kernel restarts often, and the numbers
depend only on the machine, its BLAS and msvm. So there is one JSON file per host identity —
``msvm.native.llvm.target_identity()`` (triple, CPU, features, LLVM), the loaded BLAS libraries
(``blas.identity()``: file, build, pool size) and the msvm version — in ``$XDG_CACHE_HOME/msvm``
(``~/.cache/msvm`` when it is unset). The identity is stored in the file too and compared on load;
a file that does not parse, does not validate or belongs to another identity is ignored, and the
next save replaces it. JSON only, validated field by field: loading a cache file cannot run code.
The file is sealed like every msvm cache (``msvm.native.objcache.read_sealed``): the rates steer
every kernel choice, so a file msvm did not write — planted, copied from another machine, edited by
hand — is ignored even when it is valid JSON. Saves are atomic (a temporary file renamed over the
old one); a read-only or refused cache directory only means that the next process calibrates
again. A calibration that ran on a saturated machine (load average above the cores + 1) is used by
its process but not saved: its runs were slowed at random, and every later process would inherit
the wrong picks.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..native.objcache import cache_dir, read_sealed, write_sealed

SCHEMA = "msvm-capability-cache"
VERSION = 3  # 2: files from before the saturation check are not trusted; 3: sealed
SUFFIX = ".cap"
MAX_FILES = 16  # one per host identity: msvm versions and BLAS builds come and go


def identity() -> dict[str, Any]:
    """What calibrated rates are valid for: the code generator's target, the BLAS libraries, msvm."""
    from .. import __version__
    from ..native import blas
    from ..native.llvm import target_identity

    return {"msvm": __version__, "target": target_identity(), "blas": blas.identity()}


def cache_file(key: Mapping[str, Any] | None = None) -> Path:
    """This host's cache file: ``capability-<digest of the identity>.cap`` in ``cache_dir()``."""
    key = identity() if key is None else key
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return cache_dir() / f"capability-{digest}{SUFFIX}"


def load() -> tuple[dict[str, Any] | None, str]:
    """(this host's validated snapshot or None, what happened — for the capability document)."""
    key = identity()
    path = cache_file(key)
    if not path.exists():
        return None, f"none yet ({path})"
    body = read_sealed(path)
    if body is None:
        return None, f"ignored {path}: not sealed by this user's key (or not readable)"
    try:
        snapshot = validated(json.loads(body.decode("utf-8")), key)
    except (ValueError, TypeError, RecursionError) as exc:  # not UTF-8/JSON, or nested past the limit
        return None, f"ignored {path}: {type(exc).__name__}: {exc}"
    return snapshot, f"loaded from {path}"


def save(snapshot: Mapping[str, Any]) -> str:
    """Write ``CapabilityDB.snapshot()`` for this host, sealed and atomically; returns what happened."""
    key = identity()
    path = cache_file(key)
    doc = {"schema": SCHEMA, "version": VERSION, "identity": key,
           "saved": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **snapshot}
    if not write_sealed(path, json.dumps(doc, indent=1).encode("utf-8"), keep=MAX_FILES, suffix=SUFFIX):
        return f"not saved ({path.parent} is not a private, writable folder)"
    return f"saved to {path}"


def save_db() -> None:
    """Save the process-wide capability DB (after calibration), noting the outcome in it."""
    from .capability import DB

    DB.cache_state = saturated() or save(DB.snapshot())


def save_launch_overhead(ns: int) -> str:
    """Keep the JIT's launch overhead (``msvm.msjit.compiler``) in this host's file, the rest as it is
    on disk. Unlike calibration it is kept from a busy machine too: it is the fastest of a few rounds,
    which load can only lengthen, and a fresh process would otherwise compile a probe to measure it."""
    snapshot, _ = load()
    snapshot = snapshot or {"host_rates": None, "devices": {}}
    return save({**snapshot, "jit": {"launch_overhead_ns": ns}})


def saturated() -> str | None:
    """Why the machine is too busy for its measurements to be kept, or None."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # not available on this platform
        return None
    cores = os.cpu_count() or 1
    if load <= cores + 1:
        return None
    return f"not saved (load average {load:.1f} on {cores} cores: measured on a saturated machine)"


# -- validation -------------------------------------------------------------------------------------


def validated(doc: Any, key: Mapping[str, Any]) -> dict[str, Any]:
    """The snapshot in ``doc`` with every number checked; ValueError/TypeError names what is wrong."""
    _require(isinstance(doc, dict), "not a JSON object")
    _require(doc.get("schema") == SCHEMA and doc.get("version") == VERSION,
             f"not a {SCHEMA} file of version {VERSION}")
    _require(doc.get("identity") == dict(key), "written for another host, BLAS or msvm version")
    rates = doc.get("host_rates")
    host_rates = None
    if rates is not None:
        host_rates = {k: _number(_dict(rates, "host_rates").get(k), f"host_rates.{k}", positive=True)
                      for k in ("sgemm_gflops", "bandwidth_gbps")}
    devices = {}
    for name, entry in _dict(doc.get("devices", {}), "devices").items():
        where = f"devices.{name}"
        _dict(entry, where)
        curve = entry.get("gemm_curve")
        if curve is not None:
            curve = {k: _number(_dict(curve, f"{where}.gemm_curve").get(k), f"{where}.gemm_curve.{k}")
                     for k in ("m", "n", "k")}
        ops = {op: _op(calibration, f"{where}.ops.{op}")
               for op, calibration in _dict(entry.get("ops", {}), f"{where}.ops").items()}
        devices[str(name)] = {"gemm_curve": curve, "ops": ops}
    jit = _dict(doc.get("jit", {}), "jit")
    overhead = jit.get("launch_overhead_ns")
    if overhead is not None:
        overhead = _number(overhead, "jit.launch_overhead_ns", positive=True)
    return {"host_rates": host_rates, "devices": devices, "jit": {"launch_overhead_ns": overhead}}


def _op(calibration: Any, where: str) -> dict[str, Any]:
    _dict(calibration, where)
    variants = calibration.get("variants")
    _require(isinstance(variants, list) and all(isinstance(v, str) for v in variants),
             f"{where}.variants is not a list of names")
    rates = {}
    for name, r in _dict(calibration.get("rates", {}), f"{where}.rates").items():
        _dict(r, f"{where}.rates.{name}")
        rates[name] = {"rate_gflops": _number(r.get("rate_gflops"), f"{where}.rates.{name}.rate_gflops",
                                              positive=True),
                       "overhead_us": _number(r.get("overhead_us"), f"{where}.rates.{name}.overhead_us")}
    points = {}
    for name, pts in _dict(calibration.get("points", {}), f"{where}.points").items():
        _require(isinstance(pts, list) and all(isinstance(p, list) and len(p) == 3 for p in pts),
                 f"{where}.points.{name} is not a list of [flops, bytes, seconds]")
        points[name] = [[_number(v, f"{where}.points.{name}") for v in p] for p in pts]
    return {"variants": variants, "rates": rates, "points": points}


def _dict(value: Any, where: str) -> dict[str, Any]:
    _require(isinstance(value, dict), f"{where} is not an object")
    return value


def _number(value: Any, where: str, *, positive: bool = False) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    _require(ok and (value > 0 if positive else value >= 0),
             f"{where} is not a {'positive' if positive else 'non-negative'} number")
    return float(value)


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)
