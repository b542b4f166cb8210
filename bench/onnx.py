"""The ONNX suite: msvm against onnxruntime on the same ONNX files, each engine in fresh processes.

Models: the ``onnx`` package's light zoo at batch 1 (224×224; the geometric-mean set is ResNet-50,
SqueezeNet, Inception v1, ShuffleNet and DenseNet-121) and small PyTorch models exported here with
dynamic axes (``EXPORTS``; tests/onnx exports the same ones). Every figure comes from a fresh Python
process (``python -m bench.onnx --child SPEC``, one JSON line back) that loads the file, times its
first call (import + verify + first run for msvm, session creation + first run for onnxruntime), then
runs a loop that never waits for compiles (libraries are imported and msvm's kernel cost model
calibrated before the clock starts): msvm's JIT compiles in the background while the loop goes
on, and the steady median is taken over the loop's last calls. Rounds alternate the engines; the
table has medians over rounds and their ratio. Targets: geomean ≤ 1.0× onnxruntime over the set,
none above 1.2×, first call ≤ 2 s.

Run: ``python -m bench onnx`` or ``python -m bench.onnx [--only squeezenet,encoder] [--rounds N]
[--quick]``. Needs onnx, onnxruntime, and torch for the exported models.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

from . import harness
from .harness import fmt_ratio, fmt_time, table

GEOMEAN_SET = ("resnet50", "squeezenet", "inception_v1", "shufflenet", "densenet121")
ZOO = (*GEOMEAN_SET, "bvlc_alexnet", "inception_v2", "vgg19", "zfnet512")
QUICK = ("squeezenet", "encoder")
TARGETS = {"geomean": 1.0, "each": 1.2, "first_call_s": 2.0}
ROUNDS, QUICK_ROUNDS = 3, 1
LOOP_S, QUICK_LOOP_S = 8.0, 2.0  # how long a child's loop runs (msvm's compiles land inside it)
STEADY_SHARE = 0.25  # the steady median is over the loop's last quarter of calls
CHILD_SLACK_S = 240.0


# -- the exported models (tests/onnx exports the same ones) --------------------------------------------


def torch_models() -> dict[str, Any]:
    """The PyTorch model classes by name (imports torch)."""
    import torch

    nn = torch.nn

    class ResidualCNN(nn.Module):
        """Conv + batch norm + ReLU, a residual block, max pooling, a global mean and a classifier."""

        def __init__(self) -> None:
            super().__init__()
            self.c1, self.b1 = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
            self.c2, self.b2 = nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8)
            self.fc = nn.Linear(8, 5)

        def forward(self, x):
            y = torch.relu(self.b1(self.c1(x)))
            y = torch.relu(self.b2(self.c2(y)) + y)
            y = nn.functional.max_pool2d(y, 2)
            return self.fc(y.mean(dim=(2, 3)))

    class EncoderLayer(nn.Module):
        """Pre-norm self-attention and a GELU FFN; heads split and merged with reshapes of x.shape."""

        def __init__(self, d: int = 16, heads: int = 2) -> None:
            super().__init__()
            self.heads = heads
            self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.ff1, self.ff2 = nn.Linear(d, 2 * d), nn.Linear(2 * d, d)

        def forward(self, x):
            b, n, d = x.shape
            q, k, v = self.qkv(self.n1(x)).split(d, dim=-1)
            q, k, v = (t.reshape(b, n, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
            att = torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5, dim=-1)
            x = x + self.out((att @ v).transpose(1, 2).reshape(b, n, d))
            return x + self.ff2(nn.functional.gelu(self.ff1(self.n2(x))))

    class CausalDecoder(nn.Module):
        """int64 token ids -> embeddings -> causally masked attention (mask from arange) -> logits."""

        def __init__(self, vocab: int = 20, d: int = 16) -> None:
            super().__init__()
            self.emb = nn.Embedding(vocab, d)
            self.qkv, self.head = nn.Linear(d, 3 * d), nn.Linear(d, vocab)

        def forward(self, ids):
            x = self.emb(ids)
            n = ids.shape[1]
            q, k, v = self.qkv(x).chunk(3, dim=-1)
            pos = torch.arange(n)
            mask = pos[None, :] > pos[:, None]
            att = (q @ k.transpose(-1, -2)).masked_fill(mask, float("-inf")).softmax(-1)
            return self.head(att @ v)

    class UNet(nn.Module):
        """Two levels: conv, max-pool down, conv, nearest and bilinear upsampling, concat skips."""

        def __init__(self, c: int = 8) -> None:
            super().__init__()
            self.enc1, self.enc2 = nn.Conv2d(3, c, 3, padding=1), nn.Conv2d(c, 2 * c, 3, padding=1)
            self.mid = nn.Conv2d(2 * c, 2 * c, 3, padding=1)
            self.dec2 = nn.Conv2d(4 * c, c, 3, padding=1)
            self.dec1, self.head = nn.Conv2d(2 * c, c, 3, padding=1), nn.Conv2d(c, 2, 1)

        def forward(self, x):
            e1 = torch.relu(self.enc1(x))
            e2 = torch.relu(self.enc2(nn.functional.max_pool2d(e1, 2)))
            m = torch.relu(self.mid(nn.functional.max_pool2d(e2, 2)))
            up2 = nn.functional.interpolate(m, scale_factor=2.0, mode="nearest")
            d2 = torch.relu(self.dec2(torch.cat([up2, e2], dim=1)))
            up1 = nn.functional.interpolate(d2, scale_factor=2.0, mode="bilinear", align_corners=False)
            d1 = torch.relu(self.dec1(torch.cat([up1, e1], dim=1)))
            return self.head(d1)

    class MobileNetBlock(nn.Module):
        """MobileNetV3's inverted residual: 1×1 expand + ReLU6, depthwise 3×3 + hardswish, squeeze-excite
        (global mean, 1×1 convs, ReLU, hardsigmoid), 1×1 project, the residual."""

        def __init__(self, c: int = 8, e: int = 24) -> None:
            super().__init__()
            self.expand, self.bn1 = nn.Conv2d(c, e, 1, bias=False), nn.BatchNorm2d(e)
            self.dw, self.bn2 = nn.Conv2d(e, e, 3, padding=1, groups=e, bias=False), nn.BatchNorm2d(e)
            self.se1, self.se2 = nn.Conv2d(e, 8, 1), nn.Conv2d(8, e, 1)
            self.project, self.bn3 = nn.Conv2d(e, c, 1, bias=False), nn.BatchNorm2d(c)

        def forward(self, x):
            y = nn.functional.relu6(self.bn1(self.expand(x)))
            y = nn.functional.hardswish(self.bn2(self.dw(y)))
            s = y.mean(dim=(2, 3), keepdim=True)
            y = y * nn.functional.hardsigmoid(self.se2(torch.relu(self.se1(s))))
            return x + self.bn3(self.project(y))

    return {
        "cnn": ResidualCNN,
        "encoder": EncoderLayer,
        "decoder": CausalDecoder,
        "unet": UNet,
        "mobilenet": MobileNetBlock,
    }


# name -> (example input shape, dynamic axes, dtype, shapes to compare at)
EXPORTS: dict[str, tuple[tuple[int, ...], dict[int, str], str, list[tuple[int, ...]]]] = {
    "cnn": ((2, 3, 8, 8), {0: "batch", 2: "h", 3: "w"}, "float32",
            [(1, 3, 8, 8), (3, 3, 12, 10), (2, 3, 6, 6)]),
    "encoder": ((2, 5, 16), {0: "batch", 1: "seq"}, "float32", [(1, 7, 16), (3, 4, 16), (2, 9, 16)]),
    "decoder": ((2, 5), {0: "batch", 1: "seq"}, "int64", [(1, 6), (3, 4), (2, 11)]),
    "unet": ((1, 3, 16, 16), {0: "batch", 2: "h", 3: "w"}, "float32", [(1, 3, 16, 16), (2, 3, 8, 12)]),
    "mobilenet": ((2, 8, 10, 10), {0: "batch", 2: "h", 3: "w"}, "float32", [(1, 8, 10, 10), (3, 8, 7, 9)]),
}
# the shape each exported model is timed at
BENCH_SHAPES = {"cnn": (8, 3, 32, 32), "encoder": (8, 64, 16), "decoder": (8, 64), "unet": (2, 3, 64, 64),
                "mobilenet": (8, 8, 28, 28)}


def example(shape: tuple[int, ...], dtype: str, seed: int = 0) -> Any:
    """A deterministic input: normal floats, or token ids below the decoder's vocabulary."""
    import numpy as np

    rng = np.random.default_rng(seed)
    if dtype == "int64":
        return rng.integers(0, 20, size=shape).astype(np.int64)
    return rng.standard_normal(shape).astype(np.float32)


