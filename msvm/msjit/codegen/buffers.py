"""Buffers: the memory a region's kernels read and write (inputs, outputs, constants, arena space).

Every buffer is a dense row-major block of ``shape`` elements; layouts other than that are views
(``views.View``) onto a buffer. Arena buffers get an offset from the memory planner; ``alias`` is set
when the planner folds a buffer into another one (a producer writing straight into its consumer's
output, which then works in place).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...shapes import Dim
from .dtypes import itemsize
from .views import Shape, numel


@dataclass(eq=False)
class Buffer:
    kind: str  # "input", "output", "const" or "arena"
    dtype: str
    shape: Shape
    name: str
    index: int = -1  # input: bytecode argument; output: position among the outputs; const: among the plan's
    array: np.ndarray | None = field(default=None, repr=False)  # const: the data (kept alive by the region)
    alias: Buffer | None = field(default=None, repr=False)
    offset: int = 0  # arena: byte offset from the memory plan
    size: int = 0  # arena: planned bytes (at the bounds' upper end; all threads' copies when per_thread)
    per_thread: bool = False  # kernel scratch: each thread of a split kernel gets its own copy

    def resolve(self) -> Buffer:
        buf = self
        while buf.alias is not None:
            buf = buf.alias
        return buf

    @property
    def nbytes(self) -> Dim:
        return numel(self.shape) * itemsize(self.dtype)

    def __repr__(self) -> str:
        return f"<{self.kind} {self.name} {self.dtype}[{', '.join(map(str, self.shape))}]>"
