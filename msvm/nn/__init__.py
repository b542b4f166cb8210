"""torch.nn's functional half for ported models: ``import msvm.nn.functional as F``."""

from __future__ import annotations

from . import functional

__all__ = ["functional"]
