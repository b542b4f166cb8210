"""Cold start: ``import msvm`` and a first interpreted call leave the heavy machinery unloaded.

What is asserted is what gets imported, in a fresh interpreter — not time, which a shared machine
makes noisy (``python -m bench interpreter`` reports the times next to the goal). The JIT, llvmlite,
the kernel variants and the host measurements load when first used; the Jupyter stack, plotly,
scipy and torch never load with the core.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NEVER = ("IPython", "ipywidgets", "plotly", "scipy", "torch", "msvm_widgets")
LAZY = ("llvmlite", "threadpoolctl", "msvm.msjit", "msvm.kernels", "msvm.native.llvm", "msvm.native.blas",
        "msvm.native.host")


def modules_after(code: str) -> set[str]:
    """The modules a fresh interpreter has loaded after running ``code``."""
    script = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=120, check=True)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


def test_import_msvm_leaves_the_heavy_machinery_out() -> None:
    modules = modules_after("import msvm")
    assert "msvm.vm" in modules and "msvm.scheduler" in modules
    assert loaded(modules, NEVER + LAZY) == []


def test_a_first_interpreted_call_loads_no_kernels_and_no_llvm() -> None:
    code = """
import numpy as np
from msvm.bytecode import ModuleBuilder
from msvm.interpreter import Program
mb = ModuleBuilder("small")
f = mb.function("f", ["x"])
x = f.tensor_input(0, "[N, 8]", "float32")
f.ret(f.call("relu", [f.call("add", [f.call("mul", [x, x]), x])]))
fn = Program(mb.build(), {"jit": False}).function("f")
assert fn(np.ones((4, 8), np.float32)).shape == (4, 8)
"""
    modules = modules_after(code)
    assert loaded(modules, (*NEVER, "llvmlite", "msvm.kernels", "msvm.native.blas", "msvm.native.host")) == []
