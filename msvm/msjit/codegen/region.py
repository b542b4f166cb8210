"""Lowering a region function to LLVM IR, compiling it, and binding the launcher: the pipeline.

``lower`` is pure Python (plan → memory plan → IR text); ``compile_region`` adds LLVM and the
launcher. With the crash-isolating compile worker, lowering runs there too: it is 20–50 ms of Python
per region, which in this process would hold the GIL beside the user's calls (a call that releases
it to run native code then waits up to the 5 ms switch interval to get it back, at every kernel).
What comes back is the object code and the lowering as plain data (``LoweredRegion.to_wire``): the
code reads every process-specific address from its extern table (``externs``), bound at load, and a
weight packed from the region's constants comes back as its ``Recipe``, packed again here.
Every phase is timed.

A region is two LLVM modules (``ModuleEmitter.texts``), two objects loaded together: its kernels with
loops, optimised (``PIPELINE``), and the entry with the rest — frames for native jobs, BLAS calls —
which runs once per call and is not (``ENTRY_PIPELINE``): optimising straight-line frame filling buys
nothing at run time and was about a third of LLVM's CPU per region (``python -m bench codegen``).

A bucket's bounds reach the code only through that table too (arena offsets, per-thread slots,
whether to release the GIL), so every bucket of a region has one IR and one object code: the next
bucket costs a plan (``lower``'s ``reuse``) and a load (``build_region``), not an LLVM compile.

Tiers: a region whose tensors are all small (``QUICK_MAX_ELEMENTS`` at its bounds) and whose loop module
is long may compile that module unoptimised first (``tier=1``, ``QUICK_PIPELINE``): on small tensors
unoptimised code still beats the interpreter by far and costs LLVM a fraction of the time, so it
lands sooner (``docs/performance.md``, "Quick tier"). On large tensors unoptimised loops lose to the
interpreter's numpy calls, so such a region, and one with no loop module, is built optimised at once
(``tier`` 2 in the answer). What the worker answers is plain data (``load_region`` makes the code of
it), which is also what the persistent code cache keeps.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import struct
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import astuple, dataclass, field
from typing import Any

import numpy as np

from ...bytecode.binary import decode_module, encode_module
from ...bytecode.module import Module
from ...native.blas import GemmEntry
from ...native.llvm import CompileTimes, NativeLibrary, ObjectBuild, build_object, load_object
from ...native.worker import CompileWorker
from ...ops.registry import TensorType
from . import dims, externs, shared
from .emit import ModuleEmitter, may_be_big
from .errors import LoweringError
from .kernels import THREADS
from .launcher import LaunchSpec, build_launcher
from .lower_nn import PACKS
from .memplan import Placement, plan_memory
from .plan import Planner, Recipe
from .views import numel

DISASSEMBLY_KINDS = ("llvm", "llvm-opt", "asm")
# The pass pipeline for regions: O2 without the loop unroller, which against O3 compiles faster with run
# times within noise: the vectoriser's interleaving already gives the inner loops their parallelism,
# and outer loops are never worth unrolling. Nor the SLP vectoriser, which in the benchmark regions
# only packed the entry's job frames into vectors at a third of the optimisation time: it runs only for
# regions with a kernel that writes vectors built lane by lane (``Kernel.packs_lanes``).
# ``python -m bench codegen`` re-measures.
PIPELINE = {"opt_level": 2, "unroll": False, "slp": False}
# The entry module: no optimisation, and the code generator's fastest level: it only fills frames and
# calls native jobs and the loop module, which run as fast either way.
ENTRY_PIPELINE = {"opt_level": 0, "unroll": False, "slp": False, "codegen": 0}
# The quick tier's loop module: no optimisation either, for regions whose tensors are all this small.
# Unoptimised code costs about 0.7 ns per element and op, the interpreter about 0.7 µs per op plus
# 0.3 ns per element: below ~1,000 elements the unoptimised code still wins.
# And only for a loop module of at least QUICK_MIN_LINES lines of IR: O2 costs a smaller one a few ms,
# not worth a second compile.
QUICK_PIPELINE = ENTRY_PIPELINE
QUICK_MAX_ELEMENTS = 1024
QUICK_MIN_LINES = 200
SEPARATOR = "\n; --- the loop module ---\n"  # between the modules in a listing (``disassemble``)


@dataclass
class LoweredRegion:
    """A region as LLVM IR plus everything needed to call the code compiled from it."""

    ir: str  # unoptimised LLVM IR of the entry module: the entry, its twin, the kernels without loops
    loop_ir: str  # of the loop module: the kernels with loops ("" if none)
    entry: str  # exported symbol (raw data pointers); ``entry + "_fast"`` is its METH_FASTCALL twin
    params: list[str]  # run-time symbols, in call order (bucketed dims, then scalar arguments)
    planned_bytes: int  # arena bytes with the memory plan (== naive_bytes without mem_optimize)
    naive_bytes: int  # one buffer per intermediate
    kernels: list[str]  # one line per generated kernel: what it computes and what got fused
    placements: list[Placement]  # the arena plan, for inspection
    launch: LaunchSpec
    externs: list[externs.Key]  # the addresses the code reads from its extern table, in slot order
    constants: list[np.ndarray] = field(default_factory=list, repr=False)  # the plan's constants
    recipes: list[Recipe | None] = field(default_factory=list, repr=False)  # how each was made, if known
    lower_ms: float = 0.0
    slp: bool = False  # a kernel packs lanes: optimise with the SLP vectoriser
    release_gil: bool = False  # a kernel may be big at the bounds (``emit.may_be_big``)
    symbol: str = ""  # the entry's name in the object code: another entry's when its code is shared
    small: bool = False  # every tensor within QUICK_MAX_ELEMENTS: a quick tier pays
    tier: int = 2  # the tier its object code is built at (``tier_for``)

    def tier_for(self, asked: int) -> int:
        """The tier a request for ``asked`` gets: 1 only for a long loop module over small tensors."""
        return 1 if asked == 1 and self.small and self.loop_ir.count("\n") >= QUICK_MIN_LINES else 2

    def modules(self) -> list[tuple[str, dict[str, Any]]]:
        """Each module's IR with the options ``build_object`` compiles it with, at ``tier``."""
        modules = [(self.ir, ENTRY_PIPELINE)]
        if self.loop_ir:
            modules.append((self.loop_ir, QUICK_PIPELINE if self.tier == 1 else PIPELINE | {"slp": self.slp}))
        return modules

    def listing(self) -> str:
        """The modules' IR, as generated."""
        return SEPARATOR.join(text for text, _ in self.modules())

    def numbers(self) -> dict[externs.Key, int]:
        """The extern table's entries that depend on the bounds (``externs``)."""
        table: dict[externs.Key, int] = {("gil",): int(self.release_gil)}
        for p in self.placements:
            table[("arena", p.name)] = p.offset
            table[("slot", p.name)] = p.size // THREADS  # a per-thread scratch's part (others: unused)
        return table

    def bind(self, library: NativeLibrary) -> Callable[..., Any]:
        """The launcher: called like the interpreter's Executable, returns the same results."""
        table = externs.install(library.global_address(externs.GLOBAL), self.externs, self.constants,
                                self.numbers())
        symbol = self.symbol or self.entry
        return build_launcher(
            self.launch,
            self.planned_bytes,
            library.address(symbol),
            library.address(symbol + "_fast"),
            [library, table, *self.constants],
        )

    # -- the compile worker's wire format (``lower_in_worker``) -------------------------------------------
    def to_wire(self, module: Module) -> tuple[dict[str, Any], list[bytes]]:
        """(JSON header, byte blocks): constants that are ``module``'s own travel as its index, those made
        from its own by a ``Recipe`` as the recipe, others as bytes."""
        own = {(c.ctypes.data, c.nbytes, c.dtype.name): i for i, c in enumerate(module.constants)
               if isinstance(c, np.ndarray) and c.flags.c_contiguous}

        def index(c: np.ndarray | None) -> int | None:
            return None if c is None else own.get((c.ctypes.data, c.nbytes, c.dtype.name))

        consts, blocks = [], []
        for c, recipe in itertools.zip_longest(self.constants, self.recipes):
            at, how = index(c), None
            if at is None and recipe is not None:
                sources = [index(s) for s in recipe.sources]
                if all(i is not None or s is None for i, s in zip(sources, recipe.sources)):
                    how = [recipe.kind, sources, list(recipe.args), recipe.part]
            consts.append([at, c.dtype.name, list(c.shape), how])
            if at is None and how is None:
                blocks.append(c.tobytes())
        ir_bytes, loop_bytes = self.ir.encode(), self.loop_ir.encode()
        header = {"ir_len": len(ir_bytes), "loop_ir_len": len(loop_bytes), "entry": self.entry,
                  "params": self.params,
                  "planned_bytes": self.planned_bytes, "naive_bytes": self.naive_bytes,
                  "kernels": self.kernels,
                  "placements": [list(astuple(p)) for p in self.placements], "launch": self.launch.to_json(),
                  "externs": externs.to_json(self.externs), "constants": consts, "lower_ms": self.lower_ms,
                  "slp": self.slp, "release_gil": self.release_gil, "symbol": self.symbol,
                  "small": self.small, "tier": self.tier}
        return header, [ir_bytes, loop_bytes, *blocks]

    @classmethod
    def from_wire(cls, header: dict[str, Any], data: bytes, module: Module) -> LoweredRegion:
        """The lowering ``to_wire`` described, with its constants in this process (``module``: the same
        region module, as this process holds it)."""
        at = header["ir_len"]
        ir_text = data[:at].decode()
        loop_text = data[at:at + header["loop_ir_len"]].decode()
        at += header["loop_ir_len"]
        constants = []
        for index, dtype, shape, how in header["constants"]:
            if index is not None:
                array = np.ascontiguousarray(module.constants[index], dtype=dtype).reshape(shape)
            elif how is not None:
                array = _remake(module, dtype, shape, *how)
            else:
                array = np.empty(shape, dtype)
                n = array.nbytes
                array.reshape(-1).view(np.uint8)[:] = np.frombuffer(data, np.uint8, n, at)
                at += n
            array.setflags(write=False)
            constants.append(array)
        return cls(ir_text, loop_text, header["entry"], header["params"], header["planned_bytes"],
                   header["naive_bytes"], header["kernels"], [Placement(*p) for p in header["placements"]],
                   LaunchSpec.from_json(header["launch"]), externs.from_json(header["externs"]), constants,
                   lower_ms=header["lower_ms"], slp=header["slp"], release_gil=header["release_gil"],
                   symbol=header["symbol"], small=header["small"], tier=header["tier"])


