"""The benchmark workloads W1–W6: each a model whose input shapes change at run time.

Every model exists three times over the SAME seeded float32 weights: as an ``@ms.jit`` function
(msvm interpreter / JIT), as its plain Python body run eagerly on numpy (``py_func``: the ops are
msvm's numpy reference kernels), and in PyTorch (when installed) for the eager and
``torch.compile`` columns. FLOP and byte counts feed the roofline columns.
"""

# ruff: noqa: F821, UP037 - ms.Tensor["N", 3, "H", "W"] reads to linters as string forward references

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import msvm as ms


@dataclass
class Workload:
    name: str
    title: str
    make: Callable[..., Any]  # make(**jit_options) -> JitFunction
    stream: list[tuple[np.ndarray, ...]]  # the calls, in order
    steady: tuple[np.ndarray, ...]  # the input measured for steady state
    flops: Callable[[tuple[np.ndarray, ...]], float]
    bytes: Callable[[tuple[np.ndarray, ...]], float]
    torch: Callable[..., Any] | None = None  # torch_fn(*tensors)
    modes: tuple[str, ...] = ("exact",)  # JIT cache modes worth showing
    also_steady: tuple[tuple[str, tuple[np.ndarray, ...]], ...] = ()  # (label, input) measured too
    switches: bool = False  # report how the stream's last calls compare with their shape's steady time
    notes: list[str] = field(default_factory=list)


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _w(rng: np.random.Generator, *shape: int, scale: float | None = None) -> np.ndarray:
    fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
    s = scale if scale is not None else 1.0 / np.sqrt(fan_in)
    return (rng.standard_normal(shape) * s).astype(np.float32)


# -- W1 / W4: a small ResNet-style CNN ------------------------------------------------------------
def cnn_params(seed: int = 0) -> dict[str, Any]:
    """Stem 3→16, three stages 16/32/64 with a residual block each (stride-2 projection from stage 2),
    BN folded into conv weights/bias, global average pool, linear 10."""
    rng = _rng(seed)
    p: dict[str, Any] = {"stem": (_w(rng, 16, 3, 3, 3), _w(rng, 16, scale=0.1))}
    blocks = []
    cin = 16
    for cout, stride in ((16, 1), (32, 2), (64, 2)):
        block = {
            "w1": _w(rng, cout, cin, 3, 3),
            "b1": _w(rng, cout, scale=0.1),
            "w2": _w(rng, cout, cout, 3, 3),
            "b2": _w(rng, cout, scale=0.1),
            "stride": stride,
        }
        if stride != 1 or cin != cout:
            block["wp"], block["bp"] = _w(rng, cout, cin, 1, 1), _w(rng, cout, scale=0.1)
        blocks.append(block)
        cin = cout
    p["blocks"] = blocks
    p["fc"] = (_w(rng, 10, 64), _w(rng, 10, scale=0.1))
    return p


def make_cnn(params: dict[str, Any], **options: Any):
    ws, bs = params["stem"]
    wf, bf = params["fc"]
    s1, s2, s3 = params["blocks"]
    w11, b11, w12, b12 = s1["w1"], s1["b1"], s1["w2"], s1["b2"]
    w21, b21, w22, b22, wp2, bp2 = s2["w1"], s2["b1"], s2["w2"], s2["b2"], s2["wp"], s2["bp"]
    w31, b31, w32, b32, wp3, bp3 = s3["w1"], s3["b1"], s3["w2"], s3["b2"], s3["wp"], s3["bp"]

    @ms.jit(**options)
    def cnn(x: ms.Tensor["N", 3, "H", "W"]):
        y = ms.ops.relu(ms.ops.conv2d(x, ws, bs, padding=1))
        h = ms.ops.relu(ms.ops.conv2d(y, w11, b11, padding=1))
        y = ms.ops.relu(ms.ops.conv2d(h, w12, b12, padding=1) + y)
        h = ms.ops.relu(ms.ops.conv2d(y, w21, b21, stride=2, padding=1))
        y = ms.ops.relu(ms.ops.conv2d(h, w22, b22, padding=1) + ms.ops.conv2d(y, wp2, bp2, stride=2))
        h = ms.ops.relu(ms.ops.conv2d(y, w31, b31, stride=2, padding=1))
        y = ms.ops.relu(ms.ops.conv2d(h, w32, b32, padding=1) + ms.ops.conv2d(y, wp3, bp3, stride=2))
        return ms.ops.linear(y.mean(axis=(2, 3)), wf, bf)

    return cnn


