"""Strided views and index maps: how layout ops become index arithmetic instead of copies.

A ``View`` places an index space on a flat buffer (``offset + Σ idx·stride``, all symbolic dims). A
layout op is an ``IndexMap`` from its output's index space back to its input's: ``Affine`` (permute,
slice, broadcast, squeeze/unsqueeze: each input index is a linear function of the output indices) or
``Reshape`` (row-major re-splitting, affine only when the strides allow it). Mapping a view through
an affine map always gives a view; through a reshape it gives one when the dims merge (numpy's
no-copy reshape rule), otherwise callers fall back to div/mod index arithmetic. This is the
ShapeTracker idea: fused kernels read transposed, sliced and broadcast data in place.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ...shapes import Dim, as_dim, prove_equal

ZERO, ONE = Dim.const(0), Dim.const(1)
Shape = tuple[Dim, ...]


def shape_of(dims: Sequence[Dim | int]) -> Shape:
    return tuple(as_dim(d) for d in dims)


def contiguous_strides(shape: Shape) -> Shape:
    strides, step = [], ONE
    for d in reversed(shape):
        strides.append(step)
        step = step * d
    return tuple(reversed(strides))


def numel(shape: Shape) -> Dim:
    total = ONE
    for d in shape:
        total = total * d
    return total


def same(a: Dim, b: Dim) -> bool:
    """Provably equal (symbolic dims compare by normal form)."""
    return a == b or prove_equal(a, b) is True


@dataclass(frozen=True)
class Affine:
    """old[i] = Σ coeff·new[j] over ``rows[i]`` + ``consts[i]``; ``new_shape`` is the output index space."""

    new_shape: Shape
    rows: tuple[tuple[tuple[int, Dim], ...], ...]
    consts: Shape

    def compose(self, inner: Affine) -> Affine:
        """The map new → old of ``self`` applied after ``inner`` (new → mid, mid = self's new space)."""
        rows, consts = [], []
        for row, c in zip(self.rows, self.consts):
            acc: dict[int, Dim] = {}
            const = c
            for mid, coeff in row:
                for new, c2 in inner.rows[mid]:
                    acc[new] = acc.get(new, ZERO) + coeff * c2
                const = const + coeff * inner.consts[mid]
            rows.append(tuple((j, v) for j, v in sorted(acc.items()) if v != 0))
            consts.append(const)
        return Affine(inner.new_shape, tuple(rows), tuple(consts))


@dataclass(frozen=True)
class Reshape:
    """Row-major reshape from ``old_shape`` to ``new_shape`` (same element count)."""

    old_shape: Shape
    new_shape: Shape


IndexMap = Affine | Reshape


@dataclass(frozen=True)
class View:
    shape: Shape
    strides: Shape
    offset: Dim = ZERO

    @classmethod
    def contiguous(cls, shape: Sequence[Dim | int], offset: Dim = ZERO) -> View:
        shape = shape_of(shape)
        return cls(shape, contiguous_strides(shape), offset)

    @property
    def rank(self) -> int:
        return len(self.shape)

    def is_contiguous(self) -> bool:
        """Row-major dense (strides of extent-1 dims do not matter)."""
        return all(
            d == 1 or same(s, c) for d, s, c in zip(self.shape, self.strides, contiguous_strides(self.shape))
        )

    def map(self, m: IndexMap) -> View | None:
        """This view seen through ``m`` (None when a reshape cannot be expressed with strides)."""
        if isinstance(m, Affine):
            strides = [ZERO] * len(m.new_shape)
            offset = self.offset
            for stride, row, const in zip(self.strides, m.rows, m.consts):
                for j, coeff in row:
                    strides[j] = strides[j] + stride * coeff
                offset = offset + stride * const
            return View(m.new_shape, tuple(strides), offset)
        return self._reshape(m.new_shape)

    def _reshape(self, new: Shape) -> View | None:
        """numpy's no-copy reshape: each run of new dims covers a run of old ones whose strides nest.
        A symbolic dim must be carried over whole (``[L, 256]`` → ``[L, 4, 64]``); constants may split
        and merge among themselves."""
        if self.is_contiguous() or any(d == 0 for d in self.shape):
            return View.contiguous(new, self.offset)
        kept = [(d, s) for d, s in zip(self.shape, self.strides) if d != 1]
        od, os_ = [d for d, _ in kept], [s for _, s in kept]
        ns = [ZERO] * len(new)
        oi = ni = 0
        while ni < len(new) and oi < len(od):
            if new[ni] == 1:
                ni += 1
                continue
            np_, op_, nj, oj = new[ni], od[oi], ni + 1, oi + 1
            while not same(np_, op_):
                if not (np_.is_const and op_.is_const):
                    return None
                if np_.value < op_.value and nj < len(new):
                    np_, nj = np_ * new[nj], nj + 1
                elif np_.value > op_.value and oj < len(od):
                    op_, oj = op_ * od[oj], oj + 1
                else:
                    return None
            if any(not same(os_[k], od[k + 1] * os_[k + 1]) for k in range(oi, oj - 1)):
                return None
            ns[nj - 1] = os_[oj - 1]
            for k in range(nj - 1, ni, -1):
                ns[k - 1] = ns[k] * new[k]
            ni, oi = nj, oj
        return View(new, tuple(ns), self.offset)


# -- layout ops as index maps -------------------------------------------------------------------------


def identity(shape: Shape) -> Affine:
    return Affine(shape, tuple(((i, ONE),) for i in range(len(shape))), (ZERO,) * len(shape))


def axis_order(op: str, attrs: dict, rank: int) -> list[int]:
    """The axis order of a ``transpose`` (``axes``, None reverses) or ``permute`` (``dims``) call."""
    perm = attrs.get("axes") if op == "transpose" else attrs["dims"]
    return list(range(rank - 1, -1, -1)) if perm is None else [a % rank for a in perm]


def permute(shape: Shape, perm: Sequence[int]) -> Affine:
    rows: list[tuple] = [()] * len(shape)
    for j, axis in enumerate(perm):
        rows[axis] = ((j, ONE),)
    return Affine(tuple(shape[a] for a in perm), tuple(rows), (ZERO,) * len(shape))


def slice_axes(
    shape: Shape, axes: Sequence[int], starts: Sequence[Dim], steps: Sequence[int], lengths: Sequence[Dim]
) -> Affine:
    """old[a] = start + step·new[a] on the sliced axes (starts already clamped like Python's)."""
    new = list(shape)
    rows = [((i, ONE),) for i in range(len(shape))]
    consts = [ZERO] * len(shape)
    for a, start, step, length in zip(axes, starts, steps, lengths):
        new[a] = length
        rows[a] = ((a, Dim.const(step)),)
        consts[a] = start
    return Affine(tuple(new), tuple(rows), tuple(consts))


def broadcast(shape: Shape, target: Shape) -> Affine:
    """numpy broadcasting of ``shape`` to ``target``: leading new axes and extent-1 axes read index 0."""
    lead = len(target) - len(shape)
    rows = []
    for i, d in enumerate(shape):
        rows.append(() if d == 1 and target[lead + i] != 1 else ((lead + i, ONE),))
    return Affine(tuple(target), tuple(rows), (ZERO,) * len(shape))


def squeeze(shape: Shape, axes: Sequence[int]) -> Affine:
    rows, j = [], 0
    for i in range(len(shape)):
        if i in axes:
            rows.append(())
        else:
            rows.append(((j, ONE),))
            j += 1
    return Affine(tuple(d for i, d in enumerate(shape) if i not in axes), tuple(rows), (ZERO,) * len(shape))


def unsqueeze(shape: Shape, axis: int) -> Affine:
    rows = [((i + (i >= axis), ONE),) for i in range(len(shape))]
    new = list(shape)
    new.insert(axis, ONE)
    return Affine(tuple(new), tuple(rows), (ZERO,) * len(shape))


def reshape(shape: Shape, new: Shape) -> IndexMap:
    """A reshape; identity when the shapes are equal."""
    if len(shape) == len(new) and all(same(a, b) for a, b in zip(shape, new)):
        return identity(new)
    return Reshape(shape, new)
