"""Elementwise ops: unary math, binary arithmetic, comparisons, ``where``, ``clamp`` and ``cast``.

Why dtypes come from numpy itself: the output dtype a shape function promises must be the one the
kernel produces, so every rule below asks numpy's own ufunc type resolution (``resolve_dtypes``)
instead of re-deriving promotion tables. Families are registered from tables, one row per op, so a
later layer (the JIT's fusion) can select them by trait and read the numpy function in ``extra``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .nn_common import INPLACE
from .registry import Attr, CallOnly, InferContext, OpDef, OpTypeError, TensorType, register

# Trait sets, declared once per family (later layers select ops by these names).
UNARY = frozenset({"elementwise", "unary"})
BINARY = frozenset({"elementwise", "binary"})
COMPARISON = frozenset({"elementwise", "binary", "comparison"})
TERNARY = frozenset({"elementwise", "ternary"})


# -- helpers shared by the op modules ---------------------------------------------------------------


def _probe_out_ellipsis() -> bool:
    try:
        return isinstance(np.add(np.float64(1), np.float64(1), out=...), np.ndarray)
    except TypeError:  # numpy < 2.3 has no ``out=...``
        return False


_HAS_OUT_ELLIPSIS = _probe_out_ellipsis()


def array_kernel(ufunc: np.ufunc) -> Callable[..., np.ndarray]:
    """``ufunc`` as a kernel that returns an ndarray even for 0-d inputs (numpy returns a scalar there)."""
    if _HAS_OUT_ELLIPSIS:
        return functools.partial(ufunc, out=...)
    return lambda *arrays: np.asarray(ufunc(*arrays))


@functools.cache
def ufunc_dtype(op: str, ufunc: np.ufunc, *dtypes: str) -> str:
    """The dtype numpy's ``ufunc`` returns for ``dtypes``; OpTypeError("DTYPE") when it has no loop."""
    try:
        resolved = ufunc.resolve_dtypes(tuple(np.dtype(d) for d in dtypes) + (None,) * ufunc.nout)
    except TypeError:
        raise OpTypeError(
            "DTYPE",
            f"{op} does not support input dtype(s) {', '.join(dtypes)}",
            "cast the input(s) first (ms.ops.cast)",
        ) from None
    return resolved[-1].name


def float_dtype(op: str, dtype: str) -> str:
    """Result dtype of float-only math: floats stay, ints become float64 and bool float16, like ``np.exp``."""
    return ufunc_dtype(op, np.exp, dtype)


def as_float(x: np.ndarray) -> np.ndarray:
    """``x`` in the dtype float-only math produces for it (no copy for float inputs)."""
    if x.dtype.kind == "f":
        return x
    return x.astype(np.exp.resolve_dtypes((x.dtype, None))[-1])


def numeric_dtype(op: str, dtype: str) -> str:
    """``dtype`` unchanged, rejecting bool (numpy has no arithmetic negation of bool either)."""
    if dtype == "bool":
        raise OpTypeError("DTYPE", f"{op} does not support bool inputs",
                          "cast to an int or float dtype first")
    return dtype


# -- erf (numpy has none and scipy is not a dependency) ---------------------------------------------
# W. J. Cody, "Rational Chebyshev approximations for the error function", Math. Comp. 23 (1969),
# coefficients as in SPECFUN's CALERF: relative error below 1e-15 in float64 over the whole line.

_THRESH = 0.46875
_SQRPI = 5.6418958354775628695e-1  # 1/sqrt(pi)
_A = (3.16112374387056560e00, 1.13864154151050156e02, 3.77485237685302021e02,
      3.20937758913846947e03, 1.85777706184603153e-1)
_B = (2.36012909523441209e01, 2.44024637934444173e02, 1.28261652607737228e03, 2.84423683343917062e03)
_C = (5.64188496988670089e-1, 8.88314979438837594e00, 6.61191906371416295e01, 2.98635138197400131e02,
      8.81952221241769090e02, 1.71204761263407058e03, 2.05107837782607147e03, 1.23033935479799725e03,
      2.15311535474403846e-8)