def torch_cnn(params: dict[str, Any]):
    import torch
    import torch.nn.functional as F

    t = lambda a: torch.from_numpy(a)  # noqa: E731
    ws, bs = map(t, params["stem"])
    wf, bf = map(t, params["fc"])
    blocks = [{k: (t(v) if isinstance(v, np.ndarray) else v) for k, v in b.items()} for b in params["blocks"]]

    def cnn(x):
        y = F.relu(F.conv2d(x, ws, bs, padding=1))
        for b in blocks:
            h = F.relu(F.conv2d(y, b["w1"], b["b1"], stride=b["stride"], padding=1))
            skip = F.conv2d(y, b["wp"], b["bp"], stride=b["stride"]) if "wp" in b else y
            y = F.relu(F.conv2d(h, b["w2"], b["b2"], padding=1) + skip)
        return F.linear(y.mean(dim=(2, 3)), wf, bf)

    return cnn


def cnn_flops(params: dict[str, Any], x: np.ndarray) -> float:
    n, _, h, w = x.shape
    flops = 2 * n * h * w * 16 * 3 * 9
    cin = 16
    for b in params["blocks"]:
        s = b["stride"]
        h, w = (h + 2 - 3) // s + 1, (w + 2 - 3) // s + 1
        cout = b["w1"].shape[0]
        flops += 2 * n * h * w * cout * (cin * 9 + cout * 9 + (cin if "wp" in b else 0))
        cin = cout
    return float(flops + 2 * n * 64 * 10)


# -- W2: MLP block ------------------------------------------------------------------------------
def mlp_params(seed: int = 1) -> dict[str, np.ndarray]:
    rng = _rng(seed)
    return {
        "w1": _w(rng, 4096, 1024),
        "b1": _w(rng, 4096, scale=0.1),
        "w2": _w(rng, 1024, 4096),
        "b2": _w(rng, 1024, scale=0.1),
        "g": np.ones(1024, np.float32),
        "beta": np.zeros(1024, np.float32),
    }


def make_mlp(p: dict[str, np.ndarray], **options: Any):
    w1, b1, w2, b2, g, beta = p["w1"], p["b1"], p["w2"], p["b2"], p["g"], p["beta"]

    @ms.jit(**options)
    def mlp(x: ms.Tensor["R", 1024]):
        h = ms.ops.gelu(ms.ops.linear(x, w1, b1))
        return ms.ops.layer_norm(x + ms.ops.linear(h, w2, b2), (1024,), g, beta)

    return mlp


def torch_mlp(p: dict[str, np.ndarray]):
    import torch
    import torch.nn.functional as F

    w1, b1, w2, b2, g, beta = (torch.from_numpy(p[k]) for k in ("w1", "b1", "w2", "b2", "g", "beta"))
    return lambda x: F.layer_norm(x + F.linear(F.gelu(F.linear(x, w1, b1)), w2, b2), (1024,), g, beta)


# -- W3: pre-LN transformer encoder layer --------------------------------------------------------
def encoder_params(seed: int = 2) -> dict[str, np.ndarray]:
    rng = _rng(seed)
    d, f = 256, 1024
    return {
        "g1": np.ones(d, np.float32),
        "be1": np.zeros(d, np.float32),
        "wqkv": _w(rng, 3 * d, d),
        "bqkv": _w(rng, 3 * d, scale=0.1),
        "wo": _w(rng, d, d),
        "bo": _w(rng, d, scale=0.1),
        "g2": np.ones(d, np.float32),
        "be2": np.zeros(d, np.float32),
        "w1": _w(rng, f, d),
        "b1": _w(rng, f, scale=0.1),
        "w2": _w(rng, d, f),
        "b2": _w(rng, d, scale=0.1),
    }


