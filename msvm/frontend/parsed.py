"""A Python function as the frontend sees it: source positions, AST, names, signature and annotations.

Why parsed once: decoration parses and checks the function, every version compiles from the same
tree, and a caller that inlines a jitted function reuses the callee's parse.
"""

from __future__ import annotations

import ast
import inspect
from dataclasses import dataclass
from typing import Any

from ..errors import CompileError
from .annotations import Tensor, TensorAnnotation
from .checks import Namespace, check_function, local_names
from .source import SourceInfo, parse_function


@dataclass(frozen=True)
class ParsedFunction:
    py_func: Any
    src: SourceInfo
    tree: ast.FunctionDef
    namespace: Namespace
    locals: frozenset[str]
    signature: inspect.Signature
    annotations: dict[str, TensorAnnotation]  # only ms.Tensor annotations; others are ignored

    @classmethod
    def parse(cls, fn: Any) -> ParsedFunction:
        """Parse, check for unsupported constructs and unknown names, read the ms.Tensor annotations."""
        src, tree = parse_function(fn)
        namespace = Namespace(fn)
        check_function(src, tree, namespace)
        signature = inspect.signature(fn)
        nodes = {a.arg: a for a in [*tree.args.posonlyargs, *tree.args.args, *tree.args.kwonlyargs]}
        try:
            raw = inspect.get_annotations(fn, eval_str=True)
        except Exception as exc:  # a string annotation that does not evaluate
            node = tree.args.args[0] if tree.args.args else tree
            raise src.error("E-COMPILE-ANNOTATION", node, f"cannot evaluate the annotations of {tree.name}: "
                            f"{exc}",
                            "annotate tensors with ms.Tensor[...] using names the function sees") from None
        annotations = {}
        for name, value in raw.items():
            if name == "return":
                continue
            if isinstance(value, TensorAnnotation):
                annotations[name] = value
            elif value is Tensor:
                raise src.error("E-COMPILE-ANNOTATION", nodes[name], f"parameter {name!r} is annotated with "
                                "a bare ms.Tensor",
                                "give its shape: ms.Tensor['N', 3] (use '?' for a dynamic dim)")
        return cls(fn, src, tree, namespace, frozenset(local_names(tree)), signature, annotations)

    def param_node(self, name: str) -> ast.arg:
        args = self.tree.args
        for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
            if a.arg == name:
                return a
        raise KeyError(name)

    def error(self, code: str, node: ast.AST, message: str, hint: str | None = None) -> CompileError:
        return self.src.error(code, node, message, hint)


__all__ = ["ParsedFunction"]
