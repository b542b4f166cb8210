"""embedding: PyTorch's ``F.embedding``, rows of a weight table gathered by integer indices.

Why the range check: numpy would wrap a negative index around to the end of the table and torch
raises, so an out-of-range index is a bug in the caller that must not become a silent wrong row.
"""

from __future__ import annotations

import numpy as np

from ..shapes import ShapeSpec
from .nn_common import NN, NnOpDef, ignored, only, require_index_dtype, require_rank
from .registry import InferContext, TensorType, register


def _embedding_infer(ctx: InferContext, indices: TensorType, weight: TensorType) -> TensorType:
    require_index_dtype("embedding", "indices", indices)
    require_rank("embedding", "weight", weight, (2,), "[num_embeddings, embedding_dim]")
    return TensorType(ShapeSpec([*indices.shape, weight.shape[1]]), weight.dtype)


def _embedding(indices: np.ndarray, weight: np.ndarray) -> np.ndarray:
    rows = weight.shape[0]
    if indices.size:
        bad = indices[(indices < 0) | (indices >= rows)]
        if bad.size:
            raise IndexError(f"embedding: index {int(bad.flat[0])} is out of range for {rows} embeddings "
                             f"({bad.size} out-of-range index(es))")
    return np.take(weight, indices, axis=0)


register(NnOpDef(
    name="embedding", inputs=("input", "weight"), attrs={},
    # padding_idx, norm_type, scale_grad_by_freq and sparse only change gradients; max_norm rescales rows
    call_only={"padding_idx": ignored(None),
               "max_norm": only(None, "renormalise the weight rows before the call"),
               "norm_type": ignored(2.0), "scale_grad_by_freq": ignored(False), "sparse": ignored(False)},
    infer=_embedding_infer, kernel=_embedding, traits=NN | {"layout"},
    doc="weight rows at int32/int64 indices (torch F.embedding): indices.shape + [embedding_dim]; "
        "an index outside [0, num_embeddings) raises IndexError",
))
