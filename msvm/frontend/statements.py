"""Compiling statements: assignment, ``if``/``elif``/``else``, ``for`` loops and ``return``.

Why loops compile in rounds: a loop header needs a phi for every loop-carried variable, with a type
that covers every iteration, but the body decides those types. Each round compiles the body with the
header types assumed so far; if a variable's type at the end of the body is not covered (a static
value that changes, a dim that grows) the round is rolled back and retried with the wider type.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..ops.registry import OpTypeError
from ..shapes import UNKNOWN
from .calls import CallCompiler
from .checks import assigned_names
from .emitter import EmitError, State
from .expressions import SymRange
from .merging import Same, spec_equal
from .values import (
    BoolVal,
    ScalarVal,
    TensorVal,
    Unbound,
    describe,
    describe_structure,
    is_int,
    leaves,
    structure,
)

MAX_LOOP_ROUNDS = 64  # each round widens at least one type; this bounds pathological chains


class StatementCompiler(CallCompiler):
    def run_body(self, body: list[ast.stmt]) -> None:
        """Compile statements until the path ends (a return makes the rest unreachable)."""
        for stmt in body:
            if self.state is None:
                return
            self.stmt(stmt)

    def stmt(self, node: ast.stmt) -> None:
        """Compile one statement; its instructions carry its location unless an expression is more precise."""
        saved = self.fb.loc
        self.fb.loc = self.frame.fn.src.loc(node)
        try:
            method = getattr(self, "stmt_" + type(node).__name__, None)
            if method is None:
                raise self.error("E-COMPILE-UNSUPPORTED", node,
                                 f"`{type(node).__name__}` statements are not supported",
                                 "use assignments, if/elif/else, for loops and return")
            method(node)
        except EmitError as exc:
            raise self.error(exc.code, node, exc.message, exc.hint) from None
        except OpTypeError as exc:
            raise self.error("E-COMPILE-OP", node, exc.message, exc.hint) from None
        finally:
            self.fb.loc = saved

    # -- simple statements --------------------------------------------------------------------------
    def stmt_Pass(self, node: ast.Pass) -> None:
        return

    def stmt_Expr(self, node: ast.Expr) -> None:
        if not isinstance(node.value, ast.Constant):  # docstrings and bare constants do nothing
            self.expr(node.value)

    def stmt_Assign(self, node: ast.Assign) -> None:
        value = self.expr(node.value)
        for target in node.targets:
            self.assign(target, value)

    def stmt_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.assign(node.target, self.expr(node.value))

    def stmt_AugAssign(self, node: ast.AugAssign) -> None:
        current = self.expr(node.target)
        value = self.expr(node.value)
        self.assign(node.target, self.binary(type(node.op), current, value, node))

    def assign(self, target: ast.expr, value: Any) -> None:
        if isinstance(target, ast.Name):
            self.state.env[target.id] = value
            self.name_variable(target.id, value)
            return
        if not isinstance(target, (ast.Tuple, ast.List)):
            raise self.error("E-COMPILE-UNSUPPORTED", target, "this assignment target is not supported",
                             "assign to a name or a tuple of names")
        stars = [i for i, e in enumerate(target.elts) if isinstance(e, ast.Starred)]
        if not stars:
            items = self.unpack(value, len(target.elts), target)
            for element, item in zip(target.elts, items):
                self.assign(element, item)
            return
        items = self.unpack(value, None, target)
        k, after = stars[0], len(target.elts) - stars[0] - 1
        if len(items) < len(target.elts) - 1:
            raise self.error("E-COMPILE-UNPACK", target, f"not enough values to unpack ({len(items)} values "
                             f"for at least {len(target.elts) - 1} names)", "use fewer names")
        for element, item in zip(target.elts[:k], items[:k]):
            self.assign(element, item)
        self.assign(target.elts[k].value, list(items[k:len(items) - after]))
        for element, item in zip(target.elts[k + 1:], items[len(items) - after:]):
            self.assign(element, item)

    def name_variable(self, name: str, value: Any) -> None:
        """The register-names table keeps the jitted function's own variables (an inlined callee's
        locals would read as the caller's, whose names they may share)."""
        if not self.frame.inline:
            self.name_register(name, value)

    def stmt_Assert(self, node: ast.Assert) -> None:
        value = self.expr(node.test)
        if not isinstance(value, (TensorVal, ScalarVal, BoolVal)):
            if not self.truthy(value, node.test):
                detail = ""
                if node.msg is not None:
                    detail = f": {self.expr(node.msg)}"
                raise self.error("E-COMPILE-ASSERT", node, f"assertion failed at compile time{detail}",
                                 "the assertion is about static values (ranks, constant dims), so it fails "
                                 "for every call with these argument types")
            return
        raise self.error("E-COMPILE-UNSUPPORTED", node, "`assert` on run-time values is not supported",
                         "assert only what is known at compile time (ranks, constant dims); ops check "
                         "shapes at run time")

    # -- if ---------------------------------------------------------------------------------------
    def stmt_If(self, node: ast.If) -> None:
        cond = self.cond(node.test)
        if cond is True:
            self.run_body(node.body)
            return
        if cond is False:
            self.run_body(node.orelse)
            return
        base = self.state
        paths = []
        for block, body in zip(self.targets(cond), (node.body, node.orelse)):
            if block is None:
                continue
            self.set_block(block)
            self.state = base.copy()
            self.run_body(body)
            if self.state is not None:
                paths.append((self.block, self.state))
        self.join(paths, "the `if`", self.frame.fn.src.loc(node).line)
        if self.state is not None:  # the phis that merge what the branches assigned hold those names
            for name in sorted(assigned_names([*node.body, *node.orelse])):
                self.name_variable(name, self.state.env.get(name))

    # -- return -----------------------------------------------------------------------------------
    def stmt_Return(self, node: ast.Return) -> None:
        value = None if node.value is None else self.expr(node.value)
        if self.frame.inline:
            self.frame.returns.append((self.block, self.state, value))
            self.state = None
            return
        self.emit_return(value, node)

    def emit_return(self, value: Any, node: ast.AST) -> None:
        """RET of the value's leaves; the JitFunction rebuilds tuples (even nested ones) from them."""
        frame = self.frame
        shape = structure(value)
        if frame.returns_structure is None:
            frame.returns_structure = shape
        elif frame.returns_structure != shape:
            earlier = describe_structure(frame.returns_structure)
            raise self.error("E-COMPILE-RETURN", node, f"this return gives {describe_structure(shape)} but "
                             f"an earlier one gives {earlier}",
                             "every return of a jitted function must return the same number of values")
        regs = [self.return_register(item, node) for item in leaves(value)]
        self.fb.ret(*regs)
        self.state = None

    def return_register(self, value: Any, node: ast.AST) -> int:
        if isinstance(value, (TensorVal, ScalarVal, BoolVal)):
            return value.reg
        if isinstance(value, (bool, np.bool_)):
            return self.bool_const(bool(value)).reg
        if is_int(value):
            return self.scalar(int(value)).reg
        if isinstance(value, np.ndarray):
            return self.captured_array(value).reg
        if type(value) is float or isinstance(value, np.generic):
            return self.const_array(value).reg
        raise self.error("E-COMPILE-RETURN", node, f"cannot return {describe(value)} from a jitted function",
                         "return tensors, ints, bools or tuples of them")

    # -- for --------------------------------------------------------------------------------------
    def stmt_For(self, node: ast.For) -> None:
        iterable = self.expr(node.iter)
        if isinstance(iterable, (range, SymRange)):
            self.range_loop(node, iterable.start, iterable.stop, iterable.step)
            return
        constant_rows = isinstance(iterable, TensorVal) and iterable.rank > 0 and iterable.shape[0].is_const
        if not (isinstance(iterable, (tuple, list, np.ndarray)) or constant_rows):
            raise self.error("E-COMPILE-UNSUPPORTED", node.iter, f"cannot loop over {describe(iterable)}",
                             "loop over range(...) (bounds may be shapes or ms.mutable ints) or over a "
                             "tuple/list; to visit rows write `for i in range(len(x))` and index x[i]")
        for item in self.unpack(iterable, None, node.iter):  # a static sequence: unrolled
            if self.state is None:
                return
            self.assign(node.target, item)
            self.run_body(node.body)

    def range_loop(self, node: ast.For, start: Any, stop: Any, step: int) -> None:
        """preheader -> header (phis, i < stop) -> body -> latch (i += step) -> header; header -> exit."""
        if not isinstance(node.target, ast.Name):
            raise self.error("E-COMPILE-UNSUPPORTED", node.target, "a range loop needs a single loop "
                             "variable",
                             "write `for i in range(...)`")
        body_names = assigned_names(node.body) | {node.target.id}
        pre_state = self.state
        env = pre_state.env
        carried = [n for n in sorted(body_names) if n in env and not isinstance(env[n], Unbound)]
        first, bound = self.scalar(start), self.scalar(stop)
        specs = {n: Same(env[n]) for n in carried}
        self.frame.loop_assigned.append(frozenset(body_names))
        try:
            for _ in range(MAX_LOOP_ROUNDS):
                snap, n_returns = self.snapshot(), len(self.frame.returns)
                loop = self.loop_round(node, first, bound, step, env, carried, specs)
                latch = self.state
                if latch is not None:
                    wider = {n: self.merge_spec([env[n], loop.env[n], latch.env[n]], n) for n in carried}
                    if not all(spec_equal(wider[n], specs[n]) for n in carried):
                        self.restore(snap)
                        del self.frame.returns[n_returns:]
                        specs = wider
                        continue
                    self.close_loop(loop, latch, carried, specs, step)
                break
            else:
                raise self.error("E-COMPILE-LOOP", node, "the types of the loop-carried variables "
                                 f"{', '.join(carried)} do not settle",
                                 "keep each variable's rank and dtype fixed")
        finally:
            self.frame.loop_assigned.pop()
        self.set_block(loop.exit)
        exit_env = {**env, **{n: loop.env[n] for n in carried}}
        line = self.frame.fn.src.loc(node).line
        for name in body_names.difference(carried):
            exit_env[name] = Unbound(
                name, f"is first assigned inside the loop at line {line}, so it has no value after the loop "
                      "(the loop may run zero times)", "E-COMPILE-LOOP-VAR",
                f"initialise {name} before the loop (e.g. {name} = ... above the `for`)")
        self.state = State(exit_env, dict(pre_state.scalars))

    def loop_round(self, node: ast.For, first: ScalarVal, bound: ScalarVal, step: int, env: dict[str, Any],
                   carried: list[str], specs: dict[str, Any]) -> LoopRound:
        """One attempt: the header with phis typed by ``specs``, then the body."""
        pre_block = self.block
        pre_regs = [r for n in carried for r in self.materialise(env[n], specs[n])]
        leaves = [leaf for n in carried for leaf in self.leaves(specs[n])]
        header = self.new_block()
        self.fb.jmp(header)
        self.set_block(header)
        induction = ScalarVal(self.fb.scalar_phi([(pre_block, first.reg)]), UNKNOWN)
        phi_regs = iter(self.emit_phis(leaves, [[(pre_block, r)] for r in pre_regs]))
        header_env = {**env, **{n: self.build(specs[n], phi_regs) for n in carried}}
        for n in carried:  # the header's phis hold the loop-carried variables
            self.name_variable(n, header_env[n])
        cond = self.cmp("lt" if step > 0 else "gt", induction, bound)
        body, exit_block = self.new_block(), self.new_block()
        self.fb.br(cond.reg, body, exit_block)
        self.set_block(body)
        self.state = State(dict(header_env), dict(self.state.scalars))
        self.state.env[node.target.id] = induction
        self.name_variable(node.target.id, induction)
        self.run_body(node.body)
        return LoopRound(header, exit_block, induction, header_env)

    def close_loop(self, loop: LoopRound, latch: State, carried: list[str], specs: dict[str, Any],
                   step: int) -> None:
        """The latch: materialise the carried values, step the induction variable, jump back."""
        regs = [r for n in carried for r in self.materialise(latch.env[n], specs[n])]
        nxt = self.scalar_op("add", loop.induction, step)
        latch_block = self.block
        self.fb.jmp(loop.header)
        phis = self.fb.function.blocks[loop.header].instructions
        self.add_incoming(phis[0], latch_block, nxt.reg)
        for phi, reg in zip(phis[1:1 + len(regs)], regs):
            self.add_incoming(phi, latch_block, reg)


@dataclass(frozen=True)
class LoopRound:
    header: int
    exit: int
    induction: ScalarVal
    env: dict[str, Any]


__all__ = ["StatementCompiler"]
