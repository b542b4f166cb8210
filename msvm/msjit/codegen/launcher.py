"""The Python-side caller of a compiled region: check the inputs, allocate outputs, call native code.

Launch cost is the point (a region of tiny ops must cost a few microseconds), so the launcher is a
generated Python function specialised to the region: exact-mode shapes are compared as tuples,
bucket-mode symbols are read straight from ``shape`` and every guard, output shape and returned
scalar is a pre-compiled integer function of the params. The native code is called as a builtin
(the region's ``METH_FASTCALL`` entry, ``builtin``) with the arrays themselves — it reads numpy's
data pointers out of them — because a ctypes call costs 0.4–0.9 µs and ``arr.ctypes.data`` about a
microsecond per array. Only names are spelled into the source; every value (dtypes, shapes,
functions) is bound through the function's globals.

Anything that does not fit the compiled code — a wrong dtype, a shape outside the bucket or a
violated guard, a run-time check failing inside the native code — raises ``ShapeError`` with code
``E-SHAPE-GUARD``; the runtime then runs the region interpreted, which reports user-facing errors.
Non-contiguous inputs are copied to contiguous ones first. Outputs are fresh arrays; the arena comes
from a free list, so concurrent calls (big regions release the GIL) never share one.

What the launcher needs of a lowering is a ``LaunchSpec``: plain data, which the compile worker sends
back as JSON (dims as their text) when the region was lowered there.
"""

from __future__ import annotations

import ctypes
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import ShapeError
from ...ops.registry import Guard
from ...shapes import Dim, parse_dim
from . import dims
from .emit import BAD_ARITY, DATA_OFFSET
from .plan import Plan

CODE = "E-SHAPE-GUARD"
ALIGN = 64


def guard_error(message: str) -> ShapeError:
    return ShapeError(message, code=CODE, hint="the region runs interpreted for these inputs")


def _prepare_array(arg: int, dtype: np.dtype) -> Callable[[Any], np.ndarray]:
    def prepare(value: Any) -> np.ndarray:
        if not isinstance(value, np.ndarray):
            raise guard_error(f"argument #{arg} is a {type(value).__name__}, not a numpy array")
        if value.dtype.name != dtype.name:
            raise guard_error(f"argument #{arg} has dtype {value.dtype.name}, compiled for {dtype.name}")
        return np.ascontiguousarray(value, dtype=dtype)

    return prepare


def _prepare_int(arg: int) -> Callable[[Any], int]:
    def prepare(value: Any) -> int:
        if isinstance(value, (bool, np.bool_)):
            raise guard_error(f"argument #{arg} is a bool, not an int")
        try:
            return operator.index(value)
        except TypeError:
            raise guard_error(f"argument #{arg} is a {type(value).__name__}, not an int") from None

    return prepare


