"""The capability database: what this machine and its kernel variants can do, as one versioned document.

It gathers the host facts (``msvm.native.host``: CPU, cores, caches, BLAS libraries with their
threading, the GEMM library chosen and why, measured sgemm rates and memory bandwidth), the kernel
variants registered for each device with their constraints, the cost model's calibrated rates
(written by ``cost``, measured by ``background``, kept across processes by ``persist``) and the
rules and overrides that patches added (validated by ``patch``). Devices are a mapping
(``{"cpu": {...}}``) so that a ``"cuda:0"`` entry fits later unchanged.

Why nothing here blocks a first call: the first kernel decision of a process uses what is cheap —
the on-disk cache of an earlier process on this host, else priors scaled by a quick measurement —
while the full measurements run on a background thread and replace them when done.

``capability_db()`` returns the document, ``dump_capability_db(path)`` writes it as JSON,
``reset_capability_db()`` forgets patches and calibration (tests). Whoever caches a decision
derived from the database subscribes with ``on_change`` and forgets it when the database changes.
"""

from __future__ import annotations

import importlib
import json
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..ops.registry import REGISTRY
from .variants import KERNEL_OPS, VARIANTS, Variant

SCHEMA = "msvm-capability-db"
SCHEMA_VERSION = 1
REFERENCE = "reference"
REFERENCE_KIND = "numpy"  # the reference kernels are numpy code
REFERENCE_DEVICE = "cpu"  # ... and run on the host only
KINDS = ("blas", "native", "numpy")

# Before calibration, a variant kind runs at a share of the measured sgemm rate, plus a fixed cost
# per call (Python glue, argument checks, thread hand-off). Calibration replaces both per variant.
PRIOR_SHARE_OF_SGEMM = {"blas": 1.0, "native": 0.5, "numpy": 0.15}
PRIOR_OVERHEAD_US = {"blas": 4.0, "native": 3.0, "numpy": 8.0}
# Half-efficiency sizes of a GEMM's M, N and K until ``cost.measure_gemm_curve`` has run (what it
# measured on an idle AVX2/AVX-512 host with OpenBLAS: M = 16 reaches ~65 % of peak, K = 9 ~35 %).
DEFAULT_GEMM_HALF = {"m": 8.0, "n": 16.0, "k": 16.0}


@dataclass(frozen=True)
class Rates:
    """What the cost model assumes for one variant (or kind): a compute rate and a fixed per-call cost."""

    rate_gflops: float
    overhead_us: float
    source: str  # "prior", "calibrated", "patch"

    def as_dict(self) -> dict[str, Any]:
        return {"rate_gflops": round(self.rate_gflops, 2), "overhead_us": round(self.overhead_us, 2),
                "source": self.source}


@dataclass(frozen=True)
class ForceRule:
    """Force ``variant`` for an op, optionally only for one dtype and for input shapes matching a pattern."""

    variant: str
    dtype: str | None = None
    shapes: tuple[tuple[int | None, ...], ...] | None = None  # per input; None is any size

    def matches(self, dtype: str, shapes: Sequence[tuple[int, ...]]) -> bool:
        if self.dtype is not None and dtype != self.dtype:
            return False
        if self.shapes is None:
            return True
        if len(self.shapes) > len(shapes):
            return False
        for pattern, shape in zip(self.shapes, shapes):
            if len(pattern) != len(shape) or any(p is not None and p != d for p, d in zip(pattern, shape)):
                return False
        return True

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"variant": self.variant}
        if self.dtype is not None:
            out["dtype"] = self.dtype
        if self.shapes is not None:
            out["shapes"] = [list(p) for p in self.shapes]
        return out


@dataclass
class OpRules:
    """What patches said about one op on one device."""

    force: tuple[ForceRule, ...] = ()
    forbid: frozenset[str] = frozenset()


@dataclass
class DeviceState:
    """The mutable part of one device's entry: calibration results, patch overrides and rules."""

    calibrated: dict[str, Rates] = field(default_factory=dict)  # "op/variant" -> fitted rates
    calibration_points: dict[str, list[list[float]]] = field(default_factory=dict)  # [flops, bytes, s]
    calibrated_ops: set[str] = field(default_factory=set)
    measured_ops: set[str] = field(default_factory=set)  # calibrated by measurement (here or on disk)
    gemm_curve: dict[str, float] | None = None  # measured half-efficiency sizes of a GEMM's M, N, K
    gemm_half: dict[str, float] = field(default_factory=dict)  # patch overrides of those
    bandwidth_gbps: float | None = None  # patch override
    kinds: dict[str, dict[str, float]] = field(default_factory=dict)  # patch overrides per kind
    variants: dict[str, dict[str, float]] = field(default_factory=dict)  # patch overrides per variant
    rules: dict[str, OpRules] = field(default_factory=dict)


