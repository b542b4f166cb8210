"""Kernel binding: the one place that decides which kernel an OP_CALL runs."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..ops.registry import OpDef


def bind_kernel(
    op: OpDef, static_attrs: Mapping[str, Any], in_types: Sequence, out_types: Sequence, device: str = "cpu"
) -> tuple[Callable, str]:
    """(kernel callable taking the input arrays and any register-valued attrs, variant name)."""
    kernel = op.kernel
    if static_attrs:
        kernel = functools.partial(kernel, **static_attrs)
    return kernel, "reference"
