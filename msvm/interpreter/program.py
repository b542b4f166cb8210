"""Program and Executable: a verified module prepared to run, and one callable function of it.

The entry check validates a call's inputs against their declared shapes once per input
signature (cached), binding the shape symbols and bounding every statically sized tensor by
the resource limits before anything is allocated. Failures anywhere become msvm errors that
name the bytecode address, the opcode, the source line and the shapes involved.
"""

from __future__ import annotations

import math
import threading
import time
import weakref
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..bytecode.module import Module
from ..context import CONTEXT, on_change
from ..errors import KernelError, MsvmError, ResourceLimitError, ShapeError
from ..observe.trace import TRACE, TraceEvent
from ..ops.registry import TensorType
from ..options import rewrite_enabled
from ..passes import PATTERNS, Rewrite, rewrite_module
from ..scheduler import binding_settings
from ..shapes import match_shape
from ..verifier import FunctionInfo, ModuleInfo, verify_module
from .codegen import ENTRY_LINE, Generated, generate
from .fusion import fuse_epilogues
from .lowering import Step, check_size, lower_function

_MAX_SEEN = 4096  # distinct input signatures remembered per function
# ``Executable._size_groups``: constant bytes, constant zeros' shapes, and per symbolic shape (dims,
# item size, count, first address, its opcode, the addresses of zeros)
_SizeGroups = tuple[int, dict[int, tuple[int, ...]], list[tuple[Any, int, int, int, str, list[int]]]]
_LIVE: weakref.WeakSet[Executable] = weakref.WeakSet()


def _forget_signatures() -> None:
    """Settings changed: every cached entry check must run again (the limits too, those of constant
    shapes checked once per set of bound symbols), and kernels be re-bound if needed."""
    for exe in list(_LIVE):
        exe.seen.clear()
        exe._sized.clear()
        exe.rebind_if_stale()


on_change(_forget_signatures)


class Program:
    """A verified module, ready to run: ``Program(module).function("f")(x)``.

    ``module`` is what runs: the module given with the pattern rewrites applied (``rewrites`` lists
    them) unless the options say ``rewrite=False``.
    """

    def __init__(
        self, module: Module, options: Mapping[str, Any] | None = None, info: ModuleInfo | None = None
    ) -> None:
        self.options = dict(options or {})
        self.module, self.info = module, info or verify_module(module)
        self.rewrites: list[Rewrite] = []
        if rewrite_enabled(self.options):
            self.module, self.info, self.rewrites = rewrite_module(module, self.info, PATTERNS)
        if self.rewrites:
            from ..msjit.stats import EVENTS

            for rewrite in self.rewrites:
                EVENTS.publish("rewrite", None, **rewrite.as_dict())
        self._executables: dict[str, Executable] = {}

    def function(self, name: str) -> Executable:
        exe = self._executables.get(name)
        if exe is None:
            if name not in self.info.functions:
                raise KeyError(f"module {self.module.name!r} has no function {name!r}")
            exe = self._executables[name] = Executable(self, self.info.functions[name])
        return exe

    @property
    def function_names(self) -> list[str]:
        return [fn.name for fn in self.module.functions]


