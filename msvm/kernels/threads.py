"""A tiny thread pool for native kernels, callable from Python and from generated code alike.

A kernel that runs on several cores is a *job*: ``void job(i64* frame)`` (see ``native.Frame``)
that takes its work items in chunks from an atomic counter in the frame
(``irhelpers.for_each_chunk``), so calling it from k threads at once divides the work
dynamically — a thread that starts late or is descheduled (a loaded 2-core machine) simply takes
fewer chunks. ``pool_run(pool, job, frame, threads)`` — native code, compiled once per process —
runs the job on the calling thread and lends it to up to ``threads − 1`` helpers. The interpreter's
kernels call it through ctypes (which releases the GIL); JIT regions call it by address, so the
conv kernels of a compiled region share the same helpers without any Python in between.

Handing out work: a call publishes the job with ``threads − 1`` *tickets* and wakes the helpers.
A helper that claims a ticket runs the job; once the caller's own share is done it takes back
the unclaimed tickets, so it never waits for a helper that has not started — only for those
running a chunk. Helpers spin a while after a job (the next kernel of a region follows within
microseconds, an interpreted program's after 20–100 µs of Python; shorter while the JIT compiles in
the gaps: ``share_gaps``) and then sleep on a futex; a busy pool (another thread's call) means the
job runs on the caller alone.

Why not static halves or spinning workers: on this 2-core machine shared with other processes,
libraries that split work statically and spin at barriers (OpenBLAS, torch's OpenMP) collapse
when one core is taken — measured here: torch's 2-thread conv fell from ~70 to ~1 GFLOP/s and
OpenBLAS sgemm to ~1 GFLOP/s under load — while chunked work degrades to the speed of the cores
actually available.
"""

from __future__ import annotations

import ctypes
import os
import platform
import threading
from typing import Any

import numpy as np
from llvmlite import ir

from ..native.host import cores
from ..native.irhelpers import I8, I32, I64, VOID, Slot, define, i64
from .native import PTR, native_library

# Below this much work (flops, ≈ 25 µs) per extra thread one thread is as fast: handing a job over
# costs a few microseconds to a spinning helper, a futex wake to a sleeping one, and the caller may
# wait for a helper's last chunk (``python -m bench interpreter`` re-measures).
MIN_FLOPS_PER_THREAD = 2e6
# How long a helper (after a job) and a caller (waiting for helpers) spin before sleeping, in pause
# instructions (≈ 25 ns each): ``SPINS_ALONE`` (≈ 150 µs) while nothing else wants the cores, since an
# interpreted program's next kernel follows after 20–100 µs of Python and waking a sleeping helper
# costs that kernel ≈ 30 µs; ``SPINS`` (≈ 50 µs) while the JIT's compile worker, yielding to the
# program, lives on the gaps (``share_gaps``), since spinning longer then delays its code
# (``docs/performance.md``, "Job pool"; ``python -m bench delivery``).
SPINS = 2000
SPINS_ALONE = 6000
_FUTEX = {"x86_64": 202, "aarch64": 98}.get(platform.machine()) if platform.system() == "Linux" else None
_FUTEX_WAIT, _FUTEX_WAKE = 128, 129  # the _PRIVATE variants

# The pool's shared state: one i64 per field, each on its own cache line.
_FIELDS = ("busy", "generation", "sleepers", "job", "frame", "tickets", "done", "waiting", "helpers",
           "spins")
_LINE = 8  # i64s per cache line
_SPINS, _HELPERS = (_FIELDS.index(f) * _LINE for f in ("spins", "helpers"))  # their slots in the state array
I8P = I8.as_pointer()
JOB = ir.FunctionType(VOID, [I64.as_pointer()])


class _State:
    """Named pointers to the fields of the pool's state inside one IR function."""

    def __init__(self, b: ir.IRBuilder, raw: ir.Value) -> None:
        base = b.bitcast(raw, I64.as_pointer())
        self.ptr = {name: b.gep(base, [i64(i * _LINE)]) for i, name in enumerate(_FIELDS)}
        self.word = {name: b.bitcast(p, I32.as_pointer()) for name, p in self.ptr.items()}


def _futex(b: ir.IRBuilder, word: ir.Value, op: int, value: ir.Value) -> None:
    module = b.module
    fn = module.globals.get("syscall") or ir.Function(module, ir.FunctionType(I64, [I64], var_arg=True),
                                                      name="syscall")
    b.call(fn, [i64(_FUTEX or 0), b.ptrtoint(word, I64), i64(op), value, i64(0), i64(0), i64(0)])


