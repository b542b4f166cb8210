"""The MS-JIT code generator: fused kernels against numpy/torch, launch cost, GEMM efficiency, compile time.

* W5-like: ``layer_norm(gelu(x*a+b)+x)`` on 4096×1024 float32 — GB/s of compulsory traffic (read x,
  write y: 32 MiB); goal ≥ 16 GB/s (one fused pass);
* W6-like: a chain of 200 elementwise ops on 8×8, one region — µs per call including the Python
  launcher; goal ≤ 5 µs (and the bare builtin call of the native entry for reference);
* W2-like MLP 1024→4096 GELU→1024 + residual + LayerNorm at 256 rows — time against the two bare
  sgemm calls of the same shapes (the GEMM "peak" for this workload, though the region multiplies on
  the job pool by its weights packed once; NN, by the weights' row-major transposes, and NT, the
  weights as they lie); goal ≥ 90 %;
* W3-like pre-LN transformer encoder layer (d 256, 4 heads, FFN 1024) at 128 rows — time against
  its compute roofline (the sgemm peak of a 2048³ product, measured now) and its bare sgemm calls;
  goal ≤ 1.3 × the roofline;
* compile time per region, by phase (lower, optimise, codegen, load); goal ≤ 150 ms median;
* interpreted calls while regions compile in the background: the W1 CNN at batch 4 alone, while
  the W3 region is compiled over and over with its lowering in the compile worker (what the JIT
  does), and while it is lowered over and over in this process (what every compile began with
  before: 20–50 ms of Python holding the GIL beside the calls, which wait for it at every native
  kernel).

Run: ``python -m bench.codegen``.
"""

from __future__ import annotations

import statistics
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from msvm.bytecode import ModuleBuilder
from msvm.interpreter import Program
from msvm.msjit.codegen import CompiledRegion, compile_region, lower
from msvm.msjit.codegen.launcher import builtin
from msvm.native.blas import best_sgemm
from msvm.native.worker import CompileWorker

from .harness import fmt_ratio, fmt_time, measure, optional_import, table
from .interpreter import chain_module


def w5_module(rows: int = 4096, cols: int = 1024):
    rng = np.random.default_rng(0)
    mb = ModuleBuilder("w5")
    f = mb.function("f", ["x"])
    x = f.tensor_input(0, f"[{rows}, {cols}]", "float32")
    a, b, w, c = (f.load_const(rng.standard_normal(cols).astype(np.float32)) for _ in range(4))
    h = f.call("add", [f.call("gelu", [f.call("add", [f.call("mul", [x, a]), b])]), x])
    f.ret(f.call("layer_norm", [h, w, c], {"normalized_shape": (cols,)}))
    return mb.build()


def w6_module(n_ops: int = 200):
    """W6: the interpreter suite's chain of binary ops, on static 8×8 tensors."""
    return chain_module(n_ops, "[8, 8]")


def w6_shared_module(steps: int = 50):
    """The workload's own W6: ``x = maximum(x*c + 0.1, x - 0.05)``, each step reading ``x`` twice."""
    rng = np.random.default_rng(0)
    mb = ModuleBuilder("w6_shared")
    f = mb.function("f", ["x"])
    x = f.tensor_input(0, "[8, 8]", "float32")
    for _ in range(steps):
        c = f.load_const((rng.standard_normal((8, 8)) * 0.1 + 0.95).astype(np.float32))
        scaled = f.call("add", [f.call("mul", [x, c]), f.load_const(np.float32(0.1))])
        x = f.call("maximum", [scaled, f.call("sub", [x, f.load_const(np.float32(0.05))])])
    f.ret(x)
    return mb.build()