def _remake(module: Module, dtype: str, shape: list[int], kind: str, sources: list[int | None],
            args: list[int], part: int) -> np.ndarray:
    """A constant the compile worker described by its ``Recipe``, made here from ``module``'s own."""
    arrays = [None if i is None else module.constants[i] for i in sources]
    array = PACKS[kind](*arrays, *args)[part]
    if array.dtype.name != dtype or list(array.shape) != shape:
        raise LoweringError(f"the {kind} packing made {array.dtype.name}{list(array.shape)} here, where the "
                            f"compile worker made {dtype}{shape}", code="E-JIT-COMPILE")
    return array


def lower(
    module: Module,
    function: str,
    *,
    mem_optimize: bool = False,
    name: str = "region",
    bounds: dict[str, int] | None = None,
    gemm: Mapping[str, GemmEntry | None] | None = None,
    reuse: bytes | None = None,
) -> LoweredRegion:
    """Build the LLVM IR of ``function`` (a verified straight-line region) as one entry symbol.

    ``bounds`` maps run-time symbols (bucketed dims, scalar arguments) to their upper bounds: the
    arena is sized for them and the launcher rejects larger values. Exact-mode regions need none.
    ``gemm``: the BLAS entry per dtype (default: ``best_gemm``'s). ``reuse``: a key of everything
    the IR depends on (``lowering_key``); the bounds are not in it, since they reach the code only
    through its extern table (``LoweredRegion.numbers``), so the IR of the region's next bucket is
    the last one's under another name, and only the plan is made again. Raises ``LoweringError``
    (with the op's address) for anything that cannot be compiled.
    """
    t0 = time.perf_counter()
    planner = Planner(module, function, bounds, gemm)
    plan = planner.run()
    planned, naive, placements = plan_memory(plan.kernels, plan.ranges, mem_optimize)
    kernels = [k.describe() for k in plan.kernels]
    hit = _LOWERED.get(reuse) if reuse is not None else None
    if hit is None or hit[0] != kernels:  # (the same plan, or the IR is made again)
        em = ModuleEmitter(name, plan.params)
        calls = [(kernel, kernel.emit(em)) for kernel in plan.kernels]
        em.entry(name, plan.inputs, plan.outputs, calls)
        (ir_text, loop_text), keys = em.texts(), list(em.externs)
        slp = any(k.packs_lanes() for k in plan.kernels)
        if reuse is not None:
            _LOWERED.put(reuse, (kernels, ir_text, loop_text, name, keys, slp))
    else:
        _, text, loop_text, was, keys, slp = hit
        ir_text = text.replace(was, name)
    return LoweredRegion(
        ir_text,
        loop_text,
        name,
        list(plan.params),
        planned,
        naive,
        kernels,
        placements,
        LaunchSpec.of(plan, len(module.function(function).params)),
        keys,
        plan.constants,
        plan.recipes,
        (time.perf_counter() - t0) * 1e3,
        slp,
        any(may_be_big(kernel.parallel_work(), plan.ranges) for kernel in plan.kernels),
        small=all(dims.interval(numel(t.shape), plan.ranges)[1] <= QUICK_MAX_ELEMENTS
                  for t in planner.types if isinstance(t, TensorType)),
    )


