"""Concurrent calls from several threads, with changing shapes, while compiles land: always correct."""

# ms.Tensor["N", 3] reads to linters as string forward references: F821 is noise here.
# ruff: noqa: F821

import threading

import numpy as np

import msvm as ms
import msvm.ops as ops
from msvm.frontend import Tensor, jit


@jit(hot_threshold=2)
def exact_fn(x: Tensor["N", 16], y: Tensor["N", 16]):
    return ops.relu(x * y + 1.0), ops.exp(x) - y


@jit(hot_threshold=2, cache_mode="bucket", bucket_boundaries=(4, 8))
def bucket_fn(x: Tensor["N", 16], y: Tensor["N", 16]):
    return ops.relu(x * y + 1.0), ops.exp(x) - y


def test_four_threads_with_changing_shapes_while_compiles_land() -> None:
    errors: list[str] = []

    def work(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for i in range(120):
            if i == 80:  # the first compiles land during the first 80 calls; the rest run native too
                ms.vm.wait_for_compiles(60)
            n = int(rng.choice([1, 2, 3, 5, 7, 8]))
            x, y = rng.random((n, 16), dtype=np.float32), rng.random((n, 16), dtype=np.float32)
            fn = exact_fn if i % 2 else bucket_fn
            try:
                got = fn(x, y)
                want = (np.maximum(x * y + 1.0, 0.0), np.exp(x) - y)
                for g, w in zip(got, want):
                    np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
            except Exception as exc:  # collected: an assertion in a thread would be lost
                errors.append(f"thread {seed} call {i} n={n}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert ms.vm.wait_for_compiles(60)
    info = ms.vm.jit_info()
    assert {e["function"] for e in info} == {"exact_fn", "bucket_fn"}
    assert all(e["status"] == "compiled" for e in info), [e["reason"] for e in info]
    assert sum(e["hits"] for e in info) > 0
    assert len([e for e in info if e["function"] == "bucket_fn"]) <= 2


@jit(hot_threshold=1, cache_mode="bucket", bucket_boundaries=(8,))
def shifted_fn(x: Tensor["N", 16]):
    return ops.relu(x - 0.5)


def test_the_compiler_thread_builds_no_python_ast(monkeypatch) -> None:
    """CPython 3.11 counts AST constructor recursion in one place for all threads: an ``ast.parse`` on
    the compiler thread can fail the user's (a notebook's lazy imports parse grammars) with
    "AST constructor recursion depth mismatch". Generated code must come from compiling text only."""
    import ast
    import builtins

    off_main: list[str] = []
    real = builtins.compile

    def watched(source, filename, mode, flags=0, *args, **kwargs):
        if threading.current_thread() is not threading.main_thread() and (
            flags & ast.PyCF_ONLY_AST or isinstance(source, ast.AST)
        ):
            off_main.append(f"{threading.current_thread().name}: {filename}")
        return real(source, filename, mode, flags, *args, **kwargs)

    monkeypatch.setattr(builtins, "compile", watched)
    rng = np.random.default_rng(0)
    for n in (5, 6, 7, 5, 6, 7):
        x = rng.random((n, 16), dtype=np.float32)
        np.testing.assert_array_equal(shifted_fn(x), np.maximum(x - 0.5, 0.0))
        ms.vm.wait_for_compiles(60)
    info = [e for e in ms.vm.jit_info() if e["function"] == "shifted_fn"]
    assert info and all(e["status"] == "compiled" for e in info), [e["reason"] for e in info]
    assert sum(e["hits"] for e in info) > 0
    assert off_main == []
