"""Whole-network interpreted speed (W1, a small ResNet-style CNN) and the scheduler's kernel picks.

``python -m bench network``: the W1 CNN of ``bench.models`` (stem 3→16, three stages 16/32/64 with
a residual block each and stride-2 1×1 projections, BN folded into the convs, global average pool,
linear 10; float32, seeded weights) on 3×64×64 at batch 1, 4, 8 and 16, run by the interpreter
under kernel_policy "reference", "cost" and "autotune", against the same reference kernels called
directly from Python (numpy eager) and PyTorch eager. Medians, ratios, GFLOP/s, the variant each
conv layer ran, and the peak memory of one batch-16 call with and without memory reuse.

``python -m bench.network --ops``: every W1 conv layer (each batch) and a few GEMMs, each
applicable variant measured, the cost model's pick and its distance from the fastest; prints the
share of shapes where the pick is within 10 % of the best (the goal is ≥ 90 %).
"""

from __future__ import annotations

import sys
import tracemalloc
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from msvm.bytecode import ModuleBuilder
from msvm.context import CONTEXT, set_context
from msvm.interpreter import Program
from msvm.interpreter.program import Executable
from msvm.ops.registry import REGISTRY
from msvm.runtime import POOL, memory_stats
from msvm.scheduler.capability import DB, load_variants
from msvm.scheduler.variants import variants_for

from .harness import calibrate_first, fmt_ratio, fmt_time, measure, optional_import, table
from .models import cnn_flops, cnn_params, torch_cnn

BATCHES = (1, 4, 8, 16)
INTERPRETED = {"jit": False}  # this suite measures the interpreter (the JIT has its own suite)
POLICIES = ("reference", "cost", "autotune")


# -- the network, three ways -----------------------------------------------------------------------


Layer = tuple[str, np.ndarray, np.ndarray, int, int, int]


def conv_layers(params: dict[str, Any], size: int = 64) -> list[Layer]:
    """(name, weight, bias, stride, padding, input height = width) of every conv in execution order."""
    layers = [("stem", *params["stem"], 1, 1, size)]
    for i, block in enumerate(params["blocks"], 1):
        s = block["stride"]
        layers.append((f"s{i}.conv1", block["w1"], block["b1"], s, 1, size))
        if "wp" in block:
            layers.append((f"s{i}.proj", block["wp"], block["bp"], s, 0, size))
        size //= s
        layers.append((f"s{i}.conv2", block["w2"], block["b2"], 1, 1, size))
    return layers


def build_cnn(params: dict[str, Any]) -> Executable:
    """W1 as MS-BC (builder API): x [N, 3, 64, 64] → logits [N, 10]."""
    mb = ModuleBuilder("w1")
    f = mb.function("cnn", ["x"])

    def conv(src: int, w: np.ndarray, b: np.ndarray, stride: int, padding: int) -> int:
        attrs = {"stride": (stride, stride), "padding": (padding, padding)}
        return f.call("conv2d", [src, f.load_const(w), f.load_const(b)], attrs)

    def relu(src: int) -> int:
        return f.call("relu", [src])

    y = relu(conv(f.tensor_input(0, "[N, 3, 64, 64]", "float32"), *params["stem"], 1, 1))
    for block in params["blocks"]:
        s = block["stride"]
        h = relu(conv(y, block["w1"], block["b1"], s, 1))
        skip = conv(y, block["wp"], block["bp"], s, 0) if "wp" in block else y
        y = relu(f.call("add", [conv(h, block["w2"], block["b2"], 1, 1), skip]))
    pooled = f.call("mean", [y], {"axis": (2, 3)})
    wf, bf = params["fc"]
    f.ret(f.call("linear", [pooled, f.load_const(wf), f.load_const(bf)]))
    return Program(mb.build(), INTERPRETED).function("cnn")


def numpy_cnn(params: dict[str, Any]) -> Callable[[np.ndarray], np.ndarray]:
    """The same network calling the reference kernels directly (no interpreter)."""
    conv = REGISTRY["conv2d"]
    relu, add, mean, linear = (REGISTRY[n].kernel for n in ("relu", "add", "mean", "linear"))
    attrs = {(s, p): conv.check_attrs({"stride": (s, s), "padding": (p, p)}) for s in (1, 2) for p in (0, 1)}

    def c(x: np.ndarray, w: np.ndarray, b: np.ndarray, s: int, p: int) -> np.ndarray:
        return conv.kernel(x, w, b, **attrs[s, p])

    def run(x: np.ndarray) -> np.ndarray:
        y = relu(c(x, *params["stem"], 1, 1))
        for block in params["blocks"]:
            s = block["stride"]
            h = relu(c(y, block["w1"], block["b1"], s, 1))
            skip = c(y, block["wp"], block["bp"], s, 0) if "wp" in block else y
            y = relu(add(c(h, block["w2"], block["b2"], 1, 1), skip))
        return linear(mean(y, axis=(2, 3)), *params["fc"])

    return run


