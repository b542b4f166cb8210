"""Shared helpers of the code generator's tests: build a region, run it interpreted and native, compare."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import msvm.ops  # noqa: F401  (registers the ops)
from msvm.bytecode import FunctionBuilder, Module, ModuleBuilder
from msvm.interpreter import Program
from msvm.msjit.codegen import CompiledRegion, compile_region

TOL = {"float16": (2e-2, 2e-2), "float32": (2e-4, 2e-5), "float64": (1e-9, 1e-10)}


def region(
    body: Callable[..., Any], inputs: Sequence[tuple[str, str]], scalars: Sequence[str] = ()
) -> Module:
    """A module with one function ``f``: tensor inputs (shape spec, dtype), then scalar inputs (symbols).

    ``body(f, *input_registers)`` emits the instructions and returns the register(s) to return.
    """
    mb = ModuleBuilder("t")
    names = [f"x{i}" for i in range(len(inputs))] + [f"s{i}" for i in range(len(scalars))]
    f: FunctionBuilder = mb.function("f", names)
    regs = [f.tensor_input(i, spec, dtype) for i, (spec, dtype) in enumerate(inputs)]
    regs += [f.scalar_arg(len(inputs) + i, sym) for i, sym in enumerate(scalars)]
    out = body(f, *regs)
    f.ret(*(out if isinstance(out, tuple) else (out,)))
    return mb.build()


def assert_close(native: Any, reference: Any, rtol: float | None = None, atol: float | None = None) -> None:
    if isinstance(reference, tuple):
        assert isinstance(native, tuple) and len(native) == len(reference)
        for n, r in zip(native, reference):
            assert_close(n, r, rtol, atol)
        return
    if not isinstance(reference, np.ndarray):  # an int64 scalar (the launcher always returns a Python int)
        assert type(native) is int and native == reference, (native, reference)
        return
    assert isinstance(native, np.ndarray), type(native)
    assert native.dtype == reference.dtype, (native.dtype, reference.dtype)
    assert native.shape == reference.shape, (native.shape, reference.shape)
    if reference.dtype.kind in "biu":
        np.testing.assert_array_equal(native, reference)
        return
    default = TOL.get(reference.dtype.name, (1e-5, 1e-6))
    np.testing.assert_allclose(native, reference, rtol=rtol or default[0], atol=atol or default[1])


def interpret(module: Module, *args: Any) -> Any:
    return Program(module).function("f")(*args)


def compiled(module: Module, **kw: Any) -> CompiledRegion:
    return compile_region(module, "f", **kw)


def check(
    module: Module, *args: Any, rtol: float | None = None, atol: float | None = None, **kw: Any
) -> CompiledRegion:
    """Compile ``module`` (keyword arguments go to compile_region) and compare one call with the oracle."""
    region_ = compiled(module, **kw)
    assert_close(region_.fn(*args), interpret(module, *args), rtol, atol)
    return region_


def rand(
    shape: Sequence[int],
    dtype: str = "float32",
    rng: np.random.Generator | None = None,
    low: float = -2.0,
    high: float = 2.0,
) -> np.ndarray:
    rng = rng or np.random.default_rng(0)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype.startswith("int"):
        return rng.integers(-5, 6, size=shape).astype(dtype)
    return rng.uniform(low, high, size=shape).astype(dtype)


def run_modes(
    mode: str,
    body: Callable[..., Any],
    inputs: Sequence[tuple[Sequence[int], str]],
    make_args: Callable[[list[tuple[int, ...]], np.random.Generator], list[Any]] | None = None,
    sym: dict[str, Sequence[tuple[int, int]]] | None = None,
    **kw: Any,
) -> CompiledRegion:
    """Compile ``body`` in ``mode`` and compare with the interpreter.

    ``exact``: every dim a constant, one call. ``bucket``: the dims listed in ``sym`` (symbol name ->
    [(input index, axis), ...]) become symbols with an upper bound, and the one compiled region is
    called at the given sizes and at smaller and larger ones.
    """
    shapes = [tuple(s) for s, _ in inputs]
    make_args = make_args or (lambda shp, rng: [rand(s, d, rng) for s, (_, d) in zip(shp, inputs)])
    if mode == "exact" or not sym:
        specs = [("[" + ", ".join(map(str, s)) + "]", d) for s, (_, d) in zip(shapes, inputs)]
        return check(region(body, specs), *make_args(shapes, np.random.default_rng(0)), **kw)
    names = {(i, a): name for name, places in sym.items() for i, a in places}
    specs = [
        ("[" + ", ".join(names.get((i, a), str(d)) for a, d in enumerate(s)) + "]", dt)
        for i, (s, (_, dt)) in enumerate(zip(shapes, inputs))
    ]
    base = {name: shapes[places[0][0]][places[0][1]] for name, places in sym.items()}
    rtol, atol = kw.pop("rtol", None), kw.pop("atol", None)
    module = region(body, specs)
    compiled_ = compiled(module, bounds={n: v + 3 for n, v in base.items()}, **kw)
    for delta in (0, -1, 3):
        sizes = {n: max(v + delta, 1) for n, v in base.items()}
        shp = [tuple(sizes.get(names.get((i, a)), d) for a, d in enumerate(s)) for i, s in enumerate(shapes)]
        args = make_args(shp, np.random.default_rng(delta + 5))
        assert_close(compiled_.fn(*args), interpret(module, *args), rtol, atol)
    return compiled_
