"""The interpreter-facing side of the JIT: region dispatch in generated code, hotness, and hot-patching.

Why a jump table per region: the execution thread must never wait for the compiler. At every region
entry the generated interpreter computes the region's run-time key (shapes and scalars, no calls)
and looks it up in the region's jump table; the compiler thread hot-patches native code in by
inserting the key (a single dict store, atomic under the GIL), so the next region entry runs native
code. A miss calls into this module, which counts hotness, enqueues a compile once a cache key is
hot, and serves bucket entries to new keys of a compiled bucket. The generated code for a region
(``jk3``/``jf3`` are region 3's key and launcher)::

    jk3 = (r0.shape, r1)
    jf3 = J3.get(jk3) or MISS3(jk3)   # launcher, or None (interpret and time it), or False
    if jf3:
        try:
            r5, r9 = jf3(jk3, r0, r1) # native code; then constants, detached scalar lines, deletions
        except REGION_MISS:
            jf3 = GUARD3(jk3)         # refused: run interpreted
    if not jf3:
        jt3 = NOW() if jf3 is None else 0
        r5 = K4(r0)                   # the region's interpreted lines, unchanged
        ...
        if jt3:
            DONE3(jk3, jt3)           # interpreted time, for the amortisation account

Native code may refuse a call it does not fit (a bucket guard, a check inside the code fails: the
launcher raises ``E-SHAPE-GUARD``): the native call sits in ``try``/``except REGION_MISS`` (free in
CPython 3.11 until something is raised), the call runs interpreted — which reports any user-facing
error — and a key refused three times stays interpreted.
Regions that can never compile (no op call, SCD below the threshold) get no dispatch at all, so a
function without compilable regions runs exactly the code the interpreter generated before the JIT.

The JIT must never make a region slower (``POLICY``). Native code costs a launch (checking and
allocating in Python, a ctypes call): a region whose interpreted run is already below that overhead,
measured once by the compiler (``COMPILER.launch_overhead_ns``), is not compiled ("too small"). And
each compiled entry is compared with the interpreter at one run-time key, once it has a few native runs
there: native code faster than the interpreted runs seen before it was installed is kept; otherwise
that key alternates between interpreted and native runs until both have a few fresh ones, and when
the fastest native run is still slower by more than ``_DEMOTE_MARGIN`` the entry is *demoted*: its
keys go back to the interpreter, it is never recompiled, and ``jit_info`` keeps it with the two times
as reason. Fastest runs, because noise only ever adds time (a cold first call, a compile running
alongside); alternating, because a busy machine slows both alike then, so load alone cannot demote.
"""

from __future__ import annotations

import functools
import math
import operator
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..context import CONTEXT, on_change
from ..errors import JitError, ShapeError
from ..observe.trace import TRACE, TraceEvent
from ..options import JitOptions, jit_enabled
from ..runtime.limits import nbytes_of
from . import diskcache
from .cache import CACHE, CachePolicy, Entry, KeyPlan, median_ms, plan_keys, region_digest
from .compiler import COMPILER
from .regions import Region, RegionIO, build_function, def_use, default_can_lower, form_regions, region_io
from .scd import analyze_tensors
from .stats import EVENTS, format_ns

GUARD_CODE = "E-SHAPE-GUARD"
_MAX_TABLE = 4096  # run-time keys per jump table (bucket entries serve many)
_MAX_KEYS = 64  # run-time keys remembered per cache key
_EARLY_SAMPLES = 16  # native runs: time the first 16 of an entry (to judge it), then every 32nd
_SAMPLE_EVERY = 32
_GUARD_LIMIT = 3  # native refusals of a run-time key before it stays interpreted
_INTERP_SAMPLES = 8  # interpreted runs timed per run-time key (amortisation account, judging)
_NATIVE_SAMPLES = 8  # native runs kept per run-time key
_JUDGE_RUNS = 3  # runs of each kind at a key before native and interpreted times are compared
_DEMOTE_MARGIN = 1.1  # native slower than this × interpreted: demoted


