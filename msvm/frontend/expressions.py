"""Compiling Python expressions: names, operators, comparisons, attributes, calls and conditions.

Why static values short-circuit everything: an expression whose operands are all static is evaluated
by Python itself at compile time, so shape arithmetic on constant dims, ``x.ndim == 4`` and captured
constants cost no instructions; only register-valued operands reach the emitter.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..bytecode.module import Instruction
from ..bytecode.opcodes import SCALAR_OP_INFO
from ..errors import CompileError
from ..ops.functions import FunctionDef
from ..ops.registry import REGISTRY, OpDef, OpTypeError
from .checks import MISSING, unknown_name
from .emitter import EmitError, State
from .merging import VALUE_KEY, Merger
from .parsed import ParsedFunction
from .values import BoolVal, ScalarVal, TensorVal, Unbound, describe, is_int, is_static

_BINARY: dict[type, tuple[str, Callable[[Any, Any], Any]]] = {
    ast.Add: ("+", operator.add),
    ast.Sub: ("-", operator.sub),
    ast.Mult: ("*", operator.mul),
    ast.Div: ("/", operator.truediv),
    ast.FloorDiv: ("//", operator.floordiv),
    ast.Mod: ("%", operator.mod),
    ast.Pow: ("**", operator.pow),
    ast.MatMult: ("@", operator.matmul),
    ast.BitAnd: ("&", operator.and_),
    ast.BitOr: ("|", operator.or_),
    ast.BitXor: ("^", operator.xor),
    ast.LShift: ("<<", operator.lshift),
    ast.RShift: (">>", operator.rshift),
}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_, ast.Invert: operator.invert}
_SCALAR_BINARY = {info.infix: name for name, info in SCALAR_OP_INFO.items() if info.infix}
_TENSOR_BINARY = {"+": "add", "-": "sub", "*": "mul", "/": "div", "**": "pow", "@": "matmul"}
_BOOL_BINARY = {"&": "mul", "|": "add", "^": "not_equal"}  # on bool tensors numpy's ufuncs are logical

_COMPARE: dict[type, tuple[str, Callable[[Any, Any], Any]]] = {
    ast.Eq: ("eq", operator.eq),
    ast.NotEq: ("ne", operator.ne),
    ast.Lt: ("lt", operator.lt),
    ast.LtE: ("le", operator.le),
    ast.Gt: ("gt", operator.gt),
    ast.GtE: ("ge", operator.ge),
}
_TENSOR_COMPARE = {"eq": "equal", "ne": "not_equal", "lt": "less", "le": "less_equal", "gt": "greater",
                   "ge": "greater_equal"}

# numpy function names whose ms.ops equivalent is spelled differently
NUMPY_ALIASES = {
    "negative": "neg", "absolute": "abs", "subtract": "sub", "multiply": "mul", "divide": "div",
    "true_divide": "div", "power": "pow", "amax": "max", "amin": "min", "concatenate": "concat",
    "expand_dims": "unsqueeze", "clip": "clamp", "astype": "cast",
}


@dataclass
class Jumps:
    """A run-time condition as pending branch edges: (instruction, operand index) to patch with a block."""

    true: list[tuple[Instruction, int]]
    false: list[tuple[Instruction, int]]


@dataclass
class Frame:
    """One Python function being compiled (the top-level one or an inlined callee)."""

    fn: ParsedFunction
    inline: bool
    returns: list[tuple[int, Any, Any]] = field(default_factory=list)  # inlined: (block, State, value)
    loop_assigned: list[frozenset[str]] = field(default_factory=list)  # names assigned by enclosing loops
    returns_structure: Any = None  # top level: the structure every return must have (values.structure)


@dataclass(frozen=True)
class SymRange:
    """``range(...)`` with a symbolic bound: only a ``for`` loop can consume it."""

    start: int | ScalarVal
    stop: int | ScalarVal
    step: int


class ExpressionCompiler(Merger):
    """Expression compilation on top of the typed emitter; ``frame`` is the function being compiled."""

    frame: Frame
    stack: list[Any]  # JitFunctions being compiled (recursion check)

    # -- errors and locations -----------------------------------------------------------------------
    def error(self, code: str, node: ast.AST, message: str, hint: str | None = None) -> CompileError:
        return self.frame.fn.error(code, node, message, hint)

    def expr(self, node: ast.expr) -> Any:
        """Compile one expression; instructions it emits carry its source location."""
        saved = self.fb.loc
        self.fb.loc = self.frame.fn.src.loc(node)
        try:
            method = getattr(self, "expr_" + type(node).__name__, None)
            if method is None:
                raise self.error("E-COMPILE-UNSUPPORTED", node,
                                 f"{type(node).__name__} expressions are not supported",
                                 "use arithmetic, comparisons, calls, indexing, tuples and conditional "
                                 "expressions")
            return method(node)
        except EmitError as exc:
            raise self.error(exc.code, node, exc.message, exc.hint) from None
        except OpTypeError as exc:
            raise self.error("E-COMPILE-OP", node, exc.message, exc.hint) from None
        finally:
            self.fb.loc = saved

    def fold(self, node: ast.AST, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Evaluate static operands with Python at compile time."""
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            raise self.error("E-COMPILE-STATIC-EVAL", node, "evaluating this at compile time raised "
                             f"{type(exc).__name__}: {exc}", "fix the static values involved") from None

    def truthy(self, value: Any, node: ast.AST) -> bool:
        return bool(self.fold(node, bool, value))

    # -- leaves ---------------------------------------------------------------------------------------
    def expr_Constant(self, node: ast.Constant) -> Any:
        return node.value

    def expr_Name(self, node: ast.Name) -> Any:
        name = node.id
        env = self.state.env
        if name in env:
            value = env[name]
            if isinstance(value, Unbound):
                raise self.error(value.code, node, f"name {name!r} {value.why}", value.hint)
            return value
        if name in self.frame.fn.locals:
            in_loop = any(name in names for names in self.frame.loop_assigned)
            raise self.error("E-COMPILE-LOOP-VAR" if in_loop else "E-COMPILE-UNKNOWN-NAME", node,
                             f"local variable {name!r} is used before it is assigned",
                             f"initialise {name} before the loop" if in_loop else f"assign {name} first")
        value = self.frame.fn.namespace.lookup(name)
        if value is MISSING and name == self.frame.fn.tree.name:  # not bound yet: we are decorating it
            raise self.error("E-COMPILE-RECURSION", node, f"{name} calls itself; recursion is not compiled",
                             "write the recursion as a `for` loop over range(...)")
        if value is MISSING:
            raise unknown_name(self.frame.fn.src, node, self.frame.fn.namespace, set(self.frame.fn.locals))
        return value

    def expr_Tuple(self, node: ast.Tuple) -> tuple:
        return tuple(self.items(node.elts))

    def expr_List(self, node: ast.List) -> list:
        return self.items(node.elts)

    def items(self, nodes: Sequence[ast.expr]) -> list[Any]:
        out: list[Any] = []
        for item in nodes:
            if isinstance(item, ast.Starred):
                out.extend(self.unpack(self.expr(item.value), None, item))
            else:
                out.append(self.expr(item))
        return out

    def unpack(self, value: Any, count: int | None, node: ast.AST) -> list[Any]:
        """The items of a tuple/list, or of a tensor along axis 0 when that size is a constant."""
        if isinstance(value, (tuple, list, range)):
            items = list(value)
        elif isinstance(value, TensorVal) and value.rank > 0 and value.shape[0].is_const:
            items = [self.index(value, [("int", i)], node) for i in range(value.shape[0].value)]
        elif isinstance(value, np.ndarray) and value.ndim > 0:
            items = list(value)
        else:
            raise self.error("E-COMPILE-UNSUPPORTED", node, f"cannot unpack {describe(value)}",
                             "unpack a tuple (such as x.shape) or a tensor whose first dim is a constant")
        if count is not None and len(items) != count:
            raise self.error("E-COMPILE-UNPACK", node, f"cannot unpack {len(items)} values to {count} names",
                             f"use {len(items)} names, or a starred name (a, *rest = ...)")
        return items

    def expr_NamedExpr(self, node: ast.NamedExpr) -> Any:
        value = self.expr(node.value)
        self.state.env[node.target.id] = value
        return value

    def expr_Starred(self, node: ast.Starred) -> Any:
        raise self.error("E-COMPILE-UNSUPPORTED", node, "a starred expression is only allowed in a call or "
                         "a tuple",
                         "write f(*args) or (*a, b)")

    # -- operators --------------------------------------------------------------------------------
    def expr_BinOp(self, node: ast.BinOp) -> Any:
        return self.binary(type(node.op), self.expr(node.left), self.expr(node.right), node)

    def binary(self, op: type, a: Any, b: Any, node: ast.AST) -> Any:
        symbol, python_op = _BINARY[op]
        if is_static(a) and is_static(b):
            return self.fold(node, python_op, a, b)
        if isinstance(a, (tuple, list)) or isinstance(b, (tuple, list)):
            if symbol in ("+", "*") and not (isinstance(a, (tuple, list)) and isinstance(b, (tuple, list))
                                             and symbol == "*"):
                return self.fold(node, python_op, a, b)
            raise self.error("E-COMPILE-UNSUPPORTED", node, f"`{symbol}` on a tuple holding run-time values",
                             "index the tuple first")
        if _scalarish(a) and _scalarish(b) and symbol in _SCALAR_BINARY:
            return self.scalar_op(_SCALAR_BINARY[symbol], a, b)
        if symbol in _BOOL_BINARY:
            ts, weak = self.tensors([a, b])
            if any(t.dtype != "bool" for t in ts):
                raise self.error("E-COMPILE-UNSUPPORTED", node, f"`{symbol}` is only supported on bool "
                                 "tensors",
                                 "there are no bitwise ops on ints; for masks compare first (x > 0)")
            out = self.call(_BOOL_BINARY[symbol], ts)
            return TensorVal(out.reg, out.type, weak)
        opname = _TENSOR_BINARY.get(symbol)
        if opname is None:
            raise self.error("E-COMPILE-UNSUPPORTED", node, f"`{symbol}` is not supported on tensors",
                             "there is no tensor op for it; `//` and `%` work on shape ints only")
        ts, weak = self.tensors([a, b])
        out = self.call(opname, ts)
        return TensorVal(out.reg, out.type, weak)

    def expr_UnaryOp(self, node: ast.UnaryOp) -> Any:
        return self.unary(node.op, self.expr(node.operand), node)

    def unary(self, op: ast.unaryop, value: Any, node: ast.AST) -> Any:
        if is_static(value):
            return self.fold(node, _UNARY[type(op)], value)
        if isinstance(op, ast.UAdd):
            return value
        if isinstance(op, ast.Not):
            if isinstance(value, BoolVal):
                return self.bool_not(value)
            if isinstance(value, ScalarVal):
                return self.cmp("eq", value, 0)
            raise self.error("E-COMPILE-UNSUPPORTED", node, f"`not` of {describe(value)}",
                             "for tensors compare explicitly, e.g. ms.ops.equal(x, 0)")
        if isinstance(value, ScalarVal) and isinstance(op, ast.USub):
            return self.scalar_op("sub", 0, value)
        if isinstance(value, TensorVal):
            if isinstance(op, ast.USub):
                out = self.call("neg", [value])
                return TensorVal(out.reg, out.type, value.weak)
            if value.dtype == "bool":
                ts, _ = self.tensors([value, False])
                return self.call("equal", ts)
        raise self.error("E-COMPILE-UNSUPPORTED", node, "this unary operator is not supported on "
                         f"{describe(value)}",
                         "`-` works on tensors and ints, `~` on bool tensors, `not` on conditions")

    def expr_Compare(self, node: ast.Compare) -> Any:
        left = self.expr(node.left)
        results = []
        for op, comparator in zip(node.ops, node.comparators):
            right = self.expr(comparator)
            results.append(self.compare(op, left, right, node))
            left = right
        if len(results) == 1:
            return results[0]
        if all(is_static(r) for r in results):
            return all(results)
        raise self.error("E-COMPILE-UNSUPPORTED", node, "a chained comparison of run-time values",
                         "use it directly as an `if` condition, or compare tensors one pair at a time")

    def compare(self, op: ast.cmpop, a: Any, b: Any, node: ast.AST) -> Any:
        if isinstance(op, (ast.Is, ast.IsNot)):
            if is_static(a) and is_static(b):
                result = a is b
            else:
                result = a is b or (type(a) is type(b) and not is_static(a) and a.reg == b.reg)
            return result if isinstance(op, ast.Is) else not result
        if isinstance(op, (ast.In, ast.NotIn)):
            if not (is_static(a) and is_static(b)):
                raise self.error("E-COMPILE-UNSUPPORTED", node, "`in` with run-time values",
                                 "compare the values one by one")
            result = self.fold(node, operator.contains, b, a)
            return result if isinstance(op, ast.In) else not result
        pred, python_op = _COMPARE[type(op)]
        if is_static(a) and is_static(b):
            return self.fold(node, python_op, a, b)
        if isinstance(a, (tuple, list)) or isinstance(b, (tuple, list)):
            return self.compare_sequences(pred, a, b, node)
        if _scalarish(a) and _scalarish(b):
            return self.cmp(pred, a, b)
        if isinstance(a, BoolVal) or isinstance(b, BoolVal):
            return self.compare_bools(pred, a, b, node)
        ts, weak = self.tensors([a, b])
        out = self.call(_TENSOR_COMPARE[pred], ts)
        return TensorVal(out.reg, out.type, weak)

    def compare_sequences(self, pred: str, a: Any, b: Any, node: ast.AST) -> bool:
        """``x.shape == (n, 3)``: decided statically or not at all."""
        if pred not in ("eq", "ne") or not (isinstance(a, (tuple, list)) and isinstance(b, (tuple, list))):
            raise self.error("E-COMPILE-UNSUPPORTED", node, "this comparison of tuples holding run-time "
                             "values",
                             "compare the dims one by one")
        equal = len(a) == len(b)
        for x, y in zip(a, b) if equal else ():
            r = self.compare(ast.Eq(), x, y, node)
            if not is_static(r):
                raise self.error("E-COMPILE-UNSUPPORTED", node, "comparing tuples whose dims are only known "
                                 "at run time",
                                 "compare the dims one by one: `a[0] == b[0] and a[1] == b[1]`")
            equal = equal and bool(r)
        return equal if pred == "eq" else not equal

    def compare_bools(self, pred: str, a: Any, b: Any, node: ast.AST) -> Any:
        if pred not in ("eq", "ne"):
            raise self.error("E-COMPILE-UNSUPPORTED", node, "ordering comparison of run-time bools",
                             "compare bools with == or !=")
        if isinstance(a, bool):
            a, b = b, a
        if isinstance(b, bool):
            return a if (b == (pred == "eq")) else self.bool_not(a)
        if isinstance(a, BoolVal) and isinstance(b, BoolVal):
            return BoolVal(self.fb.cmp(pred, a.reg, b.reg))
        raise self.error("E-COMPILE-UNSUPPORTED", node, f"comparing a run-time bool with {describe(b)}",
                         "compare it with True/False or another condition")

    def expr_BoolOp(self, node: ast.BoolOp) -> Any:
        is_and = isinstance(node.op, ast.And)
        for i, item in enumerate(node.values):
            value = self.expr(item)
            if i == len(node.values) - 1:
                return value
            if not is_static(value):
                raise self.error("E-COMPILE-UNSUPPORTED", item, "`and`/`or` on run-time values outside a "
                                 "condition",
                                 "use it directly as an `if` condition; for bool tensors use & and |")
            if self.truthy(value, item) != is_and:
                return value
        raise AssertionError("unreachable")

    def expr_IfExp(self, node: ast.IfExp) -> Any:
        cond = self.cond(node.test)
        if cond is True:
            return self.expr(node.body)
        if cond is False:
            return self.expr(node.orelse)
        base = self.state
        paths = []
        for block, branch in zip(self.targets(cond), (node.body, node.orelse)):
            if block is None:
                continue
            self.set_block(block)
            self.state = base.copy()
            self.state.env[VALUE_KEY] = self.expr(branch)
            paths.append((self.block, self.state))
        try:
            self.join(paths, "the conditional expression", self.frame.fn.src.loc(node).line)
        except EmitError as exc:
            raise self.error(exc.code, node, exc.message, exc.hint) from None
        return self.state.env.pop(VALUE_KEY)

    # -- conditions ---------------------------------------------------------------------------------
    def cond(self, node: ast.expr) -> bool | Jumps:
        """A condition: a static bool (the branch is folded) or pending branch edges."""
        if isinstance(node, ast.BoolOp):
            thunks = [lambda n=n: self.cond(n) for n in node.values]
            return self.chain(thunks, isinstance(node.op, ast.And), node)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return _negate(self.cond(node.operand))
        if isinstance(node, ast.Compare) and len(node.ops) > 1:
            operands = [node.left, *node.comparators]
            values: dict[int, Any] = {}

            def pair(k: int) -> bool | Jumps:
                for j in (k, k + 1):
                    if j not in values:
                        values[j] = self.expr(operands[j])
                return self.truth(self.compare(node.ops[k], values[k], values[k + 1], node), node)

            return self.chain([lambda k=k: pair(k) for k in range(len(node.ops))], True, node)
        return self.truth(self.expr(node), node)

    def truth(self, value: Any, node: ast.AST) -> bool | Jumps:
        if is_static(value) or isinstance(value, (tuple, list)):
            return self.truthy(value, node)
        if isinstance(value, ScalarVal):
            value = self.cmp("ne", value, 0)
            if not isinstance(value, BoolVal):
                return bool(value)
        if isinstance(value, BoolVal):
            self.fb.br(value.reg, -1, -1)
            ins = self.last_instruction()
            return Jumps([(ins, 1)], [(ins, 2)])
        raise self.error(
            "E-COMPILE-DATA-DEPENDENT-IF", node,
            "a condition on tensor values cannot be compiled: the branch taken would depend on the data",
            "compute both sides and select with ms.ops.where(cond, a, b); conditions on shapes "
            "(x.shape[0] > 1) and ints are fine")

    def chain(self, thunks: Sequence[Callable[[], bool | Jumps]], is_and: bool,
              node: ast.AST) -> bool | Jumps:
        """Short-circuit `and` (or `or`, by symmetry) with static parts folded."""
        if not is_and:
            return _negate(self.chain([lambda t=t: _negate(t()) for t in thunks], True, node))
        fork: State | None = None  # the path state where the first operand branched out
        exits: list[tuple[Instruction, int]] = []
        result: bool | Jumps = True
        for k, thunk in enumerate(thunks):
            c = thunk()
            if c is True:
                continue
            if c is False:
                result = Jumps([], [*exits, self.jump()]) if exits else False
                break
            if k == len(thunks) - 1 or not c.true:
                result = Jumps(c.true, exits + c.false)
                break
            exits += c.false
            fork = fork or self.state.copy()
            mid = self.new_block()
            self.patch(c.true, mid)
            self.set_block(mid)
        else:
            if exits:
                result = Jumps([self.jump()], exits)
        if fork is not None:  # later operands ran in blocks that do not dominate the false side
            env = self.state.env
            if len(env) != len(fork.env) or any(env.get(k) is not v for k, v in fork.env.items()):
                raise self.error("E-COMPILE-UNSUPPORTED", node, "an assignment expression after the first "
                                 "operand of `and`/`or`", "assign before the condition")
            self.state.scalars = fork.scalars
        return result

    def jump(self) -> tuple[Instruction, int]:
        self.fb.jmp(-1)
        return self.last_instruction(), 0

    @staticmethod
    def patch(edges: Sequence[tuple[Instruction, int]], block: int) -> None:
        for ins, index in edges:
            args = list(ins.args)
            args[index] = block
            ins.args = tuple(args)

    def targets(self, jumps: Jumps) -> tuple[int | None, int | None]:
        """Blocks for the true and false sides of a condition (None for a side no edge reaches)."""
        out = []
        for edges in (jumps.true, jumps.false):
            if edges:
                block = self.new_block()
                self.patch(edges, block)
                out.append(block)
            else:
                out.append(None)
        return out[0], out[1]

    # -- calls ----------------------------------------------------------------------------------------
    def call_args(self, node: ast.Call) -> tuple[list[Any], dict[str, Any]]:
        args = self.items(node.args)
        kwargs = {}
        for kw in node.keywords:
            if kw.arg is None:
                raise self.error("E-COMPILE-UNSUPPORTED", kw.value, "`**kwargs` in a call is not supported",
                                 "pass the keywords explicitly")
            kwargs[kw.arg] = self.expr(kw.value)
        return args, kwargs

    def op_call(self, op: OpDef, args: list[Any], kwargs: dict[str, Any], node: ast.AST) -> Any:
        """``ms.ops.<name>(...)``: tensors become sources, everything else attributes."""
        try:
            inputs, attrs = op.bind(args, kwargs)
        except TypeError as exc:
            raise self.error("E-COMPILE-OP", node, str(exc), f"call it as {op.usage()}") from None
        ts, _ = self.tensors(inputs)
        if isinstance(op, FunctionDef):
            return op.expand(_EmitBuild(self), *ts, **self.function_attrs(op, attrs))
        return self.call(op, ts, attrs)

    def function_attrs(self, op: FunctionDef, attrs: dict[str, Any]) -> dict[str, Any]:
        """A function's attributes checked as its ops will see them; run-time values pass on as they are."""
        checked = op.check_attrs({key: self._attr(key, value)[1] for key, value in attrs.items()})
        return {key: attrs[key] if key in attrs and not is_static(attrs[key]) else value
                for key, value in checked.items()}


class _EmitBuild:
    """A function's ops emitted as OP_CALLs where it is called (``msvm.ops.functions``)."""

    def __init__(self, compiler: ExpressionCompiler) -> None:
        self.compiler = compiler

    def __call__(self, op: str, *inputs: Any, **attrs: Any) -> Any:
        ts, _ = self.compiler.tensors(list(inputs))
        return self.compiler.call(op, ts, attrs)

    def rank(self, value: TensorVal) -> int:
        return value.rank


def _scalarish(value: Any) -> bool:
    return isinstance(value, ScalarVal) or is_int(value)


def _negate(c: bool | Jumps) -> bool | Jumps:
    return (not c) if isinstance(c, bool) else Jumps(c.false, c.true)


def op_hint(name: str) -> str | None:
    """"use ms.ops.exp(x)" for a numpy function name that has an ms.ops equivalent."""
    name = NUMPY_ALIASES.get(name, name)
    if name in REGISTRY:
        return f"use ms.ops.{name}(...) instead (e.g. ms.ops.{name}(x))"
    return None


__all__ = ["ExpressionCompiler", "Frame", "Jumps", "SymRange", "op_hint"]