def export(name: str, exporter: str, path: Path, opset: int = 17) -> Path:
    """Export ``EXPORTS[name]`` to ``path`` with every listed axis dynamic (``exporter``: torchscript or
    dynamo; ``opset`` for TorchScript)."""
    import torch

    shape, axes, dtype, _ = EXPORTS[name]
    torch.manual_seed(0)
    model = torch_models()[name]().eval()
    x = torch.from_numpy(example(shape, dtype))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "dynamo":
            from torch.export import Dim

            dims = {i: Dim(n, min=1 if n == "batch" else 2) for i, n in axes.items()}
            torch.onnx.export(model, (x,), str(path), input_names=["x"], output_names=["y"],
                              dynamic_shapes=(dims,), dynamo=True, optimize=True)
        else:
            torch.onnx.export(model, (x,), str(path), input_names=["x"], output_names=["y"],
                              opset_version=opset, dynamic_axes={"x": axes}, dynamo=False)
    return path


def zoo_path(name: str) -> Path:
    import onnx

    return Path(os.path.dirname(onnx.__file__)) / "backend" / "test" / "data" / "light" / f"light_{name}.onnx"


# -- children: each runs in a fresh process and prints one JSON line -----------------------------------


def _input(spec: dict[str, Any]) -> Any:
    import numpy as np

    if spec["model"] in EXPORTS:
        return example(tuple(BENCH_SHAPES[spec["model"]]), EXPORTS[spec["model"]][2])
    n = 1 * 3 * 224 * 224
    return (np.arange(n) / n).reshape(1, 3, 224, 224).astype(np.float32)  # the zoo's own input


