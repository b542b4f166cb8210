"""The JIT cache (DESIGN §6): settings, cache keys by mode, entry names, entries and their budgets.

Why two kinds of key: the *run-time key* of a region is what the generated interpreter computes at
every region entry — the shapes of its inputs whose shapes vary (``r0.shape``) and the values of its
run-time scalars — a tuple built without a single Python call, so a hit costs one tuple and one dict
lookup. The *cache key* is what an entry is compiled for: the run-time key itself in ``exact`` mode,
the bucket of every shape symbol in ``bucket`` mode, and in ``adaptive`` mode exact keys until a
region has seen more distinct keys than its budget of exact entries (``jit_adaptive_budget``), then
buckets it learns from the values it has seen.

Bucket rules: with boundaries ``b0 < b1 < …`` a value ``v`` belongs to bucket ``(b[i-1], b[i]]``
(the first is ``[1, b0]``) and the entry's code is generic in that symbol, bounded by ``b[i]``. A value
above the last boundary, or 0, is *pinned*: the entry is exact in that symbol (it still counts
against the budgets). ``bucket`` mode without boundaries uses power-of-two buckets, which have no
last boundary. Adaptive mode buckets only the symbols that have taken more than one value (the others
stay exact), in power-of-four buckets: ``(4, 16]``, ``(16, 64]``, ``(64, 256]``. Why so wide: the code
of a bucket entry is generic in the bucketed dims, so a wider bucket costs only arena bytes (sized for
its upper bound), while every extra bucket costs a compile — and a stream of many distinct sizes
is paid for in compiles: lengths spread over [16, 256] need three entries, not five.

When a region's or the whole cache's entry budget (``ms.set_context(jit_cache_region_entries=…,
jit_cache_entries=…)``) is reached, existing entries keep serving and new keys simply run
interpreted: no cliff where a whole function turns slow.
"""

from __future__ import annotations

import bisect
import hashlib
import statistics
import threading
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..bytecode.module import Module
from ..bytecode.text import disassemble, format_instruction
from ..ops.registry import TensorType
from ..options import JitOptions
from ..shapes import Dim, ShapeSpec
from ..verifier import FunctionInfo
from .regions import Region, RegionIO
from .scd import user_symbols

DISASSEMBLY_KINDS = ("bytecode", "llvm", "llvm-opt", "asm")


# -- run-time keys and the symbols they hold -------------------------------------------------------------


@dataclass(frozen=True)
class Slot:
    """Where a shape symbol's value sits in a run-time key."""

    component: int  # index into the key tuple
    axis: int | None  # a tensor input's axis; None for a scalar component
    symbol: str


@dataclass(frozen=True)
class KeyPlan:
    """How a region's run-time key is built and which shape symbols it carries.

    A dim that is a plain symbol is that symbol; an expression over the region's plain symbols
    (``H*2``) follows from them; any other non-constant dim (``?``, or over symbols the region does not
    see) gets a fresh symbol ``R<reg>d<axis>``. Scalar parameters are their own symbol or a fresh
    ``S<reg>``. The key holds the shape of an input only when it brings a symbol no earlier input
    brought (so ``x: [N, 8]`` and ``y: [N, 8]`` cost one ``shape`` read), and a scalar only when its
    symbol is new: the verifier's types determine the rest, and the launcher checks every shape anyway.
    """

    components: tuple[tuple[str, int], ...]  # ("tensor", reg) / ("scalar", reg), in key order
    slots: tuple[Slot, ...]
    specs: tuple[ShapeSpec, ...]  # per tensor input, in the region's symbols
    scalar_symbols: tuple[str, ...]  # per scalar parameter
    made_up: frozenset[str] = frozenset()  # symbols no user wrote: fresh ones, unannotated inputs' dims

    @property
    def symbols(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(s.symbol for s in self.slots))

    def key_expr(self) -> str:
        """The Python expression the generated interpreter evaluates at region entry."""
        parts = [f"r{reg}.shape" if kind == "tensor" else f"r{reg}" for kind, reg in self.components]
        return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"

    def values(self, key: tuple) -> dict[str, int]:
        """symbol -> value in a run-time key (the first occurrence of a symbol wins)."""
        out: dict[str, int] = {}
        for s in self.slots:
            part = key[s.component]
            out.setdefault(s.symbol, int(part if s.axis is None else part[s.axis]))
        return out


