"""The compile worker: LLVM compiles in a separate process, so a crash or hang never takes the user's down.

The worker (a Python process that imports only this module and ``llvm``, started with
``subprocess`` — never ``fork``, since the parent has threads and LLVM state) reads requests on
stdin and answers on stdout. A message is a frame: two big-endian u32 lengths (JSON header, raw
payload), the UTF-8 JSON header, then the payload. Nothing is pickled. A compile request carries the
IR text as payload; the answer carries the object code, optimised IR and assembly back to back
(their lengths in the header; the last two only when asked for), or an error text. A ``call``
request runs a function of the msvm package in the worker, ``fn(header, payload) -> (header,
[blocks])``: how the JIT lowers regions there, so that its Python runs outside the user's process
(the worker imports the code generator on its first such call).

``CompileWorker`` is the parent's client: started lazily (or early and in the background by
``prestart``), thread-safe (one request at a time), and self-healing — when the worker dies
(``crashed``, with its signal or exit code) or overruns its timeout (``timed_out``: it is killed),
the result says so and the next request starts a fresh worker. A timeout counts the worker's own
time: where the worker yields to the program (``idle=True``) and the user's code keeps every core
busy, the time it waits for a CPU (Linux: ``/proc/<pid>/task/*/schedstat``) extends its deadline — a
slow compile is not a hung one. Requests can inject faults for
tests: ``inject="crash"`` (``os.abort()``), ``"hang"`` (sleeps forever) or ``"error"`` (raises
inside the worker).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import importlib
import importlib.util
import json
import os
import select
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, BinaryIO

from .llvm import CompileTimes, NativeLibrary, load_object

_FRAME = struct.Struct(">II")
PROTOCOL_VERSION = 2
# An idle worker's priority for what the program waits for: nice 4 weighs 423 against a program
# thread's 1024, so on a core both want it takes 29 % — a real share, bounded — where SCHED_IDLE,
# its priority before, got nothing while the program (or anything else) kept every core busy.
URGENT_NICE = 4
INJECTIONS = ("crash", "hang", "error")


def write_frame(stream: BinaryIO, header: dict[str, Any], payload: bytes = b"") -> None:
    """Write one message: lengths, JSON header, raw payload."""
    head = json.dumps(header).encode()
    stream.write(_FRAME.pack(len(head), len(payload)) + head + payload)
    stream.flush()


def read_frame(stream: BinaryIO) -> tuple[dict[str, Any], bytes] | None:
    """Read one message; None at a clean end of stream."""
    prefix = stream.read(_FRAME.size)
    if not prefix:
        return None
    if len(prefix) < _FRAME.size:
        raise EOFError("truncated frame header")
    head_len, payload_len = _FRAME.unpack(prefix)
    head = stream.read(head_len)
    payload = stream.read(payload_len)
    if len(head) < head_len or len(payload) < payload_len:
        raise EOFError("truncated frame")
    return json.loads(head), payload


@dataclass
class WorkerResult:
    """The outcome of one request to the worker: products, or why there are none."""

    object_code: bytes = b""
    optimized_ir: str = ""
    asm: str = ""
    times: CompileTimes = field(default_factory=CompileTimes)
    error: str | None = None
    crashed: bool = False
    timed_out: bool = False
    exit_code: int | None = None  # the worker's exit status when it died
    signal: str | None = None  # e.g. "SIGABRT" when a signal killed it
    wall_ms: float = 0.0  # round trip seen by the parent
    cpu_ms: float = 0.0  # CPU time the worker spent on the request
    reply: dict[str, Any] = field(default_factory=dict)  # a ``call``'s answer header
    payload: bytes = b""  # and its blocks, back to back

    @property
    def ok(self) -> bool:
        return self.error is None

    def load(self, name: str, *, llvm_ir: str = "") -> NativeLibrary:
        """The object code loaded into this process (only when ``ok``)."""
        if not self.ok:
            raise RuntimeError(f"no object code to load: {self.error}")
        return load_object(self.object_code, name, llvm_ir=llvm_ir, optimized_ir=self.optimized_ir,
                           asm=self.asm, times=self.times)


class Deadline:
    """``timeout_s`` of a worker's own time: time it spent runnable but waiting for a CPU (``waiting()``,
    a growing count of seconds) does not count."""

    def __init__(self, timeout_s: float, waiting: Callable[[], float]) -> None:
        self._waiting = waiting
        self._end = time.monotonic() + timeout_s - waiting()

    def remaining(self) -> float:
        return self._end + self._waiting() - time.monotonic()


def _waiting_s(pid: int) -> float:
    """Seconds the threads of process ``pid`` have spent runnable but not running (0.0 where the kernel
    does not say)."""
    total = 0.0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0.0
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[1]) / 1e9
        except (OSError, ValueError, IndexError):
            continue
    return total


class CompileWorker:
    """Client of one compile worker process; see the module docstring."""

    def __init__(self, *, python: str = sys.executable, start_timeout_s: float = 60.0, idle: bool = False
                 ) -> None:
        """``idle``: the worker yields to the program — at ``URGENT_NICE`` from its first instruction —
        and requests asked for in the ``background`` run on a thread that gets only CPUs nothing else
        wants (Linux ``SCHED_IDLE``, elsewhere the lowest nice value)."""
        self._python = python
        self._idle = idle
        self._start_timeout_s = start_timeout_s
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._stderr: IO[bytes] | None = None
        self._next_id = 0
        self.starts = 0  # how many worker processes this client has started
        self.identity: dict[str, str] | None = None  # the worker's target_identity()
        self._finalizer = weakref.finalize(self, CompileWorker._kill, None)

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def prestart(self, preload: str | None = None) -> None:
        """Start the worker process on a background thread now, so the first ``compile`` finds it ready
        (starting one costs about half a second), and have it import ``preload`` (an msvm module the
        first ``call`` will need) meanwhile; a start that fails is retried by ``compile``."""
        threading.Thread(target=self._start_quietly, args=(preload,), name="msvm-worker-start",
                         daemon=True).start()

    def _start_quietly(self, preload: str | None) -> None:
        with self._lock:
            try:
                self._ensure_started()
                if preload is not None:
                    self._exchange({"op": "import", "module": preload}, b"", self._start_timeout_s)
            except (OSError, RuntimeError):
                self._stop(graceful=False)

    def compile(self, ir: str, timeout_s: float = 60.0, *, name: str = "module", opt_level: int = 3,
                unroll: bool = True, with_asm: bool = True, with_ir: bool = True,
                inject: str | None = None, background: bool = False) -> WorkerResult:
        """Compile ``ir`` to host object code in the worker (waits at most ``timeout_s``) like
        ``llvm.build_object``; the optimised IR and the assembly come back unless ``with_ir``/``with_asm``
        say no."""
        if inject is not None and inject not in INJECTIONS:
            raise ValueError(f"inject must be one of {INJECTIONS}, got {inject!r}")
        header = {"op": "compile", "name": name, "opt_level": opt_level, "unroll": unroll, "asm": with_asm,
                  "ir": with_ir, "inject": inject, "background": background}
        t0 = time.perf_counter()
        with self._lock:
            result = self._request(header, ir.encode(), timeout_s)
        result.wall_ms = (time.perf_counter() - t0) * 1e3
        return result

    def call(self, target: str, header: dict[str, Any], payload: bytes = b"", timeout_s: float = 60.0, *,
             inject: str | None = None, background: bool = False) -> WorkerResult:
        """Run ``target`` (``"msvm.module:function"``) in the worker on ``(header, payload)``; its answer is
        in ``reply``/``payload``, the compile times it reports (``times``) in ``times``."""
        if not target.startswith("msvm."):
            raise ValueError(f"the worker only runs msvm functions, not {target!r}")
        if inject is not None and inject not in INJECTIONS:
            raise ValueError(f"inject must be one of {INJECTIONS}, got {inject!r}")
        t0 = time.perf_counter()
        with self._lock:
            request = {"op": "call", "target": target, "args": header, "inject": inject,
                       "background": background}
            result = self._request(request, payload, timeout_s)
        result.wall_ms = (time.perf_counter() - t0) * 1e3
        return result

    def close(self) -> None:
        """Stop the worker (it is restarted by the next ``compile``)."""
        with self._lock:
            self._stop()

    # -- internals (called with the lock held) --------------------------------------------------

    def _ensure_started(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            return
        self._stop()
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115  (lives as long as the process)
        package = str(Path(__file__).resolve().parents[1])
        env = {**os.environ, _PATH_ENV: os.pathsep.join(p for p in sys.path if p)}
        self._proc = subprocess.Popen([self._python, "-S", "-c", _BOOTSTRAP, package, str(int(self._idle)),
                                       str(URGENT_NICE)],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
                                      close_fds=True, env=env)
        self._finalizer.detach()
        self._finalizer = weakref.finalize(self, CompileWorker._kill, self._proc)
        self.starts += 1
        reply = self._exchange({"op": "hello"}, b"", self._start_timeout_s)
        if isinstance(reply, WorkerResult):
            raise RuntimeError(f"compile worker failed to start: {reply.error}")
        header, _ = reply
        if header.get("protocol") != PROTOCOL_VERSION:
            self._stop()
            raise RuntimeError(f"compile worker speaks protocol {header.get('protocol')}, "
                               f"expected {PROTOCOL_VERSION}")
        self.identity = header["target"]

    def _request(self, header: dict[str, Any], payload: bytes, timeout_s: float) -> WorkerResult:
        try:
            self._ensure_started()
        except (OSError, RuntimeError) as exc:
            self._stop(graceful=False)
            return WorkerResult(error=str(exc), crashed=True)
        reply = self._exchange(header, payload, timeout_s)
        if isinstance(reply, WorkerResult):
            return reply
        head, data = reply
        times = CompileTimes(**head.get("times", {}))
        if not head.get("ok"):
            return WorkerResult(error=head.get("error", "unknown worker error"), times=times)
        cpu_ms = float(head.get("cpu_ms", 0.0))
        if header["op"] == "call":
            return WorkerResult(times=times, reply=head, payload=data, cpu_ms=cpu_ms)
        n_obj, n_ir = head["object_len"], head["ir_len"]
        return WorkerResult(object_code=data[:n_obj], optimized_ir=data[n_obj:n_obj + n_ir].decode(),
                            asm=data[n_obj + n_ir:].decode(), times=times, cpu_ms=cpu_ms)

    def _exchange(self, header: dict[str, Any], payload: bytes, timeout_s: float
                  ) -> tuple[dict[str, Any], bytes] | WorkerResult:
        """Send one request and read its reply, or describe how the worker failed."""
        proc = self._proc
        assert proc is not None and proc.stdin is not None and proc.stdout is not None
        self._next_id += 1
        header = {**header, "id": self._next_id}
        deadline = Deadline(timeout_s, lambda: _waiting_s(proc.pid))
        try:
            write_frame(proc.stdin, header, payload)
            prefix = self._read_exact(_FRAME.size, deadline)
            head_len, payload_len = _FRAME.unpack(prefix)
            head = json.loads(self._read_exact(head_len, deadline))
            data = self._read_exact(payload_len, deadline)
        except TimeoutError:
            self._stop(graceful=False)
            return WorkerResult(error=f"compile worker timed out after {timeout_s:g} s (killed)",
                                timed_out=True)
        except (BrokenPipeError, EOFError, OSError, ValueError):
            return self._crash_result()
        if head.get("id") != header["id"]:
            self._stop()
            return WorkerResult(error="compile worker answered out of order (restarted)", crashed=True)
        return head, data

    def _read_exact(self, n: int, deadline: Deadline) -> bytes:
        proc = self._proc
        assert proc is not None and proc.stdout is not None
        fd = proc.stdout.fileno()
        chunks, got = [], 0
        while got < n:
            remaining = deadline.remaining()
            if remaining <= 0:
                raise TimeoutError
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                continue  # the deadline may have moved: the worker was waiting for a CPU
            chunk = os.read(fd, n - got)
            if not chunk:
                raise EOFError("compile worker closed its output")
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def _crash_result(self) -> WorkerResult:
        proc = self._proc
        assert proc is not None
        try:
            code = proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        stderr = self._stderr_tail()
        self._stop()
        sig = None
        if code is not None and code < 0:
            try:
                sig = signal.Signals(-code).name
            except ValueError:
                sig = f"signal {-code}"
        how = f"killed by {sig}" if sig else f"exited with status {code}"
        detail = f": {stderr}" if stderr else ""
        return WorkerResult(error=f"compile worker crashed ({how}){detail}", crashed=True, exit_code=code,
                            signal=sig)

    def _stderr_tail(self, limit: int = 2000) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0, os.SEEK_END)
        size = self._stderr.tell()
        self._stderr.seek(max(0, size - limit))
        return self._stderr.read().decode(errors="replace").strip()

    def _stop(self, *, graceful: bool = True) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            CompileWorker._kill(proc, graceful=graceful)
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    @staticmethod
    def _kill(proc: subprocess.Popen | None, *, graceful: bool = True) -> None:
        if proc is None:
            return
        if not graceful and proc.poll() is None:
            proc.kill()
        for stream in (proc.stdin, proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        if proc.poll() is None:
            try:
                proc.wait(timeout=0.5)  # closing stdin asks it to exit
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


# -- the worker side ----------------------------------------------------------------------------

def _serve(inp: BinaryIO, out: BinaryIO) -> None:
    """Answer requests until stdin closes; one asked for in the background runs on an idle-priority
    thread (``_background_thread``) where the worker has one."""
    background = _background_thread() if os.environ.get(_IDLE_ENV) == "1" else None
    while True:
        message = read_frame(inp)
        if message is None:
            return
        header, payload = message
        if background is not None and header.get("background"):
            head, data = background.submit(_answer, header, payload).result()
        else:
            head, data = _answer(header, payload)
        write_frame(out, {**head, "id": header.get("id")}, data)


def _answer(header: dict[str, Any], payload: bytes) -> tuple[dict[str, Any], bytes]:
    """One request's answer: (header, payload)."""
    from . import llvm

    cpu = time.process_time()  # a compile's own CPU time: its wall time includes waiting for a CPU
    if header.get("op") == "hello":
        return {"protocol": PROTOCOL_VERSION, "target": llvm.target_identity()}, b""
    if header.get("op") == "import":  # a module a later call needs, imported while the parent works
        name = str(header.get("module", ""))
        ok = name.startswith("msvm.") and importlib.util.find_spec(name) is not None
        if ok:
            importlib.import_module(name)
        return {"ok": ok}, b""
    try:
        inject = header.get("inject")
        if inject == "crash":
            os.abort()
        elif inject == "hang":
            while True:
                time.sleep(3600)
        elif inject == "error":
            raise RuntimeError("injected error")
        if header.get("op") == "call":
            answer, blocks = _run(header["target"], header.get("args", {}), payload)
            return {**answer, "ok": True, "cpu_ms": (time.process_time() - cpu) * 1e3}, b"".join(blocks)
        build = llvm.build_object(payload.decode(), header.get("name", "module"),
                                  opt_level=int(header.get("opt_level", 3)),
                                  unroll=bool(header.get("unroll", True)),
                                  with_asm=bool(header.get("asm", True)),
                                  with_ir=bool(header.get("ir", True)))
    except Exception as exc:  # any failure is an answer, not a crash
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}, b""
    ir_bytes, asm_bytes = build.optimized_ir.encode(), build.asm.encode()
    return ({"ok": True, "object_len": len(build.object_code), "ir_len": len(ir_bytes),
             "times": build.times.as_dict(), "cpu_ms": (time.process_time() - cpu) * 1e3},
            build.object_code + ir_bytes + asm_bytes)