def make_encoder(p: dict[str, np.ndarray], **options: Any):
    g1, be1, wqkv, bqkv, wo, bo = p["g1"], p["be1"], p["wqkv"], p["bqkv"], p["wo"], p["bo"]
    g2, be2, w1, b1, w2, b2 = p["g2"], p["be2"], p["w1"], p["b1"], p["w2"], p["b2"]

    @ms.jit(**options)
    def encoder(x: ms.Tensor["L", 256]):
        h = ms.ops.layer_norm(x, (256,), g1, be1)
        qkv = ms.ops.linear(h, wqkv, bqkv)
        q = qkv[:, 0:256].reshape(-1, 4, 64).transpose(1, 0, 2)
        k = qkv[:, 256:512].reshape(-1, 4, 64).transpose(1, 0, 2)
        v = qkv[:, 512:768].reshape(-1, 4, 64).transpose(1, 0, 2)
        a = ms.ops.scaled_dot_product_attention(q, k, v).transpose(1, 0, 2).reshape(-1, 256)
        x = x + ms.ops.linear(a, wo, bo)
        h = ms.ops.layer_norm(x, (256,), g2, be2)
        return x + ms.ops.linear(ms.ops.gelu(ms.ops.linear(h, w1, b1)), w2, b2)

    return encoder


def torch_encoder(p: dict[str, np.ndarray]):
    import torch
    import torch.nn.functional as F

    t = {k: torch.from_numpy(v) for k, v in p.items()}

    def encoder(x):
        h = F.layer_norm(x, (256,), t["g1"], t["be1"])
        q, k, v = (
            z.reshape(-1, 4, 64).transpose(0, 1) for z in F.linear(h, t["wqkv"], t["bqkv"]).split(256, 1)
        )
        a = F.scaled_dot_product_attention(q, k, v).transpose(0, 1).reshape(-1, 256)
        x = x + F.linear(a, t["wo"], t["bo"])
        h = F.layer_norm(x, (256,), t["g2"], t["be2"])
        return x + F.linear(F.gelu(F.linear(h, t["w1"], t["b1"])), t["w2"], t["b2"])

    return encoder


def encoder_flops(x: np.ndarray) -> float:
    L, d = x.shape
    return float(2 * L * d * 3 * d + 2 * 2 * L * L * d + 2 * L * d * d + 2 * 2 * L * d * 1024)


# -- W5: fused elementwise + row kernel ----------------------------------------------------------
def make_w5(p: dict[str, np.ndarray], **options: Any):
    a, b, g, beta = p["a"], p["b"], p["g"], p["beta"]

    @ms.jit(**options)
    def w5(x: ms.Tensor["R", 1024]):
        return ms.ops.layer_norm(ms.ops.gelu(x * a + b) + x, (1024,), g, beta)

    return w5


def torch_w5(p: dict[str, np.ndarray]):
    import torch
    import torch.nn.functional as F

    a, b, g, beta = (torch.from_numpy(p[k]) for k in ("a", "b", "g", "beta"))
    return lambda x: F.layer_norm(F.gelu(x * a + b) + x, (1024,), g, beta)


# -- W6: a chain of 200 tiny ops ------------------------------------------------------------------
def make_w6(consts: tuple[np.ndarray, ...], **options: Any):
    @ms.jit(**options)
    def w6(x: ms.Tensor[8, 8]):
        for c in consts:  # a static tuple: unrolled into one straight-line region of 200 OP_CALLs
            x = ms.ops.maximum(x * c + 0.1, x - 0.05)
        return x

    return w6


def torch_w6(consts: tuple[np.ndarray, ...]):
    import torch

    tc = [torch.from_numpy(c) for c in consts]

    def w6(x):
        for c in tc:
            x = torch.maximum(x * c + 0.1, x - 0.05)
        return x

    return w6


def _stream(shapes: Iterator[tuple[int, ...]], seed: int) -> list[tuple[np.ndarray, ...]]:
    rng = _rng(seed)
    return [(rng.standard_normal(s).astype(np.float32),) for s in shapes]


