"""Local response normalisation (``lrn``): AlexNet's and GoogLeNet's cross-channel normalisation.

Why its window is ONNX's and not torch's: the two differ for an even ``size`` (ONNX puts the extra
channel after the centre, torch before), and the models that still use LRN come from Caffe through
ONNX; the op follows the ONNX definition exactly, ``y = x / (k + alpha / size * sum(x²))^beta``.
"""

from __future__ import annotations

import numpy as np

from .nn_common import NN, NnOpDef, common_float_dtype, require_rank
from .registry import Attr, InferContext, OpTypeError, TensorType, register


def _lrn_infer(
    ctx: InferContext, x: TensorType, *, size: int, alpha: float, beta: float, k: float
) -> TensorType:
    require_rank("lrn", "input", x, range(3, 64), "[N, C, ...] (rank >= 3)")
    if size < 1:
        raise OpTypeError("ATTR-VALUE", f"lrn: size {size}", "the window must hold at least one channel")
    return TensorType(x.shape, common_float_dtype("lrn", input=x))


def _lrn(x: np.ndarray, *, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0) -> np.ndarray:
    """Sum of squares over channels [c - (size-1)//2, c + ceil((size-1)/2)] by a cumulative sum."""
    before, after = (size - 1) // 2, size // 2
    sq = np.square(x.astype(np.float64))
    c = x.shape[1]
    pad = [(0, 0)] * x.ndim
    pad[1] = (before + 1, after)
    csum = np.cumsum(np.pad(sq, pad), axis=1)
    window = np.take(csum, np.arange(size, size + c), axis=1) - np.take(csum, np.arange(c), axis=1)
    scale = (k + alpha / size * window) ** beta
    return np.asarray(x / scale, dtype=x.dtype)


register(
    NnOpDef(
        name="lrn",
        inputs=("x",),
        attrs={
            "size": Attr(
                "int", doc="channels in the window (the extra one of an even size after the centre)"
            ),
            "alpha": Attr("float", 1e-4, doc="scale of the mean square"),
            "beta": Attr("float", 0.75, doc="exponent"),
            "k": Attr("float", 1.0, doc="added before the exponent (ONNX's bias)"),
        },
        infer=_lrn_infer,
        kernel=_lrn,
        traits=NN | {"reduction"},
        doc="local response normalisation across channels (ONNX LRN)",
    )
)

__all__: list[str] = []