def lowering_key(encoded: bytes, *inputs: Any) -> bytes:
    """A digest of an encoded region module and the other ``inputs`` (JSON data) its IR depends on."""
    digest = hashlib.blake2b(encoded, digest_size=16)
    digest.update(json.dumps(inputs).encode())
    return digest.digest()


class _Recent:
    """A small map that forgets its least recently used items (thread-safe)."""

    def __init__(self, size: int) -> None:
        self._items: OrderedDict[bytes, Any] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def get(self, key: bytes) -> Any:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: bytes, value: Any) -> None:
        with self._lock:
            self._items[key] = value
            while len(self._items) > self._size:
                self._items.popitem(last=False)


# The IR a region function was lowered to, by ``lowering_key``: (its kernels' descriptions, the entry and
# loop modules' IR, its entry name, extern keys, slp).
_LOWERED = _Recent(32)


# Object code by its IR (the entry's name left out), for the next bucket of the same region: its IR
# is the same but for the name (the bounds reach the code only through the extern table), so it
# costs a plan, not an LLVM compile (optimise + codegen, the bulk of a compile).
_OBJECTS = _Recent(32)  # digest -> (the modules' object code, the entry name it carries)


def build_region(lowered: LoweredRegion, share: int = 0) -> tuple[list[bytes], CompileTimes]:
    """The object code of ``lowered``'s modules at its ``tier``: built, or shared with an entry lowered
    to the same IR before, in the same ``share`` generation (then ``lowered.symbol`` names that entry,
    whose name the code carries)."""
    text = f"{share}\0{lowered.tier}\0{lowered.ir.replace(lowered.entry, chr(0))}\0{lowered.loop_ir}"
    digest = hashlib.blake2b(text.encode(), digest_size=16).digest()
    hit = _OBJECTS.get(digest)
    if hit is not None:
        lowered.symbol = hit[1]
        return hit[0], CompileTimes()
    objects, times = [], CompileTimes()
    for ir_text, options in lowered.modules():
        build = build_object(ir_text, lowered.entry, with_asm=False, with_ir=False, **options)
        objects.append(build.object_code)
        times += build.times
    lowered.symbol = lowered.entry
    _OBJECTS.put(digest, (objects, lowered.entry))
    return objects, times