_D = (1.57449261107098347e01, 1.17693950891312499e02, 5.37181101862009858e02, 1.62138957456669019e03,
      3.29079923573345963e03, 4.36261909014324716e03, 3.43936767414372164e03, 1.23033935480374942e03)
_P = (3.05326634961232344e-1, 3.60344899949804439e-1, 1.25781726111229246e-1, 1.60837851487422766e-2,
      6.58749161529837803e-4, 1.63153871373020978e-2)
_Q = (2.56852019228982242e00, 1.87295284992346725e00, 5.27905102951428412e-1, 6.05183413124413191e-2,
      2.33520497626869185e-3)


def _erf_small(x: np.ndarray) -> np.ndarray:
    """erf(x) for |x| <= 0.46875."""
    z = x * x
    num, den = _A[4] * z, z
    for i in range(3):
        num = (num + _A[i]) * z
        den = (den + _B[i]) * z
    return x * (num + _A[3]) / (den + _B[3])


def _gauss(y: np.ndarray) -> np.ndarray:
    """exp(-y*y), split so that the rounding of y*y does not cost relative accuracy."""
    ysq = np.trunc(y * 16.0) / 16.0
    return np.exp(-ysq * ysq) * np.exp(-(y - ysq) * (y + ysq))


def _erfc_large(y: np.ndarray) -> np.ndarray:
    """erfc(y) for y > 0.46875 (NaN stays NaN, erfc underflows to 0 from y = 27)."""
    out = np.zeros_like(y)
    mid = y <= 4.0
    ym = y[mid]
    num, den = _C[8] * ym, ym
    for i in range(7):
        num = (num + _C[i]) * ym
        den = (den + _D[i]) * ym
    out[mid] = (num + _C[7]) / (den + _D[7]) * _gauss(ym)
    tail = (y > 4.0) & (y < 27.0)
    yt = y[tail]
    z = 1.0 / (yt * yt)
    num, den = _P[5] * z, z
    for i in range(4):
        num = (num + _P[i]) * z
        den = (den + _Q[i]) * z
    out[tail] = (_SQRPI - z * (num + _P[4]) / (den + _Q[4])) / yt * _gauss(yt)
    out[np.isnan(y)] = np.nan
    return out


def erf(x: Any) -> np.ndarray:
    """The error function, vectorised, in float64 (Cody's rational approximations)."""
    x = np.asarray(x, dtype=np.float64)
    out = np.empty_like(x)
    small = np.abs(x) <= _THRESH
    out[small] = _erf_small(x[small])
    big = ~small
    xb = x[big]
    out[big] = np.copysign(1.0 - _erfc_large(np.abs(xb)), xb)
    return out


def erfc(x: Any) -> np.ndarray:
    """1 - erf(x) without cancellation (accurate for large x), in float64."""
    x = np.asarray(x, dtype=np.float64)
    out = np.empty_like(x)
    small = np.abs(x) <= _THRESH
    out[small] = 1.0 - _erf_small(x[small])
    big = ~small
    xb = x[big]
    r = _erfc_large(np.abs(xb))
    out[big] = np.where(xb < 0, 2.0 - r, r)
    return out


# -- unary kernels that are not a single ufunc ------------------------------------------------------

_SQRT_2_OVER_PI = 0.7978845608028654
_INV_SQRT2 = 0.7071067811865476


def _rsqrt(x: np.ndarray) -> np.ndarray:
    return np.asarray(np.reciprocal(np.sqrt(as_float(x))))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    """1/(1+exp(-x)) computed from exp(-|x|) so neither branch can overflow."""
    x = as_float(x)
    e = np.exp(-np.abs(x))
    return np.asarray(np.divide(np.where(x >= 0, 1, e), 1 + e, dtype=x.dtype))


def _silu(x: np.ndarray) -> np.ndarray:
    x = as_float(x)
    return np.asarray(np.multiply(x, _sigmoid(x), dtype=x.dtype))


