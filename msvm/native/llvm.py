"""The host's LLVM: one-time initialisation, the host target machine, and compiling IR to machine code.

llvmlite is imported on first use only (``import msvm`` must stay cheap). Every entry point
initialises LLVM once, under a lock, and then serialises its work on ``LLVM_LOCK``: llvmlite
parses into LLVM's global context, which is not thread-safe, so the JIT's background thread and
a kernel variant compiling on the execution thread take turns (a compile costs 10–60 ms here).
For crash isolation (an LLVM abort must not kill the user's kernel) compile in the worker
process (``msvm.native.worker``) and bring the object code back with ``load_object``.

Code is optimised with the new pass manager (O3 by default; callers may pick a cheaper level and
drop the unroller — the JIT does), loop and SLP vectorisation on, for the host CPU and its features
(``target_identity()`` names them; it belongs in every cache key of compiled code). One host
``TargetMachine`` is made at initialisation and serves every optimisation and object emission;
MCJIT engines, which take ownership of theirs, get fresh ones.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

# Fast-math flags for IR builders (``builder.fmul(a, b, flags=...)``). ``FAST_MATH`` lets LLVM
# reassociate, contract to FMA and assume no NaN/inf; ``FINITE_SAFE_MATH`` does all of that but
# keeps NaN/inf semantics — what code that must propagate NaN or handle ±inf (mathlib) uses.
FAST_MATH: tuple[str, ...] = ("fast",)
FINITE_SAFE_MATH: tuple[str, ...] = ("contract", "reassoc", "nsz", "arcp", "afn")

LLVM_LOCK = threading.RLock()
_INIT_LOCK = threading.Lock()
_host: _Host | None = None
_exiting = False
EXIT_WAIT_S = 30.0  # at exit, how long to wait for a compile in flight


@contextlib.contextmanager
def _llvm() -> Iterator[None]:
    """LLVM_LOCK held, unless the interpreter is exiting (then RuntimeError: no new LLVM work)."""
    with LLVM_LOCK:
        if _exiting:
            raise RuntimeError("LLVM is closed: the interpreter is exiting")
        yield


@atexit.register
def _close_at_exit() -> None:
    """Let the LLVM work in flight finish and refuse more. LLVM's static destructors run when the
    process exits; a daemon thread (the JIT's compiler binding kernels, the calibrator) still inside
    LLVM then crashed the exit with an assertion or a segfault (here: 5 exits in 6 of a script that
    ended while the compiler thread built kernels)."""
    global _exiting
    if LLVM_LOCK.acquire(timeout=EXIT_WAIT_S):
        _exiting = True
        LLVM_LOCK.release()


@dataclass(frozen=True)
class _Host:
    llvm: Any  # llvmlite.binding
    triple: str
    cpu: str
    features: str
    machine: Any  # the host TargetMachine that optimises and emits objects (used under LLVM_LOCK)
    emitters: dict[int, Any] = field(default_factory=dict)  # by code generation level, made on first use

    def target_machine(self, opt: int = 3) -> Any:
        return _target_machine(self.llvm, self.triple, self.cpu, self.features, opt)

    def emitter(self, level: int) -> Any:
        """The TargetMachine that emits objects at code generation ``level`` (under LLVM_LOCK)."""
        if level == 3:
            return self.machine
        machine = self.emitters.get(level)
        if machine is None:
            machine = self.emitters[level] = self.target_machine(level)
        return machine


def _target_machine(llvm: Any, triple: str, cpu: str, features: str, opt: int = 3) -> Any:
    target = llvm.Target.from_triple(triple)
    return target.create_target_machine(cpu=cpu, features=features, opt=opt, reloc="default",
                                        codemodel="jitdefault", jit=True)


def _init() -> _Host:
    """Initialise llvmlite's native target once (thread-safe) and describe the host."""
    global _host
    if _host is None:
        with _INIT_LOCK:
            if _host is None:
                import llvmlite.binding as llvm

                llvm.initialize_native_target()
                llvm.initialize_native_asmprinter()
                llvm.initialize_native_asmparser()
                triple, cpu = llvm.get_process_triple(), llvm.get_host_cpu_name()
                features = llvm.get_host_cpu_features().flatten()
                _host = _Host(llvm, triple, cpu, features, _target_machine(llvm, triple, cpu, features))
    return _host


def binding() -> Any:
    """``llvmlite.binding``, initialised for the host."""
    return _init().llvm


def target_identity() -> dict[str, str]:
    """Who generates the code: triple, CPU name, CPU features and LLVM version (for cache keys)."""
    host = _init()
    version = ".".join(map(str, host.llvm.llvm_version_info))
    return {"triple": host.triple, "cpu": host.cpu, "features": host.features, "llvm": version}


def target_machine() -> Any:
    """A fresh host ``TargetMachine`` (O3); an MCJIT engine takes ownership of the one it gets."""
    return _init().target_machine()


@dataclass
class CompileTimes:
    """Milliseconds spent in each phase of one compile."""

    parse_ms: float = 0.0
    optimize_ms: float = 0.0
    codegen_ms: float = 0.0

    @property
    def total_ms(self) -> float:
        return self.parse_ms + self.optimize_ms + self.codegen_ms

    def __add__(self, other: CompileTimes) -> CompileTimes:
        return CompileTimes(self.parse_ms + other.parse_ms, self.optimize_ms + other.optimize_ms,
                            self.codegen_ms + other.codegen_ms)

    def as_dict(self) -> dict[str, float]:
        return {"parse_ms": self.parse_ms, "optimize_ms": self.optimize_ms, "codegen_ms": self.codegen_ms}


@dataclass
class ObjectBuild:
    """The products of compiling IR to an object file (what the compile worker sends back)."""

    object_code: bytes
    optimized_ir: str
    asm: str
    times: CompileTimes = field(default_factory=CompileTimes)


class NativeLibrary:
    """Machine code loaded into this process; symbols stay callable while this object is alive.

    Immutable once built. ``llvm_ir``/``optimized_ir`` are empty for code loaded from an object
    file compiled elsewhere, unless the caller passed them along.
    """

    def __init__(self, name: str, engine: Any, *, llvm_ir: str, optimized_ir: str, asm: str | None,
                 times: CompileTimes, module: Any = None) -> None:
        self.name = name
        self.llvm_ir = llvm_ir
        self.optimized_ir = optimized_ir
        self.times = times
        self._engine = engine
        self._module = module
        self._asm = asm
        self._addresses: dict[str, int] = {}

    def address(self, symbol: str) -> int:
        """The entry address of ``symbol``; KeyError when the library does not define it."""
        addr = self._addresses.get(symbol)
        if addr is None:
            with _llvm():
                addr = self._engine.get_function_address(symbol)
            if not addr:
                raise KeyError(f"{self.name}: no symbol {symbol!r}")
            self._addresses[symbol] = addr
        return addr

    def global_address(self, symbol: str) -> int:
        """The address of the global variable ``symbol``; KeyError when the library does not define it."""
        with _llvm():
            addr = self._engine.get_global_value_address(symbol)
        if not addr:
            raise KeyError(f"{self.name}: no global {symbol!r}")
        return addr

    def ctypes_function(self, symbol: str, restype: Any, argtypes: Sequence[Any]) -> Any:
        """``symbol`` as a ctypes function (it releases the GIL while native code runs)."""
        fn = ctypes.CFUNCTYPE(restype, *argtypes)(self.address(symbol))
        fn._msvm_library = self  # the function keeps the code alive
        return fn

    @property
    def asm(self) -> str:
        """The assembly text (generated on first access for in-process compiles)."""
        if self._asm is None:
            with _llvm():
                self._asm = target_machine().emit_assembly(self._module)
        return self._asm

    def __repr__(self) -> str:
        return f"<NativeLibrary {self.name} {self.times.total_ms:.1f} ms>"


def _parse_and_optimize(ir: str, name: str, times: CompileTimes, opt_level: int, unroll: bool = True,
                        slp: bool = True) -> Any:
    host = _init()
    llvm = host.llvm
    t0 = time.perf_counter()
    module = llvm.parse_assembly(ir)
    module.name = name
    module.verify()
    t1 = time.perf_counter()
    module.triple = host.triple
    module.data_layout = str(host.machine.target_data)
    pto = llvm.PipelineTuningOptions(speed_level=opt_level)
    pto.loop_vectorization = opt_level >= 2
    pto.slp_vectorization = opt_level >= 2 and slp
    pto.loop_unrolling = opt_level >= 2 and unroll
    pb = llvm.create_pass_builder(host.machine, pto)
    pb.getModulePassManager().run(module, pb)
    t2 = time.perf_counter()
    times.parse_ms = (t1 - t0) * 1e3
    times.optimize_ms = (t2 - t1) * 1e3
    return module


def compile_ir(ir: str, name: str = "module", *, opt_level: int = 3) -> NativeLibrary:
    """Parse, verify, optimise (O``opt_level``) and JIT-compile ``ir`` into this process.

    Raises ``RuntimeError`` with LLVM's message on invalid IR.
    """
    times = CompileTimes()
    with _llvm():
        module = _parse_and_optimize(ir, name, times, opt_level)
        optimized = str(module)
        t0 = time.perf_counter()
        engine = binding().create_mcjit_compiler(module, target_machine())
        engine.finalize_object()
        times.codegen_ms = (time.perf_counter() - t0) * 1e3
    return NativeLibrary(name, engine, llvm_ir=ir, optimized_ir=optimized, asm=None, times=times,
                         module=module)


def build_object(ir: str, name: str = "module", *, opt_level: int = 3, unroll: bool = True, slp: bool = True,
                 codegen: int = 3, with_asm: bool = True, with_ir: bool = True) -> ObjectBuild:
    """Compile ``ir`` to a relocatable object file for the host (plus, when asked, the optimised IR
    and the assembly: printing them costs as much as a small kernel's compile, so the JIT asks only
    when someone looks). ``unroll=False`` skips the loop unroller (the vectoriser still interleaves),
    ``slp=False`` the straight-line vectoriser (code whose vectors are loops' or written out).
    ``codegen``: the code generator's level — 0 selects instructions one by one and allocates
    registers greedily per block, for code without loops about 3× faster to emit."""
    times = CompileTimes()
    with _llvm():
        module = _parse_and_optimize(ir, name, times, opt_level, unroll, slp)
        t0 = time.perf_counter()
        machine = _init().emitter(codegen)
        obj = machine.emit_object(module)
        asm = machine.emit_assembly(module) if with_asm else ""
        times.codegen_ms = (time.perf_counter() - t0) * 1e3
        return ObjectBuild(bytes(obj), str(module) if with_ir else "", asm, times)


def emit_object(ir: str, name: str = "module") -> bytes:
    """Object code for ``ir`` (optimised at O3 for the host), to load with ``load_object``."""
    return build_object(ir, name, with_asm=False, with_ir=False).object_code


def load_object(obj: bytes | Sequence[bytes], name: str = "object", *, llvm_ir: str = "",
                optimized_ir: str = "", asm: str = "", times: CompileTimes | None = None) -> NativeLibrary:
    """Load object code compiled elsewhere (the compile worker): one object, or several that call each
    other (symbols are resolved by name, across them).

    The objects must have been built for this host (compare ``target_identity()``).
    """
    llvm = binding()
    with _llvm():
        t0 = time.perf_counter()
        holder = llvm.parse_assembly("")
        holder.triple = _init().triple
        engine = llvm.create_mcjit_compiler(holder, target_machine())
        for part in [obj] if isinstance(obj, (bytes, bytearray)) else obj:
            engine.add_object_file(llvm.ObjectFileRef.from_data(bytes(part)))
        engine.finalize_object()
        load_ms = (time.perf_counter() - t0) * 1e3
    if times is None:
        times = CompileTimes(codegen_ms=load_ms)
    return NativeLibrary(name, engine, llvm_ir=llvm_ir, optimized_ir=optimized_ir, asm=asm, times=times)
