"""The attention suite: W3's encoder layer as people write it against the fused op and onnxruntime.

Engines, each timed in fresh processes (``python -m bench.attention --child SPEC``, one JSON line
back) whose loops never wait for compiles: ``plain`` — the layer with attention spelled out
(``q @ kᵀ``, a scale, ``softmax``, ``@ v``, heads made by ``reshape`` and ``transpose``), which msvm's
pattern rewrite turns into the fused op; ``plain, rewrite off`` — the same with ``rewrite=False``;
``fused`` — bench.models' W3, calling ``ms.ops.scaled_dot_product_attention``; ``msvm onnx`` and
``onnxruntime`` — the torch layer exported to ONNX (TorchScript exporter, dynamic L) run by
``ms.onnx.load`` and by onnxruntime. Steady = median of a loop's last quarter of calls; the table has
medians over rounds and each engine's ratio to onnxruntime, all from one run.

Run: ``python -m bench attention`` or ``python -m bench.attention [--lengths 16,128] [--rounds N]
[--quick]``. The ONNX engines need torch, onnx and onnxruntime.
"""

# ms.Tensor["N", 3] reads to linters as string forward references: F821 is noise here. No
# `from __future__ import annotations` either: with it, ruff's UP037 "fix" unquotes the symbols.
# ruff: noqa: F821

import argparse
import importlib.util
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from . import harness
from .harness import fmt_ratio, fmt_time, table
from .models import encoder_params
from .onnx import STEADY_SHARE

ENGINES = ("plain", "plain, rewrite off", "fused", "msvm onnx", "onnxruntime")
ONNX_ENGINES = ("msvm onnx", "onnxruntime")
LENGTHS, QUICK_LENGTHS = (16, 128, 256), (16, 128)
ROUNDS, QUICK_ROUNDS = 3, 1
LOOP_S, QUICK_LOOP_S = 6.0, 1.5
CHILD_SLACK_S = 240.0


def make_plain_encoder(p: dict[str, np.ndarray], **options: Any):
    """W3 with its attention written out, the way people (and torch.onnx) write it."""
    import msvm as ms

    g1, be1, wqkv, bqkv, wo, bo = p["g1"], p["be1"], p["wqkv"], p["bqkv"], p["wo"], p["bo"]
    g2, be2, w1, b1, w2, b2 = p["g2"], p["be2"], p["w1"], p["b1"], p["w2"], p["b2"]

    @ms.jit(**options)
    def plain_encoder(x: ms.Tensor["L", 256]):
        h = ms.ops.layer_norm(x, (256,), g1, be1)
        qkv = ms.ops.linear(h, wqkv, bqkv)
        q = qkv[:, 0:256].reshape(-1, 4, 64).transpose(1, 0, 2)
        k = qkv[:, 256:512].reshape(-1, 4, 64).transpose(1, 0, 2)
        v = qkv[:, 512:768].reshape(-1, 4, 64).transpose(1, 0, 2)
        scores = ms.ops.matmul(q, k.transpose(0, 2, 1)) * 0.125
        a = ms.ops.matmul(ms.ops.softmax(scores, -1), v).transpose(1, 0, 2).reshape(-1, 256)
        x = x + ms.ops.linear(a, wo, bo)
        h = ms.ops.layer_norm(x, (256,), g2, be2)
        return x + ms.ops.linear(ms.ops.gelu(ms.ops.linear(h, w1, b1)), w2, b2)

    return plain_encoder


def export_encoder(path: Path) -> Path:
    """The same layer in torch, attention written out, exported to ONNX with a dynamic length."""
    import torch
    import torch.nn.functional as F

    t = {k: torch.from_numpy(v) for k, v in encoder_params().items()}

    class Encoder(torch.nn.Module):
        def forward(self, x):
            h = F.layer_norm(x, (256,), t["g1"], t["be1"])
            q, k, v = (z.reshape(-1, 4, 64).transpose(0, 1)
                       for z in F.linear(h, t["wqkv"], t["bqkv"]).split(256, 1))
            a = torch.softmax(q @ k.transpose(1, 2) * 0.125, -1) @ v
            x = x + F.linear(a.transpose(0, 1).reshape(-1, 256), t["wo"], t["bo"])
            h = F.layer_norm(x, (256,), t["g2"], t["be2"])
            return x + F.linear(F.gelu(F.linear(h, t["w1"], t["b1"])), t["w2"], t["b2"])

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Encoder().eval(), (torch.zeros(16, 256),), str(path), input_names=["x"],
                          output_names=["y"], opset_version=17, dynamic_axes={"x": {0: "L"}}, dynamo=False)
    return path


# -- children: each runs in a fresh process and prints one JSON line -----------------------------------


def _callable(spec: dict[str, Any], x: np.ndarray):
    engine = spec["engine"]
    if engine == "onnxruntime":
        import onnxruntime as ort

        session = ort.InferenceSession(spec["path"], providers=["CPUExecutionProvider"])
        return lambda: session.run(None, {"x": x})[0]
    import msvm as ms

    if engine == "msvm onnx":
        import msvm.onnx

        model = ms.onnx.load(spec["path"])
        return lambda: model(x)
    if engine == "fused":
        from .models import make_encoder

        fn = make_encoder(encoder_params())
    else:
        fn = make_plain_encoder(encoder_params(), rewrite=engine == "plain")
    return lambda: fn(x)