_variants_loaded = False


def load_variants() -> None:
    """Import the native kernel package once, so that its variants are registered before anyone asks."""
    global _variants_loaded
    if not _variants_loaded:
        _variants_loaded = True
        try:
            importlib.import_module("msvm.kernels")
        except ModuleNotFoundError as exc:  # a build without native kernels: every op runs its reference
            if exc.name != "msvm.kernels":
                raise


def load_variants_for(op: str) -> None:
    """``load_variants`` if ``op`` is one of ``KERNEL_OPS``; other ops never import the kernels."""
    if op in KERNEL_OPS and not _variants_loaded:
        load_variants()


def variant_key(op: str, name: str) -> str:
    return f"{op}/{name}"


def devices_with_variants() -> list[str]:
    """Every device some kernel can run on: the host (reference kernels) and any device with variants."""
    load_variants()
    found = {REFERENCE_DEVICE}
    for variants in VARIANTS.values():
        found.update(v.device for v in variants)
    return sorted(found)


def variants_on(op: str, device: str) -> list[Variant]:
    load_variants()
    return [v for v in VARIANTS.get(op, []) if v.device == device]


def variant_names(op: str, device: str) -> list[str]:
    """Names a patch may use for ``op`` on ``device`` (the reference only where it runs)."""
    names = [v.name for v in variants_on(op, device)]
    return [*names, REFERENCE] if device == REFERENCE_DEVICE else names