@dataclass
class Policy:
    """What keeps the JIT from making a region slower (see the module docstring); both on by default.

    Switching them off shows the native code's own speed (and keeps tests about the compile trigger
    independent of timing).
    """

    demote: bool = True  # demote entries whose native code is slower than the interpreter
    skip_small: bool = True  # do not compile keys whose interpreted run is below the launch overhead


POLICY = Policy()


class GuardMiss(Exception):
    """A bucket entry's generic code refused this call's shapes; the region runs interpreted instead."""


@dataclass(frozen=True)
class RegionDispatch:
    """What the interpreter's code generator wraps around a region's lines (see the module docstring)."""

    address: int  # the region's first instruction
    addresses: frozenset[int]
    names: dict[str, Any]
    native: tuple[str, ...]  # the native branch, the call first
    key_line: str
    id: int

    def layout(self, traced: bool) -> tuple[list[tuple[int, str]], int, list[tuple[int, str]]]:
        """(lines before the region's lines, their indent, lines after) — depths relative to the region."""
        n = self.id
        native = list(self.native)
        if traced:
            native = [f"jt{n} = NOW()", native[0], f"JEMIT{n}(jf{n}, jt{n})", *native[1:]]
        before = [(0, self.key_line), (0, f"jf{n} = J{n}.get(jk{n}) or MISS{n}(jk{n})"), (0, f"if jf{n}:"),
                  (1, "try:"), *((2, line) for line in native), (1, "except REGION_MISS:"),
                  (2, f"jf{n} = GUARD{n}(jk{n})"), (0, f"if not jf{n}:"),
                  (1, f"jt{n} = NOW() if jf{n} is None else 0")]
        return before, 1, [(1, f"if jt{n}:"), (2, f"DONE{n}(jk{n}, jt{n})")]


@dataclass
class KeyState:
    """What one cache key of a region has seen."""

    count: int = 0  # interpreted runs
    entry: Entry | None = None
    keys: set[tuple] = field(default_factory=set)  # run-time keys mapping here (bounded)
    rejected: bool = False  # the cache was full when it got hot, or it is too small to compile
    guard_fails: dict[tuple, int] = field(default_factory=dict)  # run-time key -> native calls refused
    blocked: set[tuple] = field(default_factory=set)  # run-time keys that stay interpreted


