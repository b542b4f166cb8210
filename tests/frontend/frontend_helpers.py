"""Shared helpers for the frontend tests: compare a jitted call with the plain function on numpy."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import numpy as np

from msvm.bytecode.module import Instruction, Module
from msvm.errors import CompileError
from msvm.verifier import verify_module


def assert_same(got: Any, want: Any, rtol: float = 1e-6) -> None:
    """Same structure, same dtypes, same values (numpy scalars compare as 0-d arrays)."""
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want), (got, want)
        for g, w in zip(got, want):
            assert_same(g, w, rtol)
        return
    if isinstance(want, (np.ndarray, np.generic)) or type(want) is float:
        want = np.asarray(want)
        assert isinstance(got, np.ndarray), f"expected an array, got {type(got).__name__} {got!r}"
        assert got.dtype == want.dtype, f"dtype {got.dtype} != {want.dtype}"
        assert got.shape == want.shape, f"shape {got.shape} != {want.shape}"
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol)
        return
    assert type(got) is type(want) or (isinstance(got, int) and isinstance(want, int)), (got, want)
    assert got == want, (got, want)


def check(fn: Any, *args: Any, rtol: float = 1e-6) -> Any:
    """Run ``fn`` jitted and as plain Python on the same arguments; the results must agree."""
    got = fn(*args)
    want = fn.py_func(*args)
    assert_same(got, want, rtol)
    verify_module(fn.bytecode)
    return got


def opcodes(module: Module) -> list[str]:
    """Opcode names in layout order, with the op name for OP_CALL (``OP_CALL add``)."""
    out = []
    for _, _, _, _, ins in module.addresses():
        out.append(f"OP_CALL {ins['op']}" if ins.name == "OP_CALL" else ins.name)
    return out


def op_call(module: Module, op: str) -> Instruction:
    """The first OP_CALL of ``op`` in ``module``."""
    return next(ins for _, _, _, _, ins in module.addresses() if ins.name == "OP_CALL" and ins["op"] == op)


def ops(module: Module) -> list[str]:
    return [name.split()[1] for name in opcodes(module) if name.startswith("OP_CALL")]


def source_position(fn: Callable[..., Any], marker: str, snippet: str) -> tuple[int, int]:
    """(file line, 0-based column) of ``snippet`` on the line of ``fn``'s source that contains ``marker``."""
    lines, first = inspect.getsourcelines(fn)
    for offset, line in enumerate(lines):
        if marker in line:
            return first + offset, line.index(snippet)
    raise AssertionError(f"marker {marker!r} not found")


def file_position(path: str, marker: str, snippet: str) -> tuple[int, int]:
    """(line, column) of ``snippet`` on the one line of ``path`` marked with ``marker`` (not quoting it)."""
    with open(path, encoding="utf-8") as f:
        hits = [(n, line) for n, line in enumerate(f, 1) if marker in line and f'"{marker}' not in line]
    assert len(hits) == 1, f"marker {marker!r} found {len(hits)} times"
    n, line = hits[0]
    return n, line.index(snippet)


def assert_compile_error(err: CompileError, code: str, path: str, marker: str, snippet: str) -> None:
    """The error has ``code`` and points at ``snippet`` on the marked line, which its message quotes."""
    line, col = file_position(path, marker, snippet)
    assert err.code == code, str(err)
    assert err.source is not None and err.source.file == path, str(err)
    where = (err.source.line, err.source.col)
    assert where == (line, col), f"{where} != {(line, col)}\n{err}"
    assert snippet in err.message and "^" in err.message, str(err)
    assert err.hint, str(err)