@dataclass
class LaunchSpec:
    """The calling convention of one compiled region, as the launcher checks and calls it."""

    n_args: int  # bytecode arguments of the region function
    inputs: list[tuple[int, tuple[Dim, ...], str]]  # tensor arguments in call order: (argument, spec, dtype)
    outputs: list[tuple[int, str, tuple[Dim, ...]]]  # (position among the outputs, dtype, shape)
    returns: list[int | Dim]  # per returned value: an output's position, or a scalar's symbolic value
    params: list[str]  # run-time symbols, in call order
    scalar_args: dict[int, str]  # bytecode argument number -> symbol
    guards: list[Guard]
    ranges: dict[str, tuple[float, float]]
    exact: bool

    @classmethod
    def of(cls, plan: Plan, n_args: int) -> LaunchSpec:
        return cls(
            n_args,
            [(b.index, tuple(plan.input_specs[b.index][0]), plan.input_specs[b.index][1])
             for b in plan.inputs],
            [(b.index, b.dtype, tuple(b.shape)) for b in plan.outputs],
            [r.buffer.index if r.buffer is not None else r.scalar for r in plan.returns],
            list(plan.params),
            dict(plan.scalar_args),
            list(plan.guards),
            {p: (float(lo), float(hi)) for p, (lo, hi) in plan.ranges.items()},
            plan.exact,
        )

    def to_json(self) -> dict[str, Any]:
        text = lambda ds: [str(d) for d in ds]  # noqa: E731
        return {
            "n_args": self.n_args,
            "inputs": [[i, text(spec), dtype] for i, spec, dtype in self.inputs],
            "outputs": [[i, dtype, text(shape)] for i, dtype, shape in self.outputs],
            "returns": [r if isinstance(r, int) else str(r) for r in self.returns],
            "params": self.params,
            "scalar_args": [[a, s] for a, s in self.scalar_args.items()],
            "guards": [[str(g.a), str(g.b), g.what, g.broadcast] for g in self.guards],
            "ranges": {p: [lo, hi] for p, (lo, hi) in self.ranges.items()},  # json writes inf as Infinity
            "exact": self.exact,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> LaunchSpec:
        dims_of = lambda ds: tuple(parse_dim(t) for t in ds)  # noqa: E731
        return cls(
            d["n_args"],
            [(i, dims_of(spec), dtype) for i, spec, dtype in d["inputs"]],
            [(i, dtype, dims_of(shape)) for i, dtype, shape in d["outputs"]],
            [r if isinstance(r, int) else parse_dim(r) for r in d["returns"]],
            list(d["params"]),
            {a: s for a, s in d["scalar_args"]},
            [Guard(parse_dim(a), parse_dim(b), what, broadcast) for a, b, what, broadcast in d["guards"]],
            {p: (float(lo), float(hi)) for p, (lo, hi) in d["ranges"].items()},
            d["exact"],
        )


class ArenaPool:
    """Arenas of one size handed out to one call at a time (list pop/append are atomic)."""

    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes
        self.free: list[np.ndarray] = []

    def new(self) -> np.ndarray:
        """An ``ALIGN``-aligned byte array (a view into a slightly larger one)."""
        raw = np.empty(self.nbytes + ALIGN, np.uint8)
        start = -raw.ctypes.data % ALIGN
        return raw[start:start + self.nbytes]


class _MethodDef(ctypes.Structure):  # CPython's PyMethodDef
    _fields_ = [("name", ctypes.c_char_p), ("meth", ctypes.c_void_p), ("flags", ctypes.c_int),
                ("doc", ctypes.c_char_p)]


_METH_FASTCALL = 0x0080
_new_builtin = ctypes.pythonapi.PyCFunction_NewEx
_new_builtin.restype = ctypes.py_object
_new_builtin.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
_NO_ARENA = np.empty(0, np.uint8)  # what a region without an arena is handed in its place


def builtin(address: int, name: str) -> tuple[Callable[..., Any], Any]:
    """(a builtin function calling the ``METH_FASTCALL`` C function at ``address``, the method
    definition it points to — keep that alive as long as the function)."""
    definition = _MethodDef(name.encode(), address, _METH_FASTCALL, None)
    return _new_builtin(ctypes.addressof(definition), None, None), definition


def build_launcher(
    spec: LaunchSpec, arena_bytes: int, address: int, address_fast: int, keep: Sequence[Any]
) -> Callable[..., Any]:
    """The launcher for code whose entry points are at ``address`` (raw pointers, through ctypes — only
    where numpy's array layout is unknown) and ``address_fast`` (the ``METH_FASTCALL`` twin)."""
    by_object = DATA_OFFSET is not None
    if by_object:
        fn, definition = builtin(address_fast, "msvm_region")
        keep = [*keep, definition]
    else:
        n_tensors = len(spec.inputs) + len(spec.outputs)
        fn = ctypes.CFUNCTYPE(
            ctypes.c_int32, *([ctypes.c_void_p] * (n_tensors + 1)), *([ctypes.c_int64] * len(spec.params))
        )(address)
    pool = ArenaPool(arena_bytes)
    params = spec.params
    pnames = {p: f"p{i}" for i, p in enumerate(params)}
    env: dict[str, Any] = {
        "ND": np.ndarray,
        "EMPTY": np.empty,
        "FN": fn,
        "FAIL": _fail,
        "KEEP": tuple(keep),
        "POP": pool.free.pop,
        "PUSH": pool.free.append,
        "NEWARENA": pool.new,
        "NOARENA": _NO_ARENA if by_object else None,
        "GUARD": guard_error,
        "INT": int,
    }
    args = [f"a{i}" for i in range(spec.n_args)]
    lines = [f"def launch({', '.join(args)}):"]
    emit = lines.append

    # scalar arguments bind first (as in the interpreter); input dims then bind or check the symbols
    for arg, symbol in sorted(spec.scalar_args.items()):
        env[f"PINT{arg}"] = _prepare_int(arg)
        emit(f"    {pnames[symbol]} = a{arg} if type(a{arg}) is INT else PINT{arg}(a{arg})")
    bound: set[str] = set(spec.scalar_args.values())
    later: list[tuple[str, int, Dim]] = []
    for index, shape, dtype in spec.inputs:  # arrays: type, dtype, layout, then their dims bind or check
        a = f"a{index}"
        env[f"D{index}"] = np.dtype(dtype)
        env[f"PREP{index}"] = _prepare_array(index, np.dtype(dtype))
        emit(f"    if type({a}) is not ND or {a}.dtype is not D{index} or not {a}.flags.c_contiguous:")
        emit(f"        {a} = PREP{index}({a})")
        if spec.exact:
            env[f"S{index}"] = tuple(d.value for d in shape)
            emit(f"    if {a}.shape != S{index}:")
            emit(
                f"        raise GUARD('argument #{index} has shape ' + str({a}.shape) + ', compiled for "
                f"' + str(S{index}))"
            )
            continue
        emit(f"    s = {a}.shape")
        emit(f"    if len(s) != {len(shape)}:")
        emit(f"        raise GUARD('argument #{index} rank ' + str(len(s)) + ' is not {len(shape)}')")
        for j, d in enumerate(shape):
            if d.is_const:
                emit(f"    if s[{j}] != {d.value}:")
                emit(f"        raise GUARD('argument #{index} dim {j}: ' + str(s[{j}]) + ' != {d.value}')")
            elif d.is_symbol and d.name not in bound:
                bound.add(d.name)
                emit(f"    {pnames[d.name]} = s[{j}]")
            else:
                later.append((a, j, d))
    for k, (a, j, d) in enumerate(later):
        env[f"E{k}"] = dims.evaluator([d], params)
        emit(f"    if {a}.shape[{j}] != E{k}({', '.join(pnames.values())})[0]:")
        emit(f"        raise GUARD('argument {a[1:]} dim {j} does not match {d}')")
    pargs = ", ".join(pnames.values())
    for p in params:  # the arena and the 32-bit BLAS ints are sized for the bounds
        hi = spec.ranges[p][1]
        if hi != np.inf:
            emit(f"    if {pnames[p]} > {int(hi)}:")
            emit(f"        raise GUARD('{p} = ' + str({pnames[p]}) + ' is above the bucket bound {int(hi)}')")
    guards = [g for g in spec.guards if not _static(g)]
    if guards:
        env["GUARDS"] = guards
        env["GV"] = dims.evaluator([d for g in guards for d in (g.a, g.b)], params)
        env["GBROAD"] = tuple(g.broadcast for g in guards)
        emit(f"    gv = GV({pargs})")
        emit("    for i in range(0, len(gv), 2):")
        emit("        if gv[i] != gv[i + 1] and not (GBROAD[i // 2] and gv[i + 1] == 1):")
        emit("            raise GUARD('run-time check failed: ' + str(GUARDS[i // 2]))")

    # outputs, arena, call
    outs = []
    for index, dtype, shape in spec.outputs:
        env[f"OD{index}"] = np.dtype(dtype)
        if spec.exact:
            env[f"OS{index}"] = tuple(d.value for d in shape)
            emit(f"    o{index} = EMPTY(OS{index}, OD{index})")
        else:
            env[f"OS{index}"] = dims.evaluator(shape, params)
            emit(f"    o{index} = EMPTY(OS{index}({pargs}), OD{index})")
        outs.append(f"o{index}")
    ptr = (lambda v: v) if by_object else (lambda v: f"{v}.ctypes.data")
    tensors = [ptr(f"a{index}") for index, _, _ in spec.inputs] + [ptr(o) for o in outs]
    if arena_bytes:
        emit("    try:")
        emit("        ar = POP()")
        emit("    except IndexError:")
        emit("        ar = NEWARENA()")
        emit(f"    rc = FN({', '.join([*tensors, ptr('ar'), *pnames.values()])})")
        emit("    PUSH(ar)")
    else:
        emit(f"    rc = FN({', '.join([*tensors, 'NOARENA', *pnames.values()])})")
    emit("    if rc:")
    emit("        FAIL(rc)")

    values = []
    for k, ret in enumerate(spec.returns):
        if isinstance(ret, int):
            values.append(f"o{ret}")
        elif ret.is_const:
            values.append(str(ret.value))
        else:
            env[f"R{k}"] = dims.evaluator([ret], params)
            values.append(f"R{k}({pargs})[0]")
    if not values:
        emit("    return None")
    elif len(values) == 1:
        emit(f"    return {values[0]}")
    else:
        emit(f"    return ({', '.join(values)})")
    source = "\n".join(lines) + "\n"
    exec(compile(source, "<msvm-launcher>", "exec"), env)
    launch = env["launch"]
    launch.source = source
    return launch


def _static(guard: Any) -> bool:
    """A guard that holds for every binding (both sides the same constant)."""
    return (
        guard.a.is_const and guard.b.is_const and (guard.a == guard.b or (guard.broadcast and guard.b == 1))
    )


def _fail(rc: int) -> None:
    if rc == BAD_ARITY:
        raise TypeError("the region's native entry was called with the wrong number of arguments")
    raise guard_error(
        "a run-time check in the compiled code failed (an index out of range, an empty "
        f"reduction, or a batch index outside the batch; status {rc})"
    )