def w2_module(rows: int = 256, dim: int = 1024, hidden: int = 4096):
    rng = np.random.default_rng(0)
    mb = ModuleBuilder("w2")
    f = mb.function("f", ["x"])
    x = f.tensor_input(0, f"[{rows}, {dim}]", "float32")
    w1 = f.load_const((rng.standard_normal((hidden, dim)) / np.sqrt(dim)).astype(np.float32))
    b1 = f.load_const(rng.standard_normal(hidden).astype(np.float32) * 0.1)
    w2 = f.load_const((rng.standard_normal((dim, hidden)) / np.sqrt(hidden)).astype(np.float32))
    b2 = f.load_const(rng.standard_normal(dim).astype(np.float32) * 0.1)
    h = f.call("gelu", [f.call("linear", [x, w1, b1])])
    y = f.call("add", [f.call("linear", [h, w2, b2]), x])
    f.ret(f.call("layer_norm", [y], {"normalized_shape": (dim,)}))
    return mb.build(), [mb.module.constants[i] for i in range(4)]


def encoder_module(rows: int = 128, d: int = 256, heads: int = 4, ffn: int = 1024):
    """``bench.models``' W3 encoder layer as one straight-line function of ``[rows, d]``."""
    rng = np.random.default_rng(0)
    mb = ModuleBuilder("w3")
    f = mb.function("f", ["x"])
    x = f.tensor_input(0, f"[{rows}, {d}]", "float32")

    def weight(*shape: int) -> int:
        return f.load_const((rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32))

    def norm(v: int) -> int:
        return f.call("layer_norm", [v, weight(d), weight(d)], {"normalized_shape": (d,)})

    qkv = f.call("linear", [norm(x), weight(3 * d, d), weight(3 * d)])
    parts = []
    for i in range(3):
        part = f.call("slice", [qkv], {"axes": (1,), "starts": (i * d,), "stops": ((i + 1) * d,)})
        split = f.call("reshape", [part], {"shape": (-1, heads, d // heads)})
        parts.append(f.call("transpose", [split], {"axes": (1, 0, 2)}))
    a = f.call("scaled_dot_product_attention", parts)
    a = f.call("reshape", [f.call("transpose", [a], {"axes": (1, 0, 2)})], {"shape": (-1, d)})
    x = f.call("add", [x, f.call("linear", [a, weight(d, d), weight(d)])])
    h = f.call("gelu", [f.call("linear", [norm(x), weight(ffn, d), weight(ffn)])])
    f.ret(f.call("add", [x, f.call("linear", [h, weight(d, ffn), weight(d)])]))
    return mb.build()


def encoder_gemms(rows: int = 128, d: int = 256, heads: int = 4, ffn: int = 1024) -> list[tuple[int, ...]]:
    """(M, N, K, batch) of every GEMM in ``encoder_module``."""
    hd = d // heads
    attention = [(rows, rows, hd, heads), (rows, hd, rows, heads)]
    return [(rows, 3 * d, d, 1), *attention, (rows, d, d, 1), (rows, ffn, d, 1), (rows, d, ffn, 1)]


def softmax_module():
    mb = ModuleBuilder("attn")
    f = mb.function("f", ["q", "k", "v"])
    q, k, v = (f.tensor_input(i, "[8, 128, 64]", "float32") for i in range(3))
    f.ret(f.call("scaled_dot_product_attention", [q, k, v], {"is_causal": True}))
    return mb.build()


def conv_module():
    rng = np.random.default_rng(0)
    mb = ModuleBuilder("conv")
    f = mb.function("f", ["x"])
    x = f.tensor_input(0, "[1, 32, 56, 56]", "float32")
    w = f.load_const((rng.standard_normal((32, 32, 3, 3)) * 0.1).astype(np.float32))
    b = f.load_const(rng.standard_normal(32).astype(np.float32))
    y = f.call("relu", [f.call("conv2d", [x, w, b], {"padding": 1})])
    f.ret(
        f.call(
            "add",
            [f.call("max_pool2d", [y], {"kernel_size": 2}), f.call("max_pool2d", [x], {"kernel_size": 2})],
        )
    )
    return mb.build()


def _interp(module) -> Callable[..., Any]:
    return Program(module).function("f")


def bench_w5(rows: list) -> CompiledRegion:
    m = w5_module()
    r = compile_region(m, "f")
    x = np.random.default_rng(1).standard_normal((4096, 1024)).astype(np.float32)
    np.testing.assert_allclose(r.fn(x), _interp(m)(x), rtol=1e-3, atol=1e-4)
    native = measure(lambda: r.fn(x), repeat=7, min_time=0.3)
    traffic = 2 * x.nbytes
    rows.append(
        [
            "W5 layer_norm(gelu(x*a+b)+x) 4096×1024",
            "compiled region",
            fmt_time(native),
            f"{traffic / native / 1e9:.1f} GB/s",
            "goal ≥ 16 GB/s",
        ]
    )
    interp = measure(lambda: _interp(m)(x), repeat=3, min_time=0.3)
    rows.append(
        [
            "",
            "interpreter (numpy reference kernels)",
            fmt_time(interp),
            f"{traffic / interp / 1e9:.1f} GB/s",
            fmt_ratio(interp / native),
        ]
    )
    torch = optional_import("torch")
    if torch is not None:
        tx = torch.from_numpy(x)
        ta, tb, tw, tc = (torch.from_numpy(np.asarray(c)) for c in m.constants[:4])
        fn = torch.nn.functional

        def run() -> Any:
            with torch.no_grad():
                h = fn.gelu(tx * ta + tb) + tx
                return fn.layer_norm(h, (1024,), tw, tc)

        t = measure(run, repeat=5, min_time=0.3)
        rows.append(
            [
                "",
                f"torch {torch.__version__} eager ({torch.get_num_threads()} threads)",
                fmt_time(t),
                f"{traffic / t / 1e9:.1f} GB/s",
                fmt_ratio(t / native),
            ]
        )
    return r


def bench_w6(rows: list) -> CompiledRegion:
    m = w6_module()
    r = compile_region(m, "f")
    rng = np.random.default_rng(2)
    x, y = rng.random((8, 8), np.float32), rng.random((8, 8), np.float32)
    np.testing.assert_allclose(r.fn(x, y), _interp(m)(x, y), rtol=1e-4)
    call = measure(lambda: r.fn(x, y), repeat=9, min_time=0.1)
    rows.append(
        ["W6 200-op chain 8×8", "compiled region (launcher + native)", fmt_time(call), "", "goal ≤ 5 µs"]
    )
    raw, _definition = builtin(r.library.address(r.lowered.entry + "_fast"), "w6")
    out, no_arena = np.empty((8, 8), np.float32), np.empty(0, np.uint8)
    bare = measure(lambda: raw(x, y, out, no_arena), repeat=9, min_time=0.1)
    rows.append(
        ["", "bare builtin call of the native entry", fmt_time(bare), "", f"launcher {fmt_time(call - bare)}"]
    )
    ufuncs = [np.add, np.multiply, np.subtract, np.maximum]

    def numpy_chain() -> np.ndarray:
        v = x
        for i in range(200):
            v = ufuncs[i % 4](v, y)
        return v

    t = measure(numpy_chain, repeat=5, min_time=0.1)
    rows.append(["", "numpy (200 ufunc calls)", fmt_time(t), "", fmt_ratio(t / call)])
    t = measure(lambda: _interp(m)(x, y), repeat=5, min_time=0.1)
    rows.append(["", "interpreter", fmt_time(t), "", fmt_ratio(t / call)])
    return r


def bench_w2(rows: list) -> CompiledRegion:
    m, (w1, b1, w2, b2) = w2_module()
    r = compile_region(m, "f", mem_optimize=True)
    x = np.random.default_rng(3).standard_normal((256, 1024)).astype(np.float32)
    np.testing.assert_allclose(r.fn(x), _interp(m)(x), rtol=1e-3, atol=2e-3)
    native = measure(lambda: r.fn(x), repeat=7, min_time=0.5)
    entry = best_sgemm()
    h, y = np.empty((256, 4096), np.float32), np.empty((256, 1024), np.float32)
    w1t, w2t = np.ascontiguousarray(w1.T), np.ascontiguousarray(w2.T)

    def gemms() -> None:  # by the weights' row-major transposes (NN): OpenBLAS's faster form
        entry.gemm(x, w1t, h)
        entry.gemm(h, w2t, y)

    def gemms_nt() -> None:  # by the [out, in] weights as they lie, a transpose flag each (NT)
        entry.gemm(x, w1, h, trans_b=True)
        entry.gemm(h, w2, y, trans_b=True)

    # in turns: the two layouts are a few percent apart, less than this machine drifts in a second
    turns = [[measure(f, repeat=3, min_time=0.2) for f in (gemms, gemms_nt)] for _ in range(5)]
    peak, peak_nt = (statistics.median(t[i] for t in turns) for i in (0, 1))
    flops = 2 * 2 * 256 * 1024 * 4096
    rows.append(
        [
            "W2 MLP 256×1024→4096→1024 +res+LN",
            "compiled region",
            fmt_time(native),
            f"{flops / native / 1e9:.0f} GFLOP/s",
            f"{peak / native:.0%} of sgemm peak (goal ≥ 90 %)",
        ]
    )
    rows.append(
        [
            "",
            f"the two bare sgemm calls, NN ({entry.name})",
            fmt_time(peak),
            f"{flops / peak / 1e9:.0f} GFLOP/s",
            "",
        ]
    )
    rows.append(
        [
            "",
            "the same calls NT (the weights as they lie)",
            fmt_time(peak_nt),
            f"{flops / peak_nt / 1e9:.0f} GFLOP/s",
            fmt_ratio(peak_nt / peak),
        ]
    )
    torch = optional_import("torch")
    if torch is not None:
        tx, tw1, tb1, tw2, tb2 = (torch.from_numpy(np.asarray(a)) for a in (x, w1, b1, w2, b2))
        fn = torch.nn.functional

        def run() -> Any:
            with torch.no_grad():
                z = fn.linear(fn.gelu(fn.linear(tx, tw1, tb1)), tw2, tb2) + tx
                return fn.layer_norm(z, (1024,))

        t = measure(run, repeat=5, min_time=0.5)
        rows.append(
            [
                "",
                f"torch {torch.__version__} eager",
                fmt_time(t),
                f"{flops / t / 1e9:.0f} GFLOP/s",
                fmt_ratio(t / native),
            ]
        )
    t = measure(lambda: _interp(m)(x), repeat=3, min_time=0.5)
    rows.append(["", "interpreter", fmt_time(t), f"{flops / t / 1e9:.0f} GFLOP/s", fmt_ratio(t / native)])
    return r


def sgemm_peak() -> float:
    """GFLOP/s of numpy's float32 2048³ product (the workloads suite's peak), measured now."""
    a = np.random.default_rng(0).random((2048, 2048), dtype=np.float32)
    return 2 * 2048**3 / measure(lambda: a @ a, repeat=3, min_time=0.2) / 1e9


def bench_w3(rows: list) -> CompiledRegion:
    m = encoder_module()
    r = compile_region(m, "f", mem_optimize=True)
    x = np.random.default_rng(4).standard_normal((128, 256)).astype(np.float32)
    np.testing.assert_allclose(r.fn(x), _interp(m)(x), rtol=1e-3, atol=1e-3)
    entry = best_sgemm()
    shapes = encoder_gemms()
    rng = np.random.default_rng(5)
    operands = [
        [(rng.random((mm, k), np.float32), rng.random((n, k), np.float32), np.empty((mm, n), np.float32))] * b
        for mm, n, k, b in shapes
    ]

    def gemms() -> None:
        for batch in operands:
            for a, w, c in batch:
                entry.gemm(a, w, c, trans_b=True)

    flops = sum(2 * mm * n * k * b for mm, n, k, b in shapes)
    native, bare = (measure(fn, repeat=9, min_time=0.2) for fn in (lambda: r.fn(x), gemms))
    roofline = flops / (sgemm_peak() * 1e9)
    rows.append(
        [
            "W3 encoder layer 128×256 (d 256, 4 heads, FFN 1024)",
            "compiled region",
            fmt_time(native),
            f"{flops / native / 1e9:.0f} GFLOP/s",
            f"{native / roofline:.2f}× the compute roofline {fmt_time(roofline)} (goal ≤ 1.3×)",
        ]
    )
    rows.append(["", f"its bare sgemm calls ({entry.name})", fmt_time(bare), "", fmt_ratio(bare / roofline)])
    return r


def bench_compile(regions: dict[str, CompiledRegion]) -> list[list[str]]:
    """Compile each region a few more times: median ms per phase and in total."""
    builders = {
        "W5": lambda: (w5_module(), {}),
        "W6": lambda: (w6_module(), {}),
        "W6 (x read twice a step)": lambda: (w6_shared_module(), {}),
        "W2": lambda: (w2_module()[0], {"mem_optimize": True}),
        "W3 encoder": lambda: (encoder_module(), {"mem_optimize": True}),
        "attention": lambda: (softmax_module(), {}),
        "conv+pool": lambda: (conv_module(), {}),
    }
    out, totals = [], []
    for name, build in builders.items():
        module, kw = build()
        samples = [compile_region(module, "f", **kw) for _ in range(3)]
        phases = {k: statistics.median(s.phase_ms[k] for s in samples) for k in samples[0].phase_ms}
        total = statistics.median(sum(s.phase_ms.values()) for s in samples)
        totals.append(total)
        last = samples[-1]
        out.append(
            [
                name,
                f"{len(last.lowered.kernels)}",
                *(f"{phases[k]:.0f}" for k in ("lower", "optimise", "codegen", "load")),
                f"{total:.0f}",
                f"{last.code_bytes}",
            ]
        )
    out.append(["median", "", "", "", "", "", f"{statistics.median(totals):.0f}", ""])
    return out


def bench_interference() -> list[list[str]]:
    """Rows: how interpreted calls fare while compiles run beside them (see the module docstring)."""
    from .models import cnn_params, make_cnn

    cnn = make_cnn(cnn_params(), hot_threshold=1 << 30)
    x = np.random.default_rng(0).standard_normal((4, 3, 64, 64)).astype(np.float32)
    module = encoder_module()
    worker = CompileWorker(idle=True)  # as the JIT's

    def lowered_there() -> None:
        compile_region(module, "f", via_worker=worker)

    def lowered_here() -> None:  # the Python half only: the LLVM half ran in the worker before too
        lower(module, "f")

    alone = measure(lambda: cnn(x), repeat=9, min_time=0.1)
    rows = [["nothing compiling", fmt_time(alone), "1.00×", "-"]]
    compiles = (("compiles, lowered in the compile worker (now)", lowered_there),
                ("lowerings in this process (before: each compile's first 20-50 ms)", lowered_here))
    try:
        for label, compile_once in compiles:
            compile_once()  # the worker has imported and warmed up
            stop, done = threading.Event(), [0]

            def loop(compile_once=compile_once, stop=stop, done=done) -> None:
                while not stop.is_set():
                    compile_once()
                    done[0] += 1

            thread = threading.Thread(target=loop, daemon=True)
            thread.start()
            try:
                during = measure(lambda: cnn(x), repeat=9, min_time=0.1)
            finally:
                stop.set()
                thread.join()
            rows.append([label, fmt_time(during), fmt_ratio(during / alone), str(done[0])])
    finally:
        worker.close()
    return rows


def main() -> None:
    print(table("interpreted W1 CNN calls (batch 4) while W3's region compiles in the background",
                ["compiles", "call (median)", "÷ nothing compiling", "compiles done meanwhile"],
                bench_interference()))
    rows: list[list[str]] = []
    regions = {"W5": bench_w5(rows), "W6": bench_w6(rows), "W2": bench_w2(rows), "W3": bench_w3(rows)}
    title = ("MS-JIT generated code, compiled directly (the code's own speed; what a loop that never waits "
             "sees: `python -m bench delivery`)")
    print(table(title, ["workload", "variant", "time", "throughput", "vs / goal"], rows))
    for name, r in regions.items():
        print(f"\n{name} kernels: " + "; ".join(r.lowered.kernels))
    print(
        table(
            "compile time per region, nothing else running (ms, median of 3; goal ≤ 150 ms)",
            ["region", "kernels", "lower", "optimise", "codegen", "load", "total", "code bytes"],
            bench_compile(regions),
        )
    )


if __name__ == "__main__":
    main()