class RegionRuntime:
    """One compilable region of one executable: its jump table, per-key hotness and entries."""

    def __init__(self, exe: Any, region: Region, io: RegionIO, plan: KeyPlan, settings: JitOptions) -> None:
        self.exe_name = exe.name
        self.info = exe.info
        self.module = exe.program.module
        self.region = region
        self.io = io
        self.plan = plan
        self.settings = settings
        self.policy = CachePolicy(settings, plan)
        self.table: dict[tuple, Callable] = {}  # the jump table the generated code reads
        self.lock = threading.Lock()
        self.states: dict[tuple, KeyState] = {}
        self.samples: dict[tuple, list[int]] = {}  # run-time key -> interpreted runs, ns
        self.entries: list[Entry] = []
        self.misses = 0
        self.last_miss_ns = 0  # when it last ran interpreted
        self.generation = 0
        self.full_reported = False
        self.too_small: dict[tuple, str] = {}  # cache key -> why it is not compiled (bounded)
        CACHE.track(self)

    @functools.cached_property
    def digest(self) -> str:
        """Names the region in entry names (computed when its first key gets hot)."""
        return region_digest(self.region, self.io, self.info, self.module)

    # -- called by the generated code -------------------------------------------------------------
    def miss(self, key: tuple) -> Callable | bool | None:
        """No native code in the jump table for ``key``: count it; serve a compiled bucket entry.

        Returns the launcher to run, or how to interpret: None (and time the run, while the key has
        few samples of its interpreted time) or False.
        """
        if not CONTEXT.jit_enabled:
            return False
        with self.lock:
            if self.policy.learning and self.policy.observe(key, CONTEXT.jit_adaptive_budget):
                self._learn()
            cache_key, state = self._state(key)
            entry = state.entry
            if entry is not None and entry.status == "compiled" and key not in state.blocked:
                if not self._fits(entry, key):
                    return False  # interpreted: each tensor checked where it is made
                if entry.judging == key:
                    return self._judge(entry, key)
                self._remember(key, entry.launcher)
                return entry.launcher
            if entry is not None and entry.error is not None:
                raise JitError(entry.error, address=self.region.start, hint="the function was declared with "
                               "fallback=False; use fallback=True to keep running interpreted")
            self.misses += 1
            self.last_miss_ns = time.perf_counter_ns()
            if entry is not None and entry.status in ("queued", "compiling"):
                entry.waiting += 1
            if len(state.keys) < _MAX_KEYS:
                state.keys.add(key)
            first = entry is None and not state.rejected and state.count == 0
            if first and diskcache.has(self, cache_key):
                launcher = self._from_disk(cache_key, state, key)
                if launcher is not None:
                    self.misses -= 1
                    return launcher if self._fits(state.entry, key) else False
            if entry is None and not state.rejected:
                state.count += 1
                if state.count >= self.settings.hot_threshold:
                    self._create(cache_key, state, key)
            sample = self.samples.get(key)
            return None if sample is None or len(sample) < _INTERP_SAMPLES else False

    def churns(self) -> bool:
        """Has it seen more distinct keys than adaptive mode's budget of exact entries? Then an exact
        key that got hot may well never come back (W3's stream: 85 lengths in 100 calls)."""
        return len(self.states) > CONTEXT.jit_adaptive_budget

    def done(self, key: tuple, t0: int) -> None:
        """An interpreted run of the region ended: keep its time (amortisation account, judging)."""
        dt = time.perf_counter_ns() - t0
        sample = self.samples.get(key)
        if sample is None:
            if len(self.samples) >= _MAX_TABLE:
                self.samples.clear()
            sample = self.samples[key] = []
        sample.append(dt)

    def guard(self, key: tuple) -> bool:
        """The native code refused ``key`` (a failed guard): this call runs interpreted, and after
        ``_GUARD_LIMIT`` refusals the key stays interpreted."""
        with self.lock:
            _, state = self._state(key)
            fails = state.guard_fails[key] = state.guard_fails.get(key, 0) + 1
            if fails >= _GUARD_LIMIT:
                self.table.pop(key, None)
                state.blocked.add(key)
            name = state.entry.name if state.entry is not None else None
        EVENTS.publish("guard", name, function=self.exe_name, region=self.region.id, refusals=fails)
        return False

    def trace_native(self, launcher: Callable, t0: int) -> None:
        t1 = time.perf_counter_ns()
        TRACE.record(TraceEvent(self.exe_name, self.region.start, "REGION", launcher.entry.name, "native", t0,
                                t1 - t0, threading.get_ident(), "jit", None))

    def sampled(self, entry: Entry, key: tuple, ns: int) -> None:
        """A timed native run of ``entry`` at ``key`` (the launcher times some): keep it, and once the
        key has ``_JUDGE_RUNS`` of them, judge the entry (see the module docstring)."""
        with self.lock:
            if entry.status != "compiled":
                return
            runs = entry.native.get(key)
            if runs is None:
                if len(entry.native) >= _MAX_KEYS:
                    return
                runs = entry.native[key] = []
            runs.append(ns)
            if len(runs) > _NATIVE_SAMPLES:
                del runs[0]
            if entry.quick is not None and len(runs) >= _JUDGE_RUNS:
                self._tier_check(entry, key, runs)
            if (POLICY.demote and not entry.judged and entry.judging is None and len(runs) >= _JUDGE_RUNS
                    and entry.tier != 1):  # quick code is not judged: its optimised tier will be
                self._suspect(entry, key)

    # -- bookkeeping ------------------------------------------------------------------------------
    def _state(self, key: tuple) -> tuple[tuple, KeyState]:
        exact = self.states.get(key)  # an exact entry keeps serving after adaptive mode switched
        if exact is not None and exact.entry is not None:
            return key, exact
        cache_key = self.policy.cache_key(key)
        state = self.states.get(cache_key)
        if state is None:
            if len(self.states) >= _MAX_TABLE:
                self.states = {k: s for k, s in self.states.items() if s.entry is not None}
            state = self.states[cache_key] = KeyState()
        return cache_key, state

    def _fits(self, entry: Entry, key: tuple) -> bool:
        """May ``entry``'s native code run at ``key`` within ``max_tensor_bytes``? Its launcher allocates
        the outputs and the arena (intermediates, per-thread scratch, at the bucket's bounds) without the
        interpreter's checks; where one is over the limit the key runs interpreted, whose checks raise
        the limit's error before allocating (lock held)."""
        lowered = entry.compiled.lowered
        limit = CONTEXT.max_tensor_bytes
        if lowered.planned_bytes > limit:
            return False
        values = self.plan.values(key)
        return all(nbytes_of([d.evaluate(values) for d in shape], np.dtype(dtype).itemsize) <= limit
                   for _, dtype, shape in lowered.launch.outputs)

    def _remember(self, key: tuple, launcher: Callable) -> None:
        if len(self.table) >= _MAX_TABLE:
            self.table.clear()
        self.table[key] = launcher

    def _learn(self) -> None:
        """Adaptive mode has seen more distinct keys than its budget: choose buckets, and let each
        bucket inherit the runs its keys have had so far, so that it gets hot as if it had been there
        from the start (lock held)."""
        learned = self.policy.learn()
        EVENTS.publish("buckets", None, function=self.exe_name, region=self.region.id,
                       buckets={s: list(b) for s, b in learned.items()})
        for key, state in list(self.states.items()):
            if state.entry is not None or state.rejected:
                continue
            del self.states[key]
            _, bucket = self._state(key)
            bucket.count += state.count
            bucket.keys |= set(list(state.keys)[: max(0, _MAX_KEYS - len(bucket.keys))])

    def _create(self, cache_key: tuple, state: KeyState, key: tuple) -> None:
        """The key is hot: create its entry and enqueue the compile (lock held)."""
        policy = self.policy
        small = self._too_small(state.keys | {key})
        if small is not None:
            state.rejected = True
            shown = ", ".join(f"{s}={_fmt(v)}" for s, v in policy.symbols_of(cache_key, key).items())
            reason = f"too small to compile ({shown or 'static shapes'}): {small}"
            if len(self.too_small) < _MAX_KEYS:
                self.too_small[cache_key] = reason
            EVENTS.publish("skipped", None, function=self.exe_name, region=self.region.id, reason=reason)
            return
        reason = self._trigger(policy.symbols_of(cache_key, key), state.count)
        entry = self._entry(cache_key, state, key, reason)
        if entry is not None:
            COMPILER.submit(entry)

    def _entry(self, cache_key: tuple, state: KeyState, key: tuple, reason: str) -> Entry | None:
        """A new entry for ``cache_key``, registered; None when the cache is full (lock held)."""
        policy = self.policy
        symbols = policy.symbols_of(cache_key, key)
        name = policy.name(self.exe_name, self.region.id, self.digest, cache_key, key)
        entry = Entry(name, self.exe_name, self.region.id, self.region.start, self.settings.cache_mode,
                      cache_key, key, symbols, reason, owner=self, generation=self.generation)
        full = len(self.entries) >= CONTEXT.jit_cache_region_entries
        if full or not CACHE.add(entry, CONTEXT.jit_cache_entries):
            state.rejected = True
            if not self.full_reported:
                self.full_reported = True
                EVENTS.publish("cache-full", None, function=self.exe_name, region=self.region.id,
                               message=f"the JIT cache is full: new keys of {self.exe_name} region "
                               f"{self.region.id} run interpreted")
            return None
        state.entry = entry
        entry.queued_misses = self.misses
        self.entries.append(entry)
        return entry

    def _from_disk(self, cache_key: tuple, state: KeyState, key: tuple) -> Callable | None:
        """The first run of a key whose code an earlier process left in the persistent code cache: load
        and install it now, so that this very run is native (lock held). When the file does not check,
        the key compiles at once instead — it was hot before."""
        entry = self._entry(cache_key, state, key, "loaded from the persistent code cache at its first run")
        if entry is None:
            return None
        t0 = time.perf_counter_ns()
        try:
            module, _, bounds = self.build(entry)
        except Exception:  # the compile reports it: this run only interprets
            module = bounds = None
        compiled = module and diskcache.load_code(self, cache_key, module, bounds, entry.name)
        if not compiled:
            entry.reason = "its file in the persistent code cache did not load: compiled again"
            COMPILER.submit(entry)
            return None
        entry.module, entry.bounds = module, bounds
        self._adopt(entry, compiled, t0)
        return entry.launcher

    def _adopt(self, entry: Entry, compiled: Any, t0: int) -> None:
        """Install code loaded from disk for ``entry`` (lock held)."""
        entry.source, entry.judged = "disk", True  # it was judged, and kept, where it was compiled
        entry.compile_ms = (time.perf_counter_ns() - t0) / 1e6
        entry.phase_ms["disk"] = entry.compile_ms
        self._install(entry, compiled)
        EVENTS.publish("loaded", entry.name, function=self.exe_name, region=self.region.id, tier=entry.tier,
                       ms=entry.compile_ms)
        if entry.tier == 1:  # a process that ended before its tier-up left the quick code
            COMPILER.tier_up(entry)

    def load_from_disk(self) -> int:
        """Load and install the code the persistent code cache has for this region's keys, before any
        run asks for them (the compiler thread, when the function is prepared); returns how many. A
        file that does not check is left alone: its key compiles if it gets hot."""
        if self.policy.mode == "adaptive":
            return 0  # its cache keys depend on buckets learned from this process's keys
        loaded = 0
        for cache_key, key, read in diskcache.keys(self):
            t0 = time.perf_counter_ns()
            module, _, bounds = self.build_for(cache_key, key)
            compiled = diskcache.load_code(self, cache_key, module, bounds, "preload", read)
            if compiled is None:
                continue  # a file that does not fit: its key compiles if it gets hot
            with self.lock:
                cache_key_now, state = self._state(key)
                if cache_key_now != cache_key or state.entry is not None or state.rejected:
                    continue
                entry = self._entry(cache_key, state, key, "loaded from the persistent code cache when its "
                                    "function was prepared")
                if entry is None:
                    break
                entry.module, entry.bounds = module, bounds
                self._adopt(entry, compiled, t0)
            loaded += 1
        return loaded

    def _too_small(self, keys: Iterable[tuple]) -> str | None:
        """Why native code cannot beat the interpreter on ``keys``: their fastest interpreted run is
        below the launch overhead of native code. None when it can, or when nothing is measured yet."""
        overhead = COMPILER.launch_overhead_ns
        runs = [t for k in keys for t in self.samples.get(k, ())]
        if not POLICY.skip_small or overhead is None or not runs or min(runs) >= overhead:
            return None
        return (f"interpreted {format_ns(min(runs))} is below the {format_ns(overhead)} launch overhead of "
                "native code; it stays interpreted")

    def _tier_check(self, entry: Entry, key: tuple, runs: list[int]) -> None:
        """A tier-up must never make a call slower: once the optimised code has a few runs at a key its
        quick code ran at, it stays only if its fastest run is within ``_DEMOTE_MARGIN`` of the quick
        code's; otherwise the quick code comes back, for good (lock held)."""
        quick, quick_runs = entry.quick
        before = quick_runs.get(key)
        if before is None or len(before) < _JUDGE_RUNS:
            if len(entry.native) > len(quick_runs):  # the optimised code ran at keys the quick one never did
                entry.quick = None
            return
        entry.quick = None
        if min(runs) <= min(before) * _DEMOTE_MARGIN:
            return
        reason = (f"its optimised tier ran {format_ns(min(runs))} against the quick code's "
                  f"{format_ns(min(before))}: the quick code stays")
        self._install(entry, quick)
        diskcache.forget(entry)  # it holds the optimised code: a later process compiles and checks afresh
        EVENTS.publish("tier-down", entry.name, function=self.exe_name, region=self.region.id, reason=reason)

    def _suspect(self, entry: Entry, key: tuple) -> None:
        """``key`` has enough native runs: keep the entry when they beat the interpreted runs seen
        before, else start alternating interpreted and native runs at ``key`` (lock held)."""
        interp = self.samples.get(key, ())
        if len(interp) >= _JUDGE_RUNS and min(entry.native[key]) <= min(interp) * _DEMOTE_MARGIN:
            entry.judged = True
            return
        entry.judging = key
        self.samples[key] = []
        entry.native[key] = []
        self.table.pop(key, None)  # its runs come to ``miss``, which alternates them

    def _judge(self, entry: Entry, key: tuple) -> Callable | None:
        """A run at the key being judged: interpreted (None) or native (the timed launcher), in turn;
        once both kinds have ``_JUDGE_RUNS`` fresh runs, keep or demote the entry (lock held)."""
        interp, native = self.samples.get(key, []), entry.native.get(key, [])
        if min(len(interp), len(native)) < _JUDGE_RUNS:
            return None if len(interp) <= len(native) else entry.timed
        entry.judging = None
        entry.judged = True
        if min(native) <= min(interp) * _DEMOTE_MARGIN:
            self._remember(key, entry.launcher)
            return entry.launcher
        where = ", ".join(f"{s}={v}" for s, v in self.plan.values(key).items())
        entry.status = "demoted"
        entry.reason = (f"native {format_ns(min(native))} vs interpreted {format_ns(min(interp))}"
                        f"{f' ({where})' if where else ''}: slower than the interpreter, so it runs "
                        "interpreted and is not compiled again")
        for k in [k for k, launcher in self.table.items() if launcher is entry.launcher]:
            del self.table[k]
        if entry.source is not None:
            diskcache.forget(entry)
        EVENTS.publish("demoted", entry.name, function=self.exe_name, region=self.region.id,
                       reason=entry.reason)
        return None

    def _trigger(self, symbols: dict[str, Any], runs: int) -> str:
        """Why an entry is created: which symbol took which new value."""
        shown = {s: _fmt(v) for s, v in symbols.items()}
        if not self.entries:
            values = ", ".join(f"{s}={v}" for s, v in shown.items()) or "static shapes"
            reason = f"first hot key of region {self.region.id} ({values}) after {runs} interpreted runs"
            if any(r is not self and r.exe_name == self.exe_name and r.region.start == self.region.start
                   and r.digest != self.digest and r.entries for r in CACHE.regions()):
                reason += (f"; another version of {self.exe_name} has entries for this region too: its "
                           "bytecode differs (a plain Python int folded in? pass it as ms.mutable)")
            return reason
        new = [s for s, v in symbols.items() if all(e.symbols.get(s) != v for e in self.entries)]
        changes = ", ".join(f"{s} took the new {'bucket' if isinstance(symbols[s], tuple) else 'value'} "
                            f"{shown[s]}" for s in new) or "a new combination of known values"
        return f"{changes} (hot after {runs} interpreted runs)"

    # -- called by the compiler thread --------------------------------------------------------------
    def build(self, entry: Entry) -> tuple[Any, str, dict[str, int]]:
        """The entry's region function (verified by the caller), its name and the bucket bounds."""
        return self.build_for(entry.cache_key, entry.key)

    def build_for(self, cache_key: tuple, key: tuple) -> tuple[Any, str, dict[str, int]]:
        """The region function of ``cache_key`` (made hot by run-time ``key``), its name and bounds."""
        specs, scalars, bounds = self.policy.parameters(cache_key, key)
        name = f"{self.exe_name}_region{self.region.id}"
        module = build_function(self.region, self.io, self.info, self.module, specs, scalars, name)
        return module, name, bounds

    def install(self, entry: Entry, compiled: Any) -> bool:
        """Hot-patch: put the native launcher in the jump table for every key of the entry seen so far
        (a tier-up: wherever its quick code was)."""
        with self.lock:
            if entry.generation != self.generation or entry.status not in ("compiling", "compiled"):
                return False
            self._install(entry, compiled)
            return True

    def _install(self, entry: Entry, compiled: Any) -> None:
        _, scalars, _ = self.policy.parameters(entry.cache_key, entry.key)
        n_tensors = len(self.io.tensor_inputs)
        keep = (*range(n_tensors), *(n_tensors + j for j, v in enumerate(scalars) if isinstance(v, str)))
        total = n_tensors + len(scalars)
        old = entry.launcher
        if old is not None and entry.tier == 1 and compiled.tier == 2:
            entry.quick = (entry.compiled, {k: list(v) for k, v in entry.native.items()})
        entry.compiled = compiled
        entry.tier = compiled.tier
        entry.code_bytes, entry.code_from = compiled.code_bytes, compiled.code_from
        entry.planned_bytes, entry.naive_bytes = compiled.lowered.planned_bytes, compiled.lowered.naive_bytes
        entry.launcher = make_launcher(compiled.fn, entry, keep, total, self.sampled)
        entry.timed = make_launcher(compiled.fn, entry, keep, total, self.sampled, timed=True)
        entry.status = "compiled"
        if old is not None:
            entry.native.clear()  # the new tier's runs are judged afresh
            for key in [k for k, launcher in self.table.items() if launcher is old]:
                if self._fits(entry, key):
                    self.table[key] = entry.launcher
                else:
                    del self.table[key]
        state = self.states.get(entry.cache_key)
        for key in (state.keys - state.blocked) if state is not None else ():
            if key != entry.judging and self._fits(entry, key):
                self._remember(key, entry.launcher)

    def fail(self, entry: Entry, reason: str) -> None:
        with self.lock:
            entry.status = "fallback"
            entry.reason = reason
            if not self.settings.fallback:
                entry.error = f"compiling {entry.name} failed: {reason}"

    def interp_ms(self, entry: Entry) -> float | None:
        """Median interpreted time of the region over the run-time keys of ``entry``."""
        with self.lock:
            state = self.states.get(entry.cache_key)
            keys = list(state.keys) if state is not None else [entry.key]
            return median_ms([t for k in keys for t in self.samples.get(k, ())])

    def clear(self) -> None:
        with self.lock:
            self.generation += 1
            self.table.clear()
            self.states.clear()
            self.samples.clear()
            self.entries.clear()
            self.too_small.clear()
            self.misses = 0
            self.full_reported = False
            self.policy = CachePolicy(self.settings, self.plan)

    # -- the code the interpreter generates around the region ----------------------------------------
    def dispatch(self, steps_by_ins: dict[int, Any]) -> RegionDispatch:
        n = self.region.id
        io = self.io
        args = ", ".join(f"r{r}" for r in (*io.tensor_inputs, *io.scalar_params))
        outs = ", ".join(f"r{r}" for r in io.live_outs)
        call = f"{outs} = jf{n}(jk{n}, {args})" if outs else f"jf{n}(jk{n}, {args})"
        defined = {r for ins in self.region.instructions for r in ins.writes()}
        dead = dict.fromkeys(io.outer_frees)  # outside registers the interpreted lines would delete
        for ins in self.region.instructions:
            dead.update((r, None) for r in steps_by_ins[id(ins)].release if r not in defined)
        native = [call, *(steps_by_ins[id(ins)].line for ins in (*io.remat, *io.detached))]
        if dead:
            native.append(f"del {', '.join(f'r{r}' for r in dead)}")
        names = {
            f"J{n}": self.table,
            f"MISS{n}": self.miss,
            f"DONE{n}": self.done,
            f"GUARD{n}": self.guard,
            f"JEMIT{n}": self.trace_native,
            "NOW": time.perf_counter_ns,
            "REGION_MISS": GuardMiss,
        }
        return RegionDispatch(self.region.start, frozenset(self.region.addresses), names, tuple(native),
                              f"jk{n} = {self.plan.key_expr()}", n)