def child_run(spec: dict[str, Any]) -> dict[str, Any]:
    """Load the file, time the first call, then loop for ``loop_s`` seconds without ever waiting."""
    x = _input(spec)
    if spec["engine"] == "msvm":
        import onnx  # noqa: F401  (a library's import is not the model's first call)

        import msvm as ms
        import msvm.onnx

        from .harness import calibrate_first

        calibrate_first()  # untimed: the kernel cost model, on disk after a machine's first process
        t0 = time.perf_counter()
        model = ms.onnx.load(spec["path"])
        call = lambda: model(x)  # noqa: E731
    else:
        import onnxruntime as ort

        t0 = time.perf_counter()
        session = ort.InferenceSession(spec["path"], providers=["CPUExecutionProvider"])
        feeds = {session.get_inputs()[0].name: x}
        call = lambda: session.run(None, feeds)[0]  # noqa: E731
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
              "checksum": float(abs(out).sum())}
    if spec["engine"] == "msvm":
        import msvm as ms

        entries = [e for e in ms.vm.jit_info() if e["function"] == model.function.__name__]
        result["native_entries"] = sum(1 for e in entries if e["hits"])
        result["entries"] = len(entries)
    return result


def child_main(spec_json: str) -> int:
    return harness.child_main(spec_json, child_run)


def run_child(spec: dict[str, Any]) -> dict[str, Any]:
    """One child in a fresh process: its JSON result (``{"error": ...}`` if it failed)."""
    return harness.run_child("onnx", spec, spec["loop_s"] + CHILD_SLACK_S)


# -- the parent ----------------------------------------------------------------------------------------


