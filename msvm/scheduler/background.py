"""Calibration off the execution thread: one daemon thread, at the lowest priority, measures what the
cost model lacks and hands it to the capability DB.

Why not on the first call: measuring the host (up to 1–2 s) and calibrating an op's variants
(seconds) on the first conv or matmul of a process stalled a notebook cell that long (measured
here: 15–30 s for the first conv2d on a busy 2-core machine; now ≈ 1 s, the kernel's own compile). The
dispatcher decides at once from what the DB has — the on-disk cache of an earlier process, or
priors scaled by a quick measurement — and asks for calibration here. When an op is calibrated the
DB notifies every call site, which decides again, with calibrated rates, at its next call; the
results are saved to the on-disk cache after each op, so the next process on this host starts
calibrated and never measures.

The thread starts on the first request and ends when nothing is left to do. It lowers its own
priority (on Linux a thread has its own nice value; elsewhere the whole process would be reniced,
so it does not) and measures one thing at a time. ``MSVM_BACKGROUND_CALIBRATION=0`` switches it off:
decisions then stay on the cached or prior rates unless something calibrates synchronously
(``dump_capability_db``).

Why it is stopped at exit: a daemon thread is frozen wherever it is when the interpreter shuts
down, and OpenBLAS's exit handler then waits forever for a thread pool that a GEMM of the frozen
thread left busy (seen here: about one exit in four hung). So an ``atexit`` handler asks the
thread to stop, and every timed kernel run (``autotune.time_kernel``) is a ``checkpoint()``, which
ends the calibration within one run — or, during the host measurement, within about a second (the
handler waits at most ``STOP_TIMEOUT_S``).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
from typing import Any

STOP_TIMEOUT_S = 10.0


class CalibrationStopped(Exception):
    """Raised by ``checkpoint()`` in the calibration thread once the process is exiting."""


class Calibrator:
    """The queue of (device, op) pairs to calibrate and the thread that works through it."""

    def __init__(self) -> None:
        self.enabled = os.environ.get("MSVM_BACKGROUND_CALIBRATION", "1") != "0"
        self.errors: list[str] = []
        self._cond = threading.Condition()
        self._pending: list[tuple[str, str]] = []
        self._requested: set[tuple[str, str]] = set()  # once per process, failed or not
        self._current: tuple[str, str] | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()

    def request(self, device: str, op: str) -> None:
        """Calibrate ``op`` on ``device`` in the background, once per process; returns at once."""
        item = (device, op)
        if not self.enabled or item in self._requested:
            return
        with self._cond:
            if item in self._requested:
                return
            self._requested.add(item)
            self._pending.append(item)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="msvm-calibration", daemon=True)
                self._thread.start()

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """Drop the queue and end the thread after its current measurement (at interpreter exit)."""
        self._stopping.set()
        with self._cond:
            self._pending.clear()
            self._cond.wait_for(lambda: self._thread is None, timeout)

    def stopping(self) -> bool:
        """Whether the calling thread is this calibrator's and has been asked to stop."""
        return self._stopping.is_set() and threading.current_thread() is self._thread

    def wait(self, timeout: float | None = None) -> bool:
        """Block until nothing is queued or measuring; False if ``timeout`` (s) ran out first."""
        with self._cond:
            return self._cond.wait_for(lambda: self._thread is None, timeout)

    def forget(self) -> None:
        """Let every op be requested again (after ``reset_capability_db``); queued work stays queued."""
        with self._cond:
            self._requested = set(self._pending) | ({self._current} if self._current else set())

    def status(self) -> dict[str, Any]:
        """For the capability document: on/off, what is measuring, what waits, what failed."""
        with self._cond:
            return {"background": "on" if self.enabled else "off",
                    "calibrating": _label(self._current) if self._current else None,
                    "queued": [_label(item) for item in self._pending],
                    "errors": list(self.errors)}

    def _run(self) -> None:
        _lower_priority()
        while True:
            with self._cond:
                if not self._pending:
                    self._current = self._thread = None
                    self._cond.notify_all()
                    return
                self._current = self._pending.pop(0)
            device, op = self._current
            try:
                calibrate_and_save(device, op)
            except CalibrationStopped:
                pass
            except Exception as exc:  # the priors stay in place; the error shows in the capability DB
                self.errors.append(f"{_label(self._current)}: {type(exc).__name__}: {exc}")
            with self._cond:
                self._current = None


def checkpoint() -> None:
    """Between two measurements: end the calibration if the process is exiting (raises
    ``CalibrationStopped`` in the calibration thread only)."""
    if CALIBRATOR.stopping():
        raise CalibrationStopped


def _label(item: tuple[str, str]) -> str:
    device, op = item
    return f"{op} on {device}"


def calibrate_and_save(device: str, op: str) -> None:
    """Measure what ``op``'s cost estimates need on ``device`` (host rates, GEMM curve, its variants)
    unless already known, then save the capability DB to the on-disk cache."""
    from . import cost, persist

    cost.prepare_host(device)
    cost.ensure_calibrated(device, op)
    persist.save_db()


def _lower_priority() -> None:
    """Nice the calling thread to 19 where a thread has its own nice value (Linux)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError):  # not permitted: run at normal priority
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)


CALIBRATOR = Calibrator()
atexit.register(CALIBRATOR.stop)
