"""The onnx package's own test data: the nine light zoo models and the pytorch-converted/-operator cases.

Every case is imported and run (interpreted: compiling the big models would spend the suite's budget
on LLVM, and the JIT's code is tested against the interpreter elsewhere) and compared with the
expected outputs at the suite's tolerances: every one of them imports now (test_bad_input.py checks
the refusals of what does not).
"""

from __future__ import annotations

import glob

import numpy as np
import pytest
from conftest import DATA
from onnx import load_tensor, numpy_helper

import msvm as ms

ZOO = [
    "bvlc_alexnet",
    "densenet121",
    "inception_v1",
    "inception_v2",
    "resnet50",
    "shufflenet",
    "squeezenet",
    "vgg19",
    "zfnet512",
]
RTOL = {"densenet121": 2e-3}

def _tensor(path: str) -> np.ndarray:
    return numpy_helper.to_array(load_tensor(path))


@pytest.mark.parametrize("name", ZOO)
def test_light_zoo_model_matches_its_expected_output(name, no_jit):
    model = ms.onnx.load(DATA / "light" / f"light_{name}.onnx")
    expected = _tensor(str(DATA / "light" / f"light_{name}_output_0.pb"))
    shape = (1, 3, 224, 224)
    n = int(np.prod(shape))
    x = (np.arange(n) / n).reshape(shape).astype(np.float32)
    np.testing.assert_allclose(model(x), expected, rtol=RTOL.get(name, 1e-3), atol=1e-7)


def _node_cases() -> list[str]:
    return [
        f"{suite}/{case}"
        for suite in ("pytorch-converted", "pytorch-operator")
        for case in sorted(p.name for p in (DATA / suite).iterdir())
    ]


@pytest.mark.parametrize("case", _node_cases())
def test_pytorch_node_case_matches_its_expected_outputs(case, no_jit):
    folder = DATA / case
    model = ms.onnx.load(folder / "model.onnx")
    for data in sorted(glob.glob(str(folder / "test_data_set_*"))):
        inputs = [_tensor(p) for p in sorted(glob.glob(f"{data}/input_*.pb"))]
        expected = [_tensor(p) for p in sorted(glob.glob(f"{data}/output_*.pb"))]
        out = model(*inputs)
        outs = out if isinstance(out, tuple) else (out,)
        for got, want in zip(outs, expected, strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-7, equal_nan=True)
