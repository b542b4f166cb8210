"""A function's JIT options: one definition, validated once, read by the frontend and by the JIT.

``@ms.jit(**options)`` validates them at decoration, so a typo or a bad value fails where it is
written; a ``Program`` carries them as a plain dict (``JitOptions.as_dict()``, plus ``"jit": False``
to run purely interpreted), and the JIT reads them back with ``JitOptions.of``.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

CACHE_MODES = ("exact", "bucket", "adaptive")


@dataclass(frozen=True)
class JitOptions:
    """How the JIT treats a function (validated at decoration; honoured by the JIT layer)."""

    cache_mode: str = "exact"
    bucket_boundaries: tuple[int, ...] | None = None
    fallback: bool = True
    mem_optimize: bool = False
    scd_threshold: float = 0.8
    hot_threshold: int = 3
    rewrite: bool = True  # the pattern rewrites (msvm/passes): False runs the bytecode exactly as written

    def __post_init__(self) -> None:
        if not isinstance(self.cache_mode, str):
            raise TypeError(f"cache_mode must be a string, got {self.cache_mode!r}")
        if self.cache_mode not in CACHE_MODES:
            raise ValueError(f"cache_mode must be one of {', '.join(map(repr, CACHE_MODES))}, got "
                             f"{self.cache_mode!r}")
        if self.bucket_boundaries is not None:
            object.__setattr__(self, "bucket_boundaries", _boundaries(self.bucket_boundaries))
        for name in ("fallback", "mem_optimize", "rewrite"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be True or False, got {getattr(self, name)!r}")
        threshold = self.scd_threshold
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)):
            raise TypeError(f"scd_threshold must be a number in [0, 1], got {threshold!r}")
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"scd_threshold must be in [0, 1], got {threshold}")
        object.__setattr__(self, "scd_threshold", float(threshold))
        hot = self.hot_threshold
        if isinstance(hot, bool) or not isinstance(hot, int):
            raise TypeError(f"hot_threshold must be an int >= 1, got {hot!r}")
        if hot < 1:
            raise ValueError(f"hot_threshold must be >= 1, got {hot}")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def of(cls, options: Mapping[str, Any]) -> JitOptions:
        """The JIT options in a program's options dict (other keys are the program's own)."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in options.items() if k in known})


def _boundaries(value: Any) -> tuple[int, ...]:
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise TypeError(f"bucket_boundaries must be a sequence of positive ints or None, got {value!r}")
    items = tuple(value)
    for item in items:
        if isinstance(item, bool) or not isinstance(item, (int, np.integer)):
            raise TypeError(f"bucket_boundaries must hold ints, got {item!r}")
    items = tuple(int(i) for i in items)
    if not items:
        raise ValueError("bucket_boundaries must not be empty (use None for no buckets)")
    if any(i <= 0 for i in items):
        raise ValueError(f"bucket_boundaries must be positive, got {items}")
    if any(a >= b for a, b in itertools.pairwise(items)):
        raise ValueError(f"bucket_boundaries must be strictly increasing, got {items}")
    return items


def parse_options(options: dict[str, Any]) -> JitOptions:
    """``@ms.jit``'s keyword arguments as options; an unknown name is a TypeError listing the known."""
    known = [f.name for f in fields(JitOptions)]
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise TypeError(f"unknown @ms.jit option(s) {', '.join(unknown)}; known options: {', '.join(known)}")
    return JitOptions(**options)


def jit_enabled(options: Mapping[str, Any]) -> bool:
    """False when a program's options ask to run it purely interpreted (``{"jit": False}``)."""
    return options.get("jit", True) is not False


def rewrite_enabled(options: Mapping[str, Any]) -> bool:
    """False when a program's options turn the pattern rewrites off (``{"rewrite": False}``)."""
    return options.get("rewrite", True) is not False


__all__ = ["CACHE_MODES", "JitOptions", "jit_enabled", "parse_options", "rewrite_enabled"]
