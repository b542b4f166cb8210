"""Shape specs: the declared shape of a tensor as a sequence of symbolic dims.

Why one module: the assembler, the verifier, the interpreter's input checks and the JIT's cache keys
all parse, match, unify and broadcast the same specs, so they share one implementation and one set of
messages. Static questions (unify, broadcast) answer with conflicts, which are errors now, and
constraints or guards, which the verifier turns into run-time checks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import SupportsIndex

from msvm.errors import ShapeError
from msvm.shapes.expr import Dim, as_dim, parse_dim_list, prove_equal

_ONE = Dim.const(1)


class ShapeSpec(tuple):
    """An immutable, hashable tuple of ``Dim``; ``str`` gives the ``[N, 3, H*2, ?]`` text that parses back.

    ``ShapeSpec("[N, 3]")`` parses, so ``repr`` round-trips; a slice is a ShapeSpec too.
    """

    __slots__ = ()

    def __new__(cls, dims: Iterable[Dim | int | str] | str = ()) -> ShapeSpec:
        if isinstance(dims, str):
            dims = parse_dim_list(dims)
        return super().__new__(cls, (as_dim(d) for d in dims))

    def __getitem__(self, index: SupportsIndex | slice) -> Dim | ShapeSpec:  # type: ignore[override]
        item = super().__getitem__(index)
        return ShapeSpec(item) if isinstance(index, slice) else item

    @classmethod
    def of(cls, items: Iterable[Dim | int | str]) -> ShapeSpec:
        return cls(items)

    @property
    def rank(self) -> int:
        return len(self)

    @property
    def free_symbols(self) -> frozenset[str]:
        return frozenset().union(*(d.free_symbols for d in self))

    @property
    def is_static(self) -> bool:
        return all(d.is_const for d in self)

    def evaluate(self, bindings: Mapping[str, int]) -> tuple[int, ...]:
        return tuple(d.evaluate(bindings) for d in self)

    def __str__(self) -> str:
        return "[" + ", ".join(map(str, self)) + "]"

    def __repr__(self) -> str:
        return f"ShapeSpec({str(self)!r})"


def parse_shape(text: str) -> ShapeSpec:
    """Parse ``[N, 3, H*2, ?]`` (brackets required, ``[]`` is rank 0); errors carry a position."""
    return ShapeSpec(parse_dim_list(text))


def _dims(n: int) -> str:
    return f"{n} dim" if n == 1 else f"{n} dims"


def match_shape(spec: ShapeSpec, shape: tuple[int, ...], bindings: dict[str, int]) -> list[str]:
    """Check a concrete shape against ``spec``, binding its unbound plain symbols in ``bindings``.

    Only dims that are a plain symbol bind (the first occurrence wins); symbols that appear only inside
    expressions are reported as unbound rather than solved for. Returns one message per mismatch.
    """
    sizes = tuple(int(s) for s in shape)
    if len(sizes) != len(spec):
        return [f"rank: expected {_dims(len(spec))} {spec}, got {_dims(len(sizes))} {sizes}"]
    for dim, size in zip(spec, sizes):
        if dim.is_symbol:
            bindings.setdefault(dim.name, size)
    problems = []
    for axis, (dim, size) in enumerate(zip(spec, sizes)):
        if dim.is_unknown:
            continue
        if dim.is_const:
            if dim.value != size:
                problems.append(f"dim {axis}: expected {dim.value}, got {size}")
        elif dim.is_symbol:
            bound = bindings[dim.name]
            if bound != size:
                problems.append(
                    f"dim {axis}: {dim} is bound to {bound} (by an earlier dim or input), got {size}"
                )
        else:
            missing = sorted(dim.free_symbols - bindings.keys())
            if missing:
                names = ", ".join(missing)
                verb = "is" if len(missing) == 1 else "are"
                problems.append(
                    f"dim {axis}: cannot check {dim}: {names} {verb} unbound "
                    "(a symbol used only inside expressions is never bound by a shape)"
                )
                continue
            try:
                expected = dim.evaluate(bindings)
            except ShapeError as err:
                problems.append(f"dim {axis}: cannot check {dim}: {err.message}")
                continue
            if expected != size:
                problems.append(f"dim {axis}: {dim} = {expected}, got {size}")
    return problems


@dataclass(frozen=True)
class Unification:
    """The outcome of equating two specs axis by axis.

    ``conflicts`` are provable mismatches (errors now); ``constraints`` are equalities that could not be
    decided statically, including every axis where a side is ``?``, to be checked at run time. Each entry
    is ``(axis, a_dim, b_dim)``; a rank mismatch is one conflict at axis -1 holding the two ranks.
    """

    conflicts: tuple[tuple[int, Dim, Dim], ...] = ()
    constraints: tuple[tuple[int, Dim, Dim], ...] = ()

    @property
    def ok(self) -> bool:
        return not self.conflicts

    def __str__(self) -> str:
        if not self.conflicts and not self.constraints:
            return "shapes agree"
        lines = []
        if self.conflicts:
            items = "; ".join(
                f"rank {a} vs {b}" if axis == -1 else f"axis {axis}: {a} vs {b}"
                for axis, a, b in self.conflicts
            )
            lines.append(f"{len(self.conflicts)} conflict(s): {items}")
        if self.constraints:
            items = "; ".join(f"axis {axis}: {a} == {b}" for axis, a, b in self.constraints)
            lines.append(f"{len(self.constraints)} run-time check(s): {items}")
        return "\n".join(lines)


def unify(a: ShapeSpec, b: ShapeSpec) -> Unification:
    if len(a) != len(b):
        return Unification(conflicts=((-1, Dim.const(len(a)), Dim.const(len(b))),))
    conflicts, constraints = [], []
    for axis, (x, y) in enumerate(zip(a, b)):
        verdict = prove_equal(x, y)
        if verdict is False:
            conflicts.append((axis, x, y))
        elif verdict is None:
            constraints.append((axis, x, y))
    return Unification(tuple(conflicts), tuple(constraints))


def broadcast_dims(a: Dim | int, b: Dim | int) -> tuple[Dim, Dim | None]:
    """numpy broadcasting of two dims, statically: ``(result, guard)``.

    ``guard`` is None when the result is certain. Otherwise the run-time check is
    ``guard in (result, 1)``: the result is exactly ``result`` and ``guard`` must equal it or be 1.
    Rules in order: ``a == 1`` gives ``b``; ``b == 1`` gives ``a``; a ``?`` side yields to the other
    (``?`` vs ``?``: ``a`` guarded by ``b``); provably equal gives ``a``; two different constants
    raise E-SHAPE-BROADCAST; otherwise a constant side is the result (it cannot be 1 here, so the
    other side must match or broadcast) and, failing that, ``a`` is the result and ``b`` the guard.
    The check is sound but conservative: if the side chosen as result is not a constant and turns out
    to be 1 at run time while the guard side is larger, numpy would broadcast but the guard fails.
    """
    a, b = as_dim(a), as_dim(b)
    if a == 1:
        return b, None
    if b == 1:
        return a, None
    if b.is_unknown:
        return a, b
    if a.is_unknown:
        return b, a
    if prove_equal(a, b):
        return a, None
    if a.is_const and b.is_const:
        raise ShapeError(f"cannot broadcast {a} with {b}", code="E-SHAPE-BROADCAST")
    if b.is_const:
        return b, a
    return a, b


def broadcast_shapes(*specs: ShapeSpec) -> tuple[ShapeSpec, list[tuple[Dim, Dim]]]:
    """Right-aligned numpy broadcasting; guards are ``(result_dim, guard_dim)`` as in ``broadcast_dims``."""
    if not specs:
        return ShapeSpec(), []
    result = ShapeSpec(specs[0])
    guards: list[tuple[Dim, Dim]] = []
    for spec in specs[1:]:
        n = max(len(result), len(spec))
        left = (_ONE,) * (n - len(result)) + tuple(result)
        right = (_ONE,) * (n - len(spec)) + tuple(spec)
        out = []
        for axis, (x, y) in enumerate(zip(left, right)):
            try:
                dim, guard = broadcast_dims(x, y)
            except ShapeError:
                raise ShapeError(
                    f"cannot broadcast {result} with {ShapeSpec(spec)}: axis {axis - n} is {x} vs {y}",
                    code="E-SHAPE-BROADCAST",
                ) from None
            if guard is not None:
                guards.append((dim, guard))
            out.append(dim)
        result = ShapeSpec(out)
    return result, guards


__all__ = [
    "ShapeSpec",
    "Unification",
    "broadcast_dims",
    "broadcast_shapes",
    "match_shape",
    "parse_shape",
    "unify",
]
