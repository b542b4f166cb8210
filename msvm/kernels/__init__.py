"""Fast kernel variants for conv2d, matmul, linear, attention, layer_norm, softmax and the transcendental
elementwise ops; importing this package registers them.

Each variant is one row below: its ``when`` predicate and ``constraints`` say where it applies,
``flops``/``bytes`` feed the scheduler's cost model, ``workspace`` is the scratch memory a call takes
(checked against ``max_tensor_bytes`` before it is chosen), and ``make(attrs)`` returns a kernel with
the reference kernel's signature and results (tests check every variant against the reference).
``REFERENCE_WORKSPACE`` gives the reference kernels' own, where they need one.
Outside its ``when`` a kernel delegates to the reference, so a variant bound once for a symbolic
shape stays correct for every concrete shape.

Native code is generated once per process per (variant, dtype, specialisation) with all sizes as
run-time arguments (``native.compiled_libraries()`` lists what was compiled). Importing this
package compiles nothing and does not import llvmlite's binding; the first call of a kernel does.

Threading: the direct kernels (nchwc_direct, depthwise) and the ``pool`` GEMMs of linear and
attention split their work in chunks over ``threads.POOL`` (the calling thread plus helpers, GIL
released); the BLAS variants use the BLAS's own threads. On this shared 2-core machine OpenBLAS's
threads collapse when another process holds a core (see ``threads``) — the capability database
should measure under real load.
"""

from __future__ import annotations

from ..scheduler.variants import REFERENCE_WORKSPACE, Variant, register_variant
from . import attention, conv_depthwise, conv_gemm, conv_nchwc, conv_winograd, gemm_packed, matmul, rows
from .conv_common import conv_bytes, conv_flops, reference_workspace
from .elementwise import VARIANTS as ELEMENTWISE_VARIANTS  # noqa: F401  (importing registers them)

FLOATS = ("float32", "float64")

VARIANTS = (
    Variant("conv2d", "nchwc_direct", conv_nchwc.make, dtypes=FLOATS, when=conv_nchwc.applies,
            constraints="any stride, dilation and padding; each group has >= 8 output channels "
                        "(blocks of 8 float32 / 4 float64 channels, padded)",
            kind="native", flops=conv_flops, bytes=conv_bytes, workspace=conv_nchwc.workspace),
    Variant("conv2d", "im2col_gemm", conv_gemm.make_im2col, dtypes=FLOATS, when=conv_gemm.applies_im2col,
            constraints="any conv2d; needs a BLAS ?gemm", kind="blas", flops=conv_flops, bytes=conv_bytes,
            workspace=conv_gemm.workspace_im2col),
    Variant("conv2d", "direct_1x1", conv_gemm.make_1x1, dtypes=FLOATS, when=conv_gemm.applies_1x1,
            constraints="1x1 kernel, no padding, any stride/groups (stride > 1 gathers the input); "
                        "needs BLAS",
            kind="blas", flops=conv_flops, bytes=conv_bytes, workspace=conv_gemm.workspace_1x1),
    Variant("conv2d", "winograd_f2x3", conv_winograd.make, dtypes=FLOATS, when=conv_winograd.applies,
            constraints="3x3 kernel, stride 1, dilation 1, groups 1, any padding; needs BLAS",
            kind="blas", flops=conv_flops, bytes=conv_bytes, workspace=conv_winograd.workspace),
    Variant("conv2d", "depthwise", conv_depthwise.make, dtypes=FLOATS, when=conv_depthwise.applies,
            constraints="groups == C_in == C_out; any kernel size, stride, dilation and padding",
            kind="native", flops=conv_flops, bytes=conv_bytes),
    Variant("matmul", "blas", matmul.make_matmul_blas, dtypes=FLOATS, when=matmul.applies_matmul_blas,
            constraints="same float dtype; numpy matmul semantics (1-D operands, broadcast batch); "
                        "needs BLAS",
            kind="blas", flops=matmul.matmul_flops, bytes=matmul.matmul_bytes),
    Variant("matmul", "small", matmul.make_matmul_small, dtypes=FLOATS, when=matmul.applies_matmul_small,
            constraints=f"M, N, K <= {matmul.SMALL_MAX_DIM}; any batch", kind="native",
            flops=matmul.matmul_flops, bytes=matmul.matmul_bytes),
    Variant("linear", "blas", matmul.make_linear_blas, dtypes=FLOATS, when=matmul.applies_linear_blas,
            constraints="same float dtype; 2-D weight, bias of <= 1 dim; needs BLAS", kind="blas",
            flops=matmul.linear_flops, bytes=matmul.linear_bytes),
    Variant("linear", "small", matmul.make_linear_small, dtypes=FLOATS, when=matmul.applies_linear_small,
            constraints=f"rows, out and in features <= {matmul.SMALL_MAX_DIM}", kind="native",
            flops=matmul.linear_flops, bytes=matmul.linear_bytes),
    Variant("linear", "pool", gemm_packed.make_linear, dtypes=FLOATS, when=gemm_packed.applies_linear,
            constraints="2-D weight, bias absent or 1-D [out]; a constant weight is packed once",
            kind="native", flops=matmul.linear_flops, bytes=matmul.linear_bytes),
    Variant("scaled_dot_product_attention", "pool", attention.make, dtypes=FLOATS, when=attention.applies,
            constraints="q, k, v with the same batch dims; no explicit attn_mask (is_causal is fine)",
            kind="native", flops=attention.flops, bytes=attention.nbytes, workspace=attention.workspace),
    *rows.VARIANTS,
)

for _variant in VARIANTS:
    register_variant(_variant)
REFERENCE_WORKSPACE.update({"conv2d": reference_workspace,
                            "scaled_dot_product_attention": attention.reference_workspace})

__all__ = ["VARIANTS"]