def _gelu(x: np.ndarray, approximate: str = "none") -> np.ndarray:
    """PyTorch's gelu; the exact form uses erfc(-x/sqrt 2) so large negative inputs keep their tiny values."""
    x = as_float(x)
    if approximate == "tanh":
        inner = _SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)
        return np.asarray(np.multiply(0.5 * x, 1 + np.tanh(inner), dtype=x.dtype))
    x64 = x.astype(np.float64)
    return np.asarray(0.5 * x64 * erfc(-_INV_SQRT2 * x64), dtype=x.dtype)


def _relu(x: np.ndarray) -> np.ndarray:
    if x.dtype.kind == "f":  # clip is vectorised where maximum with a scalar is not: 3× faster, NaN kept
        return np.asarray(np.clip(x, x.dtype.type(0), x.dtype.type(np.inf)))
    return np.asarray(np.maximum(x, 0))


# -- families -----------------------------------------------------------------------------------------

DtypeRule = Callable[[str, str], str]


def _ufunc_rule(ufunc: np.ufunc) -> DtypeRule:
    return lambda op, dtype: ufunc_dtype(op, ufunc, dtype)


def _unary_infer(name: str, rule: DtypeRule) -> Callable[..., TensorType]:
    def infer(ctx: InferContext, x: TensorType, **attrs: Any) -> TensorType:
        return TensorType(x.shape, rule(name, x.dtype))

    return infer


def register_unary(name: str, kernel: Callable[..., np.ndarray], rule: DtypeRule, doc: str,
                   attrs: dict[str, Attr] | None = None, numpy_fn: Any = None) -> OpDef:
    """Register one unary elementwise op: same shape as the input, dtype from ``rule``.

    An op that ``torch.nn.functional`` also has is called its way (``TORCH_CALLS``): ``input``, the
    attributes, then torch's flags that change nothing here; ``x`` stays a keyword for the input.
    """
    attrs = attrs or {}
    torch = TORCH_CALLS.get(name)
    call = {} if torch is None else {"params": ("input", *attrs, *torch), "aliases": {"input": "x"},
                                     "call_only": torch}
    return register(OpDef(
        name=name, inputs=("x",), attrs=attrs, infer=_unary_infer(name, rule), kernel=kernel,
        traits=UNARY, doc=doc, extra={"numpy": numpy_fn} if numpy_fn is not None else {}, **call,
    ))


# the unary ops torch.nn.functional has, with its parameters that are no attributes here
TORCH_CALLS: dict[str, dict[str, CallOnly]] = {
    "relu": INPLACE, "silu": INPLACE, "sigmoid": {}, "tanh": {}, "gelu": {},
}


_FLOAT = float_dtype
_NUMERIC = numeric_dtype

# name, numpy ufunc (kernel and dtype rule) or (kernel, dtype rule), doc
_UNARY_TABLE: Sequence[tuple[str, Any, str]] = (
    ("neg", np.negative, "-x"),
    ("abs", np.absolute, "|x|"),
    ("exp", np.exp, "e**x"),
    ("log", np.log, "natural logarithm"),
    ("sqrt", np.sqrt, "square root"),
    ("tanh", np.tanh, "hyperbolic tangent"),
    ("sin", np.sin, "sine (radians)"),
    ("cos", np.cos, "cosine (radians)"),
    ("rsqrt", (_rsqrt, _FLOAT), "1/sqrt(x)"),
    ("sigmoid", (_sigmoid, _FLOAT), "1/(1+exp(-x)), stable for large |x|"),
    ("silu", (_silu, _FLOAT), "x*sigmoid(x) (swish)"),
    ("relu", (_relu, _NUMERIC), "max(x, 0)"),
)

for _name, _impl, _doc in _UNARY_TABLE:
    if isinstance(_impl, np.ufunc):
        register_unary(_name, array_kernel(_impl), _ufunc_rule(_impl), _doc, numpy_fn=_impl)
    else:
        register_unary(_name, _impl[0], _impl[1], _doc)

register_unary(
    "gelu", _gelu, _FLOAT, "Gaussian error linear unit, x*Phi(x) (PyTorch semantics)",
    attrs={"approximate": Attr("str", "none", ("none", "tanh"), "'none' (exact, erf) or 'tanh'")},
)


