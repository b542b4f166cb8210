"""The code generator's error: a region (or one op of it) that cannot be compiled, and why."""

from __future__ import annotations

from ...errors import MsvmError


class LoweringError(MsvmError):
    """Raised by ``lower`` for a function it cannot compile; the message is the user-facing reason."""

    default_code = "E-JIT-LOWER"
