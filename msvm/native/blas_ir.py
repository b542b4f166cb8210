"""Calling a BLAS ?gemm entry point from generated code, whatever its ABI.

Generated code receives the entry's address as an ``i64`` argument (so one compiled kernel serves
whichever entry ``blas.best_gemm`` picks at run time, as long as the ABI matches — the ABI is part
of the kernel's cache key: ``abi_key(entry)``). ``emit_gemm`` emits a row-major
``C = alpha·op(A)·op(B) + beta·C``: for a CBLAS entry a direct call; for a Fortran
(column-major) entry the transposed product with every argument passed by reference.
"""

from __future__ import annotations

from llvmlite import ir

from .blas import CBLAS_NO_TRANS, CBLAS_ROW_MAJOR, CBLAS_TRANS, GemmEntry
from .irhelpers import F32, F64, I8, I32, I64, VOID, Slot


def abi_key(entry: GemmEntry) -> str:
    """What generated code depends on: ABI, integer width and dtype (e.g. ``cblas64_float32``)."""
    return f"{entry.abi}{entry.int_bits}_{entry.dtype}"


def emit_gemm(builder: ir.IRBuilder, entry: GemmEntry, address: ir.Value, *, trans_a: bool | ir.Value,
              trans_b: bool | ir.Value,
              m: ir.Value, n: ir.Value, k: ir.Value, alpha: float, a: ir.Value, lda: ir.Value, b: ir.Value,
              ldb: ir.Value, beta: float | ir.Value, c: ir.Value, ldc: ir.Value) -> None:
    """Emit ``C[m×n] = alpha·op(A)·op(B) + beta·C`` (row-major, i64 sizes, element pointers).

    ``trans_a``/``trans_b`` are Python bools or i1 values known only at run time.
    """
    ft = F32 if entry.dtype == "float32" else F64
    it = I32 if entry.int_bits == 32 else I64
    ptr = ft.as_pointer()
    alpha_v = ir.Constant(ft, alpha)
    beta_v = beta if isinstance(beta, ir.Value) else ir.Constant(ft, beta)

    def size(v: ir.Value) -> ir.Value:
        return builder.trunc(v, it) if it is I32 else v

    if entry.abi == "cblas":
        fnty = ir.FunctionType(VOID, [I32, I32, I32, it, it, it, ft, ptr, it, ptr, it, ft, ptr, it])
        fn = builder.inttoptr(address, fnty.as_pointer())
        def enum(t: bool | ir.Value) -> ir.Value:
            if isinstance(t, ir.Value):
                return builder.select(t, ir.Constant(I32, CBLAS_TRANS), ir.Constant(I32, CBLAS_NO_TRANS))
            return ir.Constant(I32, CBLAS_TRANS if t else CBLAS_NO_TRANS)

        builder.call(fn, [ir.Constant(I32, CBLAS_ROW_MAJOR), enum(trans_a), enum(trans_b), size(m), size(n),
                          size(k), alpha_v, a, size(lda), b, size(ldb), beta_v, c, size(ldc)])
        return
    # Fortran, column-major: C^T = op(B)^T · op(A)^T, every argument by reference.
    ip, cp, fpp = it.as_pointer(), I8.as_pointer(), ft.as_pointer()
    fnty = ir.FunctionType(VOID, [cp, cp, ip, ip, ip, fpp, ptr, ip, ptr, ip, fpp, ptr, ip])
    fn = builder.inttoptr(address, fnty.as_pointer())

    def ref(typ: ir.Type, value: ir.Value) -> ir.Value:
        return Slot(builder, typ, value).ptr

    def char(t: bool | ir.Value) -> ir.Value:
        if isinstance(t, ir.Value):
            return builder.select(t, ir.Constant(I8, ord("T")), ir.Constant(I8, ord("N")))
        return ir.Constant(I8, ord("T" if t else "N"))

    ta, tb = ref(I8, char(trans_b)), ref(I8, char(trans_a))
    builder.call(fn, [ta, tb, ref(it, size(n)), ref(it, size(m)), ref(it, size(k)), ref(ft, alpha_v), b,
                      ref(it, size(ldb)), a, ref(it, size(lda)), ref(ft, beta_v), c, ref(it, size(ldc))])
