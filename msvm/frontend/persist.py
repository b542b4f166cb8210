"""Saving compiled functions as ``.msbc`` files and loading them back as callable modules.

Why a loaded module is callable by attribute: ``mod = ms.load("f.msbc"); mod.f(x)`` is the shortest way
to run shipped bytecode, and it goes through the same verifier and interpreter as a jitted call.
"""

from __future__ import annotations

from os import PathLike

from ..bytecode.binary import load_module, save_module
from ..bytecode.module import Module
from ..interpreter import Executable, Program
from .jitfunction import JitFunction


def save(fn_or_module: JitFunction | Module, path: str | PathLike[str]) -> None:
    """Write a jitted function's current version (``fn.bytecode``), or a Module, to ``path`` as ``.msbc``."""
    if isinstance(fn_or_module, JitFunction):
        module = fn_or_module.bytecode
    elif isinstance(fn_or_module, Module):
        module = fn_or_module
    else:
        raise TypeError(f"ms.save takes an @ms.jit function or a Module, got {type(fn_or_module).__name__}")
    save_module(module, path)


class LoadedModule:
    """A loaded ``.msbc`` module: each bytecode function is an attribute (``mod.f(x)``).

    A function takes one argument per bytecode parameter: arrays for tensors, ints for ``ms.mutable``
    parameters (values the original call specialised are already folded in).
    """

    def __init__(self, module: Module) -> None:
        self.module = module
        self.program = Program(module)

    def __getattr__(self, name: str) -> Executable:
        if name.startswith("__") or name in ("module", "program"):
            raise AttributeError(name)
        try:
            return self.program.function(name)
        except KeyError:
            raise AttributeError(f"module {self.module.name!r} has no function {name!r} (functions: "
                                 f"{', '.join(self.program.function_names)})") from None

    def __dir__(self) -> list[str]:
        return sorted({*self.program.function_names, "module", "program"})

    def __repr__(self) -> str:
        return f"<msvm module {self.module.name!r}: {', '.join(self.program.function_names)}>"


def load(path: str | PathLike[str]) -> LoadedModule:
    """Read, verify and prepare a ``.msbc`` file."""
    return LoadedModule(load_module(path))


__all__ = ["LoadedModule", "load", "save"]
