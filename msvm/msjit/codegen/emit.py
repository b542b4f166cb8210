"""The LLVM IR of a region: one internal function per kernel, the entry that calls them in order —
printed as two modules (``ModuleEmitter.texts``): the kernels with loops, and the rest.

Every kernel function has the same signature — one ``noalias i8*`` per buffer it touches (buffers
that are live at the same time never overlap, which is what lets LLVM vectorise without run-time
alias checks), the region's run-time params as i64, an outer-loop range ``[lo, hi)`` and an i32
status word. ``FnBuilder`` is the state of one function being built: dims are computed once in
its entry block (so every use is dominated), emitted values are memoised per loop scope, and
run-time checks (an index out of range) raise an error flag that the entry returns as the status.

The exported entry is ``i32 name(i8* inputs…, i8* outputs…, i8* arena, i64 params…)``; its twin
``name_fast`` is a CPython ``METH_FASTCALL`` function (``launcher.builtin`` wraps it as a builtin):
it reads numpy's data pointer out of each array object (``DATA_OFFSET``) and the params out of
Python ints, and returns the status as an int. Why: a ctypes call costs 0.4–0.9 µs here before the
code runs (converting each argument, then ``arr.ctypes.data`` a microsecond more per array), a
builtin call 0.06 µs — most of what a region of tiny ops costs.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
from llvmlite import ir

from ...kernels.native import DATA_OFFSET, Frame
from ...kernels.threads import MIN_FLOPS_PER_THREAD
from ...native.irhelpers import Slot, ceil_div, for_each_chunk, for_range, max_i64, min_i64
from ...shapes import Dim
from . import dims, externs
from .buffers import Buffer
from .dtypes import I1, I8, I32, I64, STORAGE, from_storage, to_storage
from .kernels import CHUNKS_PER_THREAD, PARALLEL_MIN, THREADS, Kernel
from .views import View

I8P = I8.as_pointer()
I32P = I32.as_pointer()
VOID = ir.VoidType()
INT64_MAX = (1 << 63) - 1
BAD_ARITY = -1  # the status ``name_fast`` returns when called with the wrong number of arguments


FRAME_VECTOR = 4  # i64 fields a job frame is written with per store


def run_on_pool(b: ir.IRBuilder, extern: Callable[[externs.Key], ir.Value], job: ir.Value,
                fields: Sequence[ir.Value], threads: ir.Value) -> None:
    """Store ``fields`` (pointers as integers) as i64 each in a stack frame and run ``job`` (``void
    job(i64* frame)``, as ``i8*``) on the job pool of ``kernels.threads``: this thread and up to
    ``threads − 1`` helpers. ``extern`` loads an extern table entry (the pool's address lives there)."""
    block = Slot(b, ir.ArrayType(I64, len(fields))).ptr
    frame = b.gep(block, [ir.Constant(I64, 0), ir.Constant(I64, 0)], inbounds=True)
    values = [b.ptrtoint(v, I64) if v.type.is_pointer else v for v in fields]
    # FRAME_VECTOR fields per store: a conv's dozens of scalar stores made dead-store elimination a large
    # share of the optimiser's time; vector stores of mostly constant fields are a handful of instructions
    for start in range(0, len(values), FRAME_VECTOR):
        part = values[start:start + FRAME_VECTOR]
        vt = ir.VectorType(I64, len(part))
        vector: ir.Value = ir.Constant(vt, [v if isinstance(v, ir.Constant) else ir.Undefined for v in part])
        for lane, v in enumerate(part):
            if not isinstance(v, ir.Constant):
                vector = b.insert_element(vector, v, ir.Constant(I32, lane))
        where = b.bitcast(b.gep(frame, [ir.Constant(I64, start)], inbounds=True), vt.as_pointer())
        b.store(vector, where, align=8)
    run = ir.FunctionType(VOID, [I8P, I8P, I64.as_pointer(), I64]).as_pointer()
    state = b.inttoptr(extern(("pool", "state")), I8P)
    b.call(b.inttoptr(extern(("pool", "run")), run), [state, job, frame, threads])


def run_job(fb: FnBuilder, frame: Frame, values: dict[str, ir.Value], job: tuple, flops: ir.Value) -> None:
    """Fill ``frame``'s fields (absent ones 0) in this function's stack and run ``job`` (an extern key:
    a native kernel's job, ``externs.resolve``) on as many of the job pool's threads as ``flops`` (i64)
    of work is worth — ``JobPool.run``'s rule."""
    b = fb.b
    threads = b.sdiv(flops, ir.Constant(I64, int(MIN_FLOPS_PER_THREAD)))
    threads = max_i64(b, min_i64(b, threads, ir.Constant(I64, THREADS)), ir.Constant(I64, 1))
    fields = [values.get(name, ir.Constant(I64, 0)) for name in frame.fields]
    run_on_pool(b, fb.extern, b.inttoptr(fb.extern(job), I8P), fields, threads)


# Kernels without loops (they fill a job's frame, call BLAS or a native kernel) that the entry calls
# once, directly, and smaller than this (IR instructions) are merged into it: LLVM's passes cost a few
# ms per function here however small it is.
INLINE_MAX_INSTRUCTIONS = 300


def _has_loop(fn: ir.Function) -> bool:
    """Does a branch go back to an earlier block (how ``for_range`` emits every loop)?"""
    order = {block: i for i, block in enumerate(fn.blocks)}
    return any(order.get(op, len(order)) <= i for i, block in enumerate(fn.blocks)
               if block.terminator is not None for op in block.terminator.operands)


def _inline_if_small(fn: ir.Function) -> None:
    if sum(len(block.instructions) for block in fn.blocks) < INLINE_MAX_INSTRUCTIONS:
        fn.attributes.discard("noinline")
        fn.attributes.add("alwaysinline")


def _reachable(roots: Sequence[ir.Function], outside: set[ir.Function]) -> list[ir.Function]:
    """``roots`` and every function they call or take the address of, transitively, but for those
    ``outside`` (defined in another module), in the order found."""
    found = dict.fromkeys(roots)
    todo = list(roots)
    while todo:
        for block in todo.pop().blocks:
            for ins in block.instructions:
                for value in [*ins.operands, getattr(ins, "callee", None)]:
                    if isinstance(value, ir.Function) and value not in found and value not in outside:
                        found[value] = None
                        todo.append(value)
    return list(found)


def _declaration(fn: ir.Function) -> str:
    return f"declare {fn.ftype.return_type} {fn.get_reference()}({', '.join(map(str, fn.ftype.args))})"


class FnBuilder:
    """One kernel function being emitted."""

    def __init__(self, em: ModuleEmitter, name: str, buffers: Sequence[Buffer]) -> None:
        self.em = em
        self.module = em.module
        self.buffers = list(dict.fromkeys(b.resolve() for b in buffers))
        types = [I8P] * len(self.buffers) + [I64] * len(em.params) + [I64, I64, I32P]
        self.fn = ir.Function(self.module, ir.FunctionType(VOID, types), name=name)
        self.fn.linkage = "internal"
        self.fn.attributes.add("nounwind")
        # kept out of line unless the entry calls it once, directly (``ModuleEmitter.entry``)
        self.fn.attributes.add("noinline")
        args = self.fn.args
        for arg, buf in zip(args, self.buffers):
            arg.name = buf.name
            arg.add_attribute("noalias")
        n = len(self.buffers)
        self.params = dict(zip(em.params, args[n : n + len(em.params)]))
        for name_, arg in self.params.items():
            arg.name = name_
        self.lo, self.hi, self.status = args[-3], args[-2], args[-1]
        self.lo.name, self.hi.name, self.status.name = "lo", "hi", "status"
        self._allocas = self.fn.append_basic_block("entry")  # allocas only (Slot inserts at its start)
        self.head = ir.IRBuilder(self.fn.append_basic_block("head"))
        self._body = self.fn.append_basic_block("body")
        self.b = ir.IRBuilder(self._body)
        self._dims: dict[Dim, ir.Value] = {}
        self._ptrs: dict[Buffer, ir.Value] = {}
        self._externs: dict[externs.Key, ir.Value] = {}
        self._memo: list[dict] = [{}]
        self._err: ir.Value | None = None
        self.split_extent: Dim | None = None  # extent of the loop that ``[lo, hi)`` restricts

    # -- values computed once -----------------------------------------------------------------------
    def dim(self, d: Dim) -> ir.Value:
        """``d`` as i64 (constants inline; symbolic dims computed once in the entry block)."""
        if d.is_const:
            return ir.Constant(I64, d.value)
        value = self._dims.get(d)
        if value is None:
            value = self._dims[d] = dims.emit(self.head, d, self.params)
        return value

    def extern(self, key: externs.Key) -> ir.Value:
        """The address ``key`` names (``externs``), as i64, loaded once in the entry block."""
        value = self._externs.get(key)
        if value is None:
            value = self._externs[key] = self.em.extern(self.head, key)
        return value

    def ptr(self, buf: Buffer) -> ir.Value:
        """Typed pointer to the first element of ``buf``."""
        buf = buf.resolve()
        value = self._ptrs.get(buf)
        if value is None:
            raw = self.fn.args[self.buffers.index(buf)]
            value = self._ptrs[buf] = self.head.bitcast(raw, STORAGE[buf.dtype].as_pointer())
        return value

    def slot_bytes(self, buf: Buffer) -> ir.Value:
        """Bytes of one thread's part of the per-thread scratch ``buf`` (i64)."""
        return self.extern(("slot", buf.resolve().name))

    def at(self, buf: Buffer, offset: Dim | ir.Value) -> ir.Value:
        """Typed pointer to element ``offset`` of ``buf`` (a native job's or BLAS call's operand)."""
        index = offset if isinstance(offset, ir.Value) else self.dim(offset)
        return self.b.gep(self.ptr(buf), [index], inbounds=True)

    # -- memory ---------------------------------------------------------------------------------------
    def offset(self, view: View, idx: Sequence[ir.Value]) -> ir.Value:
        b = self.b
        total = None if view.offset == 0 else self.dim(view.offset)
        for i, stride in zip(idx, view.strides):
            if stride == 0:
                continue
            term = i if stride == 1 else b.mul(i, self.dim(stride), flags=("nsw",))
            total = term if total is None else b.add(total, term, flags=("nsw",))
        return ir.Constant(I64, 0) if total is None else total

    def address(self, buf: Buffer, view: View, idx: Sequence[ir.Value]) -> ir.Value:
        return self.b.gep(self.ptr(buf), [self.offset(view, idx)], inbounds=True)

    def load(self, buf: Buffer, view: View, idx: Sequence[ir.Value]) -> ir.Value:
        return from_storage(self.b, self.b.load(self.address(buf, view, idx)), buf.dtype)

    def store(self, buf: Buffer, view: View, idx: Sequence[ir.Value], value: ir.Value) -> None:
        self.b.store(to_storage(self.b, value, buf.dtype), self.address(buf, view, idx))

    # -- memo scopes ----------------------------------------------------------------------------------
    def recall(self, key: tuple) -> ir.Value | None:
        for scope in reversed(self._memo):
            hit = scope.get(key)
            if hit is not None:
                return hit[0]
        return None

    def remember(self, key: tuple, value: ir.Value, keep: Any) -> None:
        self._memo[-1][key] = (value, keep)  # ``keep`` holds the key's objects alive (the key uses ids)

    @contextmanager
    def scope(self) -> Iterator[None]:
        """Values emitted inside (a loop body) are forgotten after it: they do not dominate later code."""
        self._memo.append({})
        try:
            yield
        finally:
            self._memo.pop()

    # -- run-time checks ------------------------------------------------------------------------------
    def fail_if(self, cond: ir.Value) -> None:
        """Flag the call as failed when ``cond`` (i1) holds; the launcher then raises E-SHAPE-GUARD."""
        if self._err is None:
            with self.head.goto_entry_block():
                self.head.position_at_start(self.fn.entry_basic_block)
                self._err = self.head.alloca(I1, name="err")
            self.head.store(ir.Constant(I1, 0), self._err)
        self.b.store(self.b.or_(self.b.load(self._err), cond), self._err)

    def finish(self) -> ir.Function:
        if self._err is not None:
            with self.b.if_then(self.b.load(self._err)):
                self.b.store(ir.Constant(I32, 1), self.status)
        self.b.ret_void()
        self.head.branch(self._body)
        ir.IRBuilder(self._allocas).branch(self.head.block)
        return self.fn

    def call(self, fn: ir.Function, buffers: Sequence[Buffer], lo: ir.Value, hi: ir.Value) -> None:
        """Call another kernel-signature function with this function's pointers for ``buffers``."""
        args = [self.fn.args[self.buffers.index(b.resolve())] for b in buffers]
        self.b.call(fn, [*args, *self.params.values(), lo, hi, self.status])


@contextmanager
def counted_loop(
    fb: FnBuilder,
    start: ir.Value,
    stop: ir.Value,
    name: str,
    unroll: bool = True,
    width: int | None = None,
) -> Iterator[ir.Value]:
    """``for i in range(start, stop)``; ``unroll=False`` tells LLVM not to unroll it (outer loops of a
    nest: fully unrolling small constant outer loops multiplies the vectorised inner loop and costs
    seconds of compile time for nothing); ``width`` asks the vectoriser for that many elements per
    vector iteration."""
    loop_md = fb.em.loop_id(unroll, width) if not unroll or width else None
    with for_range(fb.b, start, stop, name=name, loop_md=loop_md) as index:
        yield index


def loop_nest(
    fb: FnBuilder,
    extents: Sequence[Dim],
    body: Callable[[list[ir.Value]], None],
    *,
    split_outer: bool = False,
    name: str = "i",
    width: int | None = None,
) -> None:
    """``for idx in ndindex(extents): body(idx)``, row-major; the outermost loop covers ``[lo, hi)``
    of its range when ``split_outer`` (what a caller uses to hand halves to two threads). Only the
    innermost loop may be unrolled (and is the one LLVM vectorises, ``width`` as asked)."""

    if split_outer and extents:
        fb.split_extent = extents[0]

    def level(k: int, idx: list[ir.Value]) -> None:
        if k == len(extents):
            body(idx)
            return
        extent = extents[k]
        if extent == 1 and not (split_outer and k == 0):
            level(k + 1, [*idx, ir.Constant(I64, 0)])
            return
        start: ir.Value = ir.Constant(I64, 0)
        stop = fb.dim(extent)
        if split_outer and k == 0:
            start = fb.lo
            stop = fb.b.select(fb.b.icmp_signed("<", fb.hi, stop), fb.hi, stop)
        innermost = all(e == 1 for e in extents[k + 1 :])
        hint = width if innermost else None
        with counted_loop(fb, start, stop, f"{name}{k}", innermost, hint) as i, fb.scope():
            level(k + 1, [*idx, i])

    level(0, [])


def accumulate(
    fb: FnBuilder,
    extents: Sequence[Dim],
    init: Sequence[ir.Value],
    step: Callable[[list[ir.Value], list[ir.Value]], Sequence[ir.Value]],
) -> list[ir.Value]:
    """Fold ``step(idx, accs) -> accs`` over ``ndindex(extents)`` (window loops inside one element)."""
    slots = [Slot(fb.b, v.type, v) for v in init]

    def body(idx: list[ir.Value]) -> None:
        for slot, value in zip(slots, step(idx, [s.get() for s in slots])):
            slot.set(value)

    loop_nest(fb, extents, body, name="w")
    return [s.get() for s in slots]


def may_be_big(work: Dim | None, ranges: Mapping[str, dims.Interval]) -> bool:
    """Can a kernel of ``work`` elements (None: not a loop nest, e.g. a BLAS call) reach ``PARALLEL_MIN``
    with its params within ``ranges`` (a param absent from them is unbounded)?"""
    if work is None:
        return True
    bounded = {p: ranges.get(p, (-np.inf, np.inf)) for p in work.free_symbols}
    return dims.interval(work, bounded)[1] >= PARALLEL_MIN


class ModuleEmitter:
    """The IR module of one region."""

    def __init__(self, name: str, params: Sequence[str]) -> None:
        self.module = ir.Module(name=name)
        self.params = list(params)
        self._counter = itertools.count()
        self._disable = self.module.add_metadata([ir.MetaDataString(self.module, "llvm.loop.unroll.disable")])
        self.externs: dict[externs.Key, int] = {}  # key -> slot in the table at ``@msvm_externs``
        self._table = ir.GlobalVariable(self.module, I64.as_pointer(), externs.GLOBAL)
        self._table.initializer = ir.Constant(I64.as_pointer(), None)
        self._loops: list[ir.Function] = []  # what goes to the loop module (``texts``)

    def texts(self) -> tuple[str, str]:
        """The region as two modules' IR: the entry module (the entry, its twin, the kernels without
        loops) and the loop module (every kernel with loops and the functions the entry calls it
        through; "" when there is none), each with the helpers its functions use. Why two: the entry
        module's code runs once per call and is compiled without optimising it (``region``). The loop
        module's name is not the entry's: the next bucket's IR is the same but for that name."""
        module = self.module
        loops = set(self._loops)
        exported = [fn for fn in self._loops if fn.linkage != "internal"]
        roots = [fn for fn in module.functions if fn.blocks and fn not in loops and fn.linkage != "internal"]
        target = [f'target triple = "{module.triple}"', f'target datalayout = "{module.data_layout}"', ""]
        meta = [str(md) for md in module.metadata]
        entry = [f'; ModuleID = "{module.name}"', *target, str(self._table)]
        entry += [*map(str, _reachable(roots, loops)), *map(_declaration, exported), *meta]
        if not loops:
            return "\n".join(entry) + "\n", ""
        table = f"{self._table.get_reference()} = external global {self._table.value_type}"
        loop = ['; ModuleID = "loops"', *target, table, *map(str, _reachable(exported, set())), *meta]
        return "\n".join(entry) + "\n", "\n".join(loop) + "\n"

    def extern(self, b: ir.IRBuilder, key: externs.Key) -> ir.Value:
        """Load the address ``key`` names from the extern table, at ``b`` (i64)."""
        slot = self.externs.setdefault(key, len(self.externs))
        table = b.load(self._table, name="externs")
        return b.load(b.gep(table, [ir.Constant(I64, slot)], inbounds=True), name=f"{key[0]}{slot}")

    def loop_id(self, unroll: bool, width: int | None) -> ir.MDValue:
        """A fresh (distinct) loop ID: ``llvm.loop.unroll.disable`` unless ``unroll``, and the vectoriser's
        width (with no interleaving on top) when given."""
        md = self.module.add_metadata
        node = md([ir.MetaDataString(self.module, f"msvm.loop.{next(self._counter)}")])
        hints = [] if unroll else [self._disable]
        if width:
            for hint, value in (("vectorize.enable", ir.Constant(I1, 1)),
                                ("vectorize.width", ir.Constant(I32, width)),
                                ("interleave.count", ir.Constant(I32, 1))):
                hints.append(md([ir.MetaDataString(self.module, f"llvm.loop.{hint}"), value]))
        node.operands = (node, *hints)
        return node

    def function(self, prefix: str, buffers: Sequence[Buffer]) -> FnBuilder:
        return FnBuilder(self, f"{prefix}{next(self._counter)}", buffers)

    def entry(
        self,
        name: str,
        inputs: Sequence[Buffer],
        outputs: Sequence[Buffer],
        calls: Sequence[tuple[Kernel, FnBuilder]],
    ) -> None:
        """Define ``name`` (raw data pointers) and ``name_fast`` (Python objects, see the module doc)."""
        n_tensors = len(inputs) + len(outputs)
        types = [I8P] * (n_tensors + 1) + [I64] * len(self.params)
        fn = ir.Function(self.module, ir.FunctionType(I32, types), name=name)
        fn.attributes.add("nounwind")
        fn.attributes.add("noinline")  # into its object twin: it holds the kernels inlined into it
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        args = list(fn.args)
        bases: dict[Buffer, ir.Value] = {}
        for buf, arg in zip([*inputs, *outputs], args):
            arg.name = buf.name
            bases[buf] = arg
        arena = args[n_tensors]
        arena.name = "arena"
        params = args[n_tensors + 1 :]
        for p, arg in zip(self.params, params):
            arg.name = p
        status = b.alloca(I32, name="status")
        b.store(ir.Constant(I32, 0), status)
        done = fn.append_basic_block("fail")
        values = dict(zip(self.params, params))
        # While only small loops run, keeping the GIL is cheaper than handing it over. Symbolic work is
        # compared with PARALLEL_MIN at run time and the GIL released as the bucket's bounds say
        # (``may_be_big``, the table's ("gil",)), whatever they are: one code for every bucket.
        release_gil: bool | None = False  # None: as the bounds say
        for kernel, kfn in calls:
            ptrs = [self._base(b, buf, bases, arena) for buf in kfn.buffers]
            work = kernel.parallel_work()
            big = work is not None and may_be_big(work, {})
            if work is None or (big and work.is_const):
                release_gil = True
            elif big and release_gil is False:
                release_gil = None
            if THREADS > 1 and big and kfn.split_extent is not None:
                self._split_call(b, kfn, ptrs, list(params), values, work, status)
            elif _has_loop(kfn.fn):
                b.call(self._whole(kfn), [*ptrs, *params, status])
            else:
                _inline_if_small(kfn.fn)
                b.call(kfn.fn, [*ptrs, *params, ir.Constant(I64, 0), ir.Constant(I64, INT64_MAX), status])
            if kernel.can_fail:
                ok = fn.append_basic_block("ok")
                b.cbranch(b.icmp_signed("!=", b.load(status), ir.Constant(I32, 0)), done, ok)
                b.position_at_end(ok)
        b.ret(ir.Constant(I32, 0))
        b.position_at_end(done)
        b.ret(b.load(status))
        self._fastcall_twin(fn, n_tensors, release_gil)

    def _split_call(
        self,
        b: ir.IRBuilder,
        kfn: FnBuilder,
        ptrs: list[ir.Value],
        params: list[ir.Value],
        values: dict[str, ir.Value],
        work: Dim,
        status: ir.Value,
    ) -> None:
        """Run ``kfn``'s outer loop on up to ``THREADS`` threads of the job pool (``kernels.threads``:
        persistent helpers, a wake-up instead of a thread start) that claim chunks of it from a shared
        counter.

        Why chunks, not halves: the machine is shared, and a core busy with another process would
        make the thread given a fixed half finish last; with chunks the faster thread takes more.
        Big enough (``PARALLEL_MIN`` elements, checked at run time in bucket mode) or it runs inline;
        a busy pool leaves all chunks to the caller. Each thread gets its own copy of per-thread
        scratch (threads number themselves from a second counter).
        """
        extent = dims.emit(b, kfn.split_extent, values)
        big = b.and_(
            b.icmp_signed(">=", dims.emit(b, work, values), ir.Constant(I64, PARALLEL_MIN)),
            b.icmp_signed(">=", extent, ir.Constant(I64, 2)),
        )
        with b.if_else(big) as (split, inline):
            with split:
                chunk = ceil_div(b, extent, THREADS * CHUNKS_PER_THREAD)
                zero = ir.Constant(I64, 0)
                fields = [*ptrs, *params, status, zero, extent, chunk, zero]  # counter, …, thread numbers
                job = b.bitcast(self._chunk_runner(kfn), I8P)
                run_on_pool(b, lambda key: self.extern(b, key), job, fields, ir.Constant(I64, THREADS))
            with inline:
                b.call(self._whole(kfn), [*ptrs, *params, status])

    def _whole(self, kfn: FnBuilder) -> ir.Function:
        """``kfn`` over its whole range ``[0, ∞)``, a function of the loop module (``texts``) the entry
        calls (LLVM propagates the range into the kernel where this is its only caller)."""
        types = kfn.fn.function_type.args
        fn_type = ir.FunctionType(VOID, [*types[:-3], types[-1]])
        fn = ir.Function(self.module, fn_type, name=f"{kfn.fn.name}_whole")
        fn.attributes.add("nounwind")
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        *fixed, status = fn.args
        b.call(kfn.fn, [*fixed, ir.Constant(I64, 0), ir.Constant(I64, INT64_MAX), status])
        b.ret_void()
        self._loops += [kfn.fn, fn]
        return fn

    def _chunk_runner(self, kfn: FnBuilder) -> ir.Function:
        """The job ``void run(i64* frame)``: take a thread number, then claim chunks ``[start, start +
        chunk)`` of the outer loop from the frame's counter and call ``kfn`` on each until none are left
        (the frame: ``kfn``'s arguments before ``lo`` as i64 each, then the counter, the extent, the
        chunk size and the thread-number counter)."""
        fn = ir.Function(self.module, ir.FunctionType(VOID, [I64.as_pointer()]), name=f"{kfn.fn.name}_chunks")
        fn.attributes.add("nounwind")
        self._loops += [kfn.fn, fn]
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        frame = fn.args[0]

        def slot(i: int) -> ir.Value:
            return b.load(b.gep(frame, [ir.Constant(I64, i)]))

        types = kfn.fn.function_type.args
        n = len(types) - 2
        numbers = b.gep(frame, [ir.Constant(I64, n + 3)])
        thread = b.atomic_rmw("add", numbers, ir.Constant(I64, 1), "monotonic")
        fixed = []
        for i, t in enumerate(types[:-3]):
            value = b.inttoptr(slot(i), t) if t.is_pointer else slot(i)
            buf = kfn.buffers[i] if i < len(kfn.buffers) else None
            if buf is not None and buf.per_thread:
                value = b.gep(value, [b.mul(thread, self.extern(b, ("slot", buf.name)))], inbounds=True)
            fixed.append(value)
        status = b.inttoptr(slot(len(types) - 3), types[-1])
        counter = b.gep(frame, [ir.Constant(I64, n)])
        extent, chunk = slot(n + 1), slot(n + 2)
        with for_each_chunk(b, counter, extent, chunk) as (start, stop):
            b.call(kfn.fn, [*fixed, start, stop, status])
        b.ret_void()
        return fn

    def _base(self, b: ir.IRBuilder, buf: Buffer, bases: dict[Buffer, ir.Value], arena: ir.Value) -> ir.Value:
        if buf in bases:
            return bases[buf]
        if buf.kind == "arena":
            value = b.gep(arena, [self.extern(b, ("arena", buf.name))], inbounds=True)
        elif buf.kind == "const":
            value = b.inttoptr(self.extern(b, ("const", buf.index)), I8P)
        else:
            raise AssertionError(f"buffer {buf} has no base pointer")
        bases[buf] = value
        return value

    def _fastcall_twin(self, main: ir.Function, n_tensors: int, release_gil: bool) -> None:
        """``PyObject* name_fast(PyObject* self, PyObject* const* args, Py_ssize_t nargs)``: the arrays,
        the arena (an array too), then the params as ints; returns the status as an int (or NULL with
        the Python error of a param that is not one). ``release_gil``: drop the GIL while the code
        runs (what ctypes did), worth its ~0.1 µs only when the work may be large."""
        n_params = len(main.args) - n_tensors - 1
        fn_type = ir.FunctionType(I8P, [I8P, I8P.as_pointer(), I64])
        fn = ir.Function(self.module, fn_type, name=f"{main.name}_fast")
        fn.attributes.add("nounwind")
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        _, argv, nargs = fn.args

        def api(name: str, ret: ir.Type, *args: ir.Type) -> ir.Value:
            return b.inttoptr(self.extern(b, ("py", name)), ir.FunctionType(ret, args).as_pointer())

        from_long = api("PyLong_FromLong", I8P, I64)
        ok = fn.append_basic_block("arity_ok")
        bad = fn.append_basic_block("arity_bad")
        b.cbranch(b.icmp_signed("==", nargs, ir.Constant(I64, n_tensors + 1 + n_params)), ok, bad)
        b.position_at_end(bad)
        b.ret(b.call(from_long, [ir.Constant(I64, BAD_ARITY)]))
        b.position_at_end(ok)
        objects = [b.load(b.gep(argv, [ir.Constant(I64, i)], inbounds=True)) for i in range(n_tensors + 1)]
        offset = DATA_OFFSET if DATA_OFFSET is not None else 16
        values = [b.load(b.bitcast(b.gep(o, [ir.Constant(I64, offset)], inbounds=True), I8P.as_pointer()))
                  for o in objects]
        as_int = api("PyLong_AsSsize_t", I64, I8P)
        for k in range(n_params):
            obj = b.load(b.gep(argv, [ir.Constant(I64, n_tensors + 1 + k)], inbounds=True))
            value = b.call(as_int, [obj])
            failed = b.icmp_signed("==", value, ir.Constant(I64, -1))
            with b.if_then(failed, likely=False):
                raised = b.call(api("PyErr_Occurred", I8P), [])
                with b.if_then(b.icmp_unsigned("!=", raised, ir.Constant(I8P, None))):
                    b.ret(ir.Constant(I8P, None))
            values.append(value)
        def without_gil() -> ir.Value:
            state = b.call(api("PyEval_SaveThread", I8P), [])
            status = b.call(main, values)
            b.call(api("PyEval_RestoreThread", VOID, I8P), [state])
            return status

        if release_gil is None:  # as the bucket's bounds say
            result = Slot(b, I32)
            release = b.icmp_signed("!=", self.extern(b, ("gil",)), ir.Constant(I64, 0))
            with b.if_else(release) as (released, keeping):
                with released:
                    result.set(without_gil())
                with keeping:
                    result.set(b.call(main, values))
            status = result.get()
        else:
            status = without_gil() if release_gil else b.call(main, values)
        b.ret(b.call(from_long, [b.sext(status, I64)]))