class CapabilityDB:
    """The process-wide database; thread-safe.

    The cost model's yardsticks — an sgemm rate and the memory bandwidth — come from, in order of
    preference: a proper measurement (``measure_host_rates``, a fraction of a second, taken by the
    background calibrator), the on-disk cache of an earlier process on this host (``persist``, read
    once at first use), or a quick measurement of a few milliseconds (``host.quick_rates``) so that
    the first decision never waits. The lock is never held while something is measured.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._facts: dict[str, Any] | None = None
        self._measured = False
        self._host_rates: dict[str, Any] | None = None  # sgemm_gflops, bandwidth_gbps, source
        self._devices: dict[str, DeviceState] = {}
        self._patches: list[dict[str, Any]] = []
        self._listeners: list[Callable[[], None]] = []
        self._load_lock = threading.Lock()
        self._load_tried = False
        self.cache_state = "not read yet"  # what happened to the on-disk cache (for the document)
        self.jit_launch_overhead_ns: int | None = None  # a native JIT region call's fixed cost, measured

    # -- change notification ---------------------------------------------------------------------
    def on_change(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` whenever patches or calibration change what the scheduler would pick."""
        self._listeners.append(callback)

    def changed(self) -> None:
        for callback in list(self._listeners):
            callback()

    # -- the on-disk cache -------------------------------------------------------------------------
    def ensure_loaded(self) -> None:
        """Read this host's on-disk cache once, before the first rate is used (a no-op afterwards)."""
        if self._load_tried:
            return
        with self._load_lock:
            if self._load_tried:
                return
            from . import persist

            try:
                doc, self.cache_state = persist.load()
                if doc is not None:
                    self.restore(doc)
            finally:
                self._load_tried = True

    def snapshot(self) -> dict[str, Any]:
        """What the on-disk cache keeps: the measured host rates and, per device, the GEMM curve and
        every op calibrated by measurement with its variant set, fitted rates and points. Never
        patches: those belong to the process that loaded them."""
        with self._lock:
            rates = self._host_rates
            if rates is not None and rates["source"] not in ("measured", "cached"):
                rates = None  # a quick estimate is no measurement
            devices: dict[str, Any] = {}
            for name, state in sorted(self._devices.items()):
                ops = {}
                for op in sorted(state.measured_ops):
                    prefix = variant_key(op, "")
                    fitted = {k[len(prefix):]: r for k, r in state.calibrated.items() if k.startswith(prefix)}
                    ops[op] = {"variants": variant_names(op, name),
                               "rates": {n: {"rate_gflops": r.rate_gflops, "overhead_us": r.overhead_us}
                                         for n, r in sorted(fitted.items())},
                               "points": {n: state.calibration_points.get(variant_key(op, n), [])
                                          for n in sorted(fitted)}}
                if ops or state.gemm_curve:
                    devices[name] = {"gemm_curve": state.gemm_curve, "ops": ops}
            return {"host_rates": rates and {k: rates[k] for k in ("sgemm_gflops", "bandwidth_gbps")},
                    "devices": devices, "jit": {"launch_overhead_ns": self.jit_launch_overhead_ns}}

    def restore(self, doc: Mapping[str, Any]) -> None:
        """Take the measurements of a ``snapshot`` (validated by ``persist``). An op whose variants
        changed since it was calibrated is skipped: it is calibrated again."""
        with self._lock:
            overhead = (doc.get("jit") or {}).get("launch_overhead_ns")
            if overhead is not None and self.jit_launch_overhead_ns is None:
                self.jit_launch_overhead_ns = int(overhead)
            if doc.get("host_rates") and (self._host_rates is None or self._host_rates["source"] == "quick"):
                self._host_rates = {**doc["host_rates"], "source": "cached"}
            for name, entry in doc.get("devices", {}).items():
                state = self.device(name)
                if entry.get("gemm_curve") and state.gemm_curve is None:
                    state.gemm_curve = dict(entry["gemm_curve"])
                for op, calibration in entry.get("ops", {}).items():
                    if op in state.calibrated_ops or calibration["variants"] != variant_names(op, name):
                        continue
                    for n, r in calibration["rates"].items():
                        state.calibrated[variant_key(op, n)] = Rates(r["rate_gflops"], r["overhead_us"],
                                                                     "calibrated")
                        state.calibration_points[variant_key(op, n)] = calibration["points"].get(n, [])
                    state.calibrated_ops.add(op)
                    state.measured_ops.add(op)
        self.changed()

    # -- host facts --------------------------------------------------------------------------------
    def host(self, *, measure: bool = True) -> dict[str, Any]:
        """The host facts; ``measure`` adds the timed ones (BLAS rates and choice, memory bandwidth:
        up to a second or two once, on the calling thread)."""
        from ..native import host

        with self._lock:
            facts, measured = self._facts, self._measured
        if facts is not None and (measured or not measure):
            return facts
        facts = host.host_facts(measure=measure)  # outside the lock: decisions must not wait for it
        with self._lock:
            if self._facts is None or (measure and not self._measured):
                self._facts, self._measured = facts, measure
            facts = self._facts
        if measure:
            self.measure_host_rates()
        return facts

    def measure_host_rates(self) -> None:
        """Measure the yardsticks properly (once per process): the memory bandwidth as a triad over
        arrays larger than the last-level cache. The sgemm yardstick stays the quick one — a
        single-threaded GEMM that BLAS threads cannot stall; only the priors depend on it — so
        that no BLAS pool runs here (its threads would spin for a low-priority caller)."""
        from ..native import host

        memory = host.memory_bandwidth()
        with self._lock:
            self._host_rates = {"sgemm_gflops": host.quick_rates()["sgemm_gflops"],
                                "bandwidth_gbps": float(memory["triad_gbs"] or memory["copy_gbs"]),
                                "source": "measured"}
        self.changed()

    def host_rates(self) -> dict[str, Any]:
        """The yardsticks {sgemm_gflops, bandwidth_gbps, source}: "measured", "cached" (on disk from
        an earlier process) or "quick" (a few milliseconds, until one of the others exists)."""
        self.ensure_loaded()
        rates = self._host_rates
        if rates is None:
            from ..native import host

            quick = host.quick_rates()
            with self._lock:
                if self._host_rates is None:
                    self._host_rates = {**quick, "source": "quick"}
                rates = self._host_rates
        return rates

    def sgemm_gflops(self) -> float:
        """The float32 GEMM rate every prior rate is a share of."""
        return float(self.host_rates()["sgemm_gflops"])

    def bandwidth_gbps(self, device: str) -> float:
        """Memory bandwidth the cost model charges traffic at: a patch's value, else the host's."""
        override = self.device(device).bandwidth_gbps
        if override is not None:
            return override
        return float(self.host_rates()["bandwidth_gbps"])

    # -- rates -------------------------------------------------------------------------------------
    def device(self, device: str) -> DeviceState:
        with self._lock:
            state = self._devices.get(device)
            if state is None:
                state = self._devices[device] = DeviceState()
            return state

    def kind_rates(self, device: str, kind: str) -> Rates:
        """The prior for a variant kind (a patch may override either number)."""
        share = PRIOR_SHARE_OF_SGEMM.get(kind, PRIOR_SHARE_OF_SGEMM["native"])
        overhead = PRIOR_OVERHEAD_US.get(kind, PRIOR_OVERHEAD_US["native"])
        prior = Rates(share * self.sgemm_gflops(), overhead, "prior")
        return _overridden(prior, self.device(device).kinds.get(kind))

    def variant_rates(self, device: str, op: str, name: str, kind: str) -> Rates:
        """Rates for one variant: patch override > calibration (this process's or the disk cache's) >
        the kind's prior."""
        self.ensure_loaded()
        state = self.device(device)
        key = variant_key(op, name)
        base = state.calibrated.get(key) or self.kind_rates(device, kind)
        return _overridden(base, state.variants.get(key))

    def record_calibration(self, device: str, op: str, fitted: Mapping[str, Rates],
                           points: Mapping[str, list[list[float]]], *, measured: bool = False) -> None:
        """Store fitted rates for ``op``'s variants (and the measurements behind them). Only what
        ``cost.calibrate`` ``measured`` is saved to the on-disk cache — never rates a test or a
        tool made up."""
        with self._lock:
            state = self.device(device)
            for name, rates in fitted.items():
                state.calibrated[variant_key(op, name)] = rates
            for name, pts in points.items():
                state.calibration_points[variant_key(op, name)] = pts
            state.calibrated_ops.add(op)
            if measured:
                state.measured_ops.add(op)
            else:
                state.measured_ops.discard(op)
        self.changed()

    def record_gemm_curve(self, device: str, half: Mapping[str, float]) -> None:
        """Store the measured GEMM efficiency curve (``cost.measure_gemm_curve``)."""
        with self._lock:
            self.device(device).gemm_curve = dict(half)
        self.changed()

    def gemm_half(self, device: str) -> dict[str, float]:
        """Half-efficiency sizes {"m", "n", "k"} of a GEMM: a patch's values over the measured curve,
        or over ``DEFAULT_GEMM_HALF`` until the curve is measured."""
        self.ensure_loaded()
        state = self.device(device)
        return {**(state.gemm_curve or DEFAULT_GEMM_HALF), **state.gemm_half}

    def has_gemm_curve(self, device: str) -> bool:
        self.ensure_loaded()
        return self.device(device).gemm_curve is not None

    def is_calibrated(self, device: str, op: str) -> bool:
        self.ensure_loaded()
        return op in self.device(device).calibrated_ops

    # -- patch rules -------------------------------------------------------------------------------
    def rules(self, device: str, op: str) -> OpRules:
        return self.device(device).rules.get(op) or _NO_RULES

    def apply_patch(self, patch: Mapping[str, Any]) -> None:
        """Merge an already validated patch (see ``patch.load_capability_patch``)."""
        with self._lock:
            for name, entry in patch.get("devices", {}).items():
                state = self.device(name)
                if "bandwidth_gbps" in entry:
                    state.bandwidth_gbps = float(entry["bandwidth_gbps"])
                state.gemm_half.update(entry.get("gemm_half", {}))
                for kind, values in entry.get("kinds", {}).items():
                    state.kinds.setdefault(kind, {}).update(values)
                for key, values in entry.get("variants", {}).items():
                    state.variants.setdefault(key, {}).update(values)
                for op, rules in entry.get("ops", {}).items():
                    current = state.rules.get(op) or OpRules()
                    state.rules[op] = OpRules(
                        force=tuple(rules["force"]) if "force" in rules else current.force,
                        forbid=frozenset(rules["forbid"]) if "forbid" in rules else current.forbid,
                    )
            self._patches.append(_jsonable_patch(patch))
        self.changed()

    # -- the document ------------------------------------------------------------------------------
    def document(self, *, measure: bool = True) -> dict[str, Any]:
        """The whole database as a JSON-able dict (schema name and version first)."""
        facts = self.host(measure=measure)
        devices: dict[str, Any] = {}
        for name in sorted(set(devices_with_variants()) | set(self._devices)):
            devices[name] = self._device_document(name, facts if name == REFERENCE_DEVICE else None, measure)
        from . import background, persist

        return {
            "schema": SCHEMA,
            "version": SCHEMA_VERSION,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "devices": devices,
            "patches": list(self._patches),
            "calibration": {"cache_file": str(persist.cache_file()), "cache": self.cache_state,
                            **background.CALIBRATOR.status()},
        }

    def _device_document(self, name: str, facts: dict[str, Any] | None, measure: bool) -> dict[str, Any]:
        state = self.device(name)
        doc: dict[str, Any] = {"kind": name.split(":")[0]}
        if facts is not None:
            doc["host"] = facts
        ops = sorted({op for op, vs in VARIANTS.items() if any(v.device == name for v in vs)})
        listing = []
        for op in ops:
            for v in variants_on(op, name):
                listing.append(describe_variant(v))
            if name == REFERENCE_DEVICE:
                listing.append(describe_reference(op))
        doc["variants"] = listing
        if measure and name == REFERENCE_DEVICE:
            doc["cost_model"] = {
                "sgemm_gflops": round(self.sgemm_gflops(), 1),
                "bandwidth_gbps": round(self.bandwidth_gbps(name), 1),
                "host_rates": self.host_rates()["source"],
                "gemm_half": self.gemm_half(name),
                "gemm_half_source": "measured" if self.has_gemm_curve(name) else "default",
                "kinds": {k: self.kind_rates(name, k).as_dict() for k in KINDS},
                "variants": {key: {**self._effective(name, key).as_dict(),
                                   "points": state.calibration_points.get(key, [])}
                             for key in sorted(set(state.calibrated) | set(state.variants))},
            }
        doc["rules"] = {
            op: {"force": [r.as_dict() for r in rules.force], "forbid": sorted(rules.forbid)}
            for op, rules in sorted(state.rules.items())
        }
        return doc

    def _effective(self, device: str, key: str) -> Rates:
        op, name = key.split("/", 1)
        kind = REFERENCE_KIND if name == REFERENCE else next(
            (v.kind for v in variants_on(op, device) if v.name == name), "native")
        return self.variant_rates(device, op, name, kind)

    def reset(self) -> None:
        """Forget patches and calibration; the on-disk cache is read again at the next use (host facts
        stay: they do not change within a process)."""
        with self._lock:
            self._devices.clear()
            self._patches.clear()
            self._load_tried = False
            self.cache_state = "not read yet"
            self.jit_launch_overhead_ns = None
        self.changed()