def make_launcher(fn: Callable, entry: Entry, keep: tuple[int, ...], total: int,
                  sampled: Callable[[Entry, tuple, int], None], timed: bool = False) -> Callable:
    """The callable the jump table holds: counts hits, samples native time, maps refusals to GuardMiss.

    It is called with the run-time key first, then the dispatch's ``total`` arguments; ``keep`` are
    the positions of those the region function takes (an entry folds the scalars it is exact in into
    constants). It times the first ``_EARLY_SAMPLES`` runs of the entry (enough to judge it against
    the interpreter) and every ``_SAMPLE_EVERY``-th after — every run when ``timed`` — and hands each
    time to ``sampled``. One Python frame on top of the launcher.
    """
    early = math.inf if timed else _EARLY_SAMPLES
    hits, now = entry.hits, time.perf_counter_ns
    if keep == tuple(range(total)):
        pick = None
    elif keep == tuple(range(len(keep))):
        pick = operator.itemgetter(slice(0, len(keep)))
    else:
        pick = lambda args: tuple(args[i] for i in keep)  # noqa: E731

    def hit(key: tuple, *args: Any) -> Any:
        n = hits[0] = hits[0] + 1
        if pick is not None:
            args = pick(args)
        try:
            if n > early and n % _SAMPLE_EVERY:
                return fn(*args)
            t0 = now()
            out = fn(*args)
            t1 = now()
            if entry.native_ns is None:
                entry.native_ns = t0
        except ShapeError as exc:
            if exc.code != GUARD_CODE:
                raise
            hits[0] -= 1
            raise GuardMiss(str(exc)) from exc
        sampled(entry, key, t1 - t0)
        return out

    hit.entry = entry  # type: ignore[attr-defined]  # trace events name the entry
    return hit


