"""Process-wide settings (``ms.set_context``): limits, kernel policy, memory reuse, JIT timeouts.

One typed dataclass so that an unknown or mistyped setting is a clear error, not a silent no-op.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass
class Context:
    max_tensor_bytes: int = 4 << 30  # largest single tensor an instruction may create
    max_call_bytes: int = 8 << 30  # total bytes a call's statically sized tensors may take
    max_loop_iterations: int = 1_000_000  # back-edge traversals per call
    kernel_policy: str = "cost"  # "cost" | "autotune" | "reference"
    enable_mem_reuse: bool = True
    compile_timeout_ms: int = 30_000
    jit_enabled: bool = True  # False: regions run interpreted (no counting, no compiles, no native code)
    jit_cache_entries: int = 1024  # JIT cache entries in all; new keys beyond it run interpreted
    jit_cache_region_entries: int = 64  # JIT cache entries per region
    jit_adaptive_budget: int = 8  # adaptive cache mode: exact entries per region before it learns buckets
    jit_disk_cache_max_mb: int = 512  # the persistent code cache's folder; least recently used files go first
    fallback: bool = True  # an op without a usable kernel variant falls back to the reference kernel
    device: str = "cpu"

    _choices = {"kernel_policy": ("cost", "autotune", "reference")}
    _patterns = {"device": (r"cpu|cuda:\d+", "'cpu' or 'cuda:N'")}  # cuda devices have no kernels yet


CONTEXT = Context()
_listeners: list[Callable[[], None]] = []


def on_change(callback: Callable[[], None]) -> None:
    """Call ``callback()`` after every ``set_context`` (caches derived from settings clear themselves)."""
    _listeners.append(callback)


def set_context(**settings: Any) -> None:
    """Change settings, e.g. ``ms.set_context(max_tensor_bytes=1 << 30, kernel_policy="reference")``."""
    fields = {f.name: f for f in dataclasses.fields(Context)}
    for key, value in settings.items():
        if key not in fields:
            raise TypeError(f"unknown setting {key!r}; known settings: {', '.join(fields)}")
        current = getattr(CONTEXT, key)
        if type(value) is not type(current) and not (isinstance(current, int) and isinstance(value, int)):
            raise TypeError(f"setting {key!r} takes a {type(current).__name__}, got {value!r}")
        allowed = Context._choices.get(key)
        if allowed and value not in allowed:
            raise ValueError(f"setting {key!r} must be one of {', '.join(allowed)}, got {value!r}")
        pattern = Context._patterns.get(key)
        if pattern and not re.fullmatch(pattern[0], value):
            raise ValueError(f"setting {key!r} must be {pattern[1]}, got {value!r}")
        if isinstance(value, int) and not isinstance(value, bool) and value < 0:
            raise ValueError(f"setting {key!r} must be >= 0, got {value}")
    for key, value in settings.items():
        setattr(CONTEXT, key, value)
    for callback in list(_listeners):
        callback()


def get_context() -> Context:
    return CONTEXT
