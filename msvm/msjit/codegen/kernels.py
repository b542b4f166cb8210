"""The kernel protocol: one materialising step of a region (a fused loop nest, a GEMM call, …).

The plan is a list of kernels in execution order. Each one says which buffers it reads and writes
(the memory planner's lifetimes come from that), which arena scratch it needs for its own duration,
whether its outer loop may be split across threads, and emits one function with the standard
kernel signature (``emit.FnBuilder``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...kernels.threads import default_threads
from ...shapes import Dim
from .buffers import Buffer
from .nodes import Expr, loads, walk

if TYPE_CHECKING:
    from .emit import FnBuilder, ModuleEmitter

# Threads a large kernel's outer loop is split over: the job pool's (BLAS threads its own GEMMs).
# Generated code bakes it in (per-thread scratch, loop chunks), so the disk cache keys on it.
THREADS = default_threads()
# Elements below which a kernel runs on one thread: lower is slower, since small kernels that follow
# GEMMs would compete with BLAS threads still spinning on the cores (``python -m bench`` re-measures).
PARALLEL_MIN = 1 << 18
# Chunks of a split outer loop per thread: enough that a thread slowed by another process's load on
# its core hands its share to the other, few enough that claiming one (an atomic add) costs nothing.
CHUNKS_PER_THREAD = 16


class Kernel:
    can_fail = False  # sets the status word (run-time index checks)

    def reads(self) -> list[Buffer]:
        raise NotImplementedError

    def writes(self) -> list[Buffer]:
        raise NotImplementedError

    def scratch(self) -> list[Buffer]:
        """Arena buffers used only while this kernel runs."""
        return []

    def parallel_work(self) -> Dim | None:
        """Elements processed, when distinct outer-loop indices write distinct outputs (so the outer loop
        may be split across threads); None when it must run on one thread."""
        return None

    def inplace_source(self) -> Expr | None:
        """The expression whose identity-indexed loads may share memory with the output, if any."""
        return None

    def absorb_epilogue(self, consumer: Kernel, buf: Buffer) -> bool:
        """Take over ``consumer`` — the only reader of this kernel's output ``buf`` — by applying its
        elementwise computation while writing the output (then writing ``consumer``'s output)? Kernels
        that can (a native convolution's ReLU / residual epilogue) update themselves and say True."""
        return False

    def packs_lanes(self) -> bool:
        """Does ``emit`` build vectors from per-lane scalar code? The region then needs the SLP
        vectoriser, which turns those lanes into vector instructions."""
        return False

    def describe(self) -> str:
        raise NotImplementedError

    def emit(self, em: ModuleEmitter) -> FnBuilder:
        raise NotImplementedError


def expr_buffers(*exprs: Expr | None) -> list[Buffer]:
    """Buffers read by ``exprs`` (in first-seen order)."""
    out: dict[Buffer, None] = {}
    for expr in exprs:
        if expr is not None:
            for load in loads(expr):
                out[load.buffer] = None
    return list(out)


def has_checks(*exprs: Expr | None) -> bool:
    """Does evaluating ``exprs`` run checks that can fail (gather indices, roi batch indices)?"""
    return any(getattr(node, "checks", False) for e in exprs if e is not None for node in walk(e))