def child_run(spec: dict[str, Any]) -> dict[str, Any]:
    """Build the engine, time its first call, then loop for ``loop_s`` seconds without ever waiting."""
    x = np.random.default_rng(0).standard_normal((spec["length"], 256)).astype(np.float32)
    if spec["engine"] != "onnxruntime":
        import msvm  # noqa: F401  (a library's import is not the model's first call)

        from .harness import calibrate_first

        calibrate_first()
    t0 = time.perf_counter()
    call = _callable(spec, x)
    out = call()
    first = time.perf_counter() - t0
    times = []
    end = time.perf_counter() + spec["loop_s"]
    while time.perf_counter() < end or len(times) < 8:
        t = time.perf_counter()
        call()
        times.append(time.perf_counter() - t)
    tail = times[-max(4, int(len(times) * STEADY_SHARE)):]
    result = {"first_s": first, "steady_s": statistics.median(tail), "calls": len(times) + 1,
              "checksum": float(np.abs(out).sum())}
    if spec["engine"] != "onnxruntime":
        import msvm as ms

        events = ms.vm.jit_monitor().events()
        result["rewrites"] = sorted({e["pattern"] for e in events if e["kind"] == "rewrite"})
    return result


def child_main(spec_json: str) -> int:
    return harness.child_main(spec_json, child_run)


def run_child(spec: dict[str, Any]) -> dict[str, Any]:
    """One child in a fresh process: its JSON result (``{"error": ...}`` if it failed)."""
    return harness.run_child("attention", spec, spec["loop_s"] + CHILD_SLACK_S)


# -- the parent ----------------------------------------------------------------------------------------


def bench(lengths: tuple[int, ...], rounds: int, loop_s: float, engines: tuple[str, ...],
          path: Path | None) -> tuple[str, list[str]]:
    """(the table, failures): each engine at each length, ``rounds`` fresh processes, rounds interleaved."""
    rows, errors = [], []
    for length in lengths:
        runs: dict[str, list[dict]] = {e: [] for e in engines}
        for _ in range(rounds):
            for engine in engines:
                spec = {"engine": engine, "length": length, "loop_s": loop_s, "path": str(path)}
                res = run_child(spec)
                if "error" in res:
                    errors.append(f"L={length} {engine}: {res['error']}")
                else:
                    runs[engine].append(res)
        med = {e: statistics.median(r["steady_s"] for r in rs) for e, rs in runs.items() if rs}
        base = med.get("onnxruntime")
        for engine, steady in med.items():
            last = runs[engine][-1]
            rows.append([length, engine, fmt_time(steady), fmt_ratio(steady / base if base else None),
                         fmt_time(statistics.median(r["first_s"] for r in runs[engine])),
                         ", ".join(last.get("rewrites", [])) or "-", last["calls"]])
    header = ["L", "engine", "steady", "÷ onnxruntime", "first call", "rewrites", "calls"]
    return table("W3 encoder layer (d = 256, 4 heads), medians over fresh processes", header, rows), errors


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.attention", description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="", help=f"comma-separated sequence lengths ({LENGTHS})")
    parser.add_argument("--rounds", type=int, default=None, help=f"fresh processes per figure ({ROUNDS})")
    parser.add_argument("--quick", action="store_true",
                        help=f"L in {QUICK_LENGTHS}, {QUICK_ROUNDS} round, {QUICK_LOOP_S:g} s loops")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv or [])
    if args.child is not None:
        sys.exit(child_main(args.child))
    lengths = tuple(int(n) for n in args.lengths.split(",") if n)
    lengths = lengths or (QUICK_LENGTHS if args.quick else LENGTHS)
    rounds = args.rounds or (QUICK_ROUNDS if args.quick else ROUNDS)
    loop_s = QUICK_LOOP_S if args.quick else LOOP_S
    onnx_ok = all(importlib.util.find_spec(m) is not None for m in ("torch", "onnx", "onnxruntime"))
    engines = ENGINES if onnx_ok else tuple(e for e in ENGINES if e not in ONNX_ENGINES)
    print(f"Attention: every figure from a fresh process whose {loop_s:g} s loop never waits for compiles; "
          f"steady = median of the loop's last {STEADY_SHARE:.0%} of calls, medians over {rounds} round(s)."
          + ("" if onnx_ok else " (torch, onnx or onnxruntime missing: no ONNX engines)"))
    with tempfile.TemporaryDirectory(prefix="msvm-bench-attention-") as folder:
        path = export_encoder(Path(folder) / "encoder.onnx") if onnx_ok else None
        text, errors = bench(lengths, rounds, loop_s, engines, path)
    print(text)
    for error in errors:
        print(f"  failed: {error}")


if __name__ == "__main__":
    main(sys.argv[1:])
