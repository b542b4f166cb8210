"""The msvm calls a cell makes: which jitted function ran on what arguments, so a dashboard can show it.

Why a subclass in the Jupyter layer: the core's call path stays untouched (no observer in the hot
path); only the functions the ``%%msvm`` magic creates record their calls, into the magic's CallLog.
Registers are not captured during the call: a view that needs them re-runs the call in the stepping
interpreter (``CallRecord.execution()``), lazily.
"""

from __future__ import annotations

import contextlib
import inspect
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from msvm.frontend import JitFunction, JitOptions
from msvm.interpreter import Execution
from msvm.observe.trace import TRACE, TraceEvent


@contextlib.contextmanager
def collect_trace() -> Iterator[list[TraceEvent]]:
    """The trace events recorded while the block runs (every thread's: the compiler's too), tracing
    turned on in memory for it if it was off."""
    events: list[TraceEvent] = []
    turned_on = not TRACE.enabled
    TRACE.subscribe(events.append)
    if turned_on:
        TRACE.enable(True, path=None)
    try:
        yield events
    finally:
        TRACE.unsubscribe(events.append)
        if turned_on:
            TRACE.enable(False)


def describe_value(value: Any) -> str:
    """``float32[2, 3, 8, 8]`` for arrays, ``repr`` for the rest (scalars, ``ms.mutable``)."""
    shape = getattr(value, "shape", None)
    if shape is not None and hasattr(value, "dtype"):
        return f"{value.dtype}{list(shape)}"
    if isinstance(value, tuple):
        return "(" + ", ".join(describe_value(v) for v in value) + ")"
    return repr(value)


@dataclass
class CallRecord:
    """One call of a jitted function: the function and its arguments (kept for a re-run)."""

    fn: Any  # a JitFunction, or anything with ``debug(*args)`` and ``__name__``
    args: tuple
    kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return getattr(self.fn, "__name__", repr(self.fn))

    def positional(self) -> tuple:
        """The arguments with keywords bound to their parameters, in order (what ``scd_analysis`` takes)."""
        if not self.kwargs:
            return self.args
        bound = inspect.signature(self.fn).bind(*self.args, **self.kwargs)
        bound.apply_defaults()
        return bound.args

    def execution(self) -> Execution:
        """A fresh stepping Execution of this call (paused before its first instruction)."""
        return self.fn.debug(*self.positional())

    def finished_execution(self) -> Execution:
        """The call re-run to its end in the stepping interpreter: every register as it was at RET."""
        ex = self.execution()
        ex.run()
        return ex

    def traced(self) -> list[TraceEvent]:
        """Run the call again with tracing on (not counted in the call log); its trace events."""
        run = getattr(self.fn, "untracked", self.fn)
        with collect_trace() as events:
            run(*self.args, **self.kwargs)
        return events

    def describe(self) -> str:
        """``f(x: float32[2, 3, 8, 8], h: mutable(4))``: names and shapes, no values."""
        signature = getattr(getattr(self.fn, "parsed", None), "signature", None)
        params = list(signature.parameters) if signature is not None else []
        parts = [f"{params[i]}: {describe_value(a)}" if i < len(params) else describe_value(a)
                 for i, a in enumerate(self.args)]
        parts += [f"{k}={describe_value(v)}" for k, v in self.kwargs.items()]
        return f"{self.name}({', '.join(parts)})"


class CallLog:
    """The first and the last recorded call, and how many there were, since ``clear()``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.first: CallRecord | None = None
        self.last: CallRecord | None = None
        self.count = 0

    def record(self, fn: Any, args: tuple, kwargs: dict[str, Any]) -> None:
        call = CallRecord(fn, args, dict(kwargs))
        with self._lock:
            if self.first is None:
                self.first = call
            self.last = call
            self.count += 1

    def clear(self) -> None:
        with self._lock:
            self.first = self.last = None
            self.count = 0


class TrackedJitFunction(JitFunction):
    """A JitFunction that records each call in a CallLog before running it."""

    def __init__(self, fn: Callable[..., Any], options: JitOptions, log: CallLog) -> None:
        self.call_log = log
        super().__init__(fn, options)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.call_log.record(self, args, kwargs)
        return super().__call__(*args, **kwargs)

    def untracked(self, *args: Any, **kwargs: Any) -> Any:
        """The call without a record (a view re-running it)."""
        return super().__call__(*args, **kwargs)
