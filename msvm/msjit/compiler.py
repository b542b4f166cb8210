"""The background compiler: one thread that turns queued cache entries into native code.

Why a thread *and* a process: the thread keeps compiling off the execution thread, which only enqueues
and keeps interpreting; lowering and LLVM run in the compile worker process (``msvm.native.worker``),
so an LLVM crash or hang costs one compile, not the user's Python process or Jupyter kernel, and the
20–50 ms of Python that lowering a region costs never holds this process's GIL beside the user's
calls. This thread only builds the region function, sends it, and loads and binds what comes back;
lowering verifies the function, so the worker does that too (verifying here as well would hold this
process's GIL for a second verification per compile). A crash, a timeout
(``ms.set_context(compile_timeout_ms=…)``: the worker is killed and restarted) or any exception of
the code generator marks the entry ``fallback`` with the reason; its region keeps running interpreted
and is not compiled again for that key.

Phases, each timed and visible (``phase_ms``, monitor ``phase`` events, trace events of mode
"compile" when tracing): ``queue`` (waiting), ``region`` (building the standalone region function),
the code generator's own phases, ``worker`` (the round trip to the worker beyond its own phases) and
``install`` (the hot-patch).

Tiers and the disk: an entry whose quick code (tier 1, ``codegen.region``) installed is queued again
(``Entry.tier_up``) for its optimised tier, after every first compile and once the quick code has run
``TIER_UP_HITS`` times; its request runs in the background, on the worker's idle thread, and the
hot-patch replaces the quick launcher. Before asking the worker, a compile looks in the persistent code
cache (``diskcache``), and what the worker answers is kept there (the optimised tier replacing the
quick one): another process may have compiled the key since this one first saw it.

Why some entries wait: an exact key that got hot in a region whose keys churn (more distinct keys
than ``jit_adaptive_budget``) may never come back, and compiling it takes CPU from the program for
nothing (``docs/performance.md``, "Deferred entries"). Such an entry stays queued
(``Entry.deferred``; a "deferred" event says so) until its key is asked for again, the program
pauses, or someone waits for compiles.

Why a warm-up: starting the worker costs about half a second, which the first compile would pay on
top of its own time. ``prestart`` — called when a function with compilable regions is prepared, at
its decoration — has the compiler thread start the worker at once and ready what a compile needs in
this process, and know the *launch overhead* of native code (``launch_overhead_ns``), below which no
region is worth compiling: measured once per host by compiling a one-op probe region and timing its
calls, then kept in the capability DB's on-disk cache (the probe cost a fresh process's first
compile 0.2–0.3 s of queueing). The worker yields to the program (``URGENT_NICE``; see
``msvm.native.worker``): at idle priority (``SCHED_IDLE``), as it ran before, it got no CPU while the
program or anything else kept both cores busy. A program looping on one region still leaves it little,
so a request for code the program keeps asking for also borrows a core from the program's thread pools
(OpenBLAS's and the job pool) until it is answered — at once when the program is hot on it
(``HOT_CALLS`` interpreted runs since it was queued, most of its region's: ``HOT_SHARE``), after
``STARVED_S`` when it asks now and then.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from ..bytecode.builder import ModuleBuilder
from ..bytecode.module import Module
from ..context import CONTEXT
from ..native.worker import INJECTIONS, CompileWorker
from ..observe.trace import TRACE, TraceEvent
from . import diskcache
from .cache import Entry
from .stats import EVENTS, format_ns, hit_rate

# A request to the worker gets a core lent once the entry it compiles has been asked for HOT_CALLS
# times since it was queued, at least HOT_SHARE of its region's interpreted runs meanwhile (a loop on
# one shape or bucket), or WANTED_CALLS times once the request has been unanswered for STARVED_S; the
# next bucket of a region with compiled code (a plan and a load) counts as starved at once. Why: a loop
# leaves an idle-priority compile only the gaps between kernels, so its code lands late, while lending
# for code asked for now and then costs the program a core for code that lands after it is done.
# ``python -m bench delivery --only W1,W3`` re-measures; the history is in ``docs/performance.md``.
STARVED_S = 0.5
WANTED_CALLS = 2
HOT_CALLS = 8
HOT_SHARE = 2 / 3
GIL_SWITCH_S = 0.001  # the GIL switch interval while the compiler thread works (``_quick_gil_handoffs``)
_WANTED_POLL_S = 0.02
_IDLE_TICK_S = 1.0  # how often an idle compiler samples the hit rate for the monitor
_DEFER_POLL_S = 0.01  # how often a compiler with only deferred entries looks again
_TIER_POLL_S = 0.1  # ... when they are all tier-ups: nothing waits for those, and their key may be gone
_PROBE_ROUNDS, _PROBE_CALLS = 5, 20  # launch overhead: the fastest round's mean time per call


@contextmanager
def _core_when_starved(asked: Callable[[], tuple[int, int]], entry: str | None,
                       starved_s: float = STARVED_S) -> Iterator[None]:
    """Lend the worker a core (one thread fewer in OpenBLAS's pool and in our job pool) while a request
    is unanswered and the program keeps asking for what it compiles: ``asked()`` — (its interpreted
    runs, its region's) since it was queued — reaches ``HOT_CALLS`` with ``HOT_SHARE`` of the region's,
    or ``WANTED_CALLS`` after ``starved_s``. The worker yields to the program, so a program calling
    OpenBLAS or our 2-thread kernels in a loop leaves it a small share; lending for a compile the
    program rarely asks for (exact mode in a stream of many shapes) would only slow the program.
    Monitor events ``core-lent`` and ``core-returned`` (with the milliseconds lent) show it."""
    from ..kernels.threads import POOL  # not at import: interpreting needs neither (nor llvmlite)
    from ..native import blas

    done = threading.Event()
    lent_at: list[float] = []

    def watch() -> None:
        starved_at = time.monotonic() + starved_s
        while not done.wait(_WANTED_POLL_S):
            calls, region_calls = asked()
            hot = calls >= HOT_CALLS and calls >= HOT_SHARE * region_calls
            if hot or (calls >= WANTED_CALLS and time.monotonic() >= starved_at):
                lent_at.append(time.perf_counter())
                EVENTS.publish("core-lent", entry, blas=blas.lend_core(), pool=POOL.lend_core())
                return

    watcher = threading.Thread(target=watch, name="msvm-jit-starved", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()
        blas.return_core()
        POOL.return_core()
        if lent_at:
            EVENTS.publish("core-returned", entry, ms=(time.perf_counter() - lent_at[0]) * 1e3)


@contextmanager
def _quick_gil_handoffs() -> Iterator[None]:
    """A short GIL switch interval while this thread works. Its work here is short bursts between
    blocking calls (imports reading files, the worker's pipe, loading code), and after each it waits
    for the GIL: up to the 5 ms interval while the program runs Python, which makes warm-up and loads
    slow; much shorter than GIL_SWITCH_S slows the program's own calls instead (``docs/performance.md``,
    "GIL switch interval"; ``python -m bench delivery``). The program's interval comes back afterwards."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(min(before, GIL_SWITCH_S))
    try:
        yield
    finally:
        sys.setswitchinterval(before)


class _Worker:
    """The compile worker as the code generator sees it: our timeout, and a fault injected for a test."""

    def __init__(self, worker: CompileWorker, inject: str | None, asked: Callable[[], tuple[int, int]],
                 entry: str | None, starved_s: float, background: bool = False) -> None:
        self._worker = worker
        self._background = background
        self._inject = inject
        self._asked = asked
        self._entry = entry
        self._starved_s = starved_s

    def compile(self, ir: str, timeout_s: float | None = None, **options: Any) -> Any:
        del timeout_s  # compile_timeout_ms decides
        if self._inject is not None:
            options["inject"] = self._inject
        with _core_when_starved(self._asked, self._entry, self._starved_s):
            return self._worker.compile(ir, CONTEXT.compile_timeout_ms / 1000.0, **options)

    def call(self, target: str, header: dict[str, Any], payload: bytes = b"", timeout_s: float | None = None
             ) -> Any:
        del timeout_s  # compile_timeout_ms decides
        if self._background:  # nothing waits for it: idle priority, and no core lent
            return self._worker.call(target, header, payload, CONTEXT.compile_timeout_ms / 1000.0,
                                     inject=self._inject, background=True)
        with _core_when_starved(self._asked, self._entry, self._starved_s):
            return self._worker.call(target, header, payload, CONTEXT.compile_timeout_ms / 1000.0,
                                     inject=self._inject)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._worker, name)


class CompilerThread:
    """A queue of entries compiled one at a time on a daemon thread (started on the first compile): the
    entry whose region costs the most interpreted time first, then the oldest."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._queue: deque[Entry] = deque()
        self._busy = False
        self._thread: threading.Thread | None = None
        self._worker: CompileWorker | None = None
        self._backend: Callable[..., Any] | None = None
        self._fault: str | None = None
        self._sampled: float | None = None
        self._share = 0  # the generation of object code compiles may share (``codegen.region.build_region``)
        self._warm = "cold"  # -> "pending" (prestart asked for it) -> "warming" -> "done"
        self._flush = 0  # threads in wait_idle: deferred entries compile now (``Entry.deferred``)
        self._told: set[str] = set()  # deferred entries whose "deferred" event is out
        self._preloads: deque[Any] = deque()  # regions to load from the code cache before they run
        self.launch_overhead_ns: int | None = None  # a native region call's fixed cost, once measured
        EVENTS.wake = self.wake

    # -- the execution thread's side -------------------------------------------------------------
    def submit(self, entry: Entry) -> None:
        """Enqueue ``entry`` (each entry is created once per cache key, so the queue has no duplicates)."""
        with self._cv:
            self._queue.append(entry)
            self._start()
            self._cv.notify_all()
        EVENTS.publish("queued", entry.name, function=entry.function, region=entry.region,
                       reason=entry.reason)

    def tier_up(self, entry: Entry) -> None:
        """Queue ``entry``, whose quick code is installed, for its optimised tier (compiled once the
        quick code has run a few times: ``Entry.deferred``)."""
        with self._cv:
            entry.tier_up = True
            self._queue.append(entry)
            self._start()
            self._cv.notify_all()

    def wake(self) -> None:
        with self._cv:
            self._start()
            self._cv.notify_all()

    def prestart(self, regions: list[Any] = ()) -> None:
        """Start the compile worker and measure the launch overhead now, in the background (once), and
        have ``regions`` (a function being prepared) load what the persistent code cache holds for
        them (``RegionRuntime.load_from_disk``) before their first run."""
        with self._cv:
            if diskcache.enabled():
                self._preloads.extend(regions)  # which have files: the compiler thread looks
            if self._warm == "cold":
                self._warm = "pending"
            self._start()
            self._cv.notify_all()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until nothing is queued, warming up or compiling (deferred entries compile now); False when
        ``timeout`` (s) passed first."""
        with self._cv:
            self._flush += 1
            self._cv.notify_all()
            try:
                return self._cv.wait_for(self._idle, timeout)
            finally:
                self._flush -= 1

    def _idle(self) -> bool:
        return not self._queue and not self._busy and self._warm != "pending" and not self._preloads

    def reset(self) -> None:
        """Forget queued entries (a compile in flight finishes, but its region no longer installs it) and
        the object code later compiles could share."""
        with self._cv:
            self._queue.clear()
            self._told.clear()
            self._share += 1
            self._cv.notify_all()

    # -- test hooks -------------------------------------------------------------------------------
    def _inject_fault(self, kind: str | None) -> None:
        """The next compile's worker request fails: "crash", "hang" or "error" (None: no fault)."""
        if kind is not None and kind not in INJECTIONS:
            raise ValueError(f"fault must be one of {INJECTIONS} or None, got {kind!r}")
        self._fault = kind

    def _use_backend(self, backend: Callable[..., Any] | None) -> None:
        """Compile with ``backend`` (compile_region's signature) instead of the code generator."""
        self._backend = backend

    # -- the compiler thread ----------------------------------------------------------------------
    def _start(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._loop, name="msvm-jit-compiler", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        from ..kernels.threads import POOL  # not at import: interpreting needs neither (nor llvmlite)

        while True:
            with self._cv:
                idle = (not self._queue and not EVENTS.has_pending and self._warm != "pending"
                        and not self._preloads)
                if idle and not self._cv.wait(_IDLE_TICK_S):
                    self._sample()
                warm = self._warm == "pending"
                if warm:
                    self._warm = "warming"
                preload = self._preloads.popleft() if self._preloads and not warm else None
                waiting = list(self._queue) if not warm and preload is None else []
                self._busy = warm or preload is not None or bool(waiting)
            if preload is not None:
                with _quick_gil_handoffs():
                    self._load_from_disk(preload)
                continue
            entry = self._take(waiting)
            EVENTS.dispatch()
            if not warm and entry is None:
                if waiting:  # every entry deferred, or ms.vm.reset() emptied the queue meanwhile
                    with self._cv:
                        self._busy = False
                        self._cv.notify_all()
                        if self._queue:
                            tier_ups = all(e.tier_up for e in self._queue)
                            self._cv.wait(_TIER_POLL_S if tier_ups else _DEFER_POLL_S)
                continue
            POOL.share_gaps(True)  # the worker lives on the gaps between the program's jobs
            try:
                with _quick_gil_handoffs():
                    if warm:
                        self._warm_up()
                    else:
                        self._compile(entry)
            finally:
                if warm:
                    self._warm = "done"
                with self._cv:
                    now = time.perf_counter_ns()
                    POOL.share_gaps(any(not e.deferred(now) for e in self._queue))
                self._sample()
                EVENTS.dispatch()  # subscribers have seen the outcome before waiters wake
                with self._cv:
                    self._busy = False
                    self._cv.notify_all()

    def _take(self, waiting: list[Entry]) -> Entry | None:
        """Take the entry of ``waiting`` that goes first (``Entry.compile_order``) of those not deferred
        (``Entry.deferred``; all of them while someone waits for compiles). Ordering takes the regions'
        locks, so it runs without ours (the execution thread enqueues holding a region's)."""
        now = time.perf_counter_ns()
        ready = [e for e in waiting if self._flush or not e.deferred(now)]
        for e in waiting:
            if e not in ready and e.name not in self._told:
                self._told.add(e.name)
                EVENTS.publish("deferred", e.name, function=e.function, region=e.region,
                               reason="its region runs many shapes: compiled when this one comes back, the "
                                      "program pauses, or compiles are waited for")
        if not ready:
            return None
        entry = min(ready, key=Entry.compile_order)
        with self._cv:
            if entry not in self._queue:
                return None
            self._queue.remove(entry)
            return entry

    def _sample(self) -> None:
        rate = hit_rate()
        if rate != self._sampled:
            self._sampled = rate
            EVENTS.publish("hit-rate", None, rate=rate)

    def _compile(self, entry: Entry) -> None:
        region = entry.owner
        start, cpu = time.perf_counter_ns(), time.thread_time()
        if entry.generation != region.generation:
            return  # dropped by ms.vm.reset() while it waited
        fault, self._fault = self._fault, None
        tier_up, entry.tier_up = entry.tier_up, False
        if tier_up:
            if entry.status != "compiled":
                return  # demoted while its optimised tier waited
        else:
            entry.phase_ms["queue"] = (start - entry.queued_ns) / 1e6
            entry.status = "compiling"
            EVENTS.publish("started", entry.name, function=entry.function, region=entry.region)
        try:
            if entry.module is None:
                with self._phase(entry, "region"):  # not verified here: lowering verifies it, in the worker
                    module, name, bounds = region.build(entry)
                    entry.module, entry.bounds = module, bounds
            module, name, bounds = entry.module, entry.module.functions[0].name, entry.bounds
            t0 = time.perf_counter_ns()
            with self._phase(entry, "compile", record=False):
                compiled = (None if tier_up or self._backend is not None
                            else diskcache.load_code(region, entry.cache_key, module, bounds, entry.name))
                found = compiled is not None
                if compiled is None:
                    compiled = self._compile_region(module, name, entry, bounds, fault, tier_up)
            wall_ms = (time.perf_counter_ns() - t0) / 1e6
            phases = ({"disk": wall_ms} if found
                      else {f"tier2 {k}" if tier_up else k: v for k, v in compiled.phase_ms.items()})
            for phase, ms in phases.items():
                entry.phase_ms[phase] = ms
                EVENTS.publish("phase", entry.name, phase=phase, ms=ms)
            if not found:
                worker = max(0.0, wall_ms - sum(phases.values()))
                entry.phase_ms["tier2 worker" if tier_up else "worker"] = worker
            with self._phase(entry, "install"):
                installed = region.install(entry, compiled)
        except Exception as exc:  # any failure of a compile is a fallback, never the user's problem
            entry.phase = None
            if entry.generation != region.generation or tier_up:
                return  # dropped by ms.vm.reset() while it compiled; or its quick code keeps serving
            entry.compile_ms = (time.perf_counter_ns() - start) / 1e6
            region.fail(entry, f"{type(exc).__name__}: {exc}")
            EVENTS.publish("fallback", entry.name, function=entry.function, region=entry.region,
                           reason=entry.reason)
            return
        entry.phase = None
        if not tier_up:
            entry.compile_ms = (time.perf_counter_ns() - start) / 1e6
            entry.compile_cpu_ms = (time.thread_time() - cpu) * 1e3 + compiled.worker_cpu_ms
        if not installed:
            return
        entry.source = "disk" if found else "compiled"
        if not found and compiled.wire is not None and (compiled.tier == 2 or not diskcache.has(
                region, entry.cache_key)):
            diskcache.store(entry, module, bounds, *compiled.wire)
        if tier_up:
            EVENTS.publish("tier-up", entry.name, function=entry.function, region=entry.region,
                           tier=entry.tier, compile_ms=(time.perf_counter_ns() - start) / 1e6)
            return
        EVENTS.publish("installed", entry.name, function=entry.function, region=entry.region,
                       compile_ms=entry.compile_ms, tier=entry.tier, source=entry.source)
        if entry.tier == 1:
            self.tier_up(entry)

    def _compile_region(self, module: Any, name: str, entry: Entry, bounds: dict[str, int], fault: str | None,
                        tier_up: bool) -> Any:
        """Compile ``entry``: its quick tier where that pays, or, for a tier-up, its optimised tier in
        the background (its quick code serves meanwhile: no core lent)."""
        backend = self._backend
        if backend is None:
            from .codegen import compile_region as backend
        shares_code = bool(bounds) and any(e is not entry and e.status == "compiled" and e.bounds
                                           for e in entry.owner.entries)  # a plan and a load
        client = self._client(fault, lambda: (entry.waiting, entry.owner.misses - entry.queued_misses),
                              entry.name, 0.0 if shares_code else STARVED_S, background=tier_up)
        return backend(module, name, mem_optimize=entry.owner.settings.mem_optimize, name=entry.name,
                       via_worker=client, bounds=bounds or None, share=self._share, tier=2 if tier_up else 1)

    def _load_from_disk(self, region: Any) -> None:
        try:
            region.load_from_disk()
        except Exception as exc:  # the cache failing only means compiling as before
            EVENTS.publish("fallback", None, function=region.exe_name, region=region.region.id,
                           reason=f"loading code from the persistent code cache failed: {exc}")
        finally:
            EVENTS.dispatch()
            with self._cv:
                self._busy = False
                self._cv.notify_all()

    def _warm_up(self) -> None:
        """Start the worker, and have everything a first compile or disk load needs here ready: the code
        generator's modules, LLVM, the capability DB, the code cache's keys. The launch overhead comes
        from the capability DB's on-disk cache when an earlier process measured it; otherwise it is
        measured by compiling a probe region and timing its native calls, and kept there. A failure
        only leaves the overhead unknown (every hot region then compiles). The worker process starts
        while this thread imports (each takes 0.15–0.2 s in a fresh process)."""
        from ..native.llvm import target_identity
        from ..scheduler import persist
        from ..scheduler.capability import DB

        t0 = time.perf_counter_ns()
        client = self._client(None, self._queue_asked, None)
        on_disk = any(diskcache.known(r) for r in list(self._preloads))
        if on_disk:  # its code is on disk: the worker starts when a compile needs it
            DB.ensure_loaded()
        if not on_disk or DB.jit_launch_overhead_ns is None:
            client.prestart(preload="msvm.msjit.codegen.region")  # its import overlaps this thread's
        from .codegen import compile_region

        try:
            target_identity()
            DB.ensure_loaded()
            diskcache.code_version()
            diskcache.host()
            if DB.jit_launch_overhead_ns is not None:
                self.launch_overhead_ns = DB.jit_launch_overhead_ns
                EVENTS.publish("warm", None, ms=(time.perf_counter_ns() - t0) / 1e6, cached=True,
                               launch_overhead=format_ns(self.launch_overhead_ns))
                return
            module = _probe_module()
            compiled = compile_region(module, "probe", name="jit_launch_probe", via_worker=client)
            self.launch_overhead_ns = _fastest_call(compiled.fn, np.zeros(8, np.float32))
            DB.jit_launch_overhead_ns = self.launch_overhead_ns
            persist.save_launch_overhead(self.launch_overhead_ns)
        except Exception as exc:  # the JIT works without the measurement
            EVENTS.publish("warm", None, ms=(time.perf_counter_ns() - t0) / 1e6,
                           error=f"{type(exc).__name__}: {exc}")
            return
        EVENTS.publish("warm", None, ms=(time.perf_counter_ns() - t0) / 1e6,
                       launch_overhead=format_ns(self.launch_overhead_ns))

    def _client(self, fault: str | None, asked: Callable[[], tuple[int, int]], entry: str | None,
                starved_s: float = STARVED_S, background: bool = False) -> _Worker:
        if self._worker is None:
            self._worker = CompileWorker(idle=True)
        return _Worker(self._worker, fault, asked, entry, starved_s, background)

    def _queue_asked(self) -> tuple[int, int]:
        """How often the queued entry most asked for was asked, and its region (what the worker's
        start-up, during the warm-up, is for)."""
        top = max(list(self._queue), key=lambda e: e.waiting, default=None)
        return (0, 0) if top is None else (top.waiting, top.owner.misses - top.queued_misses)

    @contextmanager
    def _phase(self, entry: Entry, phase: str, record: bool = True) -> Iterator[None]:
        entry.phase = phase
        EVENTS.publish("phase", entry.name, phase=phase, started=True)
        t0 = time.perf_counter_ns()
        try:
            yield
        finally:
            t1 = time.perf_counter_ns()
            if record:
                entry.phase_ms[phase] = (t1 - t0) / 1e6
            if TRACE.enabled:
                TRACE.record(TraceEvent(entry.function, entry.address, "COMPILE", phase, entry.name, t0,
                                        t1 - t0, threading.get_ident(), "compile", None))


def _probe_module() -> Module:
    """The smallest region function there is: ``relu`` of eight floats."""
    mb = ModuleBuilder("jit_launch_probe")
    fb = mb.function("probe", ["x"])
    fb.ret(fb.call("relu", [fb.tensor_input(0, "[8]", "float32")]))
    return mb.build()


def _fastest_call(fn: Callable[..., Any], *args: Any) -> int:
    """ns per call of ``fn(*args)``: the fastest of a few rounds, so that a busy machine adds nothing."""
    best = None
    for _ in range(_PROBE_ROUNDS):
        t0 = time.perf_counter_ns()
        for _ in range(_PROBE_CALLS):
            fn(*args)
        ns = (time.perf_counter_ns() - t0) // _PROBE_CALLS
        best = ns if best is None else min(best, ns)
    assert best is not None
    return best


COMPILER = CompilerThread()

__all__ = ["COMPILER", "CompilerThread"]
