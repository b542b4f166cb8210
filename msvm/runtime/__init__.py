"""Run-time services of the interpreter: the memory pool its tensors are allocated from, and the size
limits every allocation is checked against first (``limits``)."""

from .mempool import POOL, MemoryPool, MemoryStats, memory_stats

__all__ = ["POOL", "MemoryPool", "MemoryStats", "memory_stats"]
