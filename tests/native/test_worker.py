"""The compile worker: compiles out of process, survives crashes and hangs, restarts transparently."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from native_samples import SAXPY, run_saxpy

from msvm.native import worker as worker_module
from msvm.native.worker import _BOOTSTRAP, CompileWorker, Deadline, read_frame, write_frame


@pytest.fixture(scope="module")
def worker():
    w = CompileWorker()
    yield w
    w.close()


def test_frames_round_trip() -> None:
    buf = io.BytesIO()
    write_frame(buf, {"op": "x", "n": 1}, b"\x00payload")
    write_frame(buf, {"op": "y"})
    buf.seek(0)
    assert read_frame(buf) == ({"op": "x", "n": 1}, b"\x00payload")
    assert read_frame(buf) == ({"op": "y"}, b"")
    assert read_frame(buf) is None


def test_compile_and_load(worker: CompileWorker) -> None:
    result = worker.compile(SAXPY, 60, name="saxpy")
    assert result.ok, result.error
    assert result.object_code[:4] == b"\x7fELF"
    assert "saxpy" in result.asm and "define" in result.optimized_ir
    assert result.times.optimize_ms > 0 and result.wall_ms > 0 and result.cpu_ms > 0  # the worker's own CPU
    assert worker.identity is not None and worker.identity["cpu"]
    run_saxpy(result.load("from_worker", llvm_ir=SAXPY))


def test_llvm_error_is_a_result_not_a_crash(worker: CompileWorker) -> None:
    pid = worker.pid
    result = worker.compile("this is not IR", 60)
    assert not result.ok and not result.crashed and "parsing" in result.error
    assert worker.pid == pid


def test_injected_error(worker: CompileWorker) -> None:
    result = worker.compile(SAXPY, 60, inject="error")
    assert not result.ok and not result.crashed and "injected" in result.error


def test_crash_leaves_parent_alive_and_next_compile_works(worker: CompileWorker) -> None:
    worker.compile(SAXPY, 60)
    starts, pid = worker.starts, worker.pid
    result = worker.compile(SAXPY, 60, inject="crash")
    assert result.crashed and not result.ok
    assert result.signal == "SIGABRT" and result.exit_code == -6
    assert "crashed" in result.error
    assert os.getpid()  # still here
    again = worker.compile(SAXPY, 60)
    assert again.ok and worker.starts == starts + 1 and worker.pid != pid


def test_hang_is_killed_at_the_timeout_and_next_compile_works(worker: CompileWorker) -> None:
    worker.compile(SAXPY, 60)
    starts = worker.starts
    result = worker.compile(SAXPY, 1.0, inject="hang")
    assert result.timed_out and not result.ok and "timed out" in result.error
    assert 900 <= result.wall_ms < 10_000
    again = worker.compile(SAXPY, 60)
    assert again.ok and worker.starts == starts + 1


def test_time_waiting_for_a_cpu_does_not_count_against_the_timeout(monkeypatch) -> None:
    clock = {"now": 100.0, "waiting": 3.0}
    monkeypatch.setattr(worker_module.time, "monotonic", lambda: clock["now"])
    deadline = Deadline(2.0, lambda: clock["waiting"])
    clock["now"] += 1.5
    assert deadline.remaining() == pytest.approx(0.5)
    clock["now"] += 1.0
    clock["waiting"] += 0.8  # of that second the worker ran 0.2 s: it has 0.3 s left
    assert deadline.remaining() == pytest.approx(0.3)
    clock["now"] += 0.3
    assert deadline.remaining() <= 0


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="SCHED_IDLE is Linux's")
def test_an_idle_worker_yields_to_the_program_and_runs_background_requests_at_idle_priority() -> None:
    w = CompileWorker(idle=True)
    assert w.compile(SAXPY, 60).ok
    assert os.sched_getscheduler(w.pid) == os.SCHED_OTHER
    assert os.getpriority(os.PRIO_PROCESS, w.pid) == worker_module.URGENT_NICE
    assert w.compile(SAXPY, 60, background=True).ok
    policies = {os.sched_getscheduler(int(tid)) for tid in os.listdir(f"/proc/{w.pid}/task")}
    assert policies == {os.SCHED_OTHER, os.SCHED_IDLE}  # the main thread, and the background one
    assert worker_module._waiting_s(w.pid) >= 0.0
    w.close()
    plain = CompileWorker()
    assert plain.compile(SAXPY, 60, background=True).ok and os.sched_getscheduler(plain.pid) == os.SCHED_OTHER
    assert len(os.listdir(f"/proc/{plain.pid}/task")) == 1 and os.getpriority(os.PRIO_PROCESS, plain.pid) == 0
    plain.close()


def test_bad_injection_name_is_rejected(worker: CompileWorker) -> None:
    with pytest.raises(ValueError):
        worker.compile(SAXPY, 1, inject="explode")


def test_close_and_lazy_restart() -> None:
    w = CompileWorker()
    assert w.pid is None and w.starts == 0  # started lazily
    assert w.compile(SAXPY, 60).ok
    w.close()
    assert w.pid is None
    assert w.compile(SAXPY, 60).ok and w.starts == 2
    w.close()


def test_a_worker_that_cannot_start_is_a_result() -> None:
    w = CompileWorker(python="/nonexistent/python")
    result = w.compile(SAXPY, 5)
    assert not result.ok and result.crashed
    w.close()


def test_prestart_starts_it_in_the_background() -> None:
    w = CompileWorker()
    w.prestart()
    result = w.compile(SAXPY, 60)  # waits for the start in flight, does not start a second one
    assert result.ok and w.starts == 1
    w.close()


def test_listings_only_when_asked(worker: CompileWorker) -> None:
    result = worker.compile(SAXPY, 60, opt_level=2, unroll=False, with_asm=False, with_ir=False)
    assert result.ok and result.object_code[:4] == b"\x7fELF"
    assert result.asm == "" and result.optimized_ir == ""
    run_saxpy(result.load("bare", llvm_ir=SAXPY))


def test_worker_process_imports_neither_the_vm_nor_numpy() -> None:
    loaded = "print(sorted(m for m in sys.modules if m.startswith(('msvm', 'numpy'))))"
    probe = _BOOTSTRAP.replace("main()", loaded)
    out = subprocess.run([sys.executable, "-c", probe, str(Path(worker_module.__file__).parents[1])],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['msvm', 'msvm.native', 'msvm.native.llvm', 'msvm.native.worker']"


def test_calls_run_msvm_functions_only_and_their_errors_are_results() -> None:
    w = CompileWorker()
    try:
        w.prestart(preload="msvm.no_such_module")  # an unknown preload is refused, the worker stays up
        with pytest.raises(ValueError):
            w.call("os:system", {"cmd": "true"})
        bad = w.call("msvm.msjit.codegen.region:lower_in_worker", {}, b"not a module")
        assert not bad.ok and not bad.crashed and bad.error.startswith("BytecodeFormatError")
        assert w.compile(SAXPY, 60).ok and w.starts == 1
    finally:
        w.close()