@dataclass
class CompiledRegion:
    fn: Callable[..., Any]
    lowered: LoweredRegion
    library: NativeLibrary
    phase_ms: dict[str, float]  # lower, optimise, codegen, load
    code_bytes: int
    worker_cpu_ms: float  # CPU time the compile worker spent lowering and compiling it (0: in-process)
    wire: tuple[dict[str, Any], bytes] | None = field(default=None, repr=False)  # the worker's answer
    _listing: list[ObjectBuild] | None = field(default=None, repr=False)

    @property
    def tier(self) -> int:
        return self.lowered.tier

    @property
    def code_from(self) -> str | None:
        """The entry whose object code this one shares (``build_region``), if not its own."""
        symbol = self.lowered.symbol
        return symbol if symbol and symbol != self.lowered.entry else None

    def disassemble(self, kind: str = "llvm") -> str:
        """The region's code as ``llvm`` (as generated), ``llvm-opt`` (optimised) or ``asm``.

        The compile skips printing the last two (it would cost as much as compiling a small kernel);
        the first request compiles the IR again, in this process, to list them.
        """
        if kind == "llvm":
            return self.lowered.listing()
        if kind not in DISASSEMBLY_KINDS:
            raise ValueError(f"unknown disassembly kind {kind!r}; use one of {', '.join(DISASSEMBLY_KINDS)}")
        if self._listing is None:
            self._listing = [build_object(text, self.lowered.entry, **options)
                             for text, options in self.lowered.modules()]
        return SEPARATOR.join(b.optimized_ir if kind == "llvm-opt" else b.asm for b in self._listing)


