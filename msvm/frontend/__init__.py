"""The ``@ms.jit`` Python frontend: Python functions compiled to MS-BC, run on the VM.

``jit`` compiles at decoration (or at the first call with a new argument signature), ``Tensor`` and
``mutable`` say what is symbolic, and ``save``/``load`` move compiled versions through ``.msbc`` files.
"""

from .annotations import Mutable, Tensor, TensorAnnotation, mutable, symbolic_mul
from .calls import PortingWarning
from .jitfunction import JitFunction, JitOptions, jit
from .persist import LoadedModule, load, save

__all__ = [
    "JitFunction",
    "JitOptions",
    "LoadedModule",
    "Mutable",
    "PortingWarning",
    "Tensor",
    "TensorAnnotation",
    "jit",
    "load",
    "mutable",
    "save",
    "symbolic_mul",
]
