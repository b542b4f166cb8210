"""The one coalescing pump through which VM and JIT threads update widgets, on its own thread, throttled.

Why a thread of its own: while a cell runs, the kernel's event loop gets no turn until the cell ends,
so a pump on that loop showed nothing live (a 20 s loop left the monitor at ``Cache (0)``). ipywidgets
comm messages may be sent from any thread (ipykernel routes them through its IOPub thread), so the
pump thread applies the updates itself. Producers, on any thread, only ``submit(widget, key, apply)``:
the latest ``apply`` per (widget, key) wins, and the pump runs the pending ones at most ``max_hz``
times a second, each widget's inside its ``hold_sync()`` so that one comm message carries all of its
changes; a costly redraw may ask to run at most every so many seconds, so that many open views do
not take the GIL from the user's code. ``poll`` registers an update that runs on every tick while it
is registered (a running cell's progress). Views that also redraw on the kernel's thread (a button
click) do so under ``applying()``, so two threads never interleave one widget's changes.
``background=False`` (tests, plain Python) leaves updates waiting for ``flush()``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

log = logging.getLogger(__name__)

Apply = Callable[[], None]
Key = tuple[int, str]
# The least time between two redraws of a view that re-reads the JIT's whole state (about a millisecond
# each, with the GIL): a notebook may hold many such views, all following the same events.
COSTLY_EVERY = 0.5


class UpdatePump:
    """Coalesces widget updates from any thread and applies them on the pump thread, throttled."""

    def __init__(self, max_hz: float = 10.0, *, background: bool = True) -> None:
        if not 0 < max_hz <= 60:
            raise ValueError(f"max_hz must be in (0, 60], got {max_hz}")
        self.interval = 1.0 / max_hz
        self.background = background
        self.applied = 0  # ticks that applied at least one update (for tests and curiosity)
        self._lock = threading.Lock()  # guards the tables below
        self._pending: dict[Key, tuple[Any, Apply, float]] = {}  # ... and when it is due
        self._polls: dict[Key, tuple[Any, Apply]] = {}
        self._done: dict[Key, float] = {}  # when each key was last applied
        self._applying = threading.RLock()  # one thread at a time changes widgets
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._last = float("-inf")

    # -- producers (any thread) -------------------------------------------------------------------------
    def submit(self, widget: Any, key: str, apply: Apply, every: float = 0.0) -> None:
        """Schedule ``apply()`` once (replacing an earlier one for the same widget and key), no sooner than
        ``every`` seconds after this key's last update (a costly redraw asks for fewer). Thread-safe."""
        k = (id(widget), key)
        with self._lock:
            self._pending[k] = (widget, apply, self._done.get(k, float("-inf")) + every)
        self._kick()

    def poll(self, widget: Any, key: str, apply: Apply) -> None:
        """Run ``apply()`` on every tick until ``unpoll(widget, key)``. Thread-safe."""
        with self._lock:
            self._polls[(id(widget), key)] = (widget, apply)
        self._kick()

    def unpoll(self, widget: Any, key: str) -> None:
        with self._lock:
            self._polls.pop((id(widget), key), None)

    @contextlib.contextmanager
    def applying(self) -> Iterator[None]:
        """Hold while changing a pumped widget from another thread (the kernel's, on a click)."""
        with self._applying:
            yield

    # -- applying ---------------------------------------------------------------------------------------
    def flush(self) -> int:
        """Apply every pending update (due or not) and run every poll now, on the calling thread; returns
        how many ran."""
        return self._apply(float("inf"))

    def _apply(self, now: float) -> int:
        with self._applying:
            with self._lock:
                due = [(k, (w, a)) for k, (w, a, at) in self._pending.items() if at <= now]
                for k, _ in due:
                    del self._pending[k]
                    self._done[k] = time.monotonic()
                taken = {k for k, _ in due}
                work = due + [item for item in self._polls.items() if item[0] not in taken]
            if not work:
                return 0
            by_widget: dict[int, tuple[Any, list[Apply]]] = {}
            for (wid, _key), (widget, apply) in work:
                by_widget.setdefault(wid, (widget, []))[1].append(apply)
            for widget, applies in by_widget.values():
                hold = getattr(widget, "hold_sync", None)
                if hold is None:
                    self._run(applies)
                else:
                    with hold():
                        self._run(applies)
            self.applied += 1
            return len(work)

    @staticmethod
    def _run(applies: list[Apply]) -> None:
        for apply in applies:
            try:
                apply()
            except Exception:  # one broken view must not stop the others, nor the pump
                log.exception("msvm widget update failed")

    def _kick(self) -> None:
        if not self.background:
            return
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._loop, name="msvm-widget-pump", daemon=True)
                    self._thread.start()
        if not self._wake.is_set():  # a traced instruction may submit: keep the common case cheap
            self._wake.set()

    def _timeout(self) -> float | None:
        """How long the pump may sleep: until the earliest pending update is due, a tick while polling,
        for ever (until a producer wakes it) when idle."""
        with self._lock:
            waits = [at - time.monotonic() for _w, _a, at in self._pending.values()]
            if self._polls:
                waits.append(self.interval)
        return max(min(waits), 0.0) if waits else None

    def _loop(self) -> None:
        while True:
            timeout = self._timeout()
            if timeout is None or timeout > 0:
                self._wake.wait(timeout)
            self._wake.clear()
            delay = self._last + self.interval - time.monotonic()
            if delay > 0:
                time.sleep(delay)  # the throttle: updates arriving meanwhile join this tick
            self._last = time.monotonic()
            self._apply(self._last)


_DEFAULT: UpdatePump | None = None
_DEFAULT_LOCK = threading.Lock()


def default_pump() -> UpdatePump:
    """The process's pump (one thread for every view)."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            _DEFAULT = UpdatePump()
        return _DEFAULT