def _background_thread() -> concurrent.futures.ThreadPoolExecutor:
    """One thread at idle priority (Linux ``SCHED_IDLE``: it runs only on a CPU nothing else wants) for
    the requests asked for in the background, one at a time, while the main thread waits."""
    return concurrent.futures.ThreadPoolExecutor(1, "msvm-worker-idle", initializer=_idle_priority)


def _idle_priority() -> None:
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))  # this thread only
    except (AttributeError, OSError):
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)


def _run(target: str, args: dict[str, Any], payload: bytes) -> tuple[dict[str, Any], list[bytes]]:
    module, _, function = target.partition(":")
    if not module.startswith("msvm."):
        raise ValueError(f"the worker only runs msvm functions, not {target!r}")
    return getattr(importlib.import_module(module), function)(args, payload)


# How the parent starts a worker (``python -S -c _BOOTSTRAP <path of msvm> <idle> <nice>``, the parent's
# ``sys.path`` in ``MSVM_WORKER_PATH``: without ``site`` the start-up is 40 ms shorter). An idle worker
# lowers its priority to ``URGENT_NICE`` first — its start-up included: at the program's priority it
# took a third of a busy machine and the program's calls ran up to 2× slower meanwhile — and runs
# background requests on a thread of idle priority. The packages ``msvm`` and ``msvm.native`` are
# entered as bare namespaces, so the worker imports llvmlite and this module only — not
# ``msvm/__init__``, which loads the whole VM and would double the worker's start-up time (a ``call``
# imports what its function needs, the code generator for the JIT, on first use).
_IDLE_ENV = "MSVM_WORKER_IDLE"
_PATH_ENV = "MSVM_WORKER_PATH"
_BOOTSTRAP = """
import os, sys, types
sys.path[:0] = [p for p in os.environ.pop("MSVM_WORKER_PATH", "").split(os.pathsep) if p]
if sys.argv[2:3] == ["1"]:
    os.environ["MSVM_WORKER_IDLE"] = "1"
    try:
        os.nice(int(sys.argv[3]))
    except (OSError, IndexError, ValueError):
        pass
for name, path in (("msvm", sys.argv[1]), ("msvm.native", sys.argv[1] + "/native")):
    package = types.ModuleType(name)
    package.__path__ = [path]
    sys.modules[name] = package
from msvm.native.worker import main
main()
"""


def main() -> None:
    """Entry point of a worker process (also ``python -m msvm.native.worker``): the protocol owns the
    real stdout."""
    protocol_out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # stray prints cannot corrupt the stream
    _serve(sys.stdin.buffer, protocol_out)


if __name__ == "__main__":
    main()
