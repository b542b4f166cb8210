"""IR building blocks that need more than a compile to trust: non-temporal streaming copies."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from llvmlite import ir

from msvm.native.irhelpers import F32, F64, I64, define, stream_copy
from msvm.native.llvm import compile_ir


@pytest.mark.parametrize("elem", [F32, F64])
def test_stream_copy_at_every_alignment_and_length(elem: ir.Type) -> None:
    module = ir.Module("stream")
    ptr = elem.as_pointer()
    _, b, args = define(
        module, "copy", ir.VoidType(), [("dst", ptr), ("src", ptr), ("n", I64)], noalias=("dst", "src")
    )
    stream_copy(b, args["dst"], args["src"], args["n"])
    b.fence("seq_cst")
    b.ret_void()
    lib = compile_ir(str(module), "stream")
    assert "vmovntp" in lib.asm  # the aligned middle is streamed
    copy = lib.ctypes_function("copy", None, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64])
    dtype = np.float32 if elem == F32 else np.float64
    src = np.arange(200, dtype=dtype)
    for offset in range(9):  # the destination starts at every position relative to a 32-byte boundary
        for n in (0, 1, 3, 7, 8, 9, 31, 64, 100, 150):
            dst = np.full(210, -1, dtype)
            copy(dst[offset:].ctypes.data, src.ctypes.data, n)
            assert np.array_equal(dst[offset : offset + n], src[:n]) and np.all(dst[:offset] == -1)
            assert np.all(dst[offset + n :] == -1), (offset, n)
