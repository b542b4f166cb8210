"""The rewrite patterns: each one spelling people write, recognised and replaced by the registry op.

A pattern is a function ``(graph, index) -> Match | None`` anchored at the instruction that computes
the spelling's result; it walks back through the producers of that instruction's operands in the same
block and matches only when every intermediate it replaces is read by nothing outside the match and
has the result's own type, so no other reader, shape or dtype can tell the difference. ``PATTERNS``
is the table the pass tries, in order. There is no RMSNorm op in the registry, so
``x / sqrt(mean(x²) + ε) · w`` has no pattern yet.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from ..bytecode.module import Instruction
from .rewrite import Call, Graph, Match, Pattern, Tmp

_FLOATS = ("float16", "float32", "float64")
_REL = 1e-4  # how close a written constant must be to the formula's (0.7978845608 for sqrt(2/pi))


def _close(value: float | None, target: float) -> bool:
    return value is not None and math.isclose(value, target, rel_tol=_REL)


def _same_type(g: Graph, a: int, b: int) -> bool:
    ta, tb = g.type(a), g.type(b)
    return ta is not None and tb is not None and ta.shape == tb.shape and ta.dtype == tb.dtype


def _last_axis(g: Graph, ins: Instruction, key: str = "axis") -> bool:
    """The op's ``axis`` attribute names exactly the last axis of its input."""
    t = g.type(ins["srcs"][0])
    axis = ins["attrs"].get(key)
    if isinstance(axis, tuple):
        if len(axis) != 1:
            return False
        axis = axis[0]
    return t is not None and isinstance(axis, int) and axis in (-1, t.shape.rank - 1)


def _inner(g: Graph, reg: int, taken: set[int], *ops: str) -> tuple[int, Instruction] | None:
    """The producer of ``reg`` among ``ops`` when the match may remove it: it is read only by the
    instructions already ``taken`` (it joins them)."""
    found = g.producer(reg, *ops)
    if found is None or not g.only_read_by(reg, taken):
        return None
    return found


class _Product:
    """A tree of ``mul``s (and divisions by a constant) flattened: constant coefficient × factors."""

    def __init__(self, g: Graph, reg: int, taken: set[int]) -> None:
        self.coefficient, self.factors = 1.0, []
        self._walk(g, reg, taken, True)

    def _walk(self, g: Graph, reg: int, taken: set[int], top: bool) -> None:
        value = g.constant(reg)
        if value is not None:
            self.coefficient *= value
            return
        # the top is the anchor itself; below it a producer joins only when nothing else reads it
        found = g.producer(reg, "mul", "div", "pow") if top else _inner(g, reg, taken, "mul", "div", "pow")
        if found is None:
            self.factors.append(reg)
            return
        index, ins = found
        a, b = ins["srcs"]
        if ins["op"] == "div":
            divisor = g.constant(b)
            if not divisor:
                self.factors.append(reg)
                return
            taken.add(index)
            self.coefficient /= divisor
            self._walk(g, a, taken, False)
        elif ins["op"] == "pow":
            exponent = g.constant(b)
            if exponent not in (2.0, 3.0):
                self.factors.append(reg)
                return
            taken.add(index)
            self.factors.extend([a] * int(exponent))
        else:
            taken.add(index)
            self._walk(g, a, taken, False)
            self._walk(g, b, taken, False)


def _typed(g: Graph, out: int, taken: Iterable[int]) -> bool:
    """Every removed OP_CALL's result has the type of the match's result (no broadcast, no promotion)."""
    for index in taken:
        ins = g.ins(index)
        if ins.name == "OP_CALL" and not _same_type(g, ins["dsts"][0], out):
            return False
    return True


# -- x * sigmoid(x) -----------------------------------------------------------------------------------


def silu(g: Graph, index: int) -> Match | None:
    ins = g.ins(index)
    if ins.name != "OP_CALL" or ins["op"] != "mul" or len(ins["srcs"]) != 2:
        return None
    out = ins["dsts"][0]
    for x, s in (ins["srcs"], ins["srcs"][::-1]):
        found = _inner(g, s, {index}, "sigmoid")
        if found is not None and found[1]["srcs"][0] == x and _same_type(g, x, out):
            return Match(frozenset({index, found[0]}), (Call("silu", (x,)),))
    return None


