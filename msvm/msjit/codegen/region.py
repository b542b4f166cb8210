"""Lowering a region function to LLVM IR, compiling it, and binding the launcher: the pipeline.

``lower`` is pure Python (plan → memory plan → IR text); ``compile_region`` adds LLVM (in this
process, or in the crash-isolating compile worker) and the launcher. Every phase is timed.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...bytecode.module import Module
from ...native.llvm import NativeLibrary, ObjectBuild, build_object, load_object
from ...native.worker import CompileWorker
from .emit import ModuleEmitter
from .errors import LoweringError
from .launcher import build_launcher
from .memplan import Placement, plan_memory
from .plan import Plan, Planner

DISASSEMBLY_KINDS = ("llvm", "llvm-opt", "asm")
# The pass pipeline for regions: O2 without the loop unroller. Measured against O3 on the workloads'
# regions it compiles 30–40 % faster with run times within noise: the vectoriser's interleaving
# already gives the inner loops their parallelism, and outer loops are never worth unrolling.
PIPELINE = {"opt_level": 2, "unroll": False}


@dataclass
class LoweredRegion:
    """A region as LLVM IR plus everything needed to call the code compiled from it."""

    ir: str  # unoptimised LLVM IR of the whole region
    entry: str  # exported symbol (raw data pointers); ``entry + "_obj"`` takes array objects
    params: list[str]  # run-time symbols, in call order (bucketed dims, then scalar arguments)
    planned_bytes: int  # arena bytes with the memory plan (== naive_bytes without mem_optimize)
    naive_bytes: int  # one buffer per intermediate
    kernels: list[str]  # one line per generated kernel: what it computes and what got fused
    placements: list[Placement] = field(default_factory=list)  # the arena plan, for inspection
    plan: Plan | None = field(default=None, repr=False)
    n_args: int = 0
    lower_ms: float = 0.0

    def bind(self, library: NativeLibrary) -> Callable[..., Any]:
        """The launcher: called like the interpreter's Executable, returns the same results."""
        assert self.plan is not None
        keep = [library, *self.plan.constants]
        return build_launcher(
            self.plan,
            self.n_args,
            self.planned_bytes,
            library.address(self.entry),
            library.address(self.entry + "_obj"),
            keep,
        )


def lower(
    module: Module,
    function: str,
    *,
    mem_optimize: bool = False,
    name: str = "region",
    bounds: dict[str, int] | None = None,
) -> LoweredRegion:
    """Build the LLVM IR of ``function`` (a verified straight-line region) as one entry symbol.

    ``bounds`` maps run-time symbols (bucketed dims, scalar arguments) to their upper bounds: the
    arena is sized for them and the launcher rejects larger values. Exact-mode regions need none.
    Raises ``LoweringError`` (with the op's address) for anything that cannot be compiled.
    """
    t0 = time.perf_counter()
    plan = Planner(module, function, bounds).run()
    planned, naive, placements = plan_memory(plan.kernels, plan.ranges, mem_optimize)
    em = ModuleEmitter(name, plan.params, plan.ranges)
    calls = [(kernel, kernel.emit(em)) for kernel in plan.kernels]
    em.entry(name, plan.inputs, plan.outputs, calls)
    ir_text = str(em.module)
    fn = module.function(function)
    return LoweredRegion(
        ir_text,
        name,
        list(plan.params),
        planned,
        naive,
        [k.describe() for k in plan.kernels],
        placements,
        plan,
        len(fn.params),
        (time.perf_counter() - t0) * 1e3,
    )


@dataclass
class CompiledRegion:
    fn: Callable[..., Any]
    lowered: LoweredRegion
    library: NativeLibrary
    phase_ms: dict[str, float]  # lower, optimise, codegen, load
    code_bytes: int
    _listing: ObjectBuild | None = field(default=None, repr=False)

    def disassemble(self, kind: str = "llvm") -> str:
        """The region's code as ``llvm`` (as generated), ``llvm-opt`` (optimised) or ``asm``.

        The compile skips printing the last two (it would cost as much as compiling a small kernel);
        the first request compiles the IR again, in this process, to list them.
        """
        if kind == "llvm":
            return self.lowered.ir
        if kind not in DISASSEMBLY_KINDS:
            raise ValueError(f"unknown disassembly kind {kind!r}; use one of {', '.join(DISASSEMBLY_KINDS)}")
        if self._listing is None:
            self._listing = build_object(self.lowered.ir, self.lowered.entry, **PIPELINE)
        return self._listing.optimized_ir if kind == "llvm-opt" else self._listing.asm


def compile_region(
    module: Module,
    function: str,
    *,
    mem_optimize: bool = False,
    name: str = "region",
    via_worker: CompileWorker | None = None,
    bounds: dict[str, int] | None = None,
) -> CompiledRegion:
    """``lower`` + compile (in process, or in ``via_worker``'s process) + ``bind``."""
    lowered = lower(module, function, mem_optimize=mem_optimize, name=name, bounds=bounds)
    if via_worker is not None:
        result = via_worker.compile(lowered.ir, name=name, with_asm=False, with_ir=False, **PIPELINE)
        if not result.ok:
            raise LoweringError(f"compiling {name} failed: {result.error}", code="E-JIT-COMPILE")
        obj, times = result.object_code, result.times
    else:
        build = build_object(lowered.ir, name, with_asm=False, with_ir=False, **PIPELINE)
        obj, times = build.object_code, build.times
    t0 = time.perf_counter()
    library = load_object(obj, name, llvm_ir=lowered.ir, times=times)
    fn = lowered.bind(library)
    load_ms = (time.perf_counter() - t0) * 1e3
    phases = {
        "lower": lowered.lower_ms,
        "optimise": times.parse_ms + times.optimize_ms,
        "codegen": times.codegen_ms,
        "load": load_ms,
    }
    return CompiledRegion(fn, lowered, library, phases, text_bytes(obj))


def text_bytes(obj: bytes) -> int:
    """Size of the executable sections of an ELF64 object (the whole object if it is not one)."""
    if obj[:4] != b"\x7fELF" or obj[4] != 2:
        return len(obj)
    (shoff,) = struct.unpack_from("<Q", obj, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", obj, 0x3A)
    total = 0
    for i in range(shnum):
        base = shoff + i * shentsize
        (flags,) = struct.unpack_from("<Q", obj, base + 8)
        (size,) = struct.unpack_from("<Q", obj, base + 32)
        if flags & 0x4:  # SHF_EXECINSTR
            total += size
    return total or len(obj)
