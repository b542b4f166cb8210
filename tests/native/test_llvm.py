"""msvm.native.llvm: compile in process, emit/load object code, assembly, timings, thread safety."""

from __future__ import annotations

import sys
import threading

import pytest
from native_samples import SAXPY, run_saxpy

from msvm.native import llvm


def test_import_msvm_does_not_load_llvmlite() -> None:
    code = "import sys, msvm, msvm.kernels, msvm.native.blas; print('llvmlite.binding' in sys.modules)"
    import subprocess

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_compile_ir_runs_and_reports_phases() -> None:
    lib = llvm.compile_ir(SAXPY, "saxpy_test")
    run_saxpy(lib)
    assert lib.llvm_ir == SAXPY
    assert "define" in lib.optimized_ir and "saxpy" in lib.optimized_ir
    assert "<8 x float>" in lib.optimized_ir  # the loop vectoriser ran for AVX2
    assert "saxpy" in lib.asm and ("ymm" in lib.asm or "zmm" in lib.asm)  # AVX2 or AVX-512 vectors
    t = lib.times
    assert t.parse_ms > 0 and t.optimize_ms > 0 and t.codegen_ms > 0
    assert t.total_ms == pytest.approx(t.parse_ms + t.optimize_ms + t.codegen_ms)
    with pytest.raises(KeyError, match="no symbol"):
        lib.address("missing")


def test_invalid_ir_raises_with_llvm_message() -> None:
    with pytest.raises(RuntimeError, match="error"):
        llvm.compile_ir("define void @f( {", "bad")


def test_emit_object_load_object_round_trip() -> None:
    obj = llvm.emit_object(SAXPY, "saxpy_obj")
    assert obj[:4] == b"\x7fELF"
    lib = llvm.load_object(obj, "loaded")
    run_saxpy(lib)
    build = llvm.build_object(SAXPY, "saxpy_obj")
    assert "saxpy" in build.asm and "define" in build.optimized_ir and build.times.total_ms > 0


# Four independent adds stored side by side: straight-line code only the SLP vectoriser turns into a vector.
_STRAIGHT = """
define void @add4(float* noalias %a, float* noalias %b) {
""" + "".join(f"""  %pa{i} = getelementptr float, float* %a, i64 {i}
  %pb{i} = getelementptr float, float* %b, i64 {i}
  %x{i} = load float, float* %pa{i}
  %y{i} = load float, float* %pb{i}
  %s{i} = fadd float %x{i}, %y{i}
  store float %s{i}, float* %pa{i}
""" for i in range(4)) + "  ret void\n}\n"


def test_build_object_slp_switch() -> None:
    """``slp=False`` (the JIT's regions) leaves straight-line code scalar; the default vectorises it."""
    assert "<4 x float>" in llvm.build_object(_STRAIGHT, "slp", opt_level=2).optimized_ir
    assert "<4 x float>" not in llvm.build_object(_STRAIGHT, "noslp", opt_level=2, slp=False).optimized_ir


def test_target_identity_names_the_code_generator() -> None:
    ident = llvm.target_identity()
    assert set(ident) == {"triple", "cpu", "features", "llvm"}
    assert ident["triple"] and ident["cpu"] and "+" in ident["features"]


def test_concurrent_compiles_from_threads() -> None:
    errors: list[BaseException] = []

    def work() -> None:
        try:
            run_saxpy(llvm.compile_ir(SAXPY, "threaded"))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


_EXIT_SCRIPT = """
import atexit, sys, threading, time

@atexit.register  # registered before msvm.native.llvm's own handler, so it runs after it
def after_llvm_closed():
    print("waited", bool(released), flush=True)
    try:
        llvm.compile_ir(SAXPY, "after")
    except RuntimeError as exc:
        print("refused:", exc, flush=True)

from msvm.native import llvm
from native_samples import SAXPY
llvm.compile_ir(SAXPY, "warm")
released = []

def hold():  # a compile in flight when the main thread exits
    with llvm.LLVM_LOCK:
        time.sleep(0.5)
        released.append(time.monotonic())

threading.Thread(target=hold, daemon=True).start()
time.sleep(0.1)
"""


def test_exit_waits_for_the_compile_in_flight_and_refuses_more() -> None:
    """At exit LLVM work in flight on a daemon thread finishes before LLVM goes away, and none starts after
    (a script ending while the JIT's compiler thread built kernels crashed in LLVM 5 exits in 6)."""
    import os
    import subprocess
    from pathlib import Path

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), *sys.path])}
    out = subprocess.run([sys.executable, "-c", _EXIT_SCRIPT], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "waited True" in out.stdout and "refused: LLVM is closed" in out.stdout, out.stdout + out.stderr
