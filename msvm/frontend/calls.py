"""Attributes, tensor methods and calls: ``x.shape``, ``x.reshape(-1, 8)``, ``ms.ops.relu(x)``, ``len``,
``min``/``max``, ``ms.symbolic_mul`` and inlined calls to other ``@ms.jit`` functions.

Why callees are resolved statically: the callee expression is evaluated against the function's
globals and closure at compile time, so an ``ms.ops`` call becomes one OP_CALL, a jitted callee is
inlined, and anything else is either folded (all arguments static) or rejected where it is written.
"""

from __future__ import annotations

import ast
import builtins
import difflib
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from ..bytecode.opcodes import DTYPES
from ..ops.functions import get_function
from ..ops.registry import OpDef
from .annotations import TensorAnnotation, symbolic_mul
from .emitter import EmitError, State
from .expressions import Frame, SymRange, op_hint
from .indexing import IndexCompiler
from .merging import RET_KEY
from .parsed import ParsedFunction
from .values import BoolVal, ScalarVal, TensorVal, describe, is_int, is_static

_NO_DEFAULT = object()


class PortingWarning(UserWarning):
    """A call whose numpy and torch meanings differ: it compiles with numpy's meaning."""

# method name -> (parameter names, defaults); numpy's spelling, and torch's where numpy has none
_METHODS: dict[str, tuple[tuple[str, ...], tuple[Any, ...]]] = {
    "sum": (("axis", "dtype", "out", "keepdims"), (None, None, None, False)),
    "mean": (("axis", "dtype", "out", "keepdims"), (None, None, None, False)),
    "max": (("axis", "out", "keepdims"), (None, None, False)),
    "min": (("axis", "out", "keepdims"), (None, None, False)),
    "argmax": (("axis", "out", "keepdims"), (None, None, False)),
    "astype": (("dtype",), (_NO_DEFAULT,)),
    "flatten": (("start_dim", "end_dim"), (0, -1)),  # torch's: numpy's order= is only "C" here
    "squeeze": (("axis",), (None,)),
    "unsqueeze": (("dim",), (_NO_DEFAULT,)),
    "swapaxes": (("axis1", "axis2"), (_NO_DEFAULT, _NO_DEFAULT)),
    "softmax": (("dim",), (_NO_DEFAULT,)),  # torch's
    "size": (("dim",), (None,)),  # torch's: numpy's size is an attribute, the element count
}
_VIEWS = ("reshape", "view", "transpose", "permute")  # take their sizes or axes as varargs
TENSOR_METHODS = frozenset([*_METHODS, *_VIEWS])
_ATTRIBUTES = ("shape", "ndim", "T", "mT", "dtype", "size")


def _dtype_name(value: Any) -> str | None:
    try:
        name = np.dtype(value).name
    except TypeError:
        return None
    return name if name in DTYPES else None


