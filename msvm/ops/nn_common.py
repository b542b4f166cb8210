"""What the nn ops share: torch-style arguments, float dtype rules and sliding-window geometry.

Why a subclass of OpDef: ``torch.nn.functional`` takes ``stride=2`` for ``(2, 2)`` and
``padding="same"``, and its users will write exactly that. ``NnOpDef`` accepts those forms and turns
them into the registry's schema kinds (a single value becomes a tuple), so shape functions and
kernels only ever see one form; torch's parameter order, ``bias=None`` and its call-only flags are
every op's (``OpDef.params``, ``call_only``; the flags' helpers ``ignored`` and ``only`` are here).
Eager calls also run the shape function first, so a bad call raises the same ``OpTypeError`` the
verifier would report instead of a numpy error from deep inside a kernel.

Why window sizes are computed once: the output size of a convolution or pooling window is one
formula (``window_count``) evaluated on symbolic ``Dim``s by the shape functions and on constants by
the kernels, so the two cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..shapes import Dim, ShapeSpec, as_dim, ceildiv, dmax, dmin
from .registry import CallOnly, InferContext, OpDef, OpTypeError, TensorType, eager_arrays

NN = frozenset({"nn"})
FLOAT_DTYPES = ("float32", "float64")
INDEX_DTYPES = ("int32", "int64")

DimLike = Dim | int


@dataclass
class NnOpDef(OpDef):
    """An OpDef with ``torch.nn.functional``'s argument conventions.

    ``spread`` names tuple attributes that also take a single value: ``{"stride": 2}`` makes
    ``stride=3`` mean ``(3, 3)`` and requires exactly two values otherwise; ``None`` as the length
    makes a single value a 1-tuple and allows any length (``normalized_shape=8``). A word of an
    ``ints_or_str`` attribute (``padding="same"``) is kept as is; the generic checker accepts it.
    """

    spread: Mapping[str, int | None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = set(self.spread) - set(self.attrs)
        if unknown:
            raise ValueError(f"op {self.name}: spread names unknown attributes {sorted(unknown)}")

    def shown_default(self, key: str, default: Any) -> Any:
        """A spread attribute's default of one repeated value shows as that value (torch's ``stride=1``)."""
        if key in self.spread and isinstance(default, tuple) and default and len(set(default)) == 1:
            return default[0]
        return default

    def check_attrs(self, attrs: Mapping[str, Any]) -> dict[str, Any]:
        raw = dict(attrs)
        for key, length in self.spread.items():
            value = raw.get(key)
            if isinstance(value, str):
                choices = self.attrs[key].choices
                if value not in choices:
                    options = ", ".join(map(repr, choices))
                    words_ok = f" or one of {options}" if options else ""
                    raise OpTypeError("ATTR-TYPE", f"{self.name}: attribute {key!r} must be a tuple, "
                                      f"a single value{words_ok}, got {value!r}")
            elif value is not None and not isinstance(value, (tuple, list)):
                raw[key] = (value,) * (length or 1)
        out = super().check_attrs(raw)
        for key, length in self.spread.items():
            value = out[key]
            if length is not None and isinstance(value, tuple) and len(value) != length:
                raise OpTypeError("ATTR-VALUE",
                                  f"{self.name}: {key} has {len(value)} values, expected {length}",
                                  "give one value per spatial dim (H, W), or a single value for all")
        return out

    def run(self, inputs: Sequence[Any], attrs: Mapping[str, Any]) -> Any:
        """Eager call: check the call with the shape function, then run the reference kernel."""
        self.check_arity(len(inputs))
        attrs = self.check_attrs(attrs)
        arrays = eager_arrays(inputs)
        types = [TensorType(ShapeSpec(a.shape), a.dtype.name) for a in arrays]
        self.infer(InferContext(), *types, **attrs)
        return self.kernel(*arrays, **attrs)


# -- torch's call-only parameters --------------------------------------------------------------------


def ignored(default: Any) -> CallOnly:
    """A torch parameter that changes nothing in inference (``inplace``, ``momentum``): any value."""
    return CallOnly(default)


def only(default: Any, hint: str) -> CallOnly:
    """A torch parameter msvm supports at its default only (``training=False``); ``hint`` says what works."""
    def accepts(value: Any) -> bool:
        if value is None or default is None or isinstance(default, bool):
            return value is default or (isinstance(value, np.bool_) and bool(value) is default)
        return isinstance(value, (int, float, np.number)) and not isinstance(value, bool) and value == default

    return CallOnly(default, accepts, hint)


INPLACE = {"inplace": ignored(False)}  # msvm's results are new tensors: inplace=True computes the same values


# -- dtypes -------------------------------------------------------------------------------------------


def common_float_dtype(op: str, **tensors: TensorType | None) -> str:
    """The single float dtype that all given tensors share (``None`` = an absent optional input).

    Why no promotion: torch refuses mixed dtypes here too ("expected scalar type Float"), and a
    silent float64 weight upcasting a float32 activation would double every buffer downstream.
    """
    given = {name: t.dtype for name, t in tensors.items() if t is not None}
    for name, dtype in given.items():
        if dtype not in FLOAT_DTYPES:
            raise OpTypeError("DTYPE", f"{op}: {name} must be float32 or float64, got {dtype}",
                              "cast it first (ms.ops.cast)")
    if len(set(given.values())) > 1:
        listed = ", ".join(f"{name} {dtype}" for name, dtype in given.items())
        raise OpTypeError("DTYPE", f"{op}: inputs must share one dtype, got {listed}",
                          "cast the parameters to the input's dtype")
    return next(iter(given.values()))


def require_index_dtype(op: str, name: str, t: TensorType) -> None:
    """Indices are int32 or int64 (torch's Long/Int); floats would be truncated silently."""
    if t.dtype not in INDEX_DTYPES:
        raise OpTypeError("DTYPE", f"{op}: {name} must be int32 or int64, got {t.dtype}",
                          "cast the indices (ms.ops.cast)")


# -- shapes -------------------------------------------------------------------------------------------


def require_rank(op: str, name: str, t: TensorType, ranks: Sequence[int] | range, layout: str) -> None:
    """``t`` has one of ``ranks``; the hint names the expected ``layout``."""
    if t.shape.rank not in ranks:
        raise OpTypeError("RANK", f"{op}: {name} has rank {t.shape.rank} {t.shape}",
                          f"{name} must be {layout}")


def require_vector(ctx: InferContext, op: str, name: str, t: TensorType | None, size: Dim) -> None:
    """``t`` (if given) is 1-D with ``size`` entries: a per-channel parameter."""
    if t is None:
        return
    if t.shape.rank != 1:
        raise OpTypeError("RANK", f"{op}: {name} must be 1-D [{size}], got {t.shape}",
                          f"{name} holds one value per channel")
    ctx.require_equal(t.shape[0], size, f"{op}: {name} length vs channels")


def require_same(ctx: InferContext, a: Dim, b: Dim, what: str, hint: str) -> Dim:
    """``ctx.require_equal`` with a hint that says what the sizes mean to this op."""
    try:
        return ctx.require_equal(a, b, what)
    except OpTypeError as exc:
        raise OpTypeError(exc.code, exc.message, hint) from None


def require_divisible(ctx: InferContext, n: Dim, d: int, what: str, hint: str) -> Dim:
    """``n // d`` after proving (or guarding at run time) that ``d`` divides ``n``."""
    part = n // d
    if n.is_unknown:
        return part
    rest = n % d
    if rest.is_const and rest.value != 0:
        raise OpTypeError("SHAPE-MISMATCH", f"{what}: {n} is not divisible by {d}", hint)
    ctx.require_equal(part * d, n, f"{what}: {n} divisible by {d}")
    return part


def require_positive(ctx: InferContext, size: Dim, what: str, hint: str,
                     code: str = "SHAPE-MISMATCH") -> None:
    """An output size must be >= 1: an error when provably not, a run-time guard when unknown."""
    if size.is_unknown:
        return
    if size.is_const:
        if size.value < 1:
            raise OpTypeError(code, f"{what} would be {size.value}", hint)
        return
    ctx.require_equal(dmax(size, 1), size, f"{what} ({size}) must be >= 1")


def require_nonnegative_attr(ctx: InferContext, op: str, name: str, value: Dim) -> None:
    """A size attribute is >= 0: an error for a negative constant, a guard for a register value."""
    if value.is_const:
        if value.value < 0:
            raise OpTypeError("ATTR-VALUE", f"{op}: {name} {value.value} is negative", "sizes must be >= 0")
    elif not value.is_unknown:
        ctx.require_equal(dmax(value, 0), value, f"{op}: {name} {value} must be >= 0")


def require_at_least(op: str, name: str, values: Sequence[int], low: int) -> None:
    """Every entry of an int attribute (a stride, a dilation, ...) is at least ``low``."""
    if any(v < low for v in values):
        raise OpTypeError("ATTR-VALUE", f"{op}: {name} {tuple(values)} must be >= {low}",
                          f"every {name} value must be at least {low}")


def spatial_input(op: str, x: TensorType) -> tuple[list[Dim], Dim, Dim, Dim]:
    """(batch dims, C, H, W) of an NCHW input; torch's unbatched CHW form has no batch dims."""
    require_rank(op, "input", x, (3, 4), "[N, C, H, W] or unbatched [C, H, W]")
    dims = list(x.shape)
    return dims[:-3], dims[-3], dims[-2], dims[-1]


def window_count(size: DimLike, kernel: DimLike, stride: int, pad_lo: DimLike, pad_hi: DimLike,
                 dilation: int = 1, ceil_mode: bool = False) -> Dim:
    """Number of windows along one axis: torch's conv/pool output size.

    ``(size + lo + hi - dilation*(kernel-1) - 1) // stride + 1``; with ``ceil_mode`` the division
    rounds up, but the last window must start inside the input or the left padding (torch's rule),
    i.e. at most ``(size + lo - 1) // stride`` strides in. That bound cannot bind when the window
    reaches back over the padding and a stride (``dilation*(kernel-1) >= hi + stride - 1``), the usual
    case, and the ``min`` is left out then.
    """
    extent = (as_dim(kernel) - 1) * dilation
    span = as_dim(size) + pad_lo + pad_hi - extent - 1
    if not ceil_mode:
        return span // stride + 1
    slack = as_dim(pad_hi) + stride - 1 - extent
    if slack.is_const and slack.value <= 0:
        return ceildiv(span, stride) + 1
    return dmin(ceildiv(span, stride), (as_dim(size) + pad_lo - 1) // stride) + 1


# -- kernels ------------------------------------------------------------------------------------------


def sliding_windows(x: np.ndarray, out: Sequence[int], kernel: Sequence[int], stride: Sequence[int],
                    dilation: Sequence[int], pad_lo: Sequence[int], fill: float) -> np.ndarray:
    """``[N, C, OH, OW, KH, KW]`` windows of NCHW ``x``: a strided view, no per-window copies.

    ``x`` is padded with ``fill`` by ``pad_lo`` before and as much as the last window needs after,
    which covers explicit right padding and ceil_mode's overhang alike.
    """
    need = [(o - 1) * s + d * (k - 1) + 1 for o, s, d, k in zip(out, stride, dilation, kernel)]
    size = x.shape[2:]
    pad_hi = [max(n - lo - sz, 0) for n, lo, sz in zip(need, pad_lo, size)]
    if any(pad_lo) or any(pad_hi):
        width = ((0, 0), (0, 0), *zip(pad_lo, pad_hi))
        x = np.pad(x, width, constant_values=np.array(fill, dtype=x.dtype))
    x = x[:, :, :need[0], :need[1]]
    extent = [d * (k - 1) + 1 for d, k in zip(dilation, kernel)]
    view = np.lib.stride_tricks.sliding_window_view(x, extent, axis=(2, 3))
    return view[:, :, ::stride[0], ::stride[1], ::dilation[0], ::dilation[1]]


def unbatched(kernel: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    """Let an NCHW kernel take torch's unbatched CHW input too (a batch of one, removed after)."""

    def wrapper(x: np.ndarray, *args: Any, **kwargs: Any) -> np.ndarray:
        if x.ndim == 3:
            return kernel(x[None], *args, **kwargs)[0]
        return kernel(x, *args, **kwargs)

    wrapper.__name__ = kernel.__name__
    wrapper.__doc__ = kernel.__doc__
    return wrapper


__all__ = [
    "FLOAT_DTYPES",
    "INDEX_DTYPES",
    "NN",
    "NnOpDef",
    "common_float_dtype",
    "require_divisible",
    "require_positive",
    "require_same",
    "sliding_windows",
    "spatial_input",
    "unbatched",
    "window_count",
]
