"""msvm: a bytecode VM with a JIT for dynamic-shape tensor programs.

``import msvm as ms``; decorate a function with ``@ms.jit``, call it with numpy arrays. The
Jupyter layer (``%load_ext msvm``) is imported only when IPython asks for it, and the heavy parts
of the core — the JIT, llvmlite, the native kernels, the host measurements — only when first used,
so that importing msvm and running a first interpreted call takes a fraction of a second
(``tests/test_cold_start.py`` checks what ``import msvm`` leaves out).
"""

__version__ = "0.1.0"  # before the imports: the capability DB's on-disk cache is keyed by it

from . import ops, vm
from .bytecode import Module
from .bytecode.binary import load_module, save_module
from .bytecode.text import assemble, disassemble
from .context import get_context, set_context
from .errors import (
    BytecodeFormatError,
    CapabilityPatchError,
    CompileError,
    JitError,
    KernelError,
    KernelNotFoundError,
    MsvmError,
    OnnxImportError,
    ResourceLimitError,
    ShapeError,
    VerifyError,
)
from .frontend import Tensor, jit, load, mutable, save, symbolic_mul
from .validate import validate


def __getattr__(name: str):
    """``ms.onnx``, ``ms.distributed``: imported on first use (``import msvm`` imports no onnx, no dask)."""
    if name in ("onnx", "distributed"):
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'msvm' has no attribute {name!r}")


def load_ipython_extension(ipython) -> None:  # pragma: no cover - exercised by the widget tests
    """``%load_ext msvm``: hand over to the Jupyter layer (imported only now)."""
    from msvm_widgets.magics import load_ipython_extension as load

    load(ipython)


__all__ = [
    "BytecodeFormatError",
    "CapabilityPatchError",
    "CompileError",
    "JitError",
    "KernelError",
    "KernelNotFoundError",
    "Module",
    "MsvmError",
    "OnnxImportError",
    "ResourceLimitError",
    "ShapeError",
    "Tensor",
    "VerifyError",
    "assemble",
    "disassemble",
    "get_context",
    "jit",
    "load",
    "load_module",
    "mutable",
    "ops",
    "save",
    "save_module",
    "set_context",
    "symbolic_mul",
    "validate",
    "vm",
]
