"""Shared by the ONNX import tests: the onnx test-data folders, the exported PyTorch models, imports.

The models and their export are ``bench.onnx``'s (``EXPORTS``: the benchmark times the same files).
Why exports are kept on disk between runs: a ``dynamo=True`` export costs seconds (torch.export),
most of this folder's time, and its file depends only on the model code and the library versions —
so the folder (``$MSVM_TEST_EXPORTS``, default ``~/.cache/msvm-tests/onnx-exports``) is keyed by a
digest of bench/onnx.py and the torch, onnx and onnxscript versions: any change exports afresh.
Each file is imported once per session (``imported``).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
from pathlib import Path

import pytest

onnx = pytest.importorskip("onnx")

from bench.onnx import EXPORTS, example, export  # noqa: E402

DATA = Path(os.path.dirname(onnx.__file__)) / "backend" / "test" / "data"
MODELS = EXPORTS

__all__ = ["DATA", "MODELS", "example"]


def _export_folder() -> Path:
    import bench.onnx

    digest = hashlib.sha256(Path(bench.onnx.__file__).read_bytes())
    for package in ("torch", "onnx", "onnxscript"):
        try:
            digest.update(f"{package}={importlib.metadata.version(package)}".encode())
        except importlib.metadata.PackageNotFoundError:
            digest.update(f"{package} missing".encode())
    # Not under $XDG_CACHE_HOME, which tests/conftest.py makes a fresh folder per session for msvm's
    # own caches: these files are torch's output, not msvm's, and are keyed by what makes them.
    base = Path(os.environ.get("MSVM_TEST_EXPORTS") or Path.home() / ".cache" / "msvm-tests" / "onnx-exports")
    folder = base / digest.hexdigest()[:16]
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="session")
def exported():
    """``exported(name, exporter, opset=17)``: the path of that export (made when the folder lacks it)."""
    folder = _export_folder()

    def get(name: str, exporter: str, opset: int = 17) -> Path:
        path = folder / f"{name}_{exporter}_{opset}.onnx"
        if not path.exists():  # torch (and onnxscript) are imported only to export: seconds each
            pytest.importorskip("torch")
            if exporter == "dynamo":
                pytest.importorskip("onnxscript")
            partial = path.with_suffix(f".{os.getpid()}.part")  # renamed when whole: never half a file
            export(name, exporter, partial, opset)
            partial.replace(path)
        return path

    return get


@pytest.fixture(scope="session")
def imported(exported):
    """``imported(name, exporter, opset=17)``: the msvm model of that export, imported once."""
    import msvm as ms

    cache: dict[tuple, object] = {}

    def get(name: str, exporter: str, opset: int = 17):
        key = (name, exporter, opset)
        if key not in cache:
            cache[key] = ms.onnx.load(exported(name, exporter, opset))
        return cache[key]

    return get


@pytest.fixture
def no_jit():
    """Run interpreted: the JIT is not what these tests check, and its compiles would take the CPU."""
    import msvm as ms

    before = ms.get_context().jit_enabled
    ms.set_context(jit_enabled=False)
    yield
    ms.set_context(jit_enabled=before)