# -- 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) --------------------------------------------------------


def gelu_tanh(g: Graph, index: int) -> Match | None:
    ins = g.ins(index)
    if ins.name != "OP_CALL" or ins["op"] != "mul":
        return None
    out = ins["dsts"][0]
    taken = {index}
    outer = _Product(g, out, taken)
    if not _close(outer.coefficient, 0.5) or len(outer.factors) != 2:
        return None
    for x, one_plus in (outer.factors, outer.factors[::-1]):
        t = set(taken)
        found = _inner(g, one_plus, t, "add")
        if found is None:
            continue
        t.add(found[0])
        a, b = found[1]["srcs"]
        tanh_reg = b if _close(g.constant(a), 1.0) else a if _close(g.constant(b), 1.0) else None
        tanh = None if tanh_reg is None else _inner(g, tanh_reg, t, "tanh")
        if tanh is None:
            continue
        t.add(tanh[0])
        scaled = _Product(g, tanh[1]["srcs"][0], t)
        if not _close(scaled.coefficient, math.sqrt(2 / math.pi)) or len(scaled.factors) != 1:
            continue
        total = _inner(g, scaled.factors[0], t, "add")
        if total is None:
            continue
        t.add(total[0])
        for lone, cube in (total[1]["srcs"], total[1]["srcs"][::-1]):
            if lone != x:
                continue
            t3 = set(t)
            term = _Product(g, cube, t3)
            if term.factors == [x, x, x] and _close(term.coefficient, 0.044715) and _typed(g, out, t3) \
                    and _same_type(g, x, out):
                return Match(frozenset(t3), (Call("gelu", (x,), {"approximate": "tanh"}),))
    return None


# -- (x - mean(x)) / sqrt(var + ε) [* w + b] over the last axis ---------------------------------------------


def _reduced_mean(g: Graph, reg: int, taken: set[int]) -> tuple[int, int] | None:
    """(index, input) of ``mean(input, axis=-1, keepdims=True)`` defining ``reg``."""
    found = _inner(g, reg, taken, "mean")
    if found is None:
        return None
    index, ins = found
    if not (ins["attrs"].get("keepdims") is True and _last_axis(g, ins)):
        return None
    return index, ins["srcs"][0]


def _normalized(g: Graph, index: int, taken: set[int]) -> tuple[int, float] | None:
    """(x, eps) when instruction ``index`` is ``d / sqrt(var + eps)`` or ``d * rsqrt(var + eps)``, with
    ``d = x - mean(x)`` and ``var = mean(d·d)`` (or ``mean(d**2)``) over the last axis, keeping dims;
    the instructions it covers join ``taken``."""
    ins = g.ins(index)
    if ins.name != "OP_CALL" or ins["op"] not in ("div", "mul"):
        return None
    root_op = "sqrt" if ins["op"] == "div" else "rsqrt"
    pairs = [ins["srcs"]] if ins["op"] == "div" else [ins["srcs"], ins["srcs"][::-1]]
    taken.add(index)
    rooted = next(((d, f) for d, root in pairs if (f := _inner(g, root, taken, root_op)) is not None), None)
    if rooted is None:
        return None
    d, found = rooted
    taken.add(found[0])
    plus = _inner(g, found[1]["srcs"][0], taken, "add")
    if plus is None:
        return None
    taken.add(plus[0])
    var, eps_reg = plus[1]["srcs"]
    eps = g.constant(eps_reg)
    if eps is None:
        var, eps = eps_reg, g.constant(var)
    mean_var = None if eps is None or eps < 0 else _reduced_mean(g, var, taken)
    if mean_var is None:
        return None
    taken.add(mean_var[0])
    squares = _Product(g, mean_var[1], taken)
    diff = g.producer(d, "sub")
    if squares.factors != [d, d] or squares.coefficient != 1.0 or diff is None:
        return None
    taken.add(diff[0])
    x, mean_reg = diff[1]["srcs"]
    mean = _reduced_mean(g, mean_reg, taken)
    if mean is None or mean[1] != x or not g.only_read_by(d, taken):
        return None
    taken.add(mean[0])
    return x, eps


