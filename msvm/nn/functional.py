"""``torch.nn.functional``'s names, for a port that changes one import: ``import msvm.nn.functional as F``.

Each name is an op of the registry or a function expanded into ops (``msvm.ops.functions``), called
with torch's parameter names, order and defaults — which live in that entry, not here: this module
only says which names it holds. Use them eagerly on numpy arrays or inside ``@ms.jit``; both run in
inference (``training=True`` is refused). ``transpose`` is torch's (two dims swapped), where
``ms.ops.transpose`` is numpy's (every axis).
"""

from __future__ import annotations

from typing import Any

from ..ops.functions import get_function

# the ops torch.nn.functional has, then its functions that are a few ops here
_NAMES = (
    "conv2d", "conv_transpose2d", "conv3d", "linear", "embedding", "scaled_dot_product_attention",
    "batch_norm", "layer_norm", "group_norm",
    "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "max_pool3d", "avg_pool3d",
    "relu", "sigmoid", "tanh", "silu", "gelu", "softmax", "log_softmax", "pad", "flatten",
    "relu6", "hardswish", "hardsigmoid", "mish", "leaky_relu", "elu", "softplus",
    "normalize", "dropout", "interpolate", "transpose",
)

globals().update({name: get_function(name) for name in _NAMES})

__all__ = list(_NAMES)


def __dir__() -> list[str]:
    return sorted(__all__)


def __getattr__(name: str) -> Any:
    raise AttributeError(f"msvm.nn.functional has no {name!r}; it holds {', '.join(__all__)}")