def _pause(b: ir.IRBuilder) -> None:
    if platform.machine() == "x86_64":
        fn = b.module.globals.get("llvm.x86.sse2.pause") or ir.Function(
            b.module, ir.FunctionType(VOID, []), name="llvm.x86.sse2.pause")
        b.call(fn, [])


def _load(b: ir.IRBuilder, ptr: ir.Value) -> ir.Value:
    return b.load_atomic(ptr, "seq_cst", 8)


def _wait_while_equal(b: ir.IRBuilder, st: _State, field: str, value: ir.Value, sleepers: str) -> ir.Value:
    """Spin, then sleep on the futex of ``field`` while it holds ``value``; returns the new value.

    ``sleepers`` counts the sleeping threads, so that the other side only pays a futex wake when
    somebody sleeps (both sides use sequentially consistent operations: no wake-up is lost).
    """
    fn = b.function
    spins = Slot(b, I64, i64(0))
    head, spin, sleep, done = (fn.append_basic_block(f"{field}.{n}") for n in ("head", "spin", "nap", "end"))
    b.branch(head)
    b.position_at_end(head)
    current = _load(b, st.ptr[field])
    b.cbranch(b.icmp_signed("!=", current, value), done, spin)
    b.position_at_end(spin)
    _pause(b)
    count = b.add(spins.get(), i64(1))
    spins.set(count)
    b.cbranch(b.icmp_signed("<", count, _load(b, st.ptr["spins"])), head, sleep)
    b.position_at_end(sleep)
    b.atomic_rmw("add", st.ptr[sleepers], i64(1), "seq_cst")
    with b.if_then(b.icmp_signed("==", _load(b, st.ptr[field]), value)):
        _futex(b, st.word[field], _FUTEX_WAIT, b.trunc(value, I32))
    b.atomic_rmw("sub", st.ptr[sleepers], i64(1), "seq_cst")
    spins.set(i64(0))
    b.branch(head)
    b.position_at_end(done)
    return current


def _wake(b: ir.IRBuilder, st: _State, field: str, sleepers: str) -> None:
    with b.if_then(b.icmp_signed(">", _load(b, st.ptr[sleepers]), i64(0))):
        _futex(b, st.word[field], _FUTEX_WAKE, i64(0x7FFFFFFF))


def _build_ir() -> str:
    module = ir.Module("job_pool")
    jobp = JOB.as_pointer()

    # pool_serve(state): a helper's loop, never returns.
    _, b, a = define(module, "pool_serve", VOID, [("state", I8P)])
    st = _State(b, a["state"])
    seen = Slot(b, I64, _load(b, st.ptr["generation"]))
    loop = b.append_basic_block("loop")
    b.branch(loop)
    b.position_at_end(loop)
    seen.set(_wait_while_equal(b, st, "generation", seen.get(), "sleepers"))
    claim, run = b.append_basic_block("claim"), b.append_basic_block("run")
    b.branch(claim)
    b.position_at_end(claim)
    tickets = _load(b, st.ptr["tickets"])
    try_claim = b.append_basic_block("try")
    b.cbranch(b.icmp_signed(">", tickets, i64(0)), try_claim, loop)
    b.position_at_end(try_claim)
    taken = b.cmpxchg(st.ptr["tickets"], tickets, b.sub(tickets, i64(1)), "seq_cst", "seq_cst")
    won = b.extract_value(taken, 1)
    b.cbranch(won, run, claim)
    b.position_at_end(run)  # the job and frame were stored before the tickets: this is the current job
    job = b.inttoptr(_load(b, st.ptr["job"]), jobp)
    b.call(job, [b.inttoptr(_load(b, st.ptr["frame"]), I64.as_pointer())])
    b.atomic_rmw("add", st.ptr["done"], i64(1), "seq_cst")
    _wake(b, st, "done", "waiting")
    b.branch(loop)

    # pool_run(state, job, frame, threads): run the job here and on up to threads - 1 helpers.
    _, b, a = define(module, "pool_run", VOID, [("state", I8P), ("job", jobp), ("frame", I64.as_pointer()),
                                                ("threads", I64)])
    st = _State(b, a["state"])
    wanted = b.sub(a["threads"], i64(1))
    helpers = _load(b, st.ptr["helpers"])
    wanted = b.select(b.icmp_signed("<", wanted, helpers), wanted, helpers)
    shared, alone = b.append_basic_block("shared"), b.append_basic_block("alone")
    lock = b.append_basic_block("lock")
    b.cbranch(b.icmp_signed(">", wanted, i64(0)), lock, alone)
    b.position_at_end(lock)
    locked = b.extract_value(b.cmpxchg(st.ptr["busy"], i64(0), i64(1), "seq_cst", "seq_cst"), 1)
    b.cbranch(locked, shared, alone)
    b.position_at_end(alone)
    b.call(a["job"], [a["frame"]])
    b.ret_void()
    b.position_at_end(shared)
    b.store_atomic(b.ptrtoint(a["job"], I64), st.ptr["job"], "seq_cst", 8)
    b.store_atomic(b.ptrtoint(a["frame"], I64), st.ptr["frame"], "seq_cst", 8)
    b.store_atomic(i64(0), st.ptr["done"], "seq_cst", 8)
    b.store_atomic(wanted, st.ptr["tickets"], "seq_cst", 8)
    b.atomic_rmw("add", st.ptr["generation"], i64(1), "seq_cst")
    _wake(b, st, "generation", "sleepers")
    b.call(a["job"], [a["frame"]])
    unclaimed = b.atomic_rmw("xchg", st.ptr["tickets"], i64(0), "seq_cst")
    started = b.sub(wanted, unclaimed)
    wait, finish = b.append_basic_block("wait"), b.append_basic_block("finish")
    b.branch(wait)
    b.position_at_end(wait)
    done = _load(b, st.ptr["done"])
    keep_waiting = b.append_basic_block("keep_waiting")
    b.cbranch(b.icmp_signed("<", done, started), keep_waiting, finish)
    b.position_at_end(keep_waiting)
    _wait_while_equal(b, st, "done", done, "waiting")
    b.branch(wait)
    b.position_at_end(finish)
    b.store_atomic(i64(0), st.ptr["busy"], "seq_cst", 8)
    b.ret_void()
    return str(module)