def _affine(g: Graph, reg: int, last: object, dtype: str) -> bool:
    """``reg`` is a rank-1 tensor as long as the normalised axis, of the result's dtype."""
    t = g.type(reg)
    return t is not None and t.shape.rank == 1 and t.shape[0] == last and t.dtype == dtype


def _norm_candidates(g: Graph, index: int, last: object, dtype: str):
    """(core index, weight, bias, the affine's instructions) for each way the anchor may end a layer
    norm: ``norm * w + b``, ``norm * w`` or the normalisation itself."""
    ins = g.ins(index)
    if ins["op"] == "add":
        for scaled_reg, b in (ins["srcs"], ins["srcs"][::-1]):
            scaled = _inner(g, scaled_reg, {index}, "mul") if _affine(g, b, last, dtype) else None
            for norm, w in (scaled[1]["srcs"], scaled[1]["srcs"][::-1]) if scaled else ():
                affine = {index, scaled[0]}
                core = _inner(g, norm, affine, "div", "mul") if _affine(g, w, last, dtype) else None
                if core is not None:
                    yield core[0], w, b, affine
    elif ins["op"] == "mul":
        for norm, w in (ins["srcs"], ins["srcs"][::-1]):
            core = _inner(g, norm, {index}, "div", "mul") if _affine(g, w, last, dtype) else None
            if core is not None:
                yield core[0], w, None, {index}
    if ins["op"] in ("div", "mul"):
        yield index, None, None, set()


def layer_norm(g: Graph, index: int) -> Match | None:
    ins = g.ins(index)
    if ins.name != "OP_CALL" or ins["op"] not in ("add", "mul", "div"):
        return None
    out = ins["dsts"][0]
    t = g.type(out)
    if t is None or t.dtype not in _FLOATS or t.shape.rank < 1 or not t.shape[-1].is_const:
        return None
    last = t.shape[-1]
    for core, weight, bias, taken in _norm_candidates(g, index, last, t.dtype):
        result = _normalized(g, core, taken)
        if result is None:
            continue
        x, eps = result
        if not (_same_type(g, x, out) and all(g.type(g.ins(i)["dsts"][0]).dtype == t.dtype
                                              for i in taken if g.ins(i).name == "OP_CALL")):
            return None
        srcs = (x, *(r for r in (weight, bias) if r is not None))
        attrs = {"normalized_shape": (last.value,), "eps": float(eps)}
        return Match(frozenset(taken), (Call("layer_norm", srcs, attrs),))
    return None


# -- softmax(q @ kᵀ · scale + mask) @ v -------------------------------------------------------------------


def _unscale(g: Graph, reg: int, taken: set[int]) -> tuple[int, float]:
    """(operand, factor): ``reg`` with one multiplication or division by a constant the match may
    remove stripped off (factor 1.0 when there is none)."""
    found = _inner(g, reg, taken, "mul", "div")
    if found is None:
        return reg, 1.0
    index, ins = found
    a, b = ins["srcs"]
    if ins["op"] == "div":
        c = g.constant(b)
        factor, operand = (None if not c else 1.0 / c), a
    elif g.constant(b) is not None:
        factor, operand = g.constant(b), a
    else:
        factor, operand = g.constant(a), b
    if factor is None or not _same_type(g, operand, reg):
        return reg, 1.0
    taken.add(index)
    return operand, factor


def _scores(g: Graph, reg: int, taken: set[int]) -> tuple[int, int, float] | None:
    """(q, kᵀ, scale) when ``reg`` is ``(q·c1) @ (kᵀ·c2) · c3`` (each constant optional)."""
    t = set(taken)
    product, scale = _unscale(g, reg, t)
    qk = _inner(g, product, t, "matmul")
    if qk is None:
        return None
    t.add(qk[0])
    q, q_scale = _unscale(g, qk[1]["srcs"][0], t)
    kt, k_scale = _unscale(g, qk[1]["srcs"][1], t)
    taken |= t
    return q, kt, scale * q_scale * k_scale


def _swap_last(perm: tuple[int, ...]) -> tuple[int, ...]:
    return (*perm[:-2], perm[-1], perm[-2])


