"""Shared by the ONNX import tests: the onnx test-data folders, small PyTorch models and their exports.

The models are exported once per session with both torch exporters (TorchScript and ``dynamo=True``),
every batch/length axis dynamic, so each test compares msvm with onnxruntime on the very same file.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

DATA = Path(os.path.dirname(onnx.__file__)) / "backend" / "test" / "data"


def _torch():
    return pytest.importorskip("torch")


def model_classes():
    torch = _torch()
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

    return {"cnn": ResidualCNN, "encoder": EncoderLayer, "decoder": CausalDecoder}


# name -> (example input shape, dynamic axes, dtype, shapes to compare at)
MODELS = {
    "cnn": (
        (2, 3, 8, 8),
        {0: "batch", 2: "h", 3: "w"},
        "float32",
        [(1, 3, 8, 8), (3, 3, 12, 10), (2, 3, 6, 6)],
    ),
    "encoder": ((2, 5, 16), {0: "batch", 1: "seq"}, "float32", [(1, 7, 16), (3, 4, 16), (2, 9, 16)]),
    "decoder": ((2, 5), {0: "batch", 1: "seq"}, "int64", [(1, 6), (3, 4), (2, 11)]),
}


def example(shape, dtype: str, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype == "int64":
        return rng.integers(0, 20, size=shape).astype(np.int64)
    return rng.standard_normal(shape).astype(np.float32)


def export(name: str, exporter: str, folder: Path) -> Path:
    torch = _torch()
    shape, axes, dtype, _ = MODELS[name]
    torch.manual_seed(0)
    model = model_classes()[name]().eval()
    x = torch.from_numpy(example(shape, dtype))
    path = folder / f"{name}_{exporter}.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "dynamo":
            pytest.importorskip("onnxscript")
            from torch.export import Dim

            dims = {i: Dim(n, min=1 if n == "batch" else 2) for i, n in axes.items()}
            torch.onnx.export(
                model,
                (x,),
                str(path),
                input_names=["x"],
                output_names=["y"],
                dynamic_shapes=(dims,),
                dynamo=True,
                optimize=True,
            )
        else:
            torch.onnx.export(
                model,
                (x,),
                str(path),
                input_names=["x"],
                output_names=["y"],
                opset_version=17,
                dynamic_axes={"x": axes},
                dynamo=False,
            )
    return path


@pytest.fixture(scope="session")
def exported(tmp_path_factory):
    folder = tmp_path_factory.mktemp("onnx-exports")
    cache: dict[tuple[str, str], Path] = {}

    def get(name: str, exporter: str) -> Path:
        if (name, exporter) not in cache:
            cache[name, exporter] = export(name, exporter, folder)
        return cache[name, exporter]

    return get


@pytest.fixture
def no_jit():
    """Run interpreted: the zoo's big models would spend the test budget compiling."""
    import msvm as ms

    before = ms.get_context().jit_enabled
    ms.set_context(jit_enabled=False)
    yield
    ms.set_context(jit_enabled=before)