class JobPool:
    """The process's helper threads for native jobs (daemon threads, started on first use)."""

    def __init__(self, threads: int) -> None:
        self.threads = max(1, threads)  # the calling thread included
        self._state = np.zeros(len(_FIELDS) * _LINE, np.int64)
        self._state[_SPINS] = SPINS_ALONE
        self._address = self._state.ctypes.data
        self._lock = threading.Lock()
        self._run: Any = None
        self._lent: int | None = None  # the helper count while one is lent

    def _start(self) -> Any:
        with self._lock:
            if self._run is None:
                lib = native_library(("job_pool",), _build_ir)
                state = self._address
                helpers = self.threads - 1 if _FUTEX is not None else 0
                serve = lib.ctypes_function("pool_serve", None, [PTR])
                for i in range(helpers):
                    name = f"msvm-native-{i}"
                    threading.Thread(target=serve, args=(state,), name=name, daemon=True).start()
                self._state[_HELPERS] = helpers
                self._entry = lib.address("pool_run")
                self._run = lib.ctypes_function("pool_run", None, [PTR, PTR, PTR, ctypes.c_int64])
        return self._run

    def entry(self) -> tuple[int, int]:
        """(address of ``pool_run``, address of the pool's state) for generated code to call."""
        self._start()
        return self._entry, self._address

    def lend_core(self) -> bool:
        """Run jobs on one helper fewer until ``return_core`` (``pool_run`` reads the count at every
        call): the JIT's compile worker, which yields to the program, gets that core. True if lent."""
        with self._lock:
            if self._lent is None and self._state[_HELPERS] > 0:
                self._lent = int(self._state[_HELPERS])
                self._state[_HELPERS] = self._lent - 1
            return self._lent is not None

    def return_core(self) -> None:
        with self._lock:
            if self._lent is not None:
                self._state[_HELPERS] = self._lent
                self._lent = None

    @property
    def spins(self) -> int:
        """How long helpers and callers spin now (pause instructions) before sleeping."""
        return int(self._state[_SPINS])

    def share_gaps(self, share: bool) -> None:
        """Spin ``SPINS`` after a job while ``share`` (the JIT's idle-priority compile worker runs in the
        gaps between jobs), else ``SPINS_ALONE``; ``pool_run`` and the helpers read it at every wait."""
        self._state[_SPINS] = SPINS if share else SPINS_ALONE

    def run(self, job: int, frame: Any, *, flops: float) -> None:
        """Run ``job`` (an address) on ``frame`` on as many threads as ``flops`` of work is worth."""
        threads = int(min(self.threads, max(1.0, flops / MIN_FLOPS_PER_THREAD)))
        (self._run or self._start())(self._address, job, ctypes.addressof(frame), threads)


def default_threads() -> int:
    """The threads msvm's parallel code runs on: ``MSVM_NUM_THREADS`` if set, else the CPUs this process
    may run on. The job pool is this size and the JIT plans per-thread scratch and loop splits for it."""
    env = os.environ.get("MSVM_NUM_THREADS")
    if env:
        return max(1, int(env))
    return cores()["usable"]


POOL = JobPool(default_threads())