def _key(g: Graph, kt: int, taken: set[int]) -> tuple[int | Tmp, list[Call]]:
    """k for the fused op from the kᵀ the matmul read: the view under it re-permuted (no op at all
    when that is the identity), or a swap of kᵀ's last two dims."""
    rank = g.type(kt).shape.rank
    found = g.producer(kt, "transpose", "permute")
    if found is None:
        return Tmp(0), [Call("permute", (kt,), {"dims": _swap_last(tuple(range(rank)))})]
    index, ins = found
    perm = ins["attrs"].get("axes" if ins["op"] == "transpose" else "dims")
    perm = tuple(range(rank - 1, -1, -1)) if perm is None else tuple(p % rank for p in perm)
    if g.only_read_by(kt, taken):
        taken.add(index)
    k_perm = _swap_last(perm)
    if k_perm == tuple(range(rank)):
        return ins["srcs"][0], []
    return Tmp(0), [Call("permute", (ins["srcs"][0],), {"dims": k_perm})]


def _causal(mask: np.ndarray | None, scores: object) -> bool:
    """A constant mask that is exactly torch's ``is_causal`` for these [..., L, S] scores: True (bool)
    or 0 (additive) on and below the diagonal, False or −inf above, the same for every leading index."""
    if mask is None or mask.ndim < 2 or any(d != 1 for d in mask.shape[:-2]):
        return False
    if not all(d.is_const and d.value == n for d, n in zip(scores.shape[-2:], mask.shape[-2:])):
        return False
    rows, cols = mask.shape[-2:]
    keep = np.tril(np.ones((rows, cols), dtype=bool))
    m = mask.reshape(rows, cols)
    if mask.dtype == bool:
        return bool(np.array_equal(m, keep))
    return bool(np.all(m[keep] == 0) and np.all(np.isneginf(m[~keep])))


def _masked(g: Graph, reg: int, taken: set[int]) -> tuple[int, int | None] | None:
    """(scores under the mask, mask) when ``reg`` is ``scores + mask`` (either order) or
    ``where(mask, scores, -inf)`` with a bool mask; (reg, None) when it is neither."""
    found = _inner(g, reg, taken, "add", "where")
    if found is None:
        return reg, None
    index, ins = found
    if ins["op"] == "add":
        pairs = [ins["srcs"], ins["srcs"][::-1]]
    else:
        cond, scores, fill = ins["srcs"]
        ct = g.type(cond)
        pairs = [(scores, cond)] if g.constant(fill) == -math.inf and ct and ct.dtype == "bool" else []
    for scores, mask in pairs:
        mt = g.type(mask)
        if mt is not None and _same_type(g, scores, reg) and _scores(g, scores, taken | {index}) is not None:
            taken.add(index)
            return scores, mask
    return reg, None


def attention(g: Graph, index: int) -> Match | None:
    ins = g.ins(index)
    if ins.name != "OP_CALL" or ins["op"] != "matmul":
        return None
    probs, v = ins["srcs"]
    taken = {index}
    soft = _inner(g, probs, taken, "softmax")
    if soft is None or not _last_axis(g, soft[1]):
        return None
    taken.add(soft[0])
    logits = soft[1]["srcs"][0]
    st = g.type(logits)
    if st is None or st.dtype not in _FLOATS or st.shape.rank < 2 or g.type(probs).shape != st.shape:
        return None
    scores, mask = _masked(g, logits, taken)
    found = _scores(g, scores, taken)
    if found is None:
        return None
    q, kt, scale = found
    if any(t is None or t.shape.rank < 2 or t.dtype != st.dtype for t in map(g.type, (q, kt, v))):
        return None
    if mask is not None and g.type(mask).dtype not in ("bool", st.dtype):
        return None
    causal = mask is not None and _causal(g.array(mask), st)
    if causal and g.only_read_by(mask, taken):
        taken.add(g.defs[mask][1])
    k, calls = _key(g, kt, taken)
    srcs = (q, k, v) if mask is None or causal else (q, k, v, mask)
    attrs = {"is_causal": causal, "scale": float(scale)}
    return Match(frozenset(taken), (*calls, Call("scaled_dot_product_attention", srcs, attrs)))


PATTERNS: tuple[tuple[str, Pattern], ...] = (
    ("attention", attention),
    ("layer_norm", layer_norm),
    ("gelu_tanh", gelu_tanh),
    ("silu", silu),
)
