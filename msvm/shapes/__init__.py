"""Symbolic shapes: dims as normal-form integer expressions, and shape specs built from them.

Everything that reasons about shapes (assembler, verifier, interpreter, JIT) imports from here, so
there is one meaning of "these two dims are the same".
"""

from msvm.shapes.expr import (
    UNKNOWN,
    Dim,
    ShapeSyntaxError,
    as_dim,
    ceildiv,
    dmax,
    dmin,
    parse_dim,
    prove_equal,
)
from msvm.shapes.spec import (
    ShapeSpec,
    Unification,
    broadcast_dims,
    broadcast_shapes,
    match_shape,
    parse_shape,
    unify,
)

__all__ = [
    "UNKNOWN",
    "Dim",
    "ShapeSpec",
    "ShapeSyntaxError",
    "Unification",
    "as_dim",
    "broadcast_dims",
    "broadcast_shapes",
    "ceildiv",
    "dmax",
    "dmin",
    "match_shape",
    "parse_dim",
    "parse_shape",
    "prove_equal",
    "unify",
]
