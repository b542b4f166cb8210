"""Importer of ONNX's Einsum: the matmul-like equations, lowered onto sum, transpose, reshape and matmul.

Why a lowering and not an einsum op: the equations exporters write (attention's ``bhid,bhjd->bhij``,
``bij,bjk->bik``, a permutation ``nchw->nhwc``) are batched GEMMs or views, and as registry matmuls and
transposes they reach the JIT's GEMM kernels and keep their symbolic shapes. A two-operand equation
becomes: sum each operand over the letters only it has and the output lacks; permute A to
[batch, A-only, contracted] and B to [batch, contracted, B-only]; merge those groups so one matmul
contracts them; split the merged dims again and permute to the output's order. Diagonals and traces
(a letter twice in one operand) and three or more operands are refused by name.
"""

from __future__ import annotations

from typing import Any

from .convert_tensor import fold_equal
from .graph import NodeCtx, Value, converter

Label = str | tuple[str, int]  # a letter, or ("...", k): the k-th dim of an ellipsis counted from the right
_FORMS = "one or two operands, each letter at most once per operand (batched matmuls, transposes, sums)"


def _parse(ctx: NodeCtx, equation: str, ranks: list[int]) -> tuple[list[list[Label]], list[Label]]:
    """Each operand's labels and the output's; an implicit output is the once-used letters, sorted."""
    text = equation.replace(" ", "")
    lhs, arrow, rhs = text.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise ctx.error(f"equation {equation!r} names {len(terms)} operands, the node has {len(ranks)}")
    if len(terms) > 2:
        raise ctx.error(f"Einsum {equation!r} with {len(terms)} operands is not supported", _FORMS)
    widest = 0
    operands = []
    for term, rank in zip(terms, ranks):
        labels = _labels(ctx, equation, term, rank)
        widest = max(widest, sum(isinstance(lab, tuple) for lab in labels))
        if len(set(labels)) != len(labels):
            raise ctx.error(f"Einsum {equation!r} repeats a letter in {term!r} (a diagonal or trace), which "
                            "is not supported", _FORMS)
        operands.append(labels)
    ellipsis: list[Label] = [("...", k) for k in range(widest - 1, -1, -1)]
    if arrow:
        out = _labels(ctx, equation, rhs, None, ellipsis)
    else:
        letters = [lab for labels in operands for lab in labels if isinstance(lab, str)]
        out = ellipsis + sorted(lab for lab in set(letters) if letters.count(lab) == 1)
    known = {lab for labels in operands for lab in labels}
    if len(set(out)) != len(out) or not set(out) <= known:
        raise ctx.error(f"Einsum {equation!r}: the output must name distinct letters of the operands")
    return operands, out


def _labels(ctx: NodeCtx, equation: str, term: str, rank: int | None,
            ellipsis: list[Label] | None = None) -> list[Label]:
    """One term's labels; its ``...`` stands for ``rank`` minus its letters dims (or ``ellipsis``)."""
    head, dots, tail = term.partition("...")
    letters = head + tail
    if "." in letters or (letters and not letters.isalpha()):
        raise ctx.error(f"Einsum equation {equation!r} has a term {term!r} that is not letters and '...'")
    if not dots:
        if rank is not None and len(term) != rank:
            raise ctx.error(f"Einsum {equation!r}: term {term!r} has {len(term)} letters for a rank-{rank} "
                            "input")
        return list(term)
    if ellipsis is None:
        count = (rank or 0) - len(head) - len(tail)
        if count < 0:
            raise ctx.error(f"Einsum {equation!r}: term {term!r} has more letters than its input's rank "
                            f"{rank}")
        ellipsis = [("...", k) for k in range(count - 1, -1, -1)]
    return [*head, *ellipsis, *tail]


def _sum_out(ctx: NodeCtx, v: Value, labels: list[Label], keep: set[Label]) -> tuple[Value, list[Label]]:
    """``v`` summed over the labels not in ``keep``."""
    axes = tuple(i for i, lab in enumerate(labels) if lab not in keep)
    if not axes:
        return v, labels
    return ctx.call("sum", [v], {"axis": axes}), [lab for lab in labels if lab in keep]


def _permute(ctx: NodeCtx, v: Value, labels: list[Label], order: list[Label]) -> Value:
    perm = tuple(labels.index(lab) for lab in order)
    return v if perm == tuple(range(len(perm))) else ctx.call("transpose", [v], {"axes": perm})


def _product(ctx: NodeCtx, dims: list[Any]) -> Any:
    out: Any = dims[0] if dims else 1
    for d in dims[1:]:
        out = ctx.imp.scalar_op("mul", out, d)
    return out


def _reshape(ctx: NodeCtx, v: Value, shape: list[Any]) -> Value:
    """``v`` reshaped to ``shape``, or ``v`` itself when every group merged or split is a single dim."""
    same = len(shape) == ctx.imp.rank(v) and all(fold_equal(a, b) for a, b in zip(shape, ctx.imp.dims(v)))
    return v if same else ctx.call("reshape", [v], {"shape": tuple(shape)})


@converter("Einsum", attrs={"equation": None})
def _einsum(ctx: NodeCtx) -> Value:
    values = [ctx.value(i) for i in range(len(ctx.inputs))]
    operands, out = _parse(ctx, ctx.attr("equation"), [ctx.imp.rank(v) for v in values])
    if len(values) == 1:
        v, labels = _sum_out(ctx, values[0], operands[0], set(out))
        return _permute(ctx, v, labels, out)
    (a, la), (b, lb) = zip(values, operands)
    a, la = _sum_out(ctx, a, la, set(out) | set(lb))
    b, lb = _sum_out(ctx, b, lb, set(out) | set(la))
    batch = [lab for lab in out if lab in la and lab in lb]
    a_only = [lab for lab in la if lab not in lb]
    b_only = [lab for lab in lb if lab not in la]
    contracted = [lab for lab in la if lab in lb and lab not in out]
    a = _permute(ctx, a, la, batch + a_only + contracted)
    b = _permute(ctx, b, lb, batch + contracted + b_only)
    size = {**dict(zip(batch + a_only + contracted, ctx.imp.dims(a))),
            **{lab: d for lab, d in zip(batch + contracted + b_only, ctx.imp.dims(b)) if lab not in batch}}
    a_batch = ctx.imp.dims(a)[:len(batch)]
    b_batch = ctx.imp.dims(b)[:len(batch)]
    m = _product(ctx, [size[lab] for lab in a_only])
    k = _product(ctx, [size[lab] for lab in contracted])
    n = _product(ctx, [size[lab] for lab in b_only])
    y = ctx.call("matmul", [_reshape(ctx, a, [*a_batch, m, k]), _reshape(ctx, b, [*b_batch, k, n])])
    y_batch = ctx.imp.dims(y)[:len(batch)]  # broadcast batch sizes (a 1 on one side takes the other's)
    y = _reshape(ctx, y, [*y_batch, *(size[lab] for lab in a_only + b_only)])
    return _permute(ctx, y, batch + a_only + b_only, out)


__all__: list[str] = []