class Executable:
    """One function of a Program. Calling it runs the generated fast path (or the traced one)."""

    def __init__(self, program: Program, info: FunctionInfo) -> None:
        self.program = program
        self.info = info
        self.name = info.function.name
        self.params = info.function.params
        self.steps: list[Step] = lower_function(info, program.module)
        self.by_address = {s.address: s for s in self.steps}
        self._bound_for = binding_settings()  # kernel policy, device, fallback, memory reuse
        self.seen: dict[tuple, dict[int, tuple[int, ...]]] = {}
        self._sized: dict[frozenset, _SizeGroups] = {}  # ``_size_groups``, by the symbols bound
        # the SCALAR_ARG and input TENSOR_CREATE steps ``bind_inputs`` reads, found once per lowering
        self._arg_steps: tuple[list[Step], list[Step], list[Step]] = ([], [], [])
        _LIVE.add(self)
        self._generated: Generated | None = None
        self._traced: Generated | None = None
        # the fast path's function once generated, for callers that pass the right number of
        # arguments (``__call__`` checks that, for 0.6 µs more per call)
        self.fast: Any = None
        self._jit: Any = None
        self._lock = threading.Lock()

    # -- running -------------------------------------------------------------------------------
    def __call__(self, *args: Any) -> Any:
        if len(args) != len(self.params):
            raise TypeError(
                f"{self.name}() takes {len(self.params)} argument(s) ({', '.join(self.params)}), "
                f"got {len(args)}"
            )
        gen = self._generated or self.generated()
        return gen.fn(*args)  # it hands over to the traced twin while TRACE is enabled

    def generated(self, traced: bool = False) -> Generated:
        with self._lock:
            if self._bound_for != binding_settings():
                self.steps = lower_function(self.info, self.program.module)
                self.by_address = {s.address: s for s in self.steps}
                self._bound_for = binding_settings()
            attr = "_traced" if traced else "_generated"
            gen = getattr(self, attr)
            if gen is None:
                regions = self.jit.dispatch
                steps = self.steps if traced else fuse_epilogues(self.info, self.steps, regions)
                gen = generate(self.info, steps, self._names(traced), traced=traced, regions=regions)
                setattr(self, attr, gen)
                if not traced:
                    self.fast = gen.fn
            return gen

    def rebind_if_stale(self) -> None:
        """Drop the generated code when the settings kernels were bound under changed.

        The next call re-lowers (``generated``); the hot path stays free of any check.
        """
        if self._bound_for != binding_settings():
            with self._lock:
                self._generated = self._traced = self.fast = None

    def plan_jit(self) -> None:
        """Plan the JIT's regions now rather than at the first call (and so start its compile worker)."""
        self.jit  # noqa: B018

    @property
    def jit(self) -> Any:
        """The JIT's state for this function (``msvm.msjit.runtime.FunctionJit``), planned on first use."""
        if self._jit is None:
            from ..msjit.runtime import attach

            self._jit = attach(self)
        return self._jit

    def debug(self, *args: Any):
        """A stepping Execution of this function on ``args`` (see ``msvm.interpreter.stepping``)."""
        from .stepping import Execution

        return Execution(self, args)

    @property
    def source(self) -> str:
        """The generated Python source of the fast path (for the curious and for debugging msvm)."""
        return self.generated().source

    def _names(self, traced: bool) -> dict[str, Any]:
        names: dict[str, Any] = {
            "SEEN": self.seen,
            "ENTRY": self.entry,
            "FAULT": self.fault,
            "LOOPLIMIT": self.loop_limit,
            "CTX": CONTEXT,
            "MSVM_ERROR": MsvmError,
        }
        if traced:
            names["NOW"] = time.perf_counter_ns
            names["EMIT"] = self._emit
        else:
            names["TRACE"] = TRACE
            names["TRACED"] = lambda *args: self.generated(traced=True).fn(*args)
        return names

    def _emit(self, address: int, t0: int, t1: int, out: Any) -> None:
        step = self.by_address[address]
        ins = step.ins
        choice = step.choice if ins.name == "OP_CALL" else None  # the kernel that just ran, and why
        TRACE.record(
            TraceEvent(
                self.name,
                address,
                ins.name,
                ins["op"] if choice else None,
                choice.variant if choice else None,
                t0,
                t1 - t0,
                threading.get_ident(),
                "interp",
                list(out.shape) if isinstance(out, np.ndarray) else None,
                choice.reason if choice else None,
            )
        )

    # -- the entry check -----------------------------------------------------------------------
    def entry(self, key: tuple, args: tuple) -> dict[int, tuple[int, ...]]:
        """The generated code calls this for an input signature it has not seen yet."""
        created = self.check_signature(args)
        if len(self.seen) >= _MAX_SEEN:
            self.seen.clear()
        self.seen[key] = created
        return created

    def check_signature(self, args: tuple) -> dict[int, tuple[int, ...]]:
        """Validate inputs and limits; returns the evaluated shapes of TENSOR_CREATE -1 zeros.

        Which registers are statically sized depends only on which symbols the inputs bind, so they
        are grouped once per set of bound symbols (``_size_groups``): a new signature (every call of a
        stream of lengths) then costs one evaluation and one size check per distinct symbolic shape —
        W3's 34 sized registers have 5 — not a walk over the whole function.
        """
        bindings = self.bind_inputs(args)
        bound = frozenset(bindings)
        groups = self._sized.get(bound)
        if groups is None:
            groups = self._sized[bound] = self._size_groups(bound)
        total, created, symbolic = groups
        created = dict(created)
        for dims, itemsize, count, address, opname, zeros in symbolic:
            shape = dims.evaluate(bindings)
            check_size(address, shape, itemsize, opname)
            total += math.prod(shape) * itemsize * count
            for zero in zeros:
                created[zero] = shape
        if total > CONTEXT.max_call_bytes:
            raise ResourceLimitError(
                f"{self.name} would allocate {total:,} bytes for these inputs, over "
                f"max_call_bytes={CONTEXT.max_call_bytes:,}",
                code="E-LIMIT-CALL",
                address=self.info.base,
                hint="raise it with ms.set_context(max_call_bytes=...) or call with smaller inputs",
            )
        return created

    def _size_groups(self, bound: frozenset) -> _SizeGroups:
        """The registers whose shapes ``bound`` determines, grouped by shape and item size: the bytes
        and zeros of those of constant shape (checked here, once), and per symbolic shape (dims, item
        size, how many, the first one's address and opcode, the addresses of TENSOR_CREATE -1 zeros),
        in order of first occurrence — a size check names the first register too big, as one per
        register did. The others — and those of ``runtime_sized`` steps, whose types may not be their
        run-time shapes — are sized at run time, and checked where they are allocated."""
        groups: dict[tuple[Any, int], tuple[Any, int, int, Step, list[int]]] = {}
        for step in self.steps:
            if step.runtime_sized:
                continue
            for r in step.ins.writes():
                t = self.info.types[r]
                if not isinstance(t, TensorType) or any(d.is_unknown or not d.free_symbols <= bound
                                                        for d in t.shape):
                    continue
                key = (t.shape, np.dtype(t.dtype).itemsize)
                dims, itemsize, count, first, zeros = groups.get(key) or (*key, 0, step, [])
                if step.ins.name == "TENSOR_CREATE" and step.ins["arg"] == -1:
                    zeros.append(step.address)
                groups[key] = (dims, itemsize, count + 1, first, zeros)
        constant_bytes, constant_zeros, symbolic = 0, {}, []
        for dims, itemsize, count, first, zeros in groups.values():
            if dims.is_static:
                shape = dims.evaluate({})
                check_size(first.address, shape, itemsize, first.opname)
                constant_bytes += math.prod(shape) * itemsize * count
                constant_zeros.update(dict.fromkeys(zeros, shape))
            else:
                symbolic.append((dims, itemsize, count, first.address, first.opname, zeros))
        return constant_bytes, constant_zeros, symbolic

    def bind_inputs(self, args: tuple) -> dict[str, int]:
        """Bind the shape symbols of ``args``; a ShapeError names the parameter and declaration."""
        bindings: dict[str, int] = {}
        steps, scalars, inputs = self._arg_steps
        if steps is not self.steps:
            scalars = [s for s in self.steps if s.ins.name == "SCALAR_ARG"]
            inputs = [s for s in self.steps if s.ins.name == "TENSOR_CREATE" and s.ins["arg"] >= 0]
            self._arg_steps = self.steps, scalars, inputs
        for step in scalars:
            value = args[step.ins["arg"]]
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
                what = f"must be an int, got {type(value).__name__} {value!r}"
                raise self._input_error(step, what, "E-SHAPE-INPUT-TYPE", TypeError)
            bindings[step.ins["symbol"]] = int(value)
        for step in inputs:
            ins = step.ins
            value = args[ins["arg"]]
            if not isinstance(value, np.ndarray):
                raise self._input_error(
                    step,
                    f"must be a numpy array, got {type(value).__name__}",
                    "E-SHAPE-INPUT-TYPE",
                    TypeError,
                )
            # (numpy compares a dtype with its name; ``.name``, several µs, only for another byte order)
            if value.dtype != ins["dtype"] and value.dtype.name != ins["dtype"]:
                raise self._input_error(
                    step, f"must have dtype {ins['dtype']}, got {value.dtype.name}", "E-SHAPE-DTYPE"
                )
            if len(value.shape) == ins["shape"].rank:  # plain symbols first, so any input may bind H for H*2
                for dim, size in zip(ins["shape"], value.shape):
                    if dim.is_symbol:
                        bindings.setdefault(dim.name, size)
        for step in inputs:
            ins, value = step.ins, args[step.ins["arg"]]
            problems = match_shape(ins["shape"], value.shape, bindings)
            if problems:
                raise self._input_error(
                    step,
                    f"has shape {tuple(value.shape)}, which does not match {ins['shape']}: "
                    + "; ".join(problems),
                    "E-SHAPE-INPUT",
                )
        return bindings

    def _input_error(self, step: Step, what: str, code: str, kind: type = ShapeError) -> Exception:
        arg = step.ins["arg"]
        message = f"input #{arg} ({self.params[arg]}) of {self.name} {what}"
        if kind is TypeError:
            return TypeError(f"[{code}] {message}")
        return ShapeError(message, code=code, address=step.address, opcode=step.opname, source=step.ins.loc)

    def loop_limit(self, address: int) -> None:
        raise ResourceLimitError(
            f"a loop in {self.name} ran more than max_loop_iterations={CONTEXT.max_loop_iterations:,} times",
            code="E-LIMIT-LOOP",
            address=address,
            opcode=self.by_address[address].opname,
            source=self.by_address[address].ins.loc,
            hint="raise ms.set_context(max_loop_iterations=...) if the loop is meant to run that long",
        )

    # -- failures ------------------------------------------------------------------------------
    def fault(self, exc: BaseException) -> Exception:
        """Turn an exception raised inside generated code into an msvm error at its address."""
        gen_files = {g.filename: g for g in (self._generated, self._traced) if g is not None}
        tb, found = exc.__traceback__, None
        while tb is not None:
            gen = gen_files.get(tb.tb_frame.f_code.co_filename)
            if gen is not None:
                found = (gen.line_address.get(tb.tb_lineno), tb.tb_frame.f_locals)
            tb = tb.tb_next
        if found is None or found[0] is None:
            return exc if isinstance(exc, Exception) else RuntimeError(str(exc))
        address, frame = found
        if address == ENTRY_LINE:  # the input check: report it precisely, as a call-site error
            if isinstance(exc, TypeError):
                return exc
            try:
                self.bind_inputs(tuple(frame.get(f"a{i}") for i in range(len(self.params))))
            except (MsvmError, TypeError) as precise:
                return precise
            return exc if isinstance(exc, Exception) else RuntimeError(str(exc))
        return self.runtime_error(self.by_address[address], exc, frame)

    def runtime_error(self, step: Step, exc: BaseException, regs: Mapping[str, Any]) -> Exception:
        ins = step.ins
        inputs = []
        for r in ins.reads():
            v = regs.get(f"r{r}")
            inputs.append(
                f"R{r}: {tuple(v.shape)} {v.dtype}" if isinstance(v, np.ndarray) else f"R{r} = {v!r}"
            )
        detail = f"{type(exc).__name__}: {exc}"
        where = dict(address=step.address, opcode=step.opname, source=ins.loc)
        if isinstance(exc, MemoryError):
            return ResourceLimitError(
                f"out of memory ({detail})",
                code="E-LIMIT-MEMORY",
                **where,
                hint="lower the sizes, or set tighter limits with ms.set_context",
            )
        if isinstance(exc, ZeroDivisionError):
            return ShapeError(
                f"division by zero in shape arithmetic ({', '.join(inputs)})", code="E-SHAPE-ZERODIV", **where
            )
        if isinstance(exc, (ValueError, IndexError)):
            guards = self.info.guards.get(step.address, [])
            hint = "inputs " + "; ".join(inputs)
            if guards:
                hint += " — run-time checks here: " + "; ".join(map(str, guards))
            return ShapeError(
                f"{step.opname} failed on its inputs: {detail}", code="E-SHAPE-RUNTIME", hint=hint, **where
            )
        return KernelError(f"{step.opname} failed: {detail}", hint="inputs " + "; ".join(inputs), **where)
