"""Control-flow facts of one function: predecessors, reachability, reverse postorder, dominators.

Computed once per function and shared by the verifier, the interpreter and the JIT's region
former, so that all three agree on what "dominates" and "reachable" mean.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..bytecode.module import Function


@dataclass
class CFG:
    """Why the derived facts are computed once here: the verifier asks for reachability and dominance
    once per register read, so asking must not cost the size of the function (a chain of n blocks
    made walking the dominator tree, and rebuilding the reachable set, quadratic in n)."""

    succs: list[list[int]]
    preds: list[list[int]]
    rpo: list[int]  # reachable blocks in reverse postorder (entry first)
    idom: dict[int, int]  # immediate dominator of each reachable block (entry → itself)
    reachable: frozenset[int] = field(init=False, repr=False, compare=False)
    # the dominator tree numbered depth-first: a dominates b iff b's interval nests in a's
    tree_span: dict[int, tuple[int, int]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.reachable = frozenset(self.rpo)
        self.tree_span = _tree_spans(self.rpo, self.idom)

    def dominates(self, a: int, b: int) -> bool:
        """Does block ``a`` dominate block ``b`` (``b`` reachable; False for an unreachable ``a``)?"""
        low, high = self.tree_span[b]
        span = self.tree_span.get(a)
        return span is not None and span[0] <= low and high <= span[1]

    def reachable_from(self, starts: list[int], barrier: int | None = None) -> set[int]:
        """Blocks entered on paths from ``starts``; a ``barrier`` block is entered but never left."""
        seen: set[int] = set()
        stack = list(starts)
        while stack:
            b = stack.pop()
            if b not in seen:
                seen.add(b)
                if b != barrier:
                    stack.extend(self.succs[b])
        return seen

    def back_edges(self) -> set[tuple[int, int]]:
        """Edges (src, dst) where dst dominates src: the loops."""
        return {(b, s) for b in self.rpo for s in self.succs[b] if s in self.idom and self.dominates(s, b)}


def build_cfg(fn: Function) -> CFG:
    n = len(fn.blocks)
    succs: list[list[int]] = []
    for block in fn.blocks:
        targets: list[int] = []
        if block.instructions and block.instructions[-1].opcode.is_terminator:
            targets = [t for t in block.instructions[-1].successors() if 0 <= t < n]
        succs.append(list(dict.fromkeys(targets)))
    preds: list[list[int]] = [[] for _ in range(n)]
    for b, targets in enumerate(succs):
        for t in targets:
            preds[t].append(b)
    rpo = _reverse_postorder(succs) if n else []
    return CFG(succs, preds, rpo, _dominators(rpo, preds))


def _reverse_postorder(succs: list[list[int]]) -> list[int]:
    order: list[int] = []
    seen = {0}
    stack: list[tuple[int, int]] = [(0, 0)]
    while stack:
        block, i = stack[-1]
        if i < len(succs[block]):
            stack[-1] = (block, i + 1)
            nxt = succs[block][i]
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, 0))
        else:
            stack.pop()
            order.append(block)
    order.reverse()
    return order


def _dominators(rpo: list[int], preds: list[list[int]]) -> dict[int, int]:
    """Cooper, Harvey & Kennedy's iterative algorithm."""
    if not rpo:
        return {}
    index = {b: i for i, b in enumerate(rpo)}
    idom: dict[int, int] = {rpo[0]: rpo[0]}

    def intersect(a: int, b: int) -> int:
        while a != b:
            while index[a] > index[b]:
                a = idom[a]
            while index[b] > index[a]:
                b = idom[b]
        return a

    changed = True
    while changed:
        changed = False
        for b in rpo[1:]:
            done = [p for p in preds[b] if p in idom]
            new = done[0]
            for p in done[1:]:
                new = intersect(p, new)
            if idom.get(b) != new:
                idom[b] = new
                changed = True
    return idom


def _tree_spans(rpo: list[int], idom: dict[int, int]) -> dict[int, tuple[int, int]]:
    """(first, last) depth-first number of each reachable block's dominator subtree."""
    children: dict[int, list[int]] = {b: [] for b in rpo}
    for b in rpo[1:]:
        children[idom[b]].append(b)
    spans: dict[int, tuple[int, int]] = {}
    if not rpo:
        return spans
    counter = 0
    stack: list[tuple[int, int]] = [(rpo[0], 0)]
    first: dict[int, int] = {rpo[0]: 0}
    while stack:
        block, i = stack[-1]
        if i < len(children[block]):
            stack[-1] = (block, i + 1)
            child = children[block][i]
            counter += 1
            first[child] = counter
            stack.append((child, 0))
        else:
            stack.pop()
            spans[block] = (first[block], counter)
    return spans