def compile_region(
    module: Module,
    function: str,
    *,
    mem_optimize: bool = False,
    name: str = "region",
    via_worker: CompileWorker | None = None,
    bounds: dict[str, int] | None = None,
    share: int = 0,
    tier: int = 2,
) -> CompiledRegion:
    """``lower`` + compile + ``bind``: all in this process, or lowered and compiled in ``via_worker``'s
    process (``lower_in_worker``), which leaves this process only the load and the bind. ``share``: the
    generation of object code it may share (``build_region``; the JIT starts a new one at each
    ``ms.vm.reset()``, so that what is measured after it is compiled afresh). ``tier``: 1 asks for the
    quick tier where it pays (``LoweredRegion.tier_for``)."""
    if via_worker is not None:
        sent, files = shared.export(module)
        header = {"function": function, "mem_optimize": mem_optimize, "name": name, "bounds": bounds,
                  "gemm": gemm_entries(module), "shared": files, "share": share, "tier": tier}
        result = via_worker.call(f"{__name__}:lower_in_worker", header, encode_module(sent))
        if not result.ok:
            raise LoweringError(f"compiling {name} failed: {result.error}", code="E-JIT-COMPILE")
        return load_region(result.reply, result.payload, module, name, result.cpu_ms)
    reuse = lowering_key(encode_module(module), function, mem_optimize, share)
    lowered = lower(module, function, mem_optimize=mem_optimize, name=name, bounds=bounds, reuse=reuse)
    lowered.tier = lowered.tier_for(tier)
    objects, times = build_region(lowered, share)
    return _bind(lowered, objects, times, name, 0.0, None)