def plan_keys(io: RegionIO, info: FunctionInfo) -> KeyPlan:
    types = info.types
    plain = {d.name for r in io.tensor_inputs for d in types[r].shape if d.is_symbol}
    plain |= {types[r].value.name for r in io.scalar_params if types[r].value.is_symbol}
    components: list[tuple[str, int]] = []
    slots: list[Slot] = []
    specs: list[ShapeSpec] = []
    for reg in io.tensor_inputs:
        dims, own = [], []
        for axis, d in enumerate(types[reg].shape):
            if d.is_const or (not d.is_unknown and not d.is_symbol and d.free_symbols <= plain):
                dims.append(d)
                continue
            symbol = d.name if d.is_symbol else f"R{reg}d{axis}"
            dims.append(Dim.sym(symbol))
            own.append((axis, symbol))
        specs.append(ShapeSpec(dims))
        new = [(axis, symbol) for axis, symbol in own if symbol not in {s.symbol for s in slots}]
        if new:  # an input whose symbols all came earlier adds nothing to the key
            slots += [Slot(len(components), axis, symbol) for axis, symbol in new]
            components.append(("tensor", reg))
    scalar_symbols = []
    for reg in io.scalar_params:
        value = types[reg].value
        symbol = value.name if value.is_symbol else f"S{reg}"
        scalar_symbols.append(symbol)
        if symbol not in {s.symbol for s in slots}:
            slots.append(Slot(len(components), None, symbol))
            components.append(("scalar", reg))
    named = set(user_symbols(info))
    made_up = frozenset(s.symbol for s in slots if s.symbol not in named)
    return KeyPlan(tuple(components), tuple(slots), tuple(specs), tuple(scalar_symbols), made_up)



DIGEST_SAMPLE = 1 << 12  # elements of a large constant the digest reads