def workloads(torch_ok: bool) -> list[Workload]:
    cnn_p = cnn_params()
    batches = [1, 4, 8, 16, 4, 1, 16, 8] * 3
    w1 = Workload(
        "W1",
        "ResNet-style CNN, 3×64×64, batch stream [1,4,8,16,4,1,16,8]×3",
        lambda **o: make_cnn(cnn_p, **o),
        _stream(((n, 3, 64, 64) for n in batches), 10),
        _stream([(16, 3, 64, 64)], 11)[0],
        lambda a: cnn_flops(cnn_p, a[0]),
        lambda a: 4.0 * a[0].size,
        torch_cnn(cnn_p) if torch_ok else None,
        modes=("exact", "bucket", "adaptive"),
        also_steady=(("batch 1", _stream([(1, 3, 64, 64)], 12)[0]),),
    )
    mlp_p = mlp_params()
    rows = [1, 16, 64, 256, 16, 1, 256, 64] * 2
    w2 = Workload(
        "W2",
        "MLP 1024→4096 GELU→1024 + residual + LayerNorm, rows ∈ {1,16,64,256}",
        lambda **o: make_mlp(mlp_p, **o),
        _stream(((r, 1024) for r in rows), 20),
        _stream([(256, 1024)], 21)[0],
        lambda a: 2.0 * a[0].shape[0] * 1024 * 4096 * 2,
        lambda a: 4.0 * (2 * 1024 * 4096 + 2 * a[0].size),
        torch_mlp(mlp_p) if torch_ok else None,
        modes=("exact", "bucket", "adaptive"),
    )
    enc_p = encoder_params()
    lengths = [int(v) for v in _rng(30).integers(16, 257, size=100)]
    w3 = Workload(
        "W3",
        "pre-LN transformer encoder layer (d 256, 4 heads, FFN 1024), 100 lengths in [16, 256]",
        lambda **o: make_encoder(enc_p, **o),
        _stream(((n, 256) for n in lengths), 31),
        _stream([(128, 256)], 32)[0],
        lambda a: encoder_flops(a[0]),
        lambda a: 4.0 * 1.3e6,
        torch_encoder(enc_p) if torch_ok else None,
        modes=("exact", "bucket", "adaptive"),
    )
    res = [(1, 3, 96, 160), (1, 3, 192, 320)] * 6
    w4 = Workload(
        "W4",
        "the W1 CNN at batch 1, alternating 3×96×160 and 3×192×320",
        lambda **o: make_cnn(cnn_p, **o),
        _stream(iter(res), 40),
        _stream([(1, 3, 192, 320)], 41)[0],
        lambda a: cnn_flops(cnn_p, a[0]),
        lambda a: 4.0 * a[0].size,
        torch_cnn(cnn_p) if torch_ok else None,
        switches=True,
    )
    rng = _rng(50)
    w5_p = {
        "a": _w(rng, 1024, scale=1.0),
        "b": _w(rng, 1024, scale=0.5),
        "g": np.ones(1024, np.float32),
        "beta": np.zeros(1024, np.float32),
    }
    x5 = _stream([(4096, 1024)], 51)[0]
    w5 = Workload(
        "W5",
        "layer_norm(gelu(x*a+b)+x) on 4096×1024",
        lambda **o: make_w5(w5_p, **o),
        [x5] * 6,
        x5,
        lambda a: 0.0,
        lambda a: 8.0 * a[0].size,
        torch_w5(w5_p) if torch_ok else None,
        notes=["bytes = compulsory traffic (read x, write the result)"],
    )
    consts = tuple(_w(_rng(60 + i), 8, 8, scale=0.1) + 0.95 for i in range(50))
    x6 = _stream([(8, 8)], 61)[0]
    w6 = Workload(
        "W6",
        "a chain of 200 tiny ops on 8×8",
        lambda **o: make_w6(consts, **o),
        [x6] * 6,
        x6,
        lambda a: 0.0,
        lambda a: 0.0,
        torch_w6(consts) if torch_ok else None,
    )
    return [w1, w2, w3, w4, w5, w6]