class FunctionJit:
    """The JIT state of one executable: its regions and the dispatch the interpreter generates for them."""

    def __init__(self, exe: Any) -> None:
        self.settings = JitOptions.of(exe.program.options)
        self.runtimes: list[RegionRuntime] = []
        self.dispatch: list[RegionDispatch] = []
        if not jit_enabled(exe.program.options):
            return
        try:
            self._plan(exe)
        except Exception as exc:  # the JIT failing to plan must never stop the interpreter
            self.runtimes.clear()
            self.dispatch.clear()
            EVENTS.publish("fallback", None, function=exe.name, reason="JIT planning failed, the function "
                           f"runs interpreted: {type(exc).__name__}: {exc}")

    def _plan(self, exe: Any) -> None:
        info = exe.info
        tensors = analyze_tensors(info, explain=False)
        regions, _ = form_regions(info, tensors, threshold=self.settings.scd_threshold,
                                  hot_threshold=self.settings.hot_threshold, can_lower=default_can_lower())
        facts = def_use(info)
        steps_by_ins = {id(step.ins): step for step in exe.steps}
        for region in regions:
            if not region.compilable:
                continue
            io = region_io(region, info, facts)
            plan = plan_keys(io, info)
            rt = RegionRuntime(exe, region, io, plan, self.settings)
            self.runtimes.append(rt)
            self.dispatch.append(rt.dispatch(steps_by_ins))
        if self.runtimes and CONTEXT.jit_enabled:
            COMPILER.prestart(self.runtimes)  # the worker starts while this function's first calls run