def _fingerprint(value: Any) -> bytes:
    """A constant's bytes for the digest: all of a small one; a large one's dtype, shape and an even sample
    of ``DIGEST_SAMPLE`` elements. Hashing W2's two 16 MiB weights whole cost the call that made its
    region hot 45 ms, and samples of 65 536 elements still 0.9 ms of W3's; the digest only names
    entries and tells versions of a function apart (a retrained weight differs almost everywhere)."""
    arr = np.asarray(value)
    if arr.size <= DIGEST_SAMPLE:
        return arr.tobytes()
    flat = arr.reshape(-1)
    return f"{arr.dtype}{arr.shape}".encode() + flat[:: -(-flat.size // DIGEST_SAMPLE)].tobytes()


def region_digest(region: Region, io: RegionIO, info: FunctionInfo, module: Module) -> str:
    """8 hex digits naming function + region: its instructions, input types and the constants it reads."""
    h = hashlib.sha1()
    h.update(f"{module.name}/{info.function.name}/{region.start}".encode())
    for ins in (*io.clones, *io.body):
        h.update(format_instruction(ins).split("  @")[0].encode())
        if ins.name == "LOAD_CONST":
            h.update(_fingerprint(module.constants[ins["const"]]))
    for reg in io.tensor_inputs:
        t = info.types[reg]
        if isinstance(t, TensorType):
            h.update(f"{t}".encode())
    return h.hexdigest()[:8]


# -- cache keys by mode ----------------------------------------------------------------------------------

Bucket = tuple[int, int]  # (lo, hi): a value in lo..hi; hi bounds the generated code


ADAPTIVE_GROWTH = 4  # adaptive buckets: (4, 16], (16, 64], … (see the module docstring)


def bucket_of(value: int, boundaries: Sequence[int] | None, growth: int = 2) -> Bucket | None:
    """The bucket holding ``value``; None when it is pinned (0, or above the last boundary).

    Without boundaries the buckets are the powers of ``growth``: ``(growth**(k-1), growth**k]``.
    """
    if value <= 0:
        return None
    if boundaries is None:
        hi = 1
        while hi < value:
            hi *= growth
        return (hi // growth + 1 if hi > 1 else 1, hi)
    i = bisect.bisect_left(boundaries, value)
    if i == len(boundaries):
        return None
    return (boundaries[i - 1] + 1 if i else 1, boundaries[i])


class CachePolicy:
    """Maps a region's run-time keys to cache keys, and a cache key to what its entry is compiled for."""

    _BUCKETED = "B"  # first item of a bucketed cache key (a run-time key never starts with a str)

    def __init__(self, settings: JitOptions, plan: KeyPlan) -> None:
        self.mode = settings.cache_mode
        self.plan = plan
        self.boundaries = settings.bucket_boundaries
        self.learned: dict[str, tuple[int, ...]] | None = None  # adaptive: symbol -> boundaries it chose
        self.observed: dict[str, set[int]] = {s: set() for s in plan.symbols}
        self.distinct: set[tuple] = set()  # adaptive, before learning: the run-time keys seen
        self._first: dict[str, int | Bucket] | None = None  # the symbols of the first entry named

    @property
    def bucketing(self) -> bool:
        return self.mode == "bucket" or self.learned is not None

    @property
    def learning(self) -> bool:
        """Adaptive mode that has not chosen its buckets yet."""
        return self.mode == "adaptive" and self.learned is None

    def cache_key(self, key: tuple) -> tuple:
        if not self.bucketing:
            return key
        values = self.plan.values(key)
        items: list[Any] = [self._BUCKETED]
        for symbol in self.plan.symbols:
            v = values[symbol]
            bucket = self._bucket(symbol, v)
            items.append(v if bucket is None else bucket)
        return tuple(items)

    def _bucket(self, symbol: str, value: int) -> Bucket | None:
        if self.mode == "bucket":
            return bucket_of(value, self.boundaries)
        if self.learned is not None and symbol in self.learned:
            return bucket_of(value, None, ADAPTIVE_GROWTH)
        return None

    def symbols_of(self, cache_key: tuple, key: tuple) -> dict[str, int | Bucket]:
        """symbol -> value (pinned) or (lo, hi) (bucketed) for an entry."""
        if cache_key and cache_key[0] == self._BUCKETED:
            return dict(zip(self.plan.symbols, cache_key[1:]))
        return dict(self.plan.values(key))

    def observe(self, key: tuple, budget: int) -> bool:
        """Adaptive mode: remember the values each symbol took; True once the region has seen more
        distinct keys than ``budget`` — exact entries for all of them would pass it: time to learn."""
        if key not in self.distinct:
            self.distinct.add(key)
            for symbol, v in self.plan.values(key).items():
                self.observed[symbol].add(v)
        return len(self.distinct) > budget

    def learn(self) -> dict[str, tuple[int, ...]]:
        """Adaptive mode: bucket the symbols that took several values; returns the upper bounds of the
        buckets the values seen so far fall in, per symbol (values seen later get their bucket too)."""
        learned = {}
        for symbol, seen in self.observed.items():
            positive = [v for v in seen if v > 0]
            if len(seen) > 1 and positive:
                bounds, last = [_upper(min(positive))], _upper(max(positive))
                while bounds[-1] < last:
                    bounds.append(bounds[-1] * ADAPTIVE_GROWTH)
                learned[symbol] = tuple(bounds)
        self.learned = learned
        self.distinct.clear()
        return learned

    def parameters(self, cache_key: tuple, key: tuple
                   ) -> tuple[list[ShapeSpec], list[int | str], dict[str, int]]:
        """(tensor specs, scalars as ints or symbol names, bounds) of the entry's region function."""
        plan = self.plan
        symbols = self.symbols_of(cache_key, key)
        pinned = {s: v for s, v in symbols.items() if isinstance(v, int)}
        bounds = {s: v[1] for s, v in symbols.items() if not isinstance(v, int)}
        specs = [ShapeSpec(d.substitute(pinned) for d in spec) for spec in plan.specs]
        scalars: list[int | str] = [pinned.get(s, s) for s in plan.scalar_symbols]
        return specs, scalars, bounds

    def name(self, function: str, region: int, digest: str, cache_key: tuple, key: tuple) -> str:
        """``jit_cache_cnn_r0_exact_237a4b1c_N32_H224``; bucketed symbols show their bucket (``N1-8``).

        Symbols the user named (annotations, ``ms.mutable``) are always shown; symbols msvm made up
        (``KeyPlan.made_up``: ``x_0`` for an unannotated ``x``, ``R7d2``) only where their value differs
        from the region's first entry's. Why: a key of unannotated arrays holds every dim of every
        input, most of which never change, and a name listing them all said nothing. The digest keeps
        other versions of the function apart; the registry suffixes any repeat."""
        symbols = self.symbols_of(cache_key, key)
        if self._first is None:
            self._first = symbols
        parts = [f"jit_cache_{function}_r{region}_{self.mode}_{digest}"]
        for symbol, v in symbols.items():
            if symbol in self.plan.made_up and self._first.get(symbol) == v:
                continue
            sep = "" if symbol[-1].isalpha() else "v"
            parts.append(f"{symbol}{sep}{v}" if isinstance(v, int) else f"{symbol}{sep}{v[0]}-{v[1]}")
        return "_".join(parts)


def _upper(value: int) -> int:
    """The upper bound of an adaptive bucket holding ``value`` (> 0)."""
    bucket = bucket_of(value, None, ADAPTIVE_GROWTH)
    assert bucket is not None
    return bucket[1]


# -- entries ---------------------------------------------------------------------------------------------

STATUSES = ("queued", "compiling", "compiled", "fallback", "demoted")
DEFER_IDLE_NS = 50_000_000  # a region not run interpreted for this long has paused: its deferred keys compile
TIER_UP_HITS = 3  # runs of an entry's quick code before its optimised tier compiles


@dataclass(eq=False)
class Entry:
    """One cache entry: a region compiled (or being compiled, or failed) for one cache key.

    Its status goes ``queued`` → ``compiling`` → ``compiled`` or ``fallback`` (the compile failed);
    a compiled entry whose native code proves slower than the interpreter is ``demoted``: its keys
    run interpreted again, it is never recompiled, and it stays listed with the measured reason.
    """

    name: str
    function: str
    region: int
    address: int
    mode: str
    cache_key: tuple
    key: tuple  # the run-time key that made it hot
    symbols: dict[str, Any]
    reason: str  # why it was created; replaced by why it fell back or was demoted
    owner: Any = field(repr=False)  # the region runtime that installs it
    generation: int = 0
    status: str = "queued"  # one of STATUSES
    phase: str | None = None  # the phase compiling now
    queued_ns: int = field(default_factory=time.perf_counter_ns)
    created: float = field(default_factory=time.time)
    compile_ms: float | None = None  # wall time, from leaving the queue to installed
    compile_cpu_ms: float | None = None  # CPU time of that (the worker waits for idle cores)
    phase_ms: dict[str, float] = field(default_factory=dict)
    code_bytes: int | None = None
    code_from: str | None = None  # the entry (another bucket of its region) whose object code it shares
    planned_bytes: int | None = None
    naive_bytes: int | None = None
    bounds: dict[str, int] = field(default_factory=dict)
    error: str | None = None  # raised as a JitError at the region's next runs when fallback=False
    compiled: Any = field(default=None, repr=False)  # the code generator's CompiledRegion
    launcher: Any = field(default=None, repr=False)  # what the jump table holds once compiled
    module: Module | None = field(default=None, repr=False)  # the region function it was compiled from
    timed: Any = field(default=None, repr=False)  # a launcher that times every run (for judging)
    hits: list[int] = field(default_factory=lambda: [0])  # a cell the hit launcher bumps
    waiting: int = 0  # interpreted runs of its keys while it was queued or compiling
    queued_misses: int = 0  # its region's interpreted runs (any key) when it was queued
    native: dict[tuple, list[int]] = field(default_factory=dict)  # run-time key -> sampled native runs, ns
    judging: tuple | None = None  # the run-time key whose interpreted and native runs alternate now
    judged: bool = False  # compared with the interpreter and kept
    tier: int | None = None  # 1: quick code, its optimised tier queued (``tier_up``); 2: optimised
    tier_up: bool = False  # queued again for its optimised tier
    quick: Any = field(default=None, repr=False)  # its quick code and runs, until its optimised tier proves
    # at least as fast (``runtime.RegionRuntime.sampled``)
    source: str | None = None  # where its code came from: "compiled" (this process) or "disk"
    hot_ns: int = field(default_factory=time.perf_counter_ns)  # when its key got hot (or was loaded)
    native_ns: int | None = None  # when its code first ran

    @property
    def hit_count(self) -> int:
        return self.hits[0]

    def deferred(self, now_ns: int) -> bool:
        """Does the compiler leave it for later? An exact key of a region whose keys churn
        (``churns``), not asked for again since it was queued, while the region keeps running
        interpreted (within ``DEFER_IDLE_NS``): compiling a key the program may never ask for again
        would only take CPU from it (W3's exact stream, 100 calls: 5 % slower for two such compiles).
        It compiles once its key comes back, the program pauses, or someone waits for compiles.
        A tier-up waits until its quick code has run ``TIER_UP_HITS`` times: the key stayed hot."""
        if self.tier_up:
            return self.hits[0] < TIER_UP_HITS
        owner = self.owner
        return (self.mode == "exact" and self.waiting == 0 and owner is not None and owner.churns()
                and now_ns - owner.last_miss_ns < DEFER_IDLE_NS)

    def disassemble(self, kind: str = "bytecode") -> str:
        """The region function it was compiled from ("bytecode") or its code ("llvm", "llvm-opt", "asm")."""
        if kind not in DISASSEMBLY_KINDS:
            raise ValueError(f"kind must be one of {', '.join(DISASSEMBLY_KINDS)}, got {kind!r}")
        if kind == "bytecode":
            if self.module is None:
                raise ValueError(f"{self.name} is {self.status}: its region function is not built yet")
            return disassemble(self.module)
        if self.compiled is None:
            raise ValueError(f"{self.name} has no native code ({self.status}: {self.reason})")
        return self.compiled.disassemble(kind)

    def compile_order(self) -> tuple[bool, float, int]:
        """Where it goes in the compile queue (smallest first): the entry whose region costs the most
        interpreted time per run first — compiling it first saves the most if the calls keep coming —
        then the oldest. Entries of keys not timed yet count as free; tier-ups come after every first
        compile, since they only make running code faster."""
        interp = self.owner.interp_ms(self) if self.owner is not None else None
        return self.tier_up, -(interp or 0.0), self.queued_ns

    def native_ms(self) -> float | None:
        """Median sampled native time."""
        return median_ms([t for runs in list(self.native.values()) for t in runs])

    def as_dict(self, interp_ms: float | None = None) -> dict:
        native = self.native_ms()
        saved = None
        if interp_ms is not None and native is not None:
            saved = self.hit_count * (interp_ms - native)
        return {
            "name": self.name,
            "function": self.function,
            "region": self.region,
            "address": self.address,
            "mode": self.mode,
            "status": self.status,
            "hits": self.hit_count,
            "waiting": self.waiting,
            "compile_ms": self.compile_ms,
            "compile_cpu_ms": self.compile_cpu_ms,
            "phase_ms": dict(self.phase_ms),
            "code_bytes": self.code_bytes,
            "code_from": self.code_from,
            "planned_bytes": self.planned_bytes,
            "naive_bytes": self.naive_bytes,
            "reason": self.reason,
            "saved_ms": saved,
            "interp_ms": interp_ms,
            "native_ms": native,
            "symbols": {k: (v if isinstance(v, int) else list(v)) for k, v in self.symbols.items()},
            "bounds": dict(self.bounds),
            "tier": self.tier,
            "source": self.source,
            "hot_ns": self.hot_ns,
            "native_ns": self.native_ns,
        }


class EntryRegistry:
    """Every live entry, in creation order, the global budget, and the regions entries belong to."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, Entry] = {}
        self._regions: weakref.WeakSet[Any] = weakref.WeakSet()

    def track(self, region: Any) -> None:
        """Count ``region``'s interpreted runs (``.misses``) in the hit rate while it is alive."""
        with self._lock:
            self._regions.add(region)

    def regions(self) -> list[Any]:
        with self._lock:
            return list(self._regions)

    def add(self, entry: Entry, limit: int) -> bool:
        """Register ``entry`` unless the cache holds ``limit`` entries already; names stay unique."""
        with self._lock:
            if len(self._entries) >= limit:
                return False
            base, n = entry.name, 1
            while entry.name in self._entries:
                n += 1
                entry.name = f"{base}_{n}"
            self._entries[entry.name] = entry
            return True

    def get(self, name: str) -> Entry | None:
        with self._lock:
            return self._entries.get(name)

    def all(self) -> list[Entry]:
        with self._lock:
            return list(self._entries.values())

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


CACHE = EntryRegistry()


def median_ms(runs: Sequence[int]) -> float | None:
    """The median of ``runs`` (ns) in ms; None without runs."""
    return statistics.median(runs) / 1e6 if runs else None

__all__ = [
    "ADAPTIVE_GROWTH",
    "CACHE",
    "DISASSEMBLY_KINDS",
    "STATUSES",
    "CachePolicy",
    "Entry",
    "EntryRegistry",
    "KeyPlan",
    "Slot",
    "bucket_of",
    "median_ms",
    "plan_keys",
    "region_digest",
]
