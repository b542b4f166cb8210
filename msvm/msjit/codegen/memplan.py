"""Memory planning: every intermediate gets an offset in one arena, from its lifetime interval.

A buffer lives from the first kernel that touches it to the last one (kernel scratch lives for its
kernel only). Sizes are taken at the buckets' upper bounds (interval arithmetic over the dims). With
``optimize`` the buffers are placed greedily, largest first, each at the best-fitting gap among the
already placed buffers whose lifetimes overlap its own (the interval-graph heuristic of TVM's and
XLA's planners); without it every buffer gets its own space. Offsets are 64-byte aligned.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .buffers import Buffer
from .dims import Interval, upper_bound
from .kernels import THREADS, Kernel

ALIGN = 64


@dataclass(frozen=True)
class Placement:
    """Where one arena buffer lives and when (kernel indices, inclusive)."""

    name: str
    offset: int
    size: int
    first: int
    last: int

    def overlaps(self, other: Placement) -> bool:
        """Do these two share bytes while both are live?"""
        live = self.first <= other.last and other.first <= self.last
        space = self.offset < other.offset + other.size and other.offset < self.offset + self.size
        return live and space


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def lifetimes(kernels: Sequence[Kernel]) -> dict[Buffer, tuple[int, int]]:
    """First and last kernel index touching each arena buffer (aliases resolved)."""
    spans: dict[Buffer, tuple[int, int]] = {}
    for i, kernel in enumerate(kernels):
        for buf in (*kernel.reads(), *kernel.writes(), *kernel.scratch()):
            buf = buf.resolve()
            if buf.kind != "arena":
                continue
            first, last = spans.get(buf, (i, i))
            spans[buf] = (min(first, i), max(last, i))
    return spans


def plan_memory(
    kernels: Sequence[Kernel], ranges: Mapping[str, Interval], optimize: bool
) -> tuple[int, int, list[Placement]]:
    """Assign ``offset``/``size`` to every arena buffer; returns (planned bytes, naive bytes, placements)."""
    spans = lifetimes(kernels)
    sizes = {
        buf: _align(max(upper_bound(buf.nbytes, ranges), 1)) * (THREADS if buf.per_thread else 1)
        for buf in spans
    }
    naive = sum(sizes.values())
    order = sorted(spans, key=lambda b: (-sizes[b], spans[b][0]))
    placed: list[tuple[int, int, Buffer]] = []  # (offset, size, buffer)
    end = 0
    for buf in order:
        size = sizes[buf]
        if optimize:
            first, last = spans[buf]
            busy = sorted(
                (o, s) for o, s, other in placed if spans[other][0] <= last and first <= spans[other][1]
            )
            offset = _best_fit(busy, size)
        else:
            offset = end
        buf.offset, buf.size = offset, size
        placed.append((offset, size, buf))
        end = max(end, offset + size)
    placements = [
        Placement(b.name, b.offset, b.size, *spans[b]) for _, _, b in sorted(placed, key=lambda p: p[0])
    ]
    return end, naive, placements


def _best_fit(busy: Sequence[tuple[int, int]], size: int) -> int:
    """The start of the smallest gap between ``busy`` (offset, size) ranges that holds ``size``."""
    best: tuple[int, int] | None = None  # (gap size, offset)
    cursor = 0
    for offset, length in busy:
        if offset > cursor:
            gap = offset - cursor
            if gap >= size and (best is None or gap < best[0]):
                best = (gap, cursor)
        cursor = max(cursor, offset + length)
    return best[1] if best is not None else cursor