def attach(exe: Any) -> FunctionJit:
    """The interpreter calls this once per executable, before generating its code."""
    return FunctionJit(exe)


def region_runtimes() -> list[RegionRuntime]:
    return CACHE.regions()


def reset() -> None:
    """Drop every entry, counter and queued compile; the compiler thread keeps running."""
    COMPILER.reset()
    for rt in region_runtimes():
        rt.clear()
    CACHE.clear()
    EVENTS.clear()


_LIMIT = [CONTEXT.max_tensor_bytes]  # the limit the jump tables' keys were checked under (``_fits``)


def _forget_tables() -> None:
    """``jit_enabled`` switched off, or the tensor limit changed: drop native code from every jump
    table (entries stay; a key comes back through ``miss``, which checks it against the limit again)."""
    if not CONTEXT.jit_enabled or _LIMIT[0] != CONTEXT.max_tensor_bytes:
        _LIMIT[0] = CONTEXT.max_tensor_bytes
        for rt in region_runtimes():
            with rt.lock:
                rt.table.clear()


on_change(_forget_tables)


def _fmt(value: Any) -> str:
    return str(value) if isinstance(value, int) else f"{value[0]}-{value[1]}"


__all__ = ["POLICY", "FunctionJit", "GuardMiss", "Policy", "RegionDispatch", "RegionRuntime", "attach",
           "make_launcher", "region_runtimes", "reset"]
