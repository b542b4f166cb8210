"""The kernel-variant registry: every fast kernel of an op is one small entry with a ``when`` predicate.

The op's reference kernel (in the op registry) is the oracle and the implicit variant
``"reference"``; every variant registered here must agree with it (tests check that). Variants
are chosen in one place, the scheduler's dispatcher, from device, dtype, concrete shapes and the
capability database.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Shapes = Sequence[tuple[int, ...]]
Workspace = Callable[[Shapes, Mapping[str, Any], int], int]  # (shapes, attrs, itemsize) -> bytes


def _always(shapes: Shapes, attrs: Mapping[str, Any]) -> bool:
    return True


@dataclass(frozen=True)
class Variant:
    """One kernel of one op.

    ``make(static_attrs)`` builds the kernel callable — ``kernel(*arrays, **dynamic_attrs)`` with
    the same signature and results as the op's reference kernel. ``when(shapes, attrs)`` says
    whether it applies to concrete input shapes; ``constraints`` says the same in words (for the
    capability database). ``flops``/``bytes`` feed the cost model. ``workspace(shapes, attrs,
    itemsize)`` is the most scratch memory one call allocates besides its outputs (column matrices,
    transforms, padded or packed copies, per-thread buffers), in bytes: the dispatcher does not choose
    a variant whose workspace is over ``max_tensor_bytes`` (None: it needs none worth counting).
    """

    op: str
    name: str
    make: Callable[[Mapping[str, Any]], Callable[..., Any]]
    device: str = "cpu"
    dtypes: tuple[str, ...] = ("float32",)
    when: Callable[[Shapes, Mapping[str, Any]], bool] = _always
    constraints: str = ""
    kind: str = "native"  # "native" (generated code), "blas" (calls BLAS), "numpy"
    flops: Callable[[Shapes, Mapping[str, Any]], float] | None = None
    bytes: Callable[[Shapes, Mapping[str, Any]], float] | None = None
    workspace: Workspace | None = None


VARIANTS: dict[str, list[Variant]] = {}
# The workspace of an op's reference kernel (``msvm.ops``), for the ops whose reference needs one
# (conv2d's column matrix, attention's scores): the reference is the implicit last variant and is
# checked like the others. Registered with the variants.
REFERENCE_WORKSPACE: dict[str, Workspace] = {}

# The ops ``msvm.kernels`` registers variants for. Importing that package costs tens of milliseconds
# (llvmlite's IR builder and every kernel generator), so the scheduler imports it only when one of
# these ops is bound: a program without them never pays for it. Tests check this set against what
# the package registers.
KERNEL_OPS = frozenset({"conv2d", "matmul", "linear", "scaled_dot_product_attention", "exp", "log", "tanh",
                        "sigmoid", "silu", "gelu", "layer_norm", "softmax"})


def register_variant(variant: Variant) -> Variant:
    existing = VARIANTS.setdefault(variant.op, [])
    if variant.name == "reference" or any(
        v.name == variant.name and v.device == variant.device for v in existing
    ):
        raise ValueError(f"variant {variant.op}/{variant.name} on {variant.device} registered twice")
    existing.append(variant)
    return variant


def variants_for(op: str, device: str = "cpu", dtype: str | None = None) -> list[Variant]:
    return [v for v in VARIANTS.get(op, []) if v.device == device and (dtype is None or dtype in v.dtypes)]
