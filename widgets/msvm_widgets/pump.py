"""The one coalescing pump through which VM and JIT threads update widgets, on the kernel's event loop.

Why: since ipykernel 7, output and widget messages sent from background threads reach the front end
unreliably, and a compiler thread firing per event would flood the comm channel. So producers, on any
thread, only ``submit(widget, key, apply)``: the latest ``apply`` per (widget, key) wins, and the
kernel's asyncio loop runs the pending ones at most ``max_hz`` times a second, each widget's inside its
``hold_sync()`` so that one comm message carries all of its changes. Without a running loop (plain
Python, tests), updates wait for ``flush()``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

Apply = Callable[[], None]


class UpdatePump:
    """Coalesces widget updates from any thread and applies them on one event loop, throttled."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None, max_hz: float = 15.0) -> None:
        if not 0 < max_hz <= 60:
            raise ValueError(f"max_hz must be in (0, 60], got {max_hz}")
        self.loop = loop
        self.interval = 1.0 / max_hz
        self.applied = 0  # drains that applied at least one update (for tests and curiosity)
        self._lock = threading.Lock()
        self._pending: dict[tuple[int, str], tuple[Any, Apply]] = {}
        self._armed = False
        self._last = float("-inf")

    def submit(self, widget: Any, key: str, apply: Apply) -> None:
        """Schedule ``apply()`` (replacing an earlier one for the same widget and key). Thread-safe."""
        with self._lock:
            self._pending[(id(widget), key)] = (widget, apply)
            if self._armed:
                return
            self._armed = True
        loop = self.loop
        if loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(self._arm)
        except RuntimeError:  # the loop closed between the check and the call
            log.debug("msvm update pump: event loop closed; updates wait for flush()")

    def flush(self) -> int:
        """Apply every pending update now, on the calling thread; returns how many ran."""
        with self._lock:
            pending, self._pending = self._pending, {}
            self._armed = False
        if not pending:
            return 0
        by_widget: dict[int, tuple[Any, list[Apply]]] = {}
        for (wid, _key), (widget, apply) in pending.items():
            by_widget.setdefault(wid, (widget, []))[1].append(apply)
        for widget, applies in by_widget.values():
            hold = getattr(widget, "hold_sync", None)
            if hold is None:
                self._run(applies)
            else:
                with hold():
                    self._run(applies)
        self.applied += 1
        return len(pending)

    @staticmethod
    def _run(applies: list[Apply]) -> None:
        for apply in applies:
            try:
                apply()
            except Exception:  # one broken view must not stop the others, nor the producer thread
                log.exception("msvm widget update failed")

    def _arm(self) -> None:
        assert self.loop is not None
        delay = max(0.0, self._last + self.interval - self.loop.time())
        self.loop.call_later(delay, self._drain)

    def _drain(self) -> None:
        assert self.loop is not None
        self._last = self.loop.time()
        self.flush()


_DEFAULT: UpdatePump | None = None


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def default_pump() -> UpdatePump:
    """The process's pump, bound to the kernel's loop (call it from the kernel's thread, e.g. in a cell)."""
    global _DEFAULT
    loop = _running_loop()
    stale = _DEFAULT is None or (_DEFAULT.loop is None and loop is not None)
    if _DEFAULT is not None and _DEFAULT.loop is not None and _DEFAULT.loop.is_closed():
        stale = True
    if stale:
        _DEFAULT = UpdatePump(loop)
    assert _DEFAULT is not None
    return _DEFAULT
