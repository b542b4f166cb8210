"""Helpers shared by the scheduler tests: counting fake variants, small programs, fake calibration."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

import msvm.ops  # noqa: F401  (registers the ops)
from msvm.bytecode import ModuleBuilder
from msvm.interpreter import Program
from msvm.scheduler.capability import DB, Rates
from msvm.scheduler.variants import Variant

SETTINGS = ("kernel_policy", "device", "fallback", "enable_mem_reuse")
INTERPRETED = {"jit": False}  # these tests are about the interpreter's kernel calls, not native code


class Counting:
    """A fake variant whose kernel counts its calls and computes the op's reference result."""

    def __init__(self, op: str, name: str, reference: Callable, *, when=None, dtypes=("float32",),
                 kind: str = "native", device: str = "cpu", delay: float = 0.0) -> None:
        self.calls = 0
        self.name = name
        self.reference = reference
        self.delay = delay
        self.variant = Variant(op, name, self.make, device=device, dtypes=dtypes,
                               when=when or (lambda shapes, attrs: True), constraints=f"test variant {name}",
                               kind=kind,
                               flops=lambda shapes, attrs: 2.0 * np.prod(shapes[0]) * shapes[1][-1],
                               bytes=lambda shapes, attrs: 4.0 * sum(np.prod(s) for s in shapes))

    def make(self, attrs):
        def kernel(*arrays, **dyn):
            self.calls += 1
            if self.delay:
                time.sleep(self.delay)
            return self.reference(*arrays, **{**attrs, **dyn})

        return kernel


def calibrated(op: str, rates: dict[str, tuple[float, float]], device: str = "cpu") -> None:
    """Pretend ``op`` was calibrated: {variant: (GFLOP/s, overhead µs)} — no measurement in tests."""
    DB.record_calibration(device, op, {n: Rates(r, o, "calibrated") for n, (r, o) in rates.items()}, {})


def matmul_program(dtype: str = "float32"):
    """f(a [M, K], b [K, N]) = a @ b, a fresh Program each time."""
    mb = ModuleBuilder("mm")
    f = mb.function("f", ["a", "b"])
    a = f.tensor_input(0, "[M, K]", dtype)
    b = f.tensor_input(1, "[K, N]", dtype)
    f.ret(f.call("matmul", [a, b]))
    return Program(mb.build(), INTERPRETED).function("f")


def matmul_step(fn):
    return next(s for s in fn.steps if s.ins.name == "OP_CALL")


def rand(*shape: int, dtype: str = "float32", seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)
