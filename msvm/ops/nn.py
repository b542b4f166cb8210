"""The nn ops (``torch.nn.functional`` semantics, NCHW): importing this module registers them all.

Each op lives in the module of its family; this one only gathers them, so ``msvm.ops`` needs a
single import line and the trait ``"nn"`` marks every op registered here.
"""

from __future__ import annotations

from . import attention, conv, conv_transpose, lookup, norm, pooling, resize, roi, volume

NN_MODULES = (attention, conv, conv_transpose, lookup, norm, pooling, resize, roi, volume)

__all__ = ["NN_MODULES"]
