"""nn ops: kernels against naive references, shape functions against kernels, schemas and errors.

The table ``CASES`` holds example calls for every op with the "nn" trait (the coverage test fails
when one has none; the core ops' table in test_core_ops.py covers only the core modules). Every
case runs eagerly against a reference written here with plain loops over output positions, and the
op's shape function is evaluated on the case's input shapes made constant, symbolic (size-1 dims
kept constant), and symbolic with dim attributes (register sizes) turned into symbols too: it must
give exactly the kernel's output shape and dtype, and its run-time guards must hold.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

import msvm.ops as ops
from msvm.ops import REGISTRY, Attr, InferContext, OpDef, OpTypeError, TensorType, register
from msvm.ops.nn_common import NnOpDef
from msvm.shapes import Dim, ShapeSpec, parse_shape

RNG = np.random.default_rng(20240607)
FLOATS = ("float32", "float64")
KNOWN_TRAITS = {"nn", "elementwise", "reduction", "layout", "linalg"}
NN_OPS = {name for name, op in REGISTRY.items() if "nn" in op.traits}


def randn(shape: Sequence[int], dtype: str = "float64") -> np.ndarray:
    return RNG.standard_normal(tuple(shape)).astype(dtype)


def pair(v: Any) -> tuple[Any, Any]:
    return tuple(v) if isinstance(v, (tuple, list)) else (v, v)


@dataclass
class Case:
    op: str
    inputs: list[np.ndarray]
    attrs: dict[str, Any] = field(default_factory=dict)
    expect: Callable[..., np.ndarray] | None = None

    @property
    def id(self) -> str:
        shapes = ",".join(f"{x.dtype}{list(x.shape)}" for x in self.inputs)
        attrs = ",".join(f"{k}={v}" for k, v in self.attrs.items())
        return f"{self.op}({shapes};{attrs})"


CASES: list[Case] = []


def case(op: str, inputs: Sequence[np.ndarray], expect: Callable[..., np.ndarray], **attrs: Any) -> None:
    CASES.append(Case(op, list(inputs), attrs, expect))


# -- independent references: loops over output positions, computed in float64 ------------------------


def out_len(size: int, k: int, s: int, p: int, d: int = 1, ceil_mode: bool = False) -> int:
    """torch's pooling_output_shape, transcribed: round, then pull back a window starting in padding."""
    num = size + 2 * p - d * (k - 1) - 1
    n = (-(-num // s) if ceil_mode else num // s) + 1
    if ceil_mode and (n - 1) * s >= size + p:
        n -= 1
    return n


def ref_conv2d(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None, stride: Any = 1, padding: Any = 0,
               dilation: Any = 1, groups: int = 1) -> np.ndarray:
    squeeze = x.ndim == 3
    x64 = (x[None] if squeeze else x).astype(np.float64)
    (sh, sw), (dh, dw) = pair(stride), pair(dilation)
    cout, cg, kh, kw = w.shape
    if padding == "same":
        th, tw = dh * (kh - 1), dw * (kw - 1)
        top, bottom, left, right = th // 2, th - th // 2, tw // 2, tw - tw // 2
    elif padding == "valid":
        top = bottom = left = right = 0
    else:
        (top, left) = pair(padding)
        bottom, right = top, left
    n, c, h, wd = x64.shape
    xp = np.zeros((n, c, h + top + bottom, wd + left + right))
    xp[:, :, top:top + h, left:left + wd] = x64
    oh = (h + top + bottom - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + left + right - dw * (kw - 1) - 1) // sw + 1
    og = cout // groups
    out = np.zeros((n, cout, oh, ow))
    for i in range(oh):
        for j in range(ow):
            patch = xp[:, :, i * sh:i * sh + dh * (kh - 1) + 1:dh, j * sw:j * sw + dw * (kw - 1) + 1:dw]
            for g in range(groups):
                out[:, g * og:(g + 1) * og, i, j] = np.einsum(
                    "nckl,ockl->no", patch[:, g * cg:(g + 1) * cg], w[g * og:(g + 1) * og].astype(np.float64))
    if b is not None:
        out += b[None, :, None, None]
    return out[0] if squeeze else out


def ref_max_pool2d(x: np.ndarray, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
                   ceil_mode: bool = False) -> np.ndarray:
    (kh, kw), (ph, pw), (dh, dw) = pair(kernel_size), pair(padding), pair(dilation)
    sh, sw = pair(kernel_size if stride is None else stride)
    h, w = x.shape[-2:]
    oh, ow = out_len(h, kh, sh, ph, dh, ceil_mode), out_len(w, kw, sw, pw, dw, ceil_mode)
    out = np.zeros((*x.shape[:-2], oh, ow))
    for i in range(oh):
        rows = [r for r in range(i * sh - ph, i * sh - ph + dh * kh, dh) if 0 <= r < h]
        for j in range(ow):
            cols = [c for c in range(j * sw - pw, j * sw - pw + dw * kw, dw) if 0 <= c < w]
            out[..., i, j] = x[..., rows, :][..., cols].astype(np.float64).max(axis=(-2, -1))
    return out


def ref_avg_pool2d(x: np.ndarray, kernel_size: Any, stride: Any = None, padding: Any = 0,
                   ceil_mode: bool = False, count_include_pad: bool = True,
                   divisor_override: int | None = None) -> np.ndarray:
    (kh, kw), (ph, pw) = pair(kernel_size), pair(padding)
    sh, sw = pair(kernel_size if stride is None else stride)
    h, w = x.shape[-2:]
    oh, ow = out_len(h, kh, sh, ph, 1, ceil_mode), out_len(w, kw, sw, pw, 1, ceil_mode)
    out = np.zeros((*x.shape[:-2], oh, ow))
    for i in range(oh):
        for j in range(ow):
            hs, ws = i * sh - ph, j * sw - pw
            he, we = min(hs + kh, h + ph), min(ws + kw, w + pw)
            pool = (he - hs) * (we - ws)
            hs, ws, he, we = max(hs, 0), max(ws, 0), min(he, h), min(we, w)
            total = x[..., hs:he, ws:we].astype(np.float64).sum(axis=(-2, -1))
            divisor = divisor_override or (pool if count_include_pad else (he - hs) * (we - ws))
            out[..., i, j] = total / divisor
    return out


def ref_adaptive_avg_pool2d(x: np.ndarray, output_size: Any) -> np.ndarray:
    oh, ow = pair(output_size)
    h, w = x.shape[-2:]
    out = np.zeros((*x.shape[:-2], oh, ow))
    for i in range(oh):
        h0, h1 = math.floor(i * h / oh), math.ceil((i + 1) * h / oh)
        for j in range(ow):
            w0, w1 = math.floor(j * w / ow), math.ceil((j + 1) * w / ow)
            out[..., i, j] = x[..., h0:h1, w0:w1].astype(np.float64).mean(axis=(-2, -1))
    return out


def ref_batch_norm(x: np.ndarray, mean: np.ndarray, var: np.ndarray, weight: np.ndarray | None = None,
                   bias: np.ndarray | None = None, eps: float = 1e-5) -> np.ndarray:
    out = np.zeros(x.shape)
    for c in range(x.shape[1]):
        y = (x[:, c].astype(np.float64) - mean[c]) / math.sqrt(var[c] + eps)
        out[:, c] = y * (1.0 if weight is None else weight[c]) + (0.0 if bias is None else bias[c])
    return out


def ref_layer_norm(x: np.ndarray, weight: np.ndarray | None = None, bias: np.ndarray | None = None, *,
                   normalized_shape: Any, eps: float = 1e-5) -> np.ndarray:
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    rows = x.astype(np.float64).reshape(-1, math.prod(shape))
    out = np.zeros(rows.shape)
    for r in range(rows.shape[0]):
        out[r] = (rows[r] - rows[r].mean()) / math.sqrt(rows[r].var() + eps)
    out = out.reshape(x.shape)
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out


def ref_group_norm(x: np.ndarray, weight: np.ndarray | None = None, bias: np.ndarray | None = None, *,
                   num_groups: int, eps: float = 1e-5) -> np.ndarray:
    out = np.zeros(x.shape)
    per = x.shape[1] // num_groups
    for n in range(x.shape[0]):
        for g in range(num_groups):
            block = x[n, g * per:(g + 1) * per].astype(np.float64)
            out[n, g * per:(g + 1) * per] = (block - block.mean()) / math.sqrt(block.var() + eps)
    for c in range(x.shape[1]):
        out[:, c] = out[:, c] * (1.0 if weight is None else weight[c]) + (0.0 if bias is None else bias[c])
    return out


def resized_len(size: int, out: int | None, scale: float | None) -> int:
    return out if out is not None else int(size * scale)


def ref_resize_nearest(x: np.ndarray, size: Any = None, scale_factor: Any = None) -> np.ndarray:
    sizes = pair(size) if size is not None else (None, None)
    scales = pair(scale_factor) if scale_factor is not None else (None, None)
    index = []
    for n, o, s in zip(x.shape[2:], sizes, scales):
        o = resized_len(n, o, s)
        picks = []
        for i in range(o):  # torch's nearest_idx: exact copies and doublings, else float32 math
            if o == n:
                picks.append(i)
            elif o == 2 * n:
                picks.append(i // 2)
            else:
                step = np.float32(1.0 / s) if s else np.float32(n) / np.float32(o)
                picks.append(min(math.floor(np.float32(i) * step), n - 1))
        index.append(picks)
    out = np.empty((*x.shape[:2], len(index[0]), len(index[1])), dtype=x.dtype)
    for i, r in enumerate(index[0]):
        for j, c in enumerate(index[1]):
            out[:, :, i, j] = x[:, :, r, c]
    return out


def ref_resize_bilinear(x: np.ndarray, size: Any = None, scale_factor: Any = None,
                        align_corners: bool = False) -> np.ndarray:
    sizes = pair(size) if size is not None else (None, None)
    scales = pair(scale_factor) if scale_factor is not None else (None, None)
    taps = []
    for n, o, s in zip(x.shape[2:], sizes, scales):
        o = resized_len(n, o, s)
        axis = []
        for i in range(o):
            if align_corners:
                src = i * (n - 1) / (o - 1) if o > 1 else 0.0
            else:
                step = 1.0 / s if s and o != n else n / o  # torch copies an axis of unchanged size
                src = max(step * (i + 0.5) - 0.5, 0.0)
            lo = min(math.floor(src), n - 1)
            hi = min(lo + 1, n - 1)
            lam = min(max(src - lo, 0.0), 1.0)
            axis.append((lo, hi, lam))
        taps.append(axis)
    out = np.zeros((*x.shape[:2], len(taps[0]), len(taps[1])))
    x64 = x.astype(np.float64)
    for i, (h0, h1, lh) in enumerate(taps[0]):
        for j, (w0, w1, lw) in enumerate(taps[1]):
            out[:, :, i, j] = ((1 - lh) * ((1 - lw) * x64[:, :, h0, w0] + lw * x64[:, :, h0, w1])
                               + lh * ((1 - lw) * x64[:, :, h1, w0] + lw * x64[:, :, h1, w1]))
    return out


def ref_roi_align(x: np.ndarray, boxes: np.ndarray, output_size: Any, spatial_scale: float = 1.0,
                  sampling_ratio: int = -1, aligned: bool = False) -> np.ndarray:
    """torchvision's CPU roi_align_forward_kernel_impl, loop for loop."""
    oh, ow = pair(output_size)
    _, c, h, w = x.shape
    out = np.zeros((len(boxes), c, oh, ow))
    for k, (b, x1, y1, x2, y2) in enumerate(boxes.astype(np.float64)):
        img = x[int(b)].astype(np.float64)
        off = 0.5 if aligned else 0.0
        sw, sh, ew, eh = x1 * spatial_scale - off, y1 * spatial_scale - off, x2 * spatial_scale - off, \
            y2 * spatial_scale - off
        rw, rh = ew - sw, eh - sh
        if not aligned:
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        bh, bw = rh / oh, rw / ow
        gh = sampling_ratio if sampling_ratio > 0 else math.ceil(rh / oh)
        gw = sampling_ratio if sampling_ratio > 0 else math.ceil(rw / ow)
        count = max(gh * gw, 1)
        for ph in range(oh):
            for pw in range(ow):
                acc = np.zeros(c)
                for iy in range(gh):
                    for ix in range(gw):
                        y = sh + ph * bh + (iy + 0.5) * bh / gh
                        xx = sw + pw * bw + (ix + 0.5) * bw / gw
                        if y < -1.0 or y > h or xx < -1.0 or xx > w:
                            continue
                        y, xx = max(y, 0.0), max(xx, 0.0)
                        yl, xl = int(y), int(xx)
                        if yl >= h - 1:
                            yl = yh = h - 1
                            y = float(yl)
                        else:
                            yh = yl + 1
                        if xl >= w - 1:
                            xl = xh = w - 1
                            xx = float(xl)
                        else:
                            xh = xl + 1
                        ly, lx = y - yl, xx - xl
                        hy, hx = 1 - ly, 1 - lx
                        acc += (hy * hx * img[:, yl, xl] + hy * lx * img[:, yl, xh]
                                + ly * hx * img[:, yh, xl] + ly * lx * img[:, yh, xh])
                out[k, :, ph, pw] = acc / count
    return out


def ref_embedding(indices: np.ndarray, weight: np.ndarray) -> np.ndarray:
    out = np.empty((*indices.shape, weight.shape[1]), dtype=weight.dtype)
    for pos in np.ndindex(*indices.shape):
        out[pos] = weight[int(indices[pos])]
    return out


def ref_linear(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    out = np.zeros((*x.shape[:-1], w.shape[0]))
    for pos in np.ndindex(*out.shape):
        out[pos] = float(np.dot(x[pos[:-1]].astype(np.float64), w[pos[-1]].astype(np.float64)))
    return out if b is None else out + b


def ref_sdpa(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None = None,
             is_causal: bool = False, scale: float | None = None) -> np.ndarray:
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2],
                                () if mask is None else mask.shape[:-2])
    length, source = q.shape[-2], k.shape[-2]
    if is_causal:
        mask = np.array([[j <= i for j in range(source)] for i in range(length)])
    factor = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    out = np.zeros((*batch, length, v.shape[-1]))
    for idx in np.ndindex(*batch):
        qb, kb, vb = (np.broadcast_to(t, (*batch, *t.shape[-2:]))[idx].astype(np.float64) for t in (q, k, v))
        mb = None if mask is None else np.broadcast_to(mask, (*batch, length, source))[idx]
        for i in range(length):
            scores = [float(qb[i] @ kb[j]) * factor for j in range(source)]
            if mb is not None and mb.dtype == bool:
                scores = [s if mb[i, j] else -math.inf for j, s in enumerate(scores)]
            elif mb is not None:
                scores = [s + float(mb[i, j]) for j, s in enumerate(scores)]
            top = max(scores)
            if top == -math.inf:
                continue  # a fully masked row is zeros (torch's safe softmax)
            e = [math.exp(s - top) for s in scores]
            out[(*idx, i)] = sum(ej * vb[j] for j, ej in enumerate(e)) / sum(e)
    return out


# -- the table --------------------------------------------------------------------------------------

CONV = [  # x shape, weight shape, with bias, attrs
    ((2, 3, 7, 6), (4, 3, 3, 3), True, {}),
    ((2, 3, 7, 6), (4, 3, 3, 3), False, {"stride": 2, "padding": 1}),
    ((1, 4, 9, 8), (6, 2, 3, 2), True,
     {"stride": (2, 1), "padding": (1, 2), "dilation": (2, 1), "groups": 2}),
    ((2, 4, 6, 6), (4, 1, 3, 3), True, {"groups": 4, "padding": 1}),
    ((2, 4, 6, 5), (8, 1, 3, 3), False, {"groups": 4, "stride": (1, 2)}),
    ((1, 3, 5, 7), (2, 3, 4, 2), True, {"padding": "same"}),
    ((1, 3, 5, 7), (2, 3, 3, 3), False, {"padding": "same", "dilation": 2}),
    ((2, 3, 5, 5), (2, 3, 3, 3), True, {"padding": "valid", "stride": 3}),
    ((1, 2, 4, 4), (3, 2, 1, 1), True, {}),
    ((3, 5, 5), (2, 3, 3, 3), True, {"padding": 1}),
    ((1, 2, 3, 3), (1, 2, 3, 3), False, {}),
    ((1, 2, 2, 2), (2, 2, 3, 3), True, {"padding": 4, "dilation": 3}),
]
for _dt in FLOATS:
    for _xs, _ws, _bias, _attrs in CONV:
        _inputs = [randn(_xs, _dt), randn(_ws, _dt)] + ([randn(_ws[:1], _dt)] if _bias else [])
        case("conv2d", _inputs, lambda *xs, a=_attrs: ref_conv2d(*xs, **a), **_attrs)


def ref_conv_transpose2d(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None, stride: Any = 1,
                         padding: Any = 0, output_padding: Any = 0, groups: int = 1,
                         dilation: Any = 1) -> np.ndarray:
    """Each input pixel adds its kernel-weighted copy into the output, pixel by pixel, then the crop."""
    squeeze = x.ndim == 3
    x64 = (x[None] if squeeze else x).astype(np.float64)
    (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(padding), pair(dilation)
    oph, opw = pair(output_padding)
    n, c, h, wd = x64.shape
    _, og, kh, kw = w.shape
    cg = c // groups
    full_h, full_w = (h - 1) * sh + dh * (kh - 1) + 1 + oph, (wd - 1) * sw + dw * (kw - 1) + 1 + opw
    full = np.zeros((n, og * groups, full_h, full_w))
    for i in range(h):
        for j in range(wd):
            for g in range(groups):
                contrib = np.einsum("nc,cokl->nokl", x64[:, g * cg:(g + 1) * cg, i, j],
                                    w[g * cg:(g + 1) * cg].astype(np.float64))
                full[:, g * og:(g + 1) * og, i * sh:i * sh + dh * (kh - 1) + 1:dh,
                     j * sw:j * sw + dw * (kw - 1) + 1:dw] += contrib
    out = full[:, :, ph:full_h - ph, pw:full_w - pw]
    if b is not None:
        out = out + b[None, :, None, None]
    return out[0] if squeeze else out


CONV_TRANSPOSE = [  # x shape, weight shape, with bias, attrs
    ((2, 3, 4, 5), (3, 2, 3, 3), True, {}),
    ((1, 3, 7, 6), (3, 4, 3, 3), True, {"stride": (3, 2), "padding": 1, "output_padding": 1}),
    ((2, 4, 3, 3), (4, 3, 2, 2), False, {"stride": 2}),
    ((1, 4, 5, 4), (4, 1, 3, 2), True,
     {"stride": (2, 1), "padding": (1, 0), "output_padding": (1, 0), "groups": 2, "dilation": (1, 2)}),
    ((3, 4, 4), (3, 2, 3, 3), True, {"stride": 2, "padding": 1, "output_padding": 1}),
]
for _dt in FLOATS:
    for _xs, _ws, _bias, _attrs in CONV_TRANSPOSE:
        _cout = _ws[1] * _attrs.get("groups", 1)
        _inputs = [randn(_xs, _dt), randn(_ws, _dt)] + ([randn((_cout,), _dt)] if _bias else [])
        case("conv_transpose2d", _inputs, lambda *xs, a=_attrs: ref_conv_transpose2d(*xs, **a), **_attrs)

POOL = [  # x shape, attrs shared by max and avg pooling
    ((2, 3, 7, 8), {"kernel_size": 2}),
    ((2, 3, 7, 8), {"kernel_size": 3, "stride": 2, "padding": 1}),
    ((2, 3, 7, 8), {"kernel_size": 3, "stride": 2, "ceil_mode": True}),
    ((1, 2, 7, 7), {"kernel_size": 2, "stride": 2, "ceil_mode": True}),
    ((1, 2, 5, 5), {"kernel_size": 2, "stride": 2, "padding": 1, "ceil_mode": True}),
    ((1, 2, 6, 5), {"kernel_size": (3, 2), "stride": (2, 1), "padding": (1, 1), "ceil_mode": True}),
    ((3, 6, 6), {"kernel_size": 2}),
    ((1, 1, 1, 1), {"kernel_size": 1}),
]
for _dt in FLOATS:
    for _xs, _attrs in POOL:
        case("max_pool2d", [randn(_xs, _dt)], lambda x, a=_attrs: ref_max_pool2d(x, **a), **_attrs)
        for _include in (True, False):
            a = {**_attrs, "count_include_pad": _include}
            case("avg_pool2d", [randn(_xs, _dt)], lambda x, a=a: ref_avg_pool2d(x, **a), **a)
    for _xs, _attrs in [((2, 3, 9, 8), {"kernel_size": (3, 2), "stride": (2, 1), "padding": (1, 0),
                                        "dilation": (2, 1)}),
                        ((1, 2, 7, 7), {"kernel_size": 3, "stride": 2, "padding": 1, "dilation": 2,
                                        "ceil_mode": True})]:
        case("max_pool2d", [randn(_xs, _dt)], lambda x, a=_attrs: ref_max_pool2d(x, **a), **_attrs)
    _a = {"kernel_size": 3, "stride": 2, "padding": 1, "divisor_override": 5}
    case("avg_pool2d", [randn((2, 2, 6, 7), _dt)], lambda x, a=_a: ref_avg_pool2d(x, **a), **_a)
    for _xs, _out in [((2, 3, 7, 9), (3, 4)), ((1, 2, 7, 9), (7, 9)), ((2, 3, 5, 6), 1),
                      ((1, 2, 4, 5), (10, 12)), ((3, 5, 5), 2), ((1, 1, 6, 6), (4, 1))]:
        case("adaptive_avg_pool2d", [randn(_xs, _dt)], lambda x, o=_out: ref_adaptive_avg_pool2d(x, o),
             output_size=_out)

for _dt in FLOATS:
    for _xs, _affine, _eps in [((2, 3, 4, 5), True, 1e-5), ((4, 3), True, 1e-3), ((2, 3, 5), False, 1e-5),
                               ((1, 2, 2, 2, 3), True, 0.1)]:
        _c = _xs[1]
        _inputs = [randn(_xs, _dt), randn((_c,), _dt), np.abs(randn((_c,), _dt)) + 0.5]
        if _affine:
            _inputs += [randn((_c,), _dt), randn((_c,), _dt)]
        case("batch_norm", _inputs, lambda *xs, e=_eps: ref_batch_norm(*xs, eps=e), eps=_eps)
    _inputs = [randn((2, 3, 4), _dt), randn((3,), _dt), np.abs(randn((3,), _dt)) + 0.5, randn((3,), _dt)]
    case("batch_norm", _inputs, ref_batch_norm)  # weight without bias
    for _xs, _ns, _params in [((2, 3, 8), (8,), 2), ((2, 3, 4), (3, 4), 2), ((6,), 6, 0), ((2, 5), (5,), 1),
                              ((1, 2, 2, 3), (2, 2, 3), 2)]:
        _shape = (_ns,) if isinstance(_ns, int) else _ns
        _inputs = [randn(_xs, _dt)] + [randn(_shape, _dt) for _ in range(_params)]
        case("layer_norm", _inputs, lambda *xs, ns=_ns: ref_layer_norm(*xs, normalized_shape=ns),
             normalized_shape=_ns)
    for _xs, _g, _params, _eps in [((2, 6, 4, 4), 3, 2, 1e-5), ((2, 6, 3), 1, 2, 1e-5),
                                   ((2, 6, 2, 2), 6, 1, 1e-3), ((3, 4, 5), 2, 0, 1e-5), ((1, 4), 2, 2, 1e-5)]:
        _inputs = [randn(_xs, _dt)] + [randn(_xs[1:2], _dt) for _ in range(_params)]
        case("group_norm", _inputs, lambda *xs, g=_g, e=_eps: ref_group_norm(*xs, num_groups=g, eps=e),
             num_groups=_g, eps=_eps)

def ref_lrn(x: np.ndarray, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0) -> np.ndarray:
    """ONNX's LRN, channel by channel: the window runs (size-1)//2 channels back and size//2 ahead."""
    x64, out = x.astype(np.float64), np.empty(x.shape)
    for c in range(x.shape[1]):
        lo, hi = max(c - (size - 1) // 2, 0), min(c + size // 2, x.shape[1] - 1)
        square_sum = np.sum(x64[:, lo:hi + 1] ** 2, axis=1)
        out[:, c] = x64[:, c] / (k + alpha / size * square_sum) ** beta
    return out


for _dt in FLOATS:
    for _xs, _attrs in [((2, 5, 3, 3), {"size": 3}), ((2, 3, 2, 2), {"size": 1}),
                        ((1, 6, 4), {"size": 4, "alpha": 0.5, "beta": 0.6, "k": 2.0})]:
        case("lrn", [randn(_xs, _dt)], lambda x, a=_attrs: ref_lrn(x, **a), **_attrs)

def triple(v: Any) -> tuple[Any, Any, Any]:
    return tuple(v) if isinstance(v, (tuple, list)) else (v, v, v)


def ref_window3d(x: np.ndarray, kernel: Any, stride: Any, padding: Any, dilation: Any, ceil_mode: bool,
                 fill: float, reduce: Callable[[np.ndarray, tuple[int, ...]], np.ndarray]) -> np.ndarray:
    """``reduce(window, starts)`` at every 3-D output position of padded NCDHW ``x`` (float64 loops)."""
    squeeze = x.ndim == 4
    x64 = (x[None] if squeeze else x).astype(np.float64)
    k, s = triple(kernel), triple(kernel if stride is None else stride)
    p, d, sizes = triple(padding), triple(dilation), x64.shape[2:]
    out = [out_len(size, *a, ceil_mode=ceil_mode) for size, *a in zip(sizes, k, s, p, d)]
    xp = np.full((*x64.shape[:2], *(n + 2 * pi + ki * si for n, pi, ki, si in zip(sizes, p, k, s))), fill)
    xp[(..., *(slice(pi, pi + n) for pi, n in zip(p, sizes)))] = x64
    y = None
    for pos in np.ndindex(*out):
        starts = tuple(o * si for o, si in zip(pos, s))
        win = xp[(..., *(slice(st, st + di * (ki - 1) + 1, di) for st, di, ki in zip(starts, d, k)))]
        value = reduce(win, tuple(st - pi for st, pi in zip(starts, p)))
        if y is None:
            y = np.zeros((*value.shape, *out))
        y[(..., *pos)] = value
    return y[0] if squeeze else y


def ref_conv3d(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None, stride: Any = 1, padding: Any = 0,
               dilation: Any = 1, groups: int = 1) -> np.ndarray:
    cg, og = w.shape[1], w.shape[0] // groups

    def dot(win: np.ndarray, _: Any) -> np.ndarray:
        parts = [np.einsum("ncdhw,ocdhw->no", win[:, g * cg:(g + 1) * cg], w[g * og:(g + 1) * og])
                 for g in range(groups)]
        return np.concatenate(parts, axis=1)

    y = ref_window3d(x, w.shape[2:], stride, padding, dilation, False, 0.0, dot)
    return y if b is None else y + b.reshape(-1, 1, 1, 1)


def ref_max_pool3d(x: np.ndarray, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
                   ceil_mode: bool = False) -> np.ndarray:
    return ref_window3d(x, kernel_size, stride, padding, dilation, ceil_mode, -np.inf,
                        lambda win, _: win.max(axis=(2, 3, 4)))


def ref_avg_pool3d(x: np.ndarray, kernel_size: Any, stride: Any = None, padding: Any = 0,
                   ceil_mode: bool = False, count_include_pad: bool = True,
                   divisor_override: int | None = None) -> np.ndarray:
    k, p, sizes = triple(kernel_size), triple(padding), x.shape[-3:]

    def mean(win: np.ndarray, starts: tuple[int, ...]) -> np.ndarray:
        if divisor_override is not None:
            return win.sum(axis=(2, 3, 4)) / divisor_override
        count = 1
        for st, ki, pi, size in zip(starts, k, p, sizes):
            end = min(st + ki, size + pi)  # ceil_mode's overhang never counts
            count *= (end - st) if count_include_pad else min(end, size) - max(st, 0)
        return win.sum(axis=(2, 3, 4)) / count

    return ref_window3d(x, kernel_size, stride, padding, 1, ceil_mode, 0.0, mean)


for _dt in FLOATS:
    for _xs, _ws, _bias, _attrs in [((2, 4, 4, 5, 4), (6, 2, 3, 3, 3), True, {"groups": 2}),
                                    ((1, 3, 5, 5, 5), (4, 3, 2, 2, 2), False,
                                     {"stride": 2, "padding": 1, "dilation": (1, 2, 1)}),
                                    ((3, 4, 4, 4), (2, 3, 1, 3, 2), True, {"padding": (0, 1, 0)})]:
        _inputs = [randn(_xs, _dt), randn(_ws, _dt)] + ([randn(_ws[:1], _dt)] if _bias else [])
        case("conv3d", _inputs, lambda *xs, a=_attrs: ref_conv3d(*xs, **a), **_attrs)
    for _xs, _attrs in [
        ((2, 3, 5, 5, 5), {"kernel_size": 2, "stride": 2}),
        ((1, 2, 5, 6, 7), {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}),
        ((2, 4, 6, 5), {"kernel_size": (2, 3, 2), "stride": (1, 2, 2), "padding": (1, 1, 0)}),
    ]:
        case("max_pool3d", [randn(_xs, _dt)], lambda x, a=_attrs: ref_max_pool3d(x, **a), **_attrs)
        case("max_pool3d", [randn(_xs, _dt)],
             lambda x, a=_attrs: ref_max_pool3d(x, dilation=(2, 1, 1), **a), dilation=(2, 1, 1), **_attrs)
        for _extra in ({}, {"count_include_pad": False}, {"divisor_override": 5}):
            case("avg_pool3d", [randn(_xs, _dt)], lambda x, a={**_attrs, **_extra}: ref_avg_pool3d(x, **a),
                 **_attrs, **_extra)


RESIZE = [{"size": (10, 14)}, {"size": (3, 4)}, {"size": (5, 7)}, {"size": (7, 11)}, {"size": 4},
          {"scale_factor": 2.0}, {"scale_factor": 0.5}, {"scale_factor": 1.7}, {"scale_factor": (1.5, 0.75)},
          {"scale_factor": (1.1, 2.1)}, {"size": (1, 1)}]
for _dt in FLOATS:
    for _attrs in RESIZE:
        x = randn((2, 3, 5, 7), _dt)
        case("resize_nearest", [x], lambda x, a=_attrs: ref_resize_nearest(x, **a), **_attrs)
        for _align in (False, True):
            a = {**_attrs, "align_corners": _align}
            case("resize_bilinear", [x], lambda x, a=a: ref_resize_bilinear(x, **a), **a)
for _dt in ("int64", "uint8", "bool"):
    x = RNG.integers(0, 2 if _dt == "bool" else 100, size=(1, 2, 3, 4)).astype(_dt)
    case("resize_nearest", [x], lambda x: ref_resize_nearest(x, size=(5, 9)), size=(5, 9))


def make_boxes(k: int, n: int, h: int, w: int, dtype: str, scale: float) -> np.ndarray:
    """Random boxes in feature-map units / scale, some reaching outside the map, some tiny."""
    x1 = RNG.uniform(-3, w - 1, k) / scale
    y1 = RNG.uniform(-3, h - 1, k) / scale
    x2 = x1 + RNG.uniform(0.2, w / 1.5, k) / scale
    y2 = y1 + RNG.uniform(0.2, h / 1.5, k) / scale
    boxes = np.stack([RNG.integers(0, n, k).astype(float), x1, y1, x2, y2], axis=1)
    boxes[0, 1:] = [1, 2, 1 + 2 * 3 / scale, 2 + 2 * 2 / scale]  # integer box: exact sample positions
    boxes[1, 1:] = [w / scale - 0.5, h / scale - 0.5, w / scale + 2, h / scale + 3]  # past the far edge
    return boxes.astype(dtype)


for _dt in FLOATS:
    for _out, _scale, _ratio, _aligned in [((2, 3), 1.0, -1, False), ((3, 3), 0.5, 2, False),
                                           ((2, 2), 0.5, -1, True), ((1, 4), 0.25, 1, True),
                                           (2, 1.0, 3, False)]:
        x = randn((2, 3, 10, 12), _dt)
        boxes = make_boxes(6, 2, 10, 12, _dt, _scale)
        attrs = {"output_size": _out, "spatial_scale": _scale, "sampling_ratio": _ratio, "aligned": _aligned}
        case("roi_align", [x, boxes], lambda x, b, a=attrs: ref_roi_align(x, b, **a), **attrs)

for _it in ("int32", "int64"):
    for _shape in ((2, 3), (), (0,), (4,)):
        for _dt in ("float32", "float64"):
            _indices = RNG.integers(0, 10, size=_shape).astype(_it)
            case("embedding", [_indices, randn((10, 4), _dt)], ref_embedding)

for _dt in FLOATS:
    for _xs, _ws, _bias in [((4, 6), (3, 6), True), ((2, 5, 6), (3, 6), False), ((6,), (2, 6), True)]:
        _inputs = [randn(_xs, _dt), randn(_ws, _dt)] + ([randn(_ws[:1], _dt)] if _bias else [])
        case("linear", _inputs, ref_linear)

_CAUSAL_ROW_MASK = np.array([[True] * 6, [False] * 6, [True, False] * 3, [False] * 5 + [True]])
SDPA = [  # q, k, v shapes, mask (None, an array or a shape for a float mask), attrs
    ((2, 3, 4, 5), (2, 3, 6, 5), (2, 3, 6, 7), None, {}),
    ((2, 3, 4, 5), (2, 3, 6, 5), (2, 3, 6, 7), None, {"is_causal": True}),
    ((1, 6, 3), (1, 4, 3), (1, 4, 2), None, {"is_causal": True, "scale": 0.3}),
    ((2, 4, 5), (2, 6, 5), (2, 6, 3), _CAUSAL_ROW_MASK, {}),
    ((2, 1, 4, 5), (2, 3, 6, 5), (1, 3, 6, 2), (4, 6), {}),
    ((2, 4, 5), (6, 5), (6, 5), (1, 6), {}),
    ((3, 2, 8), (3, 5, 8), (3, 5, 8), None, {"scale": 1.0}),
]
for _dt in FLOATS:
    for _qs, _ks, _vs, _mask, _attrs in SDPA:
        _inputs = [randn(_qs, _dt), randn(_ks, _dt), randn(_vs, _dt)]
        if isinstance(_mask, np.ndarray):
            _inputs.append(_mask)
        elif _mask is not None:
            _inputs.append(randn(_mask, _dt))
        case("scaled_dot_product_attention", _inputs, lambda *xs, a=_attrs: ref_sdpa(*xs, **a), **_attrs)


# -- helpers for the generic checks -----------------------------------------------------------------


def tolerance(dtype: np.dtype) -> float:
    return {"float32": 1e-4, "float64": 1e-10}[dtype.name]


def assert_close(out: np.ndarray, ref: np.ndarray) -> None:
    assert out.shape == ref.shape, f"shape {out.shape} vs reference {ref.shape}"
    if out.dtype.kind != "f":
        np.testing.assert_array_equal(out, ref)
        return
    tol = tolerance(out.dtype)
    scale = max(1.0, float(np.abs(ref).max(initial=0)))
    np.testing.assert_allclose(out, ref, rtol=tol, atol=tol * scale)


def types_for(inputs: Sequence[np.ndarray], mode: str) -> tuple[list[TensorType], dict[str, int]]:
    """Input types: 'const' keeps sizes; otherwise every dim other than 1 becomes a symbol N0, N1..."""
    bindings: dict[str, int] = {}
    types = []
    for x in inputs:
        dims: list[Any] = []
        for size in x.shape:
            if mode == "const" or size == 1:
                dims.append(size)
            else:
                bindings[f"N{len(bindings)}"] = size
                dims.append(Dim.sym(f"N{len(bindings) - 1}"))
        types.append(TensorType(ShapeSpec(dims), x.dtype.name))
    return types, bindings


def register_attrs(op: Any, attrs: dict[str, Any], bindings: dict[str, int]) -> dict[str, Any]:
    """Dim-valued attributes (sizes from scalar registers) replaced by symbols A0, A1..."""
    out = dict(attrs)
    for key, value in attrs.items():
        if op.attrs[key].kind == "dims" and value is not None:
            names = []
            for v in value:
                bindings[f"A{len(bindings)}"] = v
                names.append(Dim.sym(f"A{len(bindings) - 1}"))
            out[key] = tuple(names)
    return out


def failing_guards(ctx: InferContext, bindings: dict[str, int]) -> list[str]:
    return [str(g) for g in ctx.guards if not g.holds(bindings)]


# -- the generic tests ------------------------------------------------------------------------------


def test_table_covers_every_nn_op() -> None:
    assert len(NN_OPS) >= 12
    missing = NN_OPS - {c.op for c in CASES}
    assert not missing, f"nn ops without an example call in CASES: {sorted(missing)}"
    assert {c.op for c in CASES} <= NN_OPS


def test_every_nn_op_has_known_traits_a_doc_and_documented_attrs() -> None:
    registered_as_nn = {name for name, op in REGISTRY.items() if isinstance(op, NnOpDef)}
    assert registered_as_nn == NN_OPS
    for name in NN_OPS:
        op = REGISTRY[name]
        assert op.traits <= KNOWN_TRAITS and "nn" in op.traits, (name, op.traits)
        assert op.doc, name
        assert not callable(op.outputs), name
        for key, spec in op.attrs.items():
            assert spec.doc, (name, key)


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_kernel_against_reference(c: Case) -> None:
    op = REGISTRY[c.op]
    before = [x.copy() for x in c.inputs]
    out = op(**dict(zip(op.inputs, c.inputs)), **c.attrs)  # by name: torch's order has attributes between
    for x, saved in zip(c.inputs, before):
        np.testing.assert_array_equal(x, saved, err_msg="the kernel modified its input")
    assert isinstance(out, np.ndarray)
    assert not any(np.shares_memory(out, x) for x in c.inputs), "the kernel returned a view of an input"
    expected_dtype = c.inputs[1].dtype if c.op == "embedding" else c.inputs[0].dtype
    assert out.dtype == expected_dtype
    assert_close(out, np.asarray(c.expect(*c.inputs)))


@pytest.mark.parametrize("mode", ["const", "sym", "symattrs"])
@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_shape_function_matches_kernel(c: Case, mode: str) -> None:
    op = REGISTRY[c.op]
    out = op(**dict(zip(op.inputs, c.inputs)), **c.attrs)  # by name: torch's order has attributes between
    attrs = op.check_attrs(c.attrs)
    types, bindings = types_for(c.inputs, mode)
    if mode == "symattrs":
        attrs = register_attrs(op, attrs, bindings)
    ctx = InferContext()
    t = op.infer(ctx, *types, **attrs)
    if mode == "const":
        assert not ctx.guards, [str(g) for g in ctx.guards]
        assert t.shape.is_static, t
    assert not failing_guards(ctx, bindings)
    assert t.shape.rank == out.ndim, (t, out.shape)
    for i, (d, size) in enumerate(zip(t.shape, out.shape)):
        if not d.is_unknown:
            assert d.evaluate(bindings) == size, f"dim {i} is {d}, the kernel gave {size} ({bindings})"
    assert t.dtype == out.dtype.name


# -- symbolic shapes stay symbolic --------------------------------------------------------------------


def infer(name: str, *specs: str, dtypes: Sequence[str] = (),
          **attrs: Any) -> tuple[TensorType, InferContext]:
    """The op's shape function on specs (dtypes default to float32)."""
    op = REGISTRY[name]
    types = [TensorType(parse_shape(s), dtypes[i] if i < len(dtypes) else "float32")
             for i, s in enumerate(specs)]
    ctx = InferContext()
    return op.infer(ctx, *types, **op.check_attrs(attrs)), ctx


h, w = Dim.sym("h"), Dim.sym("w")
FLOAT3 = ("float32",) * 3


@pytest.mark.parametrize(("name", "specs", "attrs", "expected"), [
    ("conv2d", ("[N, 3, H, W]", "[16, 3, 3, 3]"), {"padding": 1}, "[N, 16, H, W]"),
    ("conv2d", ("[N, 3, H, W]", "[16, 3, 3, 3]", "[16]"), {"stride": 2, "padding": 1},
     "[N, 16, (H+1)//2, (W+1)//2]"),
    ("conv2d", ("[N, 3, H, W]", "[16, 3, 5, 4]"), {"padding": "same"}, "[N, 16, H, W]"),
    ("conv2d", ("[N, 3, H, W]", "[8, 3, 3, 3]"), {"dilation": 2}, "[N, 8, H-4, W-4]"),
    ("conv2d", ("[N, C, H, W]", "[C, 1, 3, 3]"), {"groups": 4, "padding": 1}, "[N, C, H, W]"),
    ("conv2d", ("[3, H, W]", "[8, 3, 1, 1]"), {}, "[8, H, W]"),
    ("max_pool2d", ("[N, C, H, W]",), {"kernel_size": 2}, "[N, C, H//2, W//2]"),
    ("max_pool2d", ("[N, C, H, W]",), {"kernel_size": 2, "ceil_mode": True}, "[N, C, (H+1)//2, (W+1)//2]"),
    ("max_pool2d", ("[N, C, H, W]",), {"kernel_size": 3, "stride": 2, "padding": 1},
     "[N, C, (H+1)//2, (W+1)//2]"),
    ("max_pool2d", ("[N, C, 5, 5]",), {"kernel_size": 2, "padding": 1, "ceil_mode": True}, "[N, C, 3, 3]"),
    ("avg_pool2d", ("[N, C, H, 7]",), {"kernel_size": 3, "stride": 2, "ceil_mode": True}, "[N, C, H//2, 3]"),
    ("max_pool2d", ("[N, C, H, 7]",), {"kernel_size": 1, "stride": 2, "ceil_mode": True},
     "[N, C, min((H+1)//2-1,H//2)+1, 4]"),  # the last-window rule can bind: it stays in the formula
    ("adaptive_avg_pool2d", ("[N, C, H, W]",), {"output_size": (h, w)}, "[N, C, h, w]"),
    ("adaptive_avg_pool2d", ("[N, C, H, W]",), {"output_size": 1}, "[N, C, 1, 1]"),
    ("batch_norm", ("[N, C, H, W]", "[C]", "[C]"), {}, "[N, C, H, W]"),
    ("layer_norm", ("[B, T, D]", "[D]", "[D]"), {"normalized_shape": (Dim.sym("D"),)}, "[B, T, D]"),
    ("group_norm", ("[N, 32, H, W]",), {"num_groups": 8}, "[N, 32, H, W]"),
    ("resize_nearest", ("[N, C, H, W]",), {"size": (h * 2, w * 2)}, "[N, C, h*2, w*2]"),
    ("resize_nearest", ("[N, C, H, W]",), {"scale_factor": 2.0}, "[N, C, H*2, W*2]"),
    ("resize_nearest", ("[N, C, H, W]",), {"scale_factor": (0.5, 1.5)}, "[N, C, H//2, W+W//2]"),
    ("resize_nearest", ("[N, C, H, W]",), {"scale_factor": 1.7}, "[N, C, ?, ?]"),
    ("resize_nearest", ("[N, C, 10, W]",), {"scale_factor": 1.7}, "[N, C, 17, ?]"),
    ("resize_bilinear", ("[N, C, H, W]",), {"size": h}, "[N, C, h, h]"),
    ("roi_align", ("[N, C, H, W]", "[K, 5]"), {"output_size": 7}, "[K, C, 7, 7]"),
    ("embedding", ("[B, T]", "[V, D]"), {}, "[B, T, D]"),
    ("scaled_dot_product_attention", ("[B, NH, L, E]", "[B, NH, S, E]", "[B, NH, S, EV]"), {},
     "[B, NH, L, EV]"),
    ("scaled_dot_product_attention", ("[B, 1, L, E]", "[B, NH, S, E]", "[B, NH, S, E]", "[L, S]"), {},
     "[B, NH, L, E]"),
])
def test_symbolic_shapes(name: str, specs: tuple, attrs: dict, expected: str) -> None:
    dtypes = {"embedding": ("int64",), "scaled_dot_product_attention": (*FLOAT3, "bool")}.get(name, ())
    out, _ = infer(name, *specs, dtypes=dtypes, **attrs)
    assert str(out.shape) == expected


def test_undecidable_sizes_become_guards() -> None:
    _, ctx = infer("conv2d", "[N, C, H, W]", "[8, 3, 5, 5]")
    assert not failing_guards(ctx, {"N": 2, "C": 3, "H": 5, "W": 9})
    assert failing_guards(ctx, {"N": 2, "C": 4, "H": 5, "W": 9})  # channels
    assert failing_guards(ctx, {"N": 2, "C": 3, "H": 4, "W": 9})  # window larger than the input
    _, ctx = infer("group_norm", "[N, C, H]", num_groups=4)
    assert not failing_guards(ctx, {"N": 1, "C": 8, "H": 3}) and failing_guards(ctx, {"N": 1, "C": 6, "H": 3})
    _, ctx = infer("resize_nearest", "[N, C, H, W]", scale_factor=0.5)
    assert not failing_guards(ctx, {"N": 1, "C": 1, "H": 2, "W": 3}) and failing_guards(
        ctx, {"N": 1, "C": 1, "H": 1, "W": 3})
    _, ctx = infer("adaptive_avg_pool2d", "[N, C, H, W]", output_size=(h, 3))
    assert failing_guards(ctx, {"N": 1, "C": 1, "H": 2, "W": 3, "h": -1})
    _, ctx = infer("roi_align", "[N, C, H, W]", "[K, F]", output_size=2)
    assert not failing_guards(ctx, {"N": 1, "C": 1, "H": 2, "W": 3, "K": 4, "F": 5})
    assert failing_guards(ctx, {"N": 1, "C": 1, "H": 2, "W": 3, "K": 4, "F": 4})


# -- attribute schemas and errors ----------------------------------------------------------------------


def test_single_values_spread_over_h_and_w() -> None:
    op = REGISTRY["conv2d"]
    assert op.check_attrs({"stride": 2, "padding": [1, 0]}) == {
        "stride": (2, 2), "padding": (1, 0), "dilation": (1, 1), "groups": 1}
    assert op.check_attrs({"padding": "same"})["padding"] == "same"
    assert REGISTRY["max_pool2d"].check_attrs({"kernel_size": 3})["stride"] is None
    assert REGISTRY["layer_norm"].check_attrs({"normalized_shape": 8})["normalized_shape"] == (8,)
    assert REGISTRY["resize_bilinear"].check_attrs({"scale_factor": 2})["scale_factor"] == (2.0, 2.0)
    assert REGISTRY["adaptive_avg_pool2d"].check_attrs({"output_size": h})["output_size"] == (h, h)


def test_conv2d_padding_schema_says_what_it_accepts() -> None:
    """padding is an ints_or_str attribute: the generic checker (what the verifier runs) takes the words."""
    spec = REGISTRY["conv2d"].attrs["padding"]
    assert spec.kind == "ints_or_str" and spec.choices == ("same", "valid")
    generic = OpDef.check_attrs
    assert generic(REGISTRY["conv2d"], {"padding": "valid"})["padding"] == "valid"
    assert generic(REGISTRY["conv2d"], {"padding": [1, 2]})["padding"] == (1, 2)
    for bad in ("full", 1.5, ("same",)):
        with pytest.raises(OpTypeError) as info:
            generic(REGISTRY["conv2d"], {"padding": bad})
        assert info.value.code == "ATTR-TYPE"
        if bad == "full":
            assert "a tuple of ints or one of 'same', 'valid'" in info.value.message


def test_choices_only_on_kinds_that_take_words() -> None:
    def op(name: str, attr: Attr) -> OpDef:
        return OpDef(name, ("x",), {"a": attr}, lambda ctx, x, a: x, lambda x, a: x, doc="test")

    with pytest.raises(ValueError, match="cannot have choices"):
        register(op("t_choices_on_ints", Attr("ints", (0,), choices=("same",), doc="d")))
    with pytest.raises(ValueError, match="needs choices"):
        register(op("t_words_without_choices", Attr("ints_or_str", (0,), doc="d")))
    assert "t_choices_on_ints" not in REGISTRY and "t_words_without_choices" not in REGISTRY


def test_linear_takes_torch_style_arguments() -> None:
    x, wt, b = randn((2, 4)), randn((3, 4)), randn((3,))
    assert_close(ops.linear(x, wt, None), ref_linear(x, wt))  # bias=None is absent
    assert_close(ops.linear(x, weight=wt, bias=b), ref_linear(x, wt, b))
    with pytest.raises(OpTypeError) as info:  # checked by the shape function before the kernel runs
        ops.linear(x, randn((3, 5)))
    assert info.value.code == "SHAPE-MISMATCH"


def test_eager_calls_follow_torch_conventions() -> None:
    x, wt, b = randn((1, 2, 5, 5)), randn((3, 2, 3, 3)), randn((3,))
    expected = ref_conv2d(x, wt, b, stride=2)
    assert_close(ops.conv2d(x, wt, b, 2), expected)  # positional attributes after the inputs
    assert_close(ops.conv2d(x, weight=wt, bias=b, stride=2), expected)
    assert_close(ops.conv2d(x, wt, None, 2), ref_conv2d(x, wt, stride=2))  # bias=None is absent
    assert_close(ops.layer_norm(x, normalized_shape=5), ref_layer_norm(x, normalized_shape=(5,)))
    with pytest.raises(TypeError, match="weight"):
        ops.layer_norm(x, bias=randn((5,)), normalized_shape=5)
    with pytest.raises(OpTypeError) as info:  # eager calls are checked by the shape function
        ops.conv2d(x, randn((3, 3, 3, 3)))
    assert info.value.code == "SHAPE-MISMATCH"


@pytest.mark.parametrize(("name", "attrs", "code"), [
    ("conv2d", {"padding": "full"}, "ATTR-TYPE"),
    ("conv2d", {"stride": (1, 2, 3)}, "ATTR-VALUE"),
    ("conv2d", {"stride": 1.5}, "ATTR-TYPE"),
    ("conv2d", {"dilations": 1}, "ATTR-UNKNOWN"),
    ("max_pool2d", {}, "ATTR-MISSING"),
    ("max_pool2d", {"kernel_size": 2, "ceil_mode": 1}, "ATTR-TYPE"),
    ("avg_pool2d", {"kernel_size": 2, "divisor_override": 1.5}, "ATTR-TYPE"),
    ("adaptive_avg_pool2d", {"output_size": (1, 2, 3)}, "ATTR-VALUE"),
    ("resize_nearest", {"size": 2.5}, "ATTR-TYPE"),
    ("resize_bilinear", {"scale_factor": "2"}, "ATTR-TYPE"),
    ("roi_align", {}, "ATTR-MISSING"),
    ("group_norm", {}, "ATTR-MISSING"),
    ("layer_norm", {"normalized_shape": 4, "eps": "small"}, "ATTR-TYPE"),
    ("scaled_dot_product_attention", {"is_causal": "yes"}, "ATTR-TYPE"),
])
def test_attribute_schema_errors(name: str, attrs: dict, code: str) -> None:
    with pytest.raises(OpTypeError) as info:
        REGISTRY[name].check_attrs(attrs)
    assert info.value.code == code


@pytest.mark.parametrize(("name", "specs", "dtypes", "attrs", "code"), [
    ("conv2d", ("[2, 3, 8, 8]", "[4, 2, 3, 3]"), (), {}, "SHAPE-MISMATCH"),  # channels vs weight
    ("conv2d", ("[2, 6, 8, 8]", "[5, 2, 3, 3]"), (), {"groups": 3}, "SHAPE-MISMATCH"),  # out % groups
    ("conv2d", ("[2, 6, 8, 8]", "[6, 4, 3, 3]"), (), {"groups": 4}, "SHAPE-MISMATCH"),  # in % groups
    ("conv2d", ("[2, 3, 2, 8]", "[4, 3, 3, 3]"), (), {}, "SHAPE-MISMATCH"),  # kernel larger than input
    ("conv2d", ("[2, 3, 4, 8]", "[4, 3, 3, 3]"), (), {"dilation": 2}, "SHAPE-MISMATCH"),
    ("conv2d", ("[2, 3, 8, 8]", "[4, 3, 3, 3]", "[5]"), (), {}, "SHAPE-MISMATCH"),  # bias length
    ("conv2d", ("[2, 3, 8, 8]", "[4, 3, 3, 3]", "[4, 1]"), (), {}, "RANK"),
    ("conv2d", ("[2, 3, 8, 8]", "[4, 3, 3, 3]"), (), {"padding": "same", "stride": 2}, "ATTR-VALUE"),
    ("conv2d", ("[2, 3, 8, 8]", "[4, 3, 3, 3]"), (), {"stride": 0}, "ATTR-VALUE"),
    ("conv2d", ("[2, 3, 8, 8]", "[4, 3, 3, 3]"), (), {"padding": -1}, "ATTR-VALUE"),
    ("conv2d", ("[2, 3, 8, 8]", "[4, 3, 3, 3]"), (), {"groups": 0}, "ATTR-VALUE"),
    ("conv2d", ("[3, 8]", "[4, 3, 3, 3]"), (), {}, "RANK"),
    ("conv2d", ("[2, 3, 8, 8]", "[4, 3, 3]"), (), {}, "RANK"),
    ("conv2d", ("[2, 3, 8, 8]", "[4, 3, 3, 3]"), ("float32", "float64"), {}, "DTYPE"),
    ("conv2d", ("[2, 3, 8, 8]", "[4, 3, 3, 3]"), ("int64", "int64"), {}, "DTYPE"),
    ("max_pool2d", ("[1, 1, 8, 8]",), (), {"kernel_size": 3, "padding": 2}, "ATTR-VALUE"),
    ("max_pool2d", ("[1, 1, 8, 8]",), (), {"kernel_size": 0}, "ATTR-VALUE"),
    ("max_pool2d", ("[1, 1, 8, 8]",), (), {"kernel_size": 2, "dilation": 0}, "ATTR-VALUE"),
    ("max_pool2d", ("[1, 1, 2, 8]",), (), {"kernel_size": 3}, "SHAPE-MISMATCH"),
    ("max_pool2d", ("[1, 8, 8]",), ("int32",), {"kernel_size": 2}, "DTYPE"),
    ("max_pool2d", ("[8, 8]",), (), {"kernel_size": 2}, "RANK"),
    ("avg_pool2d", ("[1, 1, 8, 8]",), (), {"kernel_size": 2, "divisor_override": 0}, "ATTR-VALUE"),
    ("avg_pool2d", ("[1, 1, 8, 8]",), (), {"kernel_size": 2, "stride": (1, 0)}, "ATTR-VALUE"),
    ("adaptive_avg_pool2d", ("[1, 1, 8, 8]",), (), {"output_size": -1}, "ATTR-VALUE"),
    ("adaptive_avg_pool2d", ("[1, 1, 0, 8]",), (), {"output_size": 2}, "SHAPE-MISMATCH"),
    ("batch_norm", ("[2]", "[2]", "[2]"), (), {}, "RANK"),
    ("batch_norm", ("[2, 3, 4]", "[4]", "[3]"), (), {}, "SHAPE-MISMATCH"),
    ("batch_norm", ("[2, 3, 4]", "[3]", "[3]", "[3, 1]"), (), {}, "RANK"),
    ("batch_norm", ("[2, 3, 4]", "[3]", "[3]"), ("float32", "float64", "float32"), {}, "DTYPE"),
    ("layer_norm", ("[2, 3, 4]",), (), {"normalized_shape": (3,)}, "SHAPE-MISMATCH"),
    ("layer_norm", ("[4]",), (), {"normalized_shape": (2, 4)}, "RANK"),
    ("layer_norm", ("[2, 4]",), (), {"normalized_shape": ()}, "ATTR-VALUE"),
    ("layer_norm", ("[2, 4]", "[2, 4]"), (), {"normalized_shape": 4}, "RANK"),
    ("layer_norm", ("[2, 4]", "[5]"), (), {"normalized_shape": 4}, "SHAPE-MISMATCH"),
    ("group_norm", ("[2, 6, 4]",), (), {"num_groups": 4}, "SHAPE-MISMATCH"),
    ("group_norm", ("[2, 6, 4]",), (), {"num_groups": 0}, "ATTR-VALUE"),
    ("group_norm", ("[2, 6, 4]", "[4]"), (), {"num_groups": 3}, "SHAPE-MISMATCH"),
    ("group_norm", ("[6]",), (), {"num_groups": 3}, "RANK"),
    ("resize_nearest", ("[1, 1, 4, 4]",), (), {}, "ATTR-VALUE"),
    ("resize_nearest", ("[1, 1, 4, 4]",), (), {"size": 2, "scale_factor": 2.0}, "ATTR-VALUE"),
    ("resize_nearest", ("[1, 1, 4, 4]",), (), {"scale_factor": -2.0}, "ATTR-VALUE"),
    ("resize_nearest", ("[1, 1, 4, 4]",), (), {"scale_factor": 0.2}, "ATTR-VALUE"),
    ("resize_nearest", ("[1, 1, 4, 4]",), (), {"size": (0, 2)}, "ATTR-VALUE"),
    ("resize_nearest", ("[1, 4, 4]",), (), {"size": 2}, "RANK"),
    ("resize_bilinear", ("[1, 1, 4, 4]",), ("int64",), {"size": 2}, "DTYPE"),
    ("roi_align", ("[1, 1, 4, 4]", "[3, 4]"), (), {"output_size": 2}, "SHAPE-MISMATCH"),
    ("roi_align", ("[1, 1, 4, 4]", "[3, 5]"), (), {"output_size": 0}, "ATTR-VALUE"),
    ("roi_align", ("[1, 4, 4]", "[3, 5]"), (), {"output_size": 2}, "RANK"),
    ("roi_align", ("[1, 1, 4, 4]", "[3, 5]"), ("float32", "float64"), {"output_size": 2}, "DTYPE"),
    ("embedding", ("[3]", "[5, 2]"), ("float32",), {}, "DTYPE"),
    ("embedding", ("[3]", "[5]"), ("int64",), {}, "RANK"),
    ("scaled_dot_product_attention", ("[2, 4, 5]", "[2, 6, 4]", "[2, 6, 3]"), (), {}, "SHAPE-MISMATCH"),
    ("scaled_dot_product_attention", ("[2, 4, 5]", "[2, 6, 5]", "[2, 5, 3]"), (), {}, "SHAPE-MISMATCH"),
    ("scaled_dot_product_attention", ("[2, 4, 5]", "[3, 6, 5]", "[3, 6, 3]"), (), {}, "SHAPE-MISMATCH"),
    ("scaled_dot_product_attention", ("[4, 5]", "[6, 5]", "[6, 3]", "[4, 5]"), (), {}, "SHAPE-MISMATCH"),
    ("scaled_dot_product_attention", ("[4, 5]", "[6, 5]", "[6, 3]", "[4, 6]"), (), {"is_causal": True},
     "ATTR-VALUE"),
    ("scaled_dot_product_attention", ("[4, 5]", "[6, 5]", "[6, 3]", "[4, 6]"), (*FLOAT3, "int64"), {},
     "DTYPE"),
    ("scaled_dot_product_attention", ("[5]", "[6, 5]", "[6, 3]"), (), {}, "RANK"),
    ("scaled_dot_product_attention", ("[4, 5]", "[6, 5]", "[6, 3]", "[2, 4, 6]"), (*FLOAT3, "bool"), {},
     "RANK"),
    ("scaled_dot_product_attention", ("[2, 4, 5]", "[6, 5]", "[6, 3]", "[3, 4, 6]"), (*FLOAT3, "bool"), {},
     "SHAPE-MISMATCH"),
])
def test_shape_function_errors(name: str, specs: tuple, dtypes: tuple, attrs: dict, code: str) -> None:
    with pytest.raises(OpTypeError) as info:
        infer(name, *specs, dtypes=dtypes, **attrs)
    assert info.value.code == code
    assert info.value.message and info.value.hint


# -- kernel behaviour beyond shapes ---------------------------------------------------------------------


def test_embedding_rejects_out_of_range_indices() -> None:
    weight = randn((4, 2))
    for bad in ([0, 4], [-1, 0]):
        with pytest.raises(IndexError, match="out of range"):
            ops.embedding(np.array(bad), weight)


def test_roi_align_rejects_bad_batch_indices() -> None:
    with pytest.raises(IndexError, match="batch index"):
        ops.roi_align(randn((1, 1, 4, 4)), np.array([[1.0, 0, 0, 2, 2]]), output_size=2)


def test_roi_align_of_no_boxes_is_empty() -> None:
    out = ops.roi_align(randn((1, 2, 4, 4)), np.zeros((0, 5)), output_size=(2, 3))
    assert out.shape == (0, 2, 2, 3)


def test_max_pool_propagates_nan_and_ignores_padding() -> None:
    x = -np.ones((1, 1, 4, 4))
    x[0, 0, 0, 0] = np.nan
    out = ops.max_pool2d(x, kernel_size=2, padding=1)
    assert np.isnan(out[0, 0, 0, 0]) and (out[0, 0, 1:, 1:] == -1).all()


def test_fully_masked_attention_rows_are_zero() -> None:
    q, k, v = randn((3, 4)), randn((5, 4)), randn((5, 2))
    mask = np.ones((3, 5), bool)
    mask[1] = False
    out = ops.scaled_dot_product_attention(q, k, v, mask)
    assert (out[1] == 0).all() and np.isfinite(out).all()


def test_bilinear_resize_of_the_same_size_is_the_identity() -> None:
    x = randn((1, 2, 5, 6))
    for align in (False, True):
        assert_close(ops.resize_bilinear(x, size=(5, 6), align_corners=align), x)


# -- through the bytecode: verifier types and interpreter results ------------------------------------


def test_nn_ops_in_a_verified_program() -> None:
    """Register sizes stay symbolic through the verifier, and the interpreter runs the kernels.

    (conv2d is left out: its dispatch calibrates the scheduler's fast variants, tested elsewhere.)
    """
    from msvm.bytecode import ModuleBuilder
    from msvm.bytecode.module import RegRef
    from msvm.interpreter import Program
    from msvm.verifier import analyze_module

    mb = ModuleBuilder("nn")
    f = mb.function("f", ["x"])
    x = f.tensor_input(0, "[N, 3, H, W]", "float32")
    y = f.call("avg_pool2d", [x], {"kernel_size": 3, "stride": 2, "padding": 1})
    two = f.scalar_const(2)
    h2 = f.scalar_op("mul", f.shape_of(x, 2), two)
    w2 = f.scalar_op("mul", f.shape_of(x, 3), two)
    z = f.call("resize_nearest", [y], {"size": (RegRef(h2), RegRef(w2))})
    p = f.call("max_pool2d", [z], {"kernel_size": 2, "ceil_mode": True})
    a = f.call("adaptive_avg_pool2d", [p], {"output_size": RegRef(f.shape_of(x, 2))})
    f.ret(y, z, p, a)
    module = mb.build()
    info, diags = analyze_module(module)
    assert not diags, [str(d) for d in diags]
    types = info.functions["f"].types
    assert [str(types[r].shape) for r in (y, z, p, a)] == [
        "[N, 3, (H+1)//2, (W+1)//2]", "[N, 3, H*2, W*2]", "[N, 3, H, W]", "[N, 3, H, H]"]
    xs = randn((2, 3, 7, 5), "float32")
    outs = Program(module).function("f")(xs)
    assert [o.shape for o in outs] == [(2, 3, 4, 3), (2, 3, 14, 10), (2, 3, 7, 5), (2, 3, 7, 7)]
    assert_close(outs[0], ref_avg_pool2d(xs, 3, 2, 1).astype(np.float32))
    assert_close(outs[1], ref_resize_nearest(outs[0], size=(14, 10)))