def _clamp_infer(ctx: InferContext, x: TensorType, min: float | None, max: float | None) -> TensorType:
    # numpy's rule for a Python float bound: it keeps float dtypes and turns ints and bool into float64.
    bounds = [b for b in (min, max) if b is not None]
    return TensorType(x.shape, np.result_type(np.dtype(x.dtype), *bounds).name)


def _clamp(x: np.ndarray, min: float | None, max: float | None) -> np.ndarray:
    """np.clip's semantics (and dtypes) with two ufunc calls instead of np.clip's slower wrapper."""
    if min is None and max is None:
        return x.copy()
    if min is not None:
        x = np.maximum(x, min)
    if max is not None:
        x = np.minimum(x, max)
    return np.asarray(x)


register(OpDef(
    name="clamp", inputs=("x",),
    attrs={"min": Attr("float", None, doc="lower bound or None"),
           "max": Attr("float", None, doc="upper bound or None")},
    infer=_clamp_infer, kernel=_clamp, traits=UNARY,
    doc="min(max(x, min), max) like np.clip; a bound turns int inputs into float64 (numpy's rule)",
))


def _cast_infer(ctx: InferContext, x: TensorType, dtype: str) -> TensorType:
    return TensorType(x.shape, dtype)


register(OpDef(
    name="cast", inputs=("x",), attrs={"dtype": Attr("dtype", doc="target dtype")},
    infer=_cast_infer, kernel=lambda x, dtype: x.astype(dtype), traits=UNARY,
    doc="x converted to dtype (numpy astype: a new array)",
))


def _binary_infer(name: str, ufunc: np.ufunc) -> Callable[..., TensorType]:
    def infer(ctx: InferContext, a: TensorType, b: TensorType) -> TensorType:
        shape = ctx.broadcast(a.shape, b.shape, what=f"{name} broadcast")
        return TensorType(shape, ufunc_dtype(name, ufunc, a.dtype, b.dtype))

    return infer


def register_binary(name: str, ufunc: np.ufunc, traits: frozenset[str], doc: str) -> OpDef:
    """Register one broadcasting binary op backed by a numpy ufunc."""
    return register(OpDef(
        name=name, inputs=("a", "b"), attrs={}, infer=_binary_infer(name, ufunc),
        kernel=array_kernel(ufunc), traits=traits, doc=doc, extra={"numpy": ufunc},
    ))


_BINARY_TABLE: Sequence[tuple[str, np.ufunc, frozenset[str], str]] = (
    ("add", np.add, BINARY, "a + b"),
    ("sub", np.subtract, BINARY, "a - b"),
    ("mul", np.multiply, BINARY, "a * b"),
    ("div", np.true_divide, BINARY, "a / b (true division: ints give float64)"),
    ("pow", np.power, BINARY, "a ** b"),
    ("maximum", np.maximum, BINARY, "elementwise max (NaN propagates)"),
    ("minimum", np.minimum, BINARY, "elementwise min (NaN propagates)"),
    ("greater", np.greater, COMPARISON, "a > b"),
    ("less", np.less, COMPARISON, "a < b"),
    ("equal", np.equal, COMPARISON, "a == b"),
    ("greater_equal", np.greater_equal, COMPARISON, "a >= b"),
    ("less_equal", np.less_equal, COMPARISON, "a <= b"),
    ("not_equal", np.not_equal, COMPARISON, "a != b"),
)

for _name, _ufunc, _traits, _doc in _BINARY_TABLE:
    register_binary(_name, _ufunc, _traits, _doc)


def _where_infer(ctx: InferContext, cond: TensorType, a: TensorType, b: TensorType) -> TensorType:
    shape = ctx.broadcast(cond.shape, a.shape, b.shape, what="where broadcast")
    return TensorType(shape, np.result_type(np.dtype(a.dtype), np.dtype(b.dtype)).name)


register(OpDef(
    name="where", inputs=("cond", "a", "b"), attrs={}, infer=_where_infer, kernel=np.where, traits=TERNARY,
    doc="a where cond else b, all three broadcast (np.where; a non-bool cond is tested for != 0)",
))