_NO_RULES = OpRules()


def _overridden(base: Rates, values: Mapping[str, float] | None) -> Rates:
    if not values:
        return base
    return Rates(float(values.get("rate_gflops", base.rate_gflops)),
                 float(values.get("overhead_us", base.overhead_us)), "patch")


def _jsonable_patch(patch: Mapping[str, Any]) -> dict[str, Any]:
    def convert(value: Any) -> Any:
        if isinstance(value, ForceRule):
            return value.as_dict()
        if isinstance(value, Mapping):
            return {k: convert(v) for k, v in value.items()}
        if isinstance(value, (list, tuple, frozenset, set)):
            items = [convert(v) for v in value]
            return sorted(items) if isinstance(value, (frozenset, set)) else items
        return value

    return convert(patch)


def describe_variant(v: Variant) -> dict[str, Any]:
    return {"op": v.op, "name": v.name, "device": v.device, "kind": v.kind, "dtypes": list(v.dtypes),
            "constraints": v.constraints or "any shapes"}


def describe_reference(op: str) -> dict[str, Any]:
    doc = REGISTRY[op].doc if op in REGISTRY else ""
    return {"op": op, "name": REFERENCE, "device": REFERENCE_DEVICE, "kind": REFERENCE_KIND,
            "dtypes": ["any"],
            "constraints": f"any shapes and dtypes the op accepts (the oracle){': ' + doc if doc else ''}"}


DB = CapabilityDB()


def capability_db(*, measure: bool = True) -> dict[str, Any]:
    """The capability database as a JSON-able dict; ``measure=False`` skips the timed host facts."""
    return DB.document(measure=measure)


def dump_capability_db(path: str | os.PathLike, *, calibrate: bool = True) -> Path:
    """Write the database as JSON; ``calibrate`` first fits the cost model of every op with variants
    that is not calibrated yet (seconds, once per host: the results go to the on-disk cache) so that
    the file shows the rates the scheduler will use."""
    if calibrate:
        from .cost import calibrate_all  # cost builds on this module: imported only when asked

        calibrate_all()
    out = Path(path)
    out.write_text(json.dumps(capability_db(), indent=2, sort_keys=False) + "\n", encoding="utf-8")
    return out


def reset_capability_db() -> None:
    """Forget every patch and calibration result (for tests; host measurements are kept, and the
    on-disk cache is read again at the next use)."""
    from .background import CALIBRATOR

    DB.reset()
    CALIBRATOR.forget()