# -- the network table -----------------------------------------------------------------------------


def conv_choices(fn: Executable) -> list[str]:
    """The variant each conv2d OP_CALL ran last (on this thread)."""
    return [s.choice.variant for s in fn.steps if s.ins.name == "OP_CALL" and s.ins["op"] == "conv2d"]


def peak_memory(fn: Executable, x: np.ndarray, reuse: bool) -> tuple[int, dict[str, Any]]:
    """Peak traced bytes of one warm call (tracemalloc: every numpy buffer) and the pool's counters."""
    set_context(enable_mem_reuse=reuse)
    fn(x)
    fn(x)
    POOL.reset_stats()
    tracemalloc.start()
    try:
        fn(x)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return peak, memory_stats()


def bench_network() -> str:
    torch = optional_import("torch")
    params = cnn_params(0)
    fn = build_cnn(params)
    eager = numpy_cnn(params)
    torch_fn = torch_cnn(params) if torch is not None else None
    rng = np.random.default_rng(0)
    rows, picks = [], {}
    saved = {"kernel_policy": CONTEXT.kernel_policy, "enable_mem_reuse": CONTEXT.enable_mem_reuse}
    try:
        for n in BATCHES:
            x = rng.standard_normal((n, 3, 64, 64)).astype(np.float32)
            expected = eager(x)
            t_np = measure(lambda: eager(x), repeat=5)  # noqa: B023
            times = {}
            for policy in POLICIES:
                set_context(kernel_policy=policy)
                np.testing.assert_allclose(fn(x), expected, rtol=2e-3, atol=2e-3)
                times[policy] = measure(lambda: fn(x), repeat=5)  # noqa: B023
                picks[policy, n] = conv_choices(fn)
            t_torch = None
            if torch_fn is not None:
                tx = torch.from_numpy(x)
                with torch.no_grad():
                    t_torch = measure(lambda: torch_fn(tx), repeat=5)  # noqa: B023
            gflop = cnn_flops(params, x) / 1e9
            rates = [gflop / t for t in (t_np, *times.values(), t_torch) if t]
            rows.append([
                n, f"{gflop:.3f}", fmt_time(t_np), *(fmt_time(times[p]) for p in POLICIES), fmt_time(t_torch),
                " · ".join(f"{r:.0f}" for r in rates), fmt_ratio(t_np / times["cost"]),
                *(fmt_ratio(times[p] / t_torch) if t_torch else "-" for p in ("cost", "autotune")),
            ])
        x16 = rng.standard_normal((16, 3, 64, 64)).astype(np.float32)
        set_context(kernel_policy="cost")
        memory = {reuse: peak_memory(fn, x16, reuse) for reuse in (False, True)}
    finally:
        set_context(**saved)
    header = ["batch", "GFLOP", "numpy eager", *(f"msvm {p}" for p in POLICIES), "torch eager",
              "GFLOP/s (same order)", "numpy ÷ msvm cost", "msvm cost ÷ torch (goal ≤ 2×)",
              "msvm autotune ÷ torch"]
    out = [table("W1 CNN, 3×64×64 float32, interpreted (medians)", header, rows)]
    out.append(_picks_table(params, picks))
    out.append(_memory_table(memory))
    return "\n".join(out)


def _picks_table(params: dict[str, Any], picks: dict[tuple[str, int], list[str]]) -> str:
    names = [layer[0] for layer in conv_layers(params)]
    rows = []
    for i, name in enumerate(names):
        row = [name]
        for policy in ("cost", "autotune"):
            row.append(" / ".join(picks[policy, n][i] for n in BATCHES))
        rows.append(row)
    batches = "/".join(map(str, BATCHES))
    return table(f"Variant per conv layer (batch {batches})", ["layer", "cost", "autotune"], rows)


def _memory_table(memory: dict[bool, tuple[int, dict[str, Any]]]) -> str:
    (peak_off, _), (peak_on, stats) = memory[False], memory[True]
    mib = lambda n: f"{n / 2**20:.1f} MiB"  # noqa: E731
    rows = [
        ["without reuse (enable_mem_reuse=False)", mib(peak_off), "-", "-"],
        ["with reuse (pool + last-use release)", mib(peak_on),
         f"{mib(stats['peak_in_use_bytes'])} / {mib(stats['peak_held_bytes'])}",
         f"{stats['reuses']}/{stats['allocations']}"],
    ]
    return table("Peak memory of one warm batch-16 call (tracemalloc)",
                 ["mode", "peak traced", "pool peak in use / held", "pool reuses/allocations"], rows)


