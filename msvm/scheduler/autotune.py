"""Autotuning: time every applicable kernel variant once per shape class and remember the winner.

Winners are process-wide, keyed by device, op, the candidate set, dtype, input shapes and static
attributes, so every call site and every function with the same key reuses one measurement.
Measurements are serialised (two at once on a 2-core machine would disturb each other).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .background import checkpoint

REPEATS = 3  # timed runs after one warm-up; the median is kept
BUDGET_S = 0.25  # stop repeating a candidate once its runs took this long


@dataclass(frozen=True)
class Tuned:
    """The measured medians of one tuning key's candidates and the fastest of them."""

    winner: str
    seconds: Mapping[str, float]


_WINNERS: dict[tuple, Tuned] = {}
_LOCK = threading.Lock()


def median(samples: Sequence[float]) -> float:
    """The median (``statistics`` is not imported for this: it drags in ``decimal`` and ``fractions``)."""
    ordered = sorted(samples)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def time_kernel(run: Callable[[], Any], repeats: int = REPEATS, budget_s: float = BUDGET_S,
                statistic: Callable[[Sequence[float]], float] = median, warmup: int = 1) -> float:
    """Median (or ``statistic``) seconds of ``run()`` after ``warmup`` calls (first touch, lazy
    compiles, BLAS threads waking up). In the background calibrator every run is a ``checkpoint``
    (the process may be exiting). Runs are not timed while the JIT's worker borrows a core."""
    from ..native.blas import LEND_WAIT_S, UNLENT  # not at import: ``import msvm`` stays light
    for _ in range(warmup):
        checkpoint()
        run()
    samples: list[float] = []
    for _ in range(repeats):
        checkpoint()
        UNLENT.wait(LEND_WAIT_S)  # the JIT's worker may have a core of ours for a while
        t0 = time.perf_counter()
        run()
        samples.append(time.perf_counter() - t0)
        if sum(samples) > budget_s:
            break
    return statistic(samples)


def tuning_key(device: str, op: str, names: Sequence[str], dtype: str, shapes: Sequence[tuple[int, ...]],
               attrs: Mapping[str, Any]) -> tuple:
    return (device, op, tuple(names), dtype, tuple(shapes), _frozen(attrs))


def tune(key: tuple, candidates: Sequence[tuple[str, Callable[[], Any]]]) -> Tuned:
    """The remembered result for ``key``, measuring ``candidates`` (name, run) the first time."""
    tuned = _WINNERS.get(key)
    if tuned is not None:
        return tuned
    with _LOCK:
        tuned = _WINNERS.get(key)
        if tuned is None:
            seconds = {name: time_kernel(run) for name, run in candidates}
            winner = min(seconds, key=seconds.__getitem__)  # ties go to the first (variants before reference)
            tuned = _WINNERS[key] = Tuned(winner, seconds)
    return tuned


def winners() -> dict[tuple, Tuned]:
    """Every remembered tuning result (for observability and tests)."""
    return dict(_WINNERS)


def forget_winners() -> None:
    with _LOCK:
        _WINNERS.clear()


def _frozen(value: Any) -> Any:
    if isinstance(value, Mapping):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    try:
        hash(value)
    except TypeError:
        return repr(value)
    return value
