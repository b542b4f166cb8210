"""MS-JIT code generator: a straight-line MS-BC region compiled to one native function.

``lower`` plans the region (fusion: ``plan``; memory: ``memplan``) and emits LLVM IR (``emit*``);
``compile_region`` compiles it and binds a launcher with the interpreter's calling convention.
``can_lower`` tells the runtime, per OP_CALL, whether it can be part of a compiled region.
"""

from __future__ import annotations

from . import lower_core, lower_nn  # noqa: F401  (importing them registers the lowerings)
from .errors import LoweringError
from .memplan import Placement
from .plan import can_lower
from .region import CompiledRegion, LoweredRegion, compile_region, lower

__all__ = [
    "CompiledRegion",
    "LoweredRegion",
    "LoweringError",
    "Placement",
    "can_lower",
    "compile_region",
    "lower",
]