def op_cases(params: dict[str, Any]) -> list[tuple[str, str, tuple[tuple[int, ...], ...], dict[str, Any]]]:
    """(label, op, input shapes, attrs): each W1 conv layer at each batch, W1's linear, a few GEMMs."""
    cases = []
    for n in BATCHES:
        for name, w, b, stride, padding, size in conv_layers(params):
            shapes = ((n, w.shape[1], size, size), w.shape, b.shape)
            attrs = {"stride": (stride, stride), "padding": (padding, padding)}
            kind = f"{w.shape[2]}×{w.shape[3]}/s{stride}"
            cases.append((f"N{n} {name} {w.shape[1]}→{w.shape[0]} {size}² {kind}", "conv2d", shapes, attrs))
        cases.append((f"N{n} fc 64→10", "linear", ((n, 64), (10, 64), (10,)), {}))
    cases += [
        ("matmul 256³", "matmul", ((256, 256), (256, 256)), {}),
        ("matmul 16×16×16", "matmul", ((16, 16), (16, 16)), {}),
        ("matmul batched 64×(32×32)", "matmul", ((64, 32, 32), (64, 32, 32)), {}),
        ("linear B32 512→2048", "linear", ((32, 512), (2048, 512), (2048,)), {}),
        ("linear B256 2048→512", "linear", ((256, 2048), (512, 2048), (512,)), {}),
    ]
    return cases


def single_op(op: str, shapes: Sequence[tuple[int, ...]], attrs: dict[str, Any]) -> Executable:
    mb = ModuleBuilder(op)
    f = mb.function("f", [f"a{i}" for i in range(len(shapes))])
    srcs = [f.tensor_input(i, list(s), "float32") for i, s in enumerate(shapes)]
    f.ret(f.call(op, srcs, attrs))
    return Program(mb.build(), INTERPRETED).function("f")


def bench_ops() -> str:
    load_variants()
    rng = np.random.default_rng(1)
    rows = []
    saved = CONTEXT.kernel_policy
    set_context(kernel_policy="cost")
    cases = op_cases(cnn_params(0))
    try:
        for label, op, shapes, attrs in cases:
            rows.append(_pick_row(label, op, shapes, attrs, rng))
    finally:
        set_context(kernel_policy=saved)
    within = sum(row[5] == "yes" for row in rows)
    header = ["shape", "measured (fastest first)", "best", "cost pick", "pick vs best", "≤ 10 %", "reason"]
    calibration = ", ".join(f"{key} {r.rate_gflops:.0f} GF/s + {r.overhead_us:.0f} µs"
                            for key, r in sorted(DB.device("cpu").calibrated.items()))
    return "\n".join([
        table("Cost-model picks vs measured best (medians)", header, rows),
        f"\ncost model's pick within 10 % of the best on {within}/{len(cases)} shapes = "
        f"{within / len(cases):.0%} (goal ≥ 90 %)",
        f"calibrated (overhead + flops/rate): {calibration}",
    ])


def _pick_row(label: str, op: str, shapes: Sequence[tuple[int, ...]], attrs: dict[str, Any],
              rng: np.random.Generator) -> list[str]:
    """One shape: every candidate measured, and what the dispatcher picked under the cost policy."""
    args = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    timings = measure_candidates(op, args, REGISTRY[op].check_attrs(attrs))
    fn = single_op(op, shapes, attrs)
    fn(*args)
    pick = next(s for s in fn.steps if s.ins.name == "OP_CALL").choice
    best = min(timings, key=timings.__getitem__)
    distance = timings[pick.variant] / timings[best] - 1.0
    measured = " ".join(f"{k} {fmt_time(t)}" for k, t in sorted(timings.items(), key=lambda kv: kv[1]))
    ok = "yes" if distance <= 0.10 else "NO"
    return [label, measured, best, pick.variant, f"{distance * 100:+.0f} %", ok, pick.reason]


def measure_candidates(op: str, args: Sequence[np.ndarray], attrs: dict[str, Any]) -> dict[str, float]:
    """Median seconds of every applicable variant of ``op`` and of its reference kernel."""
    shapes = tuple(a.shape for a in args)
    timings = {v.name: measure(_call(v.make(attrs), args), repeat=5, min_time=0.02)
               for v in variants_for(op, "cpu", "float32") if v.when(shapes, attrs)}
    timings["reference"] = measure(_call(REGISTRY[op].kernel, args, attrs), repeat=5, min_time=0.02)
    return timings


def _call(kernel: Callable[..., Any], args: Sequence[np.ndarray], attrs: dict[str, Any] | None = None):
    return lambda: kernel(*args, **(attrs or {}))


def machine_line() -> str:
    """What the numbers depend on: CPU, cores, the BLAS GEMM the native variants call, torch's threads."""
    from msvm.native import blas, host

    torch = optional_import("torch")
    gemm = blas.best_sgemm()
    threads = "no torch" if torch is None else f"torch {torch.__version__}, {torch.get_num_threads()} threads"
    return (f"machine: {host.cpu()['name']}, {host.cores()['usable']} usable cores; native variants' sgemm: "
            f"{gemm.name if gemm else 'none'}; {threads}")


def main(argv: Sequence[str] = ()) -> None:
    print(f"cost model: {calibrate_first()}")
    print(machine_line())
    if "--ops" in argv:
        print(bench_ops())
    else:
        print(bench_network())


if __name__ == "__main__":
    main(sys.argv[1:])
