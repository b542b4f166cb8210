"""An imported ONNX model: ``run`` (onnxruntime's convention), positional calls, and its jit function.

Why the function is a frontend ``Version``: an imported module runs through exactly the path a jitted
Python function does — verified once, prepared as a Program, its JIT planned at once — so SCD analysis,
``debug``, traces and ``jit_info`` see it as any other function. Every dynamic axis is a symbol, so
one version serves every shape.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..bytecode.module import Module
from ..frontend.jitfunction import Version
from ..frontend.values import VALUE
from ..options import JitOptions


def _converter(dtype: str):
    np_dtype = np.dtype(dtype)

    def convert(a: Any) -> np.ndarray:
        arr = np.asarray(a)
        if arr.dtype != np_dtype:
            if not np.can_cast(arr.dtype, np_dtype, casting="same_kind"):
                raise TypeError(f"an input of dtype {arr.dtype} cannot feed a {dtype} model input")
            arr = arr.astype(np_dtype)
        return arr

    return convert


class OnnxFunction:
    """The model's jit function: ``bytecode``, ``versions``, ``debug``, ``program_for``, calls."""

    def __init__(
        self, name: str, module: Module, input_dtypes: Sequence[str], n_outputs: int, options: JitOptions
    ) -> None:
        self.__name__ = self.__qualname__ = name
        self.options = options
        inputs = [(i, _converter(d), True) for i, d in enumerate(input_dtypes)]
        returns = VALUE if n_outputs == 1 else (tuple, [VALUE] * n_outputs)
        self._key = tuple(np.dtype(d) for d in input_dtypes)
        self._version = Version(self._key, module, inputs, returns, options)
        self._nargs = len(input_dtypes)

    def __call__(self, *args: Any) -> Any:
        if len(args) != self._nargs:
            raise TypeError(f"{self.__name__}() takes {self._nargs} input(s), got {len(args)}")
        return self._version.run(args)

    def program_for(self, *args: Any) -> tuple[Any, str, list[Any]]:
        """(Program, bytecode function name, bytecode arguments) of a call (for the SCD analysis)."""
        return self._version.program, self._version.name, self._version.arguments(args)

    @property
    def executable(self) -> Any:
        """The prepared bytecode function: ``ms.vm.print_scd_analysis(model.function.executable, x)``."""
        return self._version.executable

    def debug(self, *args: Any) -> Any:
        """The interpreter's stepping Execution of this call."""
        return self._version.executable.debug(*self._version.arguments(args))

    @property
    def bytecode(self) -> Module:
        return self._version.module

    @property
    def versions(self) -> dict[tuple, Module]:
        """One version: every dynamic axis is a symbol, so no shape compiles another."""
        return {self._key: self._version.module}

    def __repr__(self) -> str:
        return f"<ms.onnx function {self.__name__} (1 version)>"


class OnnxModel:
    """``model.run(None, {"x": x})``, ``model(x)``, ``model.function``, ``model.bytecode``."""

    def __init__(
        self,
        function: OnnxFunction,
        input_names: Sequence[str],
        output_names: Sequence[str],
        symbols: Mapping[str, str],
    ) -> None:
        self.function = function
        self.input_names = list(input_names)
        self.output_names = list(output_names)
        self.symbols = dict(symbols)  # ONNX dim_param -> MS-BC symbol

    @property
    def bytecode(self) -> Module:
        """The imported module; ``print`` it for its MS-BC, whose locations name the ONNX nodes."""
        return self.function.bytecode

    def __call__(self, *inputs: Any) -> Any:
        return self.function(*inputs)

    def run(self, output_names: Sequence[str] | None, feeds: Mapping[str, Any]) -> list[np.ndarray]:
        """onnxruntime's ``InferenceSession.run``: the named outputs (None: all) as a list."""
        missing = [n for n in self.input_names if n not in feeds]
        extra = [n for n in feeds if n not in self.input_names]
        if missing or extra:
            raise ValueError(
                f"feeds must name exactly the model inputs {self.input_names}"
                + (f"; missing {missing}" if missing else "")
                + (f"; unknown {extra}" if extra else "")
            )
        result = self.function(*(feeds[n] for n in self.input_names))
        outs = list(result) if len(self.output_names) > 1 else [result]
        if output_names is None:
            return outs
        index = {n: i for i, n in enumerate(self.output_names)}
        unknown = [n for n in output_names if n not in index]
        if unknown:
            raise ValueError(f"unknown output name(s) {unknown}; outputs: {self.output_names}")
        return [outs[index[n]] for n in output_names]

    def __reduce__(self) -> tuple[Any, tuple[bytes]]:
        """Pickled as its MS-BC module and plain data (``frontend.persist.ship``), never Python code."""
        from ..frontend.persist import receive, ship

        return receive, (ship(self),)

    def __repr__(self) -> str:
        return (
            f"<ms.onnx model {self.function.__name__}: inputs {self.input_names}, outputs "
            f"{self.output_names}>"
        )


__all__ = ["OnnxFunction", "OnnxModel"]