class CallCompiler(IndexCompiler):
    # -- attributes ----------------------------------------------------------------------------------
    def expr_Attribute(self, node: ast.Attribute) -> Any:
        return self.attribute(self.expr(node.value), node.attr, node)

    def attribute(self, base: Any, attr: str, node: ast.AST) -> Any:
        if isinstance(base, TensorVal):
            return self.tensor_attribute(base, attr, node)
        if isinstance(base, (ScalarVal, BoolVal)):
            raise self.error("E-COMPILE-UNSUPPORTED", node, f"{describe(base)} has no attribute {attr!r}",
                             "shape values and run-time bools are plain values: use them in arithmetic or "
                             "an `if`")
        try:
            return getattr(base, attr)
        except AttributeError as exc:
            close = difflib.get_close_matches(attr, dir(base), n=1)
            hint = f"did you mean {close[0]!r}?" if close else "check the spelling"
            raise self.error("E-COMPILE-UNKNOWN-NAME", node, str(exc), hint) from None

    def tensor_attribute(self, t: TensorVal, attr: str, node: ast.AST) -> Any:
        if attr == "shape":
            return tuple(self.dim(t, a) for a in range(t.rank))
        if attr == "ndim":
            return t.rank
        if attr == "dtype":
            return np.dtype(t.dtype)
        if attr == "T":
            if t.rank < 2:
                return t
            out = self.call("transpose", [t])
            return TensorVal(out.reg, out.type, t.weak)
        if attr == "mT":  # the last two dims swapped (numpy 2 and torch alike)
            if t.rank < 2:
                raise self.error("E-COMPILE-CALL", node, f"x.mT needs rank >= 2, got {t.type}",
                                 "x.mT swaps the last two dims of a matrix or a stack of them")
            return self.swapped(t, -2, -1, node)
        if attr == "size":
            size: Any = 1
            for a in range(t.rank):
                size = self.dim(t, a) if a == 0 else self.scalar_op("mul", size, self.dim(t, a))
            return size
        if attr in TENSOR_METHODS and attr != "size":
            raise self.error("E-COMPILE-UNSUPPORTED", node, f"the method {attr!r} must be called, not stored",
                             f"call it where it is used: x.{attr}(...)")
        raise self.error("E-COMPILE-UNSUPPORTED", node, f"tensors have no attribute {attr!r} here",
                         f"supported: {', '.join(_ATTRIBUTES)} and the methods "
                         f"{', '.join(sorted(TENSOR_METHODS))}")

    # -- calls ------------------------------------------------------------------------------------
    def expr_Call(self, node: ast.Call) -> Any:
        func = node.func
        if isinstance(func, ast.Attribute):
            receiver = self.expr(func.value)
            if isinstance(receiver, TensorVal):
                return self.method(receiver, func.attr, *self.call_args(node), node)
            if isinstance(receiver, np.ndarray) and func.attr in TENSOR_METHODS:
                args, kwargs = self.call_args(node)
                if is_static(args) and is_static(list(kwargs.values())):
                    return self.fold(node, getattr(receiver, func.attr), *args, **kwargs)
                return self.method(self.captured_array(receiver), func.attr, args, kwargs, node)
            callee = self.attribute(receiver, func.attr, func)
        else:
            callee = self.expr(func)
        args, kwargs = self.call_args(node)
        return self.call_value(callee, args, kwargs, node)

    def call_value(self, callee: Any, args: list[Any], kwargs: dict[str, Any], node: ast.Call) -> Any:
        if isinstance(callee, OpDef):
            return self.op_call(callee, args, kwargs, node)
        if isinstance(getattr(callee, "parsed", None), ParsedFunction):  # a JitFunction
            return self.inline(callee, args, kwargs, node)
        if callee is symbolic_mul:
            return self.symbolic_mul(args, kwargs, node)
        if not is_static(callee):
            raise self.error("E-COMPILE-CALL", node, f"{describe(callee)} is not callable",
                             "call functions, ms.ops.* or @ms.jit functions")
        if is_static(args) and is_static(list(kwargs.values())):
            result = self.fold(node, callee, *args, **kwargs)
            return list(result) if isinstance(result, Iterator) else result  # zip(), enumerate(), ...
        handler = _BUILTINS.get(id(callee))
        if handler is not None:
            return handler(self, args, kwargs, node)
        name = getattr(callee, "__name__", type(callee).__name__)
        hint = op_hint(name) if _is_numpy(callee) else None
        hint = hint or "use ms.ops.* for tensor math, or decorate the helper with @ms.jit so it is inlined"
        raise self.error("E-COMPILE-CALL", node, f"cannot call {name}() on run-time values (tensors or "
                         "symbolic ints) inside @ms.jit", hint)

    def bind(self, what: str, names: Sequence[str], defaults: Sequence[Any], args: list[Any],
             kwargs: dict[str, Any], node: ast.AST) -> dict[str, Any]:
        """Python's argument binding for a method or builtin with positional-or-keyword parameters."""
        usage = f"{what}({', '.join(names)})"
        if len(args) > len(names):
            raise self.error("E-COMPILE-CALL", node, f"{what}() takes at most {len(names)} arguments, got "
                             f"{len(args)}", f"call it as {usage}")
        bound = dict(zip(names, args))
        for key, value in kwargs.items():
            if key not in names:
                raise self.error("E-COMPILE-CALL", node, f"{what}() got an unexpected keyword argument "
                                 f"{key!r}", f"call it as {usage}")
            if key in bound:
                raise self.error("E-COMPILE-CALL", node, f"{what}() got multiple values for {key!r}",
                                 f"call it as {usage}")
            bound[key] = value
        for key, default in zip(names, defaults):
            if key not in bound:
                if default is _NO_DEFAULT:
                    raise self.error("E-COMPILE-CALL", node, f"{what}() is missing the argument {key!r}",
                                     f"call it as {usage}")
                bound[key] = default
        return bound

    # -- tensor methods -----------------------------------------------------------------------------
    def method(self, t: TensorVal, name: str, args: list[Any], kwargs: dict[str, Any], node: ast.AST) -> Any:
        if name in _VIEWS:
            keyword = "shape" if name in ("reshape", "view") else "axes"
            values = self.varargs(name, args, kwargs, keyword, node)
            if name in ("reshape", "view"):  # torch's view is a reshape of its contiguous tensor
                return self.call("reshape", [t], {"shape": tuple(values)})
            if name == "transpose" and len(values) == 2:
                self.check_two_axis_transpose(t, values, node)
            if name == "permute" or values:
                return self.call(name, [t], {"dims" if name == "permute" else "axes": tuple(values)})
            return self.call("transpose", [t])
        if name not in _METHODS:
            raise self.error("E-COMPILE-UNSUPPORTED", node, f"the tensor method {name!r} is not supported",
                             hint=op_hint(name) or f"supported methods: {', '.join(sorted(TENSOR_METHODS))}")
        if name in ("sum", "mean", "max", "min", "argmax"):
            kwargs = self.numpy_axis_names(name, kwargs, node)
        params = self.bind(name, *_METHODS[name], args, kwargs, node)
        for unsupported in ("dtype", "out"):
            if params.get(unsupported) is not None and name != "astype":
                raise self.error("E-COMPILE-UNSUPPORTED", node, f"{name}({unsupported}=...) is not supported",
                                 "cast with .astype(...) separately" if unsupported == "dtype" else None)
        if name in ("sum", "mean", "max", "min", "argmax"):
            return self.call(name, [t], {"axis": params["axis"], "keepdims": params["keepdims"]})
        if name == "astype":
            dtype = _dtype_name(params["dtype"]) if is_static(params["dtype"]) else None
            if dtype is None:
                raise self.error("E-COMPILE-OP", node, f"astype: unsupported dtype {params['dtype']!r}",
                                 f"use one of {', '.join(DTYPES)}")
            return t if dtype == t.dtype and not t.weak else self.cast(TensorVal(t.reg, t.type), dtype)
        if name == "flatten":
            if params["start_dim"] == "C":  # numpy's x.flatten("C")
                params = {"start_dim": 0, "end_dim": params["end_dim"]}
            return self.call("flatten", [t], params)
        if name == "squeeze":
            return self.call("squeeze", [t], {"axis": params["axis"]})
        if name == "swapaxes":
            return self.swapped(t, params["axis1"], params["axis2"], node)
        if name == "softmax":
            return self.call("softmax", [t], {"axis": params["dim"]})
        if name == "size":
            shape = self.tensor_attribute(t, "shape", node)
            return shape if params["dim"] is None else self.fold(node, shape.__getitem__, params["dim"])
        return self.call("unsqueeze", [t], {"axis": params["dim"]})

    def swapped(self, t: TensorVal, a: Any, b: Any, node: ast.AST) -> TensorVal:
        """``t`` with axes ``a`` and ``b`` exchanged (``x.swapaxes``, ``x.mT``), as ``F.transpose`` does."""
        out = self.op_call(get_function("transpose"), [t, a, b], {}, node)
        return TensorVal(out.reg, out.type, t.weak)

    def check_two_axis_transpose(self, t: TensorVal, axes: list[Any], node: ast.AST) -> None:
        """``x.transpose(a, b)``: numpy permutes every axis, torch swaps two; say so where they differ."""
        swap = f"x.swapaxes({axes[0]}, {axes[1]}) or F.transpose(x, {axes[0]}, {axes[1]})"
        if t.rank != 2:
            raise self.error("E-COMPILE-CALL", node, f"x.transpose({axes[0]}, {axes[1]}) on a rank-{t.rank} "
                             f"tensor: numpy's transpose takes every axis (a permutation of all {t.rank})",
                             f"to swap two dims as torch does, write {swap}")
        if all(is_int(a) and -2 <= a < 2 for a in axes) and [a % 2 for a in axes] == [0, 1]:
            self.warn(node, f"x.transpose({axes[0]}, {axes[1]}) on a rank-2 tensor is numpy's identity "
                      "permutation (the tensor unchanged), where torch's swaps the two dims: write x.T, x.mT "
                      f"or {swap} to swap them, or leave the call out")

    def numpy_axis_names(self, name: str, kwargs: dict[str, Any], node: ast.AST) -> dict[str, Any]:
        """torch's ``dim=``/``keepdim=`` as numpy's ``axis=``/``keepdims=`` (the ops' own aliases)."""
        if name in ("max", "min") and "dim" in kwargs:
            raise self.error("E-COMPILE-CALL", node, f"x.{name}(dim=...) is torch's (values, indices) pair; "
                             f"numpy's x.{name}(axis=...) gives the values alone",
                             f"write x.{name}(axis=...) for the values and x.arg{name}(axis=...) for the "
                             "indices" if name == "max" else f"write x.{name}(axis=...) for the values")
        aliases = get_function(name).aliases
        return {aliases.get(key, key): value for key, value in kwargs.items()}

    def warn(self, node: ast.AST, message: str) -> None:
        """A compile-time warning at the user's line: the call compiles, but may not mean what was meant."""
        loc = self.frame.fn.src.loc(node)
        warnings.warn_explicit(message, PortingWarning, loc.file, loc.line)

    def varargs(self, name: str, args: list[Any], kwargs: dict[str, Any], keyword: str,
                node: ast.AST) -> list[Any]:
        """``x.reshape(2, -1)`` and ``x.reshape((2, -1))`` alike."""
        if kwargs:
            extra = set(kwargs) - {keyword, "order"}
            if extra or kwargs.get("order", "C") != "C" or (keyword in kwargs and args):
                raise self.error("E-COMPILE-CALL", node, f"{name}() got unsupported arguments "
                                 f"{sorted(kwargs)}",
                                 f"pass the sizes positionally: x.{name}(a, b, ...) or x.{name}((a, b, ...))")
            if keyword in kwargs:
                args = [kwargs[keyword]]
        if len(args) == 1 and (isinstance(args[0], (tuple, list)) or args[0] is None):
            return [] if args[0] is None else list(args[0])
        return list(args)

    # -- builtins and helpers -----------------------------------------------------------------------
    def symbolic_mul(self, args: list[Any], kwargs: dict[str, Any], node: ast.AST) -> Any:
        params = self.bind("symbolic_mul", ("a", "b"), (_NO_DEFAULT, _NO_DEFAULT), args, kwargs, node)
        a, b = params["a"], params["b"]
        if is_static(a) and is_static(b):
            return self.fold(node, symbolic_mul, a, b)
        if not all(isinstance(v, ScalarVal) or is_int(v) for v in (a, b)):
            raise self.error("E-COMPILE-CALL", node, "ms.symbolic_mul multiplies shape ints (x.shape[i], "
                             f"ms.mutable ints), got {describe(a)} and {describe(b)}", "use * for tensors")
        return self.scalar_op("mul", a, b)

    def builtin_len(self, args: list[Any], kwargs: dict[str, Any], node: ast.AST) -> Any:
        (value,) = self.bind("len", ("obj",), (_NO_DEFAULT,), args, kwargs, node).values()
        if isinstance(value, (tuple, list)):
            return len(value)
        if isinstance(value, TensorVal):
            if value.rank == 0:
                raise self.error("E-COMPILE-CALL", node, "len() of a 0-d tensor", "it has no length")
            return self.dim(value, 0)
        raise self.error("E-COMPILE-CALL", node, f"len() of {describe(value)}", "use a tensor or a tuple")

    def builtin_minmax(self, which: str, args: list[Any], kwargs: dict[str, Any], node: ast.AST) -> Any:
        if kwargs:
            raise self.error("E-COMPILE-CALL", node, f"{which}() with keyword arguments is not supported",
                             f"write {which}(a, b, ...)")
        items = list(args[0]) if len(args) == 1 and isinstance(args[0], (tuple, list)) else list(args)
        if not items or not all(isinstance(v, ScalarVal) or is_int(v) for v in items):
            raise self.error("E-COMPILE-CALL", node, f"{which}() works on ints and shape values here",
                             f"for tensors use ms.ops.{which}imum(a, b) or x.{which}()")
        result = items[0]
        for item in items[1:]:
            result = self.scalar_op(which, result, item)
        return result

    def builtin_abs(self, args: list[Any], kwargs: dict[str, Any], node: ast.AST) -> Any:
        (value,) = self.bind("abs", ("x",), (_NO_DEFAULT,), args, kwargs, node).values()
        if isinstance(value, ScalarVal):
            return self.scalar_op("max", value, self.scalar_op("sub", 0, value))
        if isinstance(value, TensorVal):
            out = self.call("abs", [value])
            return TensorVal(out.reg, out.type, value.weak)
        raise self.error("E-COMPILE-CALL", node, f"abs() of {describe(value)}", "use a tensor or an int")

    def builtin_int(self, args: list[Any], kwargs: dict[str, Any], node: ast.AST) -> Any:
        (value,) = self.bind("int", ("x",), (_NO_DEFAULT,), args, kwargs, node).values()
        if isinstance(value, ScalarVal):
            return value
        raise self.error("E-COMPILE-CALL", node, f"int() of {describe(value)} would read tensor data",
                         "shape values (x.shape[i]) and ms.mutable ints are already ints")

    def builtin_float(self, args: list[Any], kwargs: dict[str, Any], node: ast.AST) -> Any:
        (value,) = self.bind("float", ("x",), (_NO_DEFAULT,), args, kwargs, node).values()
        if isinstance(value, ScalarVal):
            out = self.call("full", [], {"shape": (), "fill_value": value, "dtype": "float64"})
            return TensorVal(out.reg, out.type, True)
        raise self.error("E-COMPILE-CALL", node, f"float() of {describe(value)} would read tensor data",
                         "keep it a tensor: rank-0 tensors combine with other tensors directly")

    def builtin_range(self, args: list[Any], kwargs: dict[str, Any], node: ast.AST) -> Any:
        if kwargs or not 1 <= len(args) <= 3:
            raise self.error("E-COMPILE-CALL", node, "range() takes 1 to 3 positional arguments",
                             "write range(stop), range(start, stop) or range(start, stop, step)")
        start, stop, step = (0, args[0], 1) if len(args) == 1 else (*args, 1)[:3]
        for value in (start, stop):
            if not (isinstance(value, ScalarVal) or is_int(value)):
                raise self.error("E-COMPILE-CALL", node, "range() bounds must be ints or shape values, got "
                                 f"{describe(value)}", "use x.shape[i], len(x) or an ms.mutable int")
        if not is_int(step) or step == 0:
            raise self.error("E-COMPILE-CALL", node, "range() step must be a non-zero constant int, got "
                             f"{describe(step)}", "use a literal step such as 1, 2 or -1")
        return SymRange(start, stop, int(step))

    def builtin_structural(self, fn: Callable[..., Any], args: list[Any], kwargs: dict[str, Any],
                           node: ast.AST) -> Any:
        """tuple/list/enumerate/zip/reversed only rearrange items: fine on tuples holding registers."""
        if kwargs or not all(isinstance(a, (tuple, list)) for a in args):
            got = ", ".join(describe(a) for a in args)
            raise self.error("E-COMPILE-CALL", node, f"{fn.__name__}() works on tuples and lists, got {got}",
                             "pass tuples or lists (x.shape is a tuple)")
        result = fn(*args)
        return result if isinstance(result, (tuple, list)) else list(result)

    def builtin_print(self, args: list[Any], kwargs: dict[str, Any], node: ast.AST) -> Any:
        raise self.error("E-COMPILE-CALL", node, "print() of run-time values is not supported",
                         "return the value, or step through the call with fn.debug(...)")

    # -- inlining ---------------------------------------------------------------------------------
    def inline(self, callee: Any, args: list[Any], kwargs: dict[str, Any], node: ast.AST) -> Any:
        """Compile a jitted callee's body in place, its parameters bound to the caller's values."""
        parsed = callee.parsed
        if any(f is callee for f in self.stack):
            chain = " -> ".join(f.__name__ for f in [*self.stack, callee])
            raise self.error("E-COMPILE-RECURSION", node, f"recursive call ({chain}) cannot be compiled",
                             "write the recursion as a `for` loop over range(...)")
        try:
            bound = parsed.signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise self.error("E-COMPILE-CALL", node, f"{callee.__name__}(): {exc}",
                             f"its parameters are {parsed.signature}") from None
        bound.apply_defaults()
        for name, value in bound.arguments.items():
            self.check_inline_argument(callee.__name__, name, parsed.annotations.get(name), value, node)
        caller_frame, caller_state = self.frame, self.state
        self.frame = Frame(parsed, inline=True)
        self.state = State(dict(bound.arguments), dict(caller_state.scalars))
        self.stack.append(callee)
        try:
            self.run_body(parsed.tree.body)
            if self.state is not None:
                self.frame.returns.append((self.block, self.state, None))
            paths = [(block, State({RET_KEY: value}, state.scalars))
                     for block, state, value in self.frame.returns]
        finally:
            self.stack.pop()
            self.frame = caller_frame
        try:
            self.join(paths, f"the inlined call to {callee.__name__}", self.frame.fn.src.loc(node).line)
        except EmitError as exc:
            raise self.error(exc.code, node, exc.message, exc.hint) from None
        value = self.state.env[RET_KEY]
        self.state = State(caller_state.env, self.state.scalars)
        return value

    def check_inline_argument(self, fname: str, name: str, annotation: TensorAnnotation | None, value: Any,
                              node: ast.AST) -> None:
        if annotation is None or not isinstance(value, TensorVal):
            return
        if value.rank != annotation.spec.rank:
            raise self.error("E-COMPILE-CALL", node, f"{fname}(): parameter {name!r} expects rank "
                             f"{annotation.spec.rank} {annotation.spec}, got {value.type}",
                             "reshape the argument, or change the callee's ms.Tensor annotation")
        if annotation.dtype is not None and annotation.dtype != value.dtype:
            raise self.error("E-COMPILE-CALL", node, f"{fname}(): parameter {name!r} expects dtype "
                             f"{annotation.dtype}, got {value.dtype}",
                             f"cast with .astype('{annotation.dtype}')")


def _is_numpy(fn: Any) -> bool:
    return isinstance(fn, np.ufunc) or (getattr(fn, "__module__", None) or "").startswith("numpy")


_BUILTINS: dict[int, Callable[..., Any]] = {
    id(builtins.len): CallCompiler.builtin_len,
    id(builtins.min): lambda self, a, k, n: self.builtin_minmax("min", a, k, n),
    id(builtins.max): lambda self, a, k, n: self.builtin_minmax("max", a, k, n),
    id(builtins.abs): CallCompiler.builtin_abs,
    id(builtins.int): CallCompiler.builtin_int,
    id(builtins.float): CallCompiler.builtin_float,
    id(builtins.range): CallCompiler.builtin_range,
    id(builtins.print): CallCompiler.builtin_print,
    **{id(fn): (lambda self, a, k, n, fn=fn: self.builtin_structural(fn, a, k, n))
       for fn in (builtins.tuple, builtins.list, builtins.enumerate, builtins.zip, builtins.reversed)},
}

__all__ = ["TENSOR_METHODS", "CallCompiler", "PortingWarning"]
