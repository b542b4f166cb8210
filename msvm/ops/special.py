"""Special functions as elementwise ops: ``erf`` (the exact GELU of exporters that predate ONNX's Gelu).

Why a separate op and not a GELU pattern match: ``x * 0.5 * (1 + erf(x / sqrt(2)))`` is only one of
the forms exporters write, and erf stands on its own in other models; the registry's erf kernel is
Cody's rational approximation, accurate to float64.
"""

from __future__ import annotations

import numpy as np

from .elementwise import as_float, erf, float_dtype, register_unary


def _erf(x: np.ndarray) -> np.ndarray:
    x = as_float(x)
    return np.asarray(erf(x), dtype=x.dtype)


register_unary("erf", _erf, float_dtype, "the error function (float; ints become float64)")

__all__: list[str] = []
