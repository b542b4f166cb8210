"""Control-flow facts of one function: predecessors, reachability, reverse postorder, dominators.

Computed once per function and shared by the verifier, the interpreter and the JIT's region
former, so that all three agree on what "dominates" and "reachable" mean.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..bytecode.module import Function


@dataclass
class CFG:
    succs: list[list[int]]
    preds: list[list[int]]
    rpo: list[int]  # reachable blocks in reverse postorder (entry first)
    idom: dict[int, int]  # immediate dominator of each reachable block (entry → itself)

    @property
    def reachable(self) -> set[int]:
        return set(self.rpo)

    def dominates(self, a: int, b: int) -> bool:
        """Does block ``a`` dominate block ``b`` (both reachable)?"""
        while True:
            if a == b:
                return True
            parent = self.idom[b]
            if parent == b:
                return False
            b = parent

    def reachable_from(self, starts: list[int]) -> set[int]:
        seen: set[int] = set()
        stack = list(starts)
        while stack:
            b = stack.pop()
            if b not in seen:
                seen.add(b)
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
