"""Shared IR for the native tests: a saxpy loop, and a check that compiled code computes it."""

from __future__ import annotations

import ctypes

import numpy as np

from msvm.native.llvm import NativeLibrary

SAXPY = r"""
define void @saxpy(float* noalias %x, float* noalias %y, i64 %n, float %a) {
entry:
  %empty = icmp sle i64 %n, 0
  br i1 %empty, label %exit, label %loop
loop:
  %i = phi i64 [0, %entry], [%i1, %loop]
  %px = getelementptr inbounds float, float* %x, i64 %i
  %py = getelementptr inbounds float, float* %y, i64 %i
  %vx = load float, float* %px
  %vy = load float, float* %py
  %m = fmul contract float %vx, %a
  %s = fadd contract float %m, %vy
  store float %s, float* %py
  %i1 = add nsw i64 %i, 1
  %c = icmp slt i64 %i1, %n
  br i1 %c, label %loop, label %exit
exit:
  ret void
}
"""
ARGS = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_float]


def run_saxpy(lib: NativeLibrary) -> None:
    fn = lib.ctypes_function("saxpy", None, ARGS)
    x = np.arange(37, dtype=np.float32)
    y = np.ones(37, np.float32)
    fn(x.ctypes.data, y.ctypes.data, x.size, 2.0)
    np.testing.assert_array_equal(y, 2 * np.arange(37, dtype=np.float32) + 1)