def load_region(reply: dict[str, Any], payload: bytes, module: Module, name: str, worker_cpu_ms: float = 0.0
                ) -> CompiledRegion:
    """The code ``lower_in_worker`` answered (``reply``, ``payload``) for ``module``, loaded and bound
    here: from the compile worker, or from the persistent code cache."""
    objects, at = [], 0
    for n in reply["object_lens"]:
        objects.append(payload[at:at + n])
        at += n
    if at > len(payload) or not all(_is_object(obj) for obj in objects):
        raise LoweringError(f"{name}: the code's object files are cut short or not objects",
                            code="E-JIT-COMPILE")
    lowered = LoweredRegion.from_wire(reply, payload[at:], module)
    return _bind(lowered, objects, CompileTimes(**reply["times"]), name, worker_cpu_ms, (reply, payload))


def _bind(lowered: LoweredRegion, objects: list[bytes], times: CompileTimes, name: str, worker_cpu_ms: float,
          wire: tuple[dict[str, Any], bytes] | None) -> CompiledRegion:
    t0 = time.perf_counter()
    library = load_object(objects, name, llvm_ir=lowered.listing(), times=times)
    fn = lowered.bind(library)
    load_ms = (time.perf_counter() - t0) * 1e3
    phases = {
        "lower": lowered.lower_ms,
        "optimise": times.parse_ms + times.optimize_ms,
        "codegen": times.codegen_ms,
        "load": load_ms,
    }
    return CompiledRegion(fn, lowered, library, phases, sum(map(text_bytes, objects)), worker_cpu_ms, wire)


def gemm_entries(module: Module) -> dict[str, list[Any] | None]:
    """The BLAS entry the region's code calls per dtype, as the worker gets it (plain data)."""
    from ...native.blas import best_gemm

    entries = {dt: best_gemm(dt) for dt in _float_dtypes(module)}
    return {dt: None if e is None else [e.name, e.source, e.path, e.symbol, e.abi, e.int_bits]
            for dt, e in entries.items()}


def _float_dtypes(module: Module) -> list[str]:
    """The BLAS dtypes the region's tensors may have (its inputs', its constants'): choosing a BLAS entry
    for a dtype can mean measuring libraries, which a float32 region should not wait for."""
    seen = {np.asarray(c).dtype.name for c in module.constants}
    for fn in module.functions:
        for _, _, ins in fn.instructions():
            if any(o.name == "dtype" for o in ins.opcode.operands):
                seen.add(ins["dtype"])
    return [dt for dt in ("float32", "float64") if dt in seen]


def lower_in_worker(header: dict[str, Any], payload: bytes) -> tuple[dict[str, Any], list[bytes]]:
    """The compile worker's half of ``compile_region``: decode the region module, lower and compile it;
    answer with the object code (one object per module), then the lowering's wire form
    (``LoweredRegion.to_wire``)."""
    module = shared.restore(decode_module(payload), header["shared"])
    gemm = {dt: None if e is None else GemmEntry(e[0], e[1], e[2], e[3], dt, e[4], e[5], 0)
            for dt, e in header["gemm"].items()}
    inputs = ("function", "mem_optimize", "gemm", "shared", "share")  # all but the name and the bounds
    reuse = lowering_key(payload, *(header[k] for k in inputs))
    lowered = lower(module, header["function"], mem_optimize=header["mem_optimize"], name=header["name"],
                    bounds=header["bounds"], gemm=gemm, reuse=reuse)
    lowered.tier = lowered.tier_for(header["tier"])
    objects, times = build_region(lowered, header["share"])
    reply, blocks = lowered.to_wire(module)
    reply |= {"object_lens": [len(obj) for obj in objects], "times": times.as_dict()}
    return reply, [*objects, *blocks]


def _is_object(obj: bytes) -> bool:
    """Does ``obj`` look like what LLVM emits here (a 64-bit ELF file on Linux)? LLVM's loader assumes
    well-formed input: a few bytes of something else crashed the process."""
    if sys.platform.startswith("linux"):
        return len(obj) > 64 and obj[:4] == b"\x7fELF" and obj[4] == 2
    return len(obj) > 0


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