def _geomean(values: list[float]) -> float | None:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def bench(names: list[str], rounds: int, loop_s: float, folder: Path) -> tuple[str, list[str]]:
    """(the table, failures) for ``names``, ``rounds`` fresh processes per engine and model."""
    rows, errors, ratios = [], [], {}
    for name in names:
        if name in EXPORTS:
            try:
                path = export(name, "torchscript", folder / f"{name}.onnx")
            except Exception as exc:
                errors.append(f"{name}: export failed: {type(exc).__name__}: {exc}")
                continue
        else:
            path = zoo_path(name)
        runs: dict[str, list[dict]] = {"msvm": [], "onnxruntime": []}
        for _ in range(rounds):
            for engine in runs:
                res = run_child({"engine": engine, "path": str(path), "model": name, "loop_s": loop_s})
                if "error" in res:
                    errors.append(f"{name} {engine}: {res['error']}")
                else:
                    runs[engine].append(res)
        if not all(runs.values()):
            continue
        med = {e: statistics.median(r["steady_s"] for r in rs) for e, rs in runs.items()}
        first = {e: statistics.median(r["first_s"] for r in rs) for e, rs in runs.items()}
        ratio = med["msvm"] / med["onnxruntime"]
        ratios[name] = ratio
        native = f"{runs['msvm'][-1].get('native_entries', 0)}/{runs['msvm'][-1].get('entries', 0)}"
        rows.append([name, fmt_time(med["msvm"]), fmt_time(med["onnxruntime"]), fmt_ratio(ratio),
                     fmt_time(first["msvm"]), fmt_time(first["onnxruntime"]), native,
                     runs["msvm"][-1]["calls"]])
    in_set = [ratios[n] for n in GEOMEAN_SET if n in ratios]
    geo = _geomean(in_set)
    summary = (f"geomean over {len(in_set)} of {', '.join(GEOMEAN_SET)}: {fmt_ratio(geo)} (target ≤ "
               f"{TARGETS['geomean']:.1f}×, each ≤ {TARGETS['each']:.1f}×, first call ≤ "
               f"{TARGETS['first_call_s']:g} s)")
    header = ["model", "msvm steady", "onnxruntime steady", "msvm ÷ ort", "msvm first call",
              "ort first call", "regions native", "msvm calls"]
    return table("msvm vs onnxruntime, medians over fresh processes", header, rows) + "\n\n" + summary, errors


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.onnx", description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help=f"comma-separated models of {', '.join((*ZOO, *EXPORTS))}")
    parser.add_argument("--rounds", type=int, default=None, help=f"fresh processes per figure ({ROUNDS})")
    parser.add_argument("--quick", action="store_true",
                        help=f"{', '.join(QUICK)} only, {QUICK_ROUNDS} round, {QUICK_LOOP_S:g} s loops")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv or [])
    if args.child is not None:
        sys.exit(child_main(args.child))
    missing = [m for m in ("onnx", "onnxruntime") if importlib.util.find_spec(m) is None]
    if missing:
        print(f"the onnx suite needs {' and '.join(missing)} (pip install msvm[onnx] onnxruntime)")
        return
    names = [n for n in args.only.split(",") if n] or list(QUICK if args.quick else (*ZOO, *EXPORTS))
    unknown = [n for n in names if n not in ZOO and n not in EXPORTS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}")
    if importlib.util.find_spec("torch") is None:
        names = [n for n in names if n not in EXPORTS]
    rounds = args.rounds or (QUICK_ROUNDS if args.quick else ROUNDS)
    loop_s = QUICK_LOOP_S if args.quick else LOOP_S
    print(f"ONNX: msvm against onnxruntime (CPUExecutionProvider) on the same files; every figure from a "
          f"fresh process whose {loop_s:g} s loop never waits for compiles; steady = median of the loop's "
          f"last {STEADY_SHARE:.0%} of calls, medians over {rounds} round(s).")
    with tempfile.TemporaryDirectory(prefix="msvm-bench-onnx-") as folder:
        text, errors = bench(names, rounds, loop_s, Path(folder))
    print(text)
    for line in errors:
        print(f"failed: {line}")


if __name__ == "__main__":
    main(sys.argv[1:])
