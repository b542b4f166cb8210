"""``@ms.jit``: compile a Python function to MS-BC at decoration, one version per argument signature.

Why versions are keyed by cheap per-parameter extractors: every call computes its key (an annotated
tensor's dtype, an unannotated one's dtype and rank, a specialised int's value), so each extractor is
built once at decoration and does a type check and an attribute read on the common path.
"""

from __future__ import annotations

import functools
import inspect
import re
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from ..bytecode.module import Module
from ..bytecode.opcodes import DTYPES
from ..errors import MsvmError
from ..interpreter import Program
from ..ops.registry import host_array
from ..options import CACHE_MODES, JitOptions, parse_options
from ..shapes import ShapeSpec
from ..verifier import verify_module
from .annotations import Mutable, TensorAnnotation
from .compiler import FunctionCompiler, ParamKind, ScalarParam, StaticParam, TensorParam, scalar_symbol
from .parsed import ParsedFunction
from .values import NOTHING, VALUE, rebuild

# -- signature keys ----------------------------------------------------------------------------------

_MUTABLE = "mutable"  # key parts of unannotated parameters that are not (type, value) or (dtype, rank)
_FLOAT = "float"


def _as_array(fname: str, pname: str, value: Any, dtype: np.dtype | None = None) -> np.ndarray:
    """A non-ndarray argument for a tensor parameter: a DLPack tensor (torch, cupy, ...) zero-copy with its
    own dtype, anything else as numpy converts it; only Python data (lists, scalars) takes ``dtype``.

    Why a tensor keeps its dtype: int32 or float ids must meet the int64 an annotation pins as the same
    error a numpy array meets, not be cast on the way in.
    """
    try:
        if hasattr(value, "__dlpack__"):
            arr = host_array(value)
        elif dtype is not None and not hasattr(value, "dtype"):
            arr = np.asarray(value, dtype=dtype)
        else:
            arr = np.asarray(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{fname}() argument {pname!r} must be array-like, got {type(value).__name__}: "
                        f"{exc}") from None
    except (BufferError, RuntimeError) as exc:  # a tensor on a GPU, or one DLPack cannot export
        raise TypeError(f"{fname}() argument {pname!r}: {type(value).__name__} cannot be read in place "
                        f"({exc}); msvm runs on the CPU: pass a CPU tensor (torch: x.cpu())") from None
    if arr.dtype.name not in DTYPES:
        what = "is not array-like" if arr.dtype == object else f"has dtype {arr.dtype.name}"
        raise TypeError(f"{fname}() argument {pname!r} {what} (got {type(value).__name__}); tensors must "
                        f"have one of the dtypes {', '.join(DTYPES)}")
    return arr


def _static_tuple(value: Any) -> bool:
    return all(type(v) in (int, float, bool, str) or v is None or (type(v) is tuple and _static_tuple(v))
               for v in value)


Extractor = Callable[[Any], Any]
Converter = Callable[[Any], Any]
Input = tuple[int, Converter, bool]  # (argument index, conversion, is it a tensor: ndarrays pass unconverted)


def _tensor_extractor(fname: str, pname: str, annotation: TensorAnnotation) -> tuple[Extractor, Converter]:
    """Key part of an annotated tensor parameter: its dtype (None for an optional tensor left out)."""
    if annotation.dtype is None:
        def extract(a: Any) -> Any:
            if type(a) is np.ndarray:
                return a.dtype
            return None if a is None else _as_array(fname, pname, a).dtype

        def convert(a: Any) -> Any:
            return a if type(a) is np.ndarray else _as_array(fname, pname, a)

        return extract, convert
    pinned = np.dtype(annotation.dtype)

    def extract_pinned(a: Any) -> Any:
        if a is None:
            return None
        if type(a) is np.ndarray and a.dtype == pinned:
            return pinned
        arr = a if isinstance(a, np.ndarray) else _as_array(fname, pname, a, pinned)
        if arr.dtype != pinned:
            raise TypeError(f"{fname}() argument {pname!r} must have dtype {pinned.name} (pinned by its "
                            f"annotation), got {arr.dtype.name}; cast it with .astype(np.{pinned.name}) "
                            f"(torch: .to(torch.{pinned.name}))")
        return pinned

    def convert_pinned(a: Any) -> Any:
        return a if type(a) is np.ndarray else _as_array(fname, pname, a, pinned)

    return extract_pinned, convert_pinned


def _free_extractor(fname: str, pname: str) -> Extractor:
    """Key part of an unannotated parameter: what kind of argument it got decides the version."""

    def slow(a: Any) -> Any:
        if isinstance(a, (np.bool_, bool)):
            return (bool, bool(a))
        if isinstance(a, (np.integer, int)):
            return (int, int(a))
        if type(a) is tuple and _static_tuple(a):
            return (tuple, a)
        arr = _as_array(fname, pname, a)
        return (arr.dtype, arr.ndim)

    def extract(a: Any) -> Any:
        t = type(a)
        if t is np.ndarray:
            return (a.dtype, a.ndim)
        if t is int or t is bool or t is str or a is None:
            return (t, a)
        if t is Mutable:
            return _MUTABLE
        if t is float:
            return _FLOAT
        return slow(a)

    return extract


def _free_converter(fname: str, pname: str, part: Any) -> Converter | None:
    """How an unannotated argument is passed to the bytecode (None: it is folded, not passed)."""
    if part == _MUTABLE:
        return int
    if part == _FLOAT:
        return functools.partial(np.asarray, dtype=np.float64)
    if isinstance(part[0], np.dtype):
        return lambda a: a if type(a) is np.ndarray else _as_array(fname, pname, a)
    return None


def _key_function(fast_paths: list[str], extractors: list[Extractor],
                  pinned: list[np.dtype | None]) -> Callable[[tuple], tuple]:
    """One generated function computing a call's key: ndarray arguments never leave its inlined fast paths.

    ``fast_paths[i]`` is "tensor" (annotated: its dtype), "pinned" (annotated with a dtype) or "free"
    (unannotated: dtype and rank); anything that is not an ndarray goes to ``extractors[i]``.
    """
    namespace: dict[str, Any] = {"ndarray": np.ndarray}
    parts = []
    for i, (kind, extract, dtype) in enumerate(zip(fast_paths, extractors, pinned)):
        namespace[f"e{i}"], namespace[f"p{i}"] = extract, dtype
        if kind == "tensor":
            parts.append(f"(a{i}.dtype if type(a{i}) is ndarray else e{i}(a{i}))")
        elif kind == "pinned":
            parts.append(f"(p{i} if type(a{i}) is ndarray and a{i}.dtype == p{i} else e{i}(a{i}))")
        else:
            parts.append(f"((a{i}.dtype, a{i}.ndim) if type(a{i}) is ndarray else e{i}(a{i}))")
    names = "".join(f"a{i}, " for i in range(len(parts)))
    source = f"def key(args):\n    {names}= args\n    return ({''.join(p + ', ' for p in parts)})\n"
    if not parts:
        source = "def key(args):\n    return ()\n"
    exec(compile(source, "<ms.jit signature key>", "exec"), namespace)
    return namespace["key"]


# -- versions --------------------------------------------------------------------------------------


SHAPES_KEPT = 32  # distinct shape combinations a version records of its unannotated arrays


class Version:
    """One compiled signature: its module, and the prepared program that runs it."""

    def __init__(self, key: tuple, module: Module, inputs: list[Input], returns: Any,
                 options: JitOptions, watched: tuple[int, ...] = ()) -> None:
        self.key = key
        # The shapes its unannotated arrays (argument indices ``watched``) came with, for the SCD
        # analysis's "annotate w1 as ms.Tensor[8, 3, 3, 3]": the shapes that never changed are the
        # literals. Recorded until SHAPES_KEPT combinations are known, then never again.
        self.watched = watched
        self.shapes: dict[tuple, None] = {}
        self.returns = returns  # the Python structure of its results (kept for pickling)
        self.module = module
        self.name = module.functions[0].name
        self.inputs = inputs
        self.program = Program(module, options.as_dict(), info=verify_module(module))
        self.executable = self.program.function(self.name)
        # Planned at once, not at the first call: the compile worker starts while the program gets its
        # inputs ready, and the first call pays neither for the JIT's imports nor for its analysis.
        self.executable.plan_jit()
        self.run = self._runner(len(key), returns)

    def arguments(self, args: tuple) -> list[Any]:
        """The bytecode arguments of a call (specialised values dropped, the rest converted)."""
        return [convert(args[i]) for i, convert, _ in self.inputs]

    def _seen(self, shapes: tuple) -> None:
        self.shapes[shapes] = None
        if len(self.shapes) >= SHAPES_KEPT:  # enough to tell the fixed dims: stop paying for it
            self.run = self._runner(len(self.key), self.returns, watch=False)

    def _runner(self, n_args: int, returns: Any, watch: bool = True) -> Callable[[tuple], Any]:
        """A generated ``run(args)``: ndarray arguments pass straight through to the executable's fast
        path (the executable itself until that is generated); a new combination of the watched arrays'
        shapes is recorded (one tuple and one dict lookup)."""
        namespace: dict[str, Any] = {"ndarray": np.ndarray, "exe": self.executable, "rebuild": rebuild,
                                     "R": returns, "S": self.shapes, "seen": self._seen}
        values = []
        for k, (index, convert, is_tensor) in enumerate(self.inputs):
            namespace[f"c{k}"] = convert
            a = f"a{index}"
            values.append(f"({a} if type({a}) is ndarray else c{k}({a}))" if is_tensor else f"c{k}({a})")
        call = f"(exe.fast or exe)({', '.join(values)})"
        flat = returns in (VALUE, NOTHING) or (returns[0] is tuple and len(returns[1]) > 1
                                               and all(c == VALUE for c in returns[1]))
        unpack = f"    {''.join(f'a{i}, ' for i in range(n_args))}= args\n" if n_args else ""
        if watch and self.watched:
            shapes = "".join(f"(a{i}.shape if type(a{i}) is ndarray else None), " for i in self.watched)
            unpack += f"    k = ({shapes})\n    if k not in S:\n        seen(k)\n"
        body = call if flat else f"rebuild(R, {call})"
        exec(compile(f"def run(args):\n{unpack}    return {body}\n", "<ms.jit call>", "exec"), namespace)
        return namespace["run"]


class JitFunction:
    """A jitted function: call it like the Python function; see ``bytecode``, ``versions``, ``debug``."""

    def __init__(self, fn: Callable[..., Any], options: JitOptions) -> None:
        if not inspect.isfunction(fn):
            raise TypeError(f"@ms.jit decorates Python functions, got {type(fn).__name__} {fn!r}")
        functools.update_wrapper(self, fn)
        self.py_func = fn
        self.options = options
        self.parsed = ParsedFunction.parse(fn)
        self._versions: dict[tuple, Version] = {}
        self._latest: Version | None = None
        pinned = self._set_signature(fn.__name__, self.parsed.signature, self.parsed.annotations)
        params = list(self.parsed.signature.parameters.values())
        self._deferred: MsvmError | None = None
        default = self._default_key(params)
        if default is not None:
            try:
                self._compile(default)
            except MsvmError as exc:
                self._deferred = exc
                self._compile_other_guess(params, pinned, default)

    def _set_signature(self, fname: str, signature: inspect.Signature,
                       annotations: dict[str, TensorAnnotation]) -> list[np.dtype | None]:
        """The call-key machinery of ``signature`` (also a shipped function's, rebuilt without Python
        source); returns each parameter's pinned dtype."""
        self._lock = threading.RLock()
        self._signature = signature
        params = list(signature.parameters.values())
        self._names = [p.name for p in params]
        self._nargs = len(params)
        self._extractors: list[Extractor] = []
        self._converters: dict[str, Converter] = {}
        fast_paths, pinned = [], []
        for p in params:
            annotation = annotations.get(p.name)
            if annotation is not None:
                extract, convert = _tensor_extractor(fname, p.name, annotation)
                self._converters[p.name] = convert
                fast_paths.append("pinned" if annotation.dtype else "tensor")
                pinned.append(np.dtype(annotation.dtype) if annotation.dtype else None)
            else:
                extract = _free_extractor(fname, p.name)
                fast_paths.append("free")
                pinned.append(None)
            self._extractors.append(extract)
        self._key = _key_function(fast_paths, self._extractors, pinned)
        return pinned

    def _compile_other_guess(self, params: list[inspect.Parameter], pinned: list[np.dtype | None],
                             default: tuple) -> None:
        """After the float32 guess failed: int64 for the unpinned tensors, and its error is the function's.

        float32 is a guess no call asked for: a function of ids or masks does not compile for it, and
        each dtype should compile (or fail, with its own message) at its first call. An error that the
        int64 guess meets as well does not depend on the dtype and is raised at decoration, where it
        was written.
        """
        guessed = [p.name in self.parsed.annotations and dtype is None for p, dtype in zip(params, pinned)]
        if not any(guessed):
            raise self._deferred  # the dtypes the annotations name: the version every call runs
        other = tuple(np.dtype("int64") if g else part for g, part in zip(guessed, default))
        try:
            self._compile(other)
        except MsvmError:
            raise self._deferred from None

    def _default_key(self, params: list[inspect.Parameter]) -> tuple | None:
        """The key of the version compiled at decoration: every tensor annotated (float32 unless pinned)."""
        key = []
        for p, extract in zip(params, self._extractors):
            annotation = self.parsed.annotations.get(p.name)
            if annotation is not None:
                key.append(np.dtype(annotation.dtype or "float32"))
            elif p.default is not inspect.Parameter.empty:
                try:
                    key.append(extract(p.default))
                except TypeError:  # a default the VM cannot take: it is reported at the call instead
                    return None
            else:
                return None
        return tuple(key)

    # -- calling ------------------------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs or len(args) != self._nargs:
            args = self._bind(args, kwargs)
        key = self._key(args)
        version = self._versions.get(key)
        if version is None:
            version = self._compile(key)
        return version.run(args)

    def _bind(self, args: tuple, kwargs: dict[str, Any]) -> tuple:
        try:
            bound = self._signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{self.__name__}(): {exc}") from None
        bound.apply_defaults()
        return tuple(bound.arguments[name] for name in self._names)

    def _version_for(self, args: tuple, kwargs: dict[str, Any]) -> tuple[Version, tuple]:
        if kwargs or len(args) != self._nargs:
            args = self._bind(args, kwargs)
        key = self._key(args)
        return self._versions.get(key) or self._compile(key), args

    def program_for(self, *args: Any, **kwargs: Any) -> tuple[Any, str, list[Any]]:
        """(Program, bytecode function name, bytecode arguments) of this call's version (for the JIT)."""
        version, args = self._version_for(args, kwargs)
        return version.program, version.name, version.arguments(args)

    def shapes_seen(self, *args: Any, **kwargs: Any) -> dict[str, list[tuple[int, ...]]]:
        """The shapes the unannotated array parameters of this call's version came with: per parameter
        one shape per distinct combination recorded (aligned across parameters), this call's last."""
        version, args = self._version_for(args, kwargs)
        now = tuple(np.shape(args[i]) for i in version.watched)
        combos = [c for c in version.shapes if None not in c and c != now] + [now]
        return {self._names[i]: [c[k] for c in combos] for k, i in enumerate(version.watched)}

    def debug(self, *args: Any, **kwargs: Any) -> Any:
        """The interpreter's stepping Execution of this call (``step()``, ``run()``, ``registers``)."""
        version, args = self._version_for(args, kwargs)
        return version.executable.debug(*version.arguments(args))

    # -- compiling ----------------------------------------------------------------------------------
    def _kinds(self, key: tuple) -> tuple[dict[str, ParamKind], list[Input]]:
        kinds: dict[str, ParamKind] = {}
        inputs: list[Input] = []
        for index, (name, part) in enumerate(zip(self._names, key)):
            annotation = self.parsed.annotations.get(name)
            if annotation is not None and part is None:  # an optional tensor left out: folded as None
                kinds[name] = StaticParam(None)
                continue
            if annotation is not None:
                kinds[name] = TensorParam(part.name, annotation.spec)
                inputs.append((index, self._converters[name], True))
                continue
            convert = _free_converter(self.__name__, name, part)
            if part == _MUTABLE:
                kinds[name] = ScalarParam()
            elif part == _FLOAT:
                kinds[name] = TensorParam("float64", ShapeSpec(), weak=True)
            elif isinstance(part[0], np.dtype):
                if part[0].name not in DTYPES:
                    raise TypeError(f"{self.__name__}() argument {name!r} has dtype {part[0].name}; tensors "
                                    f"must have one of the dtypes {', '.join(DTYPES)}")
                kinds[name] = TensorParam(part[0].name, ShapeSpec(f"{name}_{i}" for i in range(part[1])))
            else:
                kinds[name] = StaticParam(part[1])
            if convert is not None:
                inputs.append((index, convert, isinstance(kinds[name], TensorParam)))
        return kinds, inputs

    def _check_annotation_symbols(self, kinds: dict[str, ParamKind]) -> None:
        """Every symbol in an annotated shape is bound at entry in this version (else a CompileError).

        Why here and not in the verifier: it would reject the version too (E-VERIFY-UNBOUND-SYMBOL), but
        at a TENSOR_CREATE the user never wrote, while the mistake is in the annotation. A symbol is bound
        by a dimension that is just that symbol (``"H"``) or by an ``ms.mutable`` parameter of its name.
        """
        bound = {scalar_symbol(name) for name, kind in kinds.items() if isinstance(kind, ScalarParam)}
        bound.update(d.name for kind in kinds.values() if isinstance(kind, TensorParam)
                     for d in kind.spec if d.is_symbol)
        for name, kind in kinds.items():
            if name not in self.parsed.annotations or not isinstance(kind, TensorParam):
                continue
            for axis, dim in enumerate(kind.spec):
                missing = sorted(dim.free_symbols - bound)
                if not missing:
                    continue
                symbol = missing[0]
                plain = re.sub(r"\W", "", str(dim))
                plain = plain if plain[:1].isalpha() else f"D{plain}"
                hint = (f"name the dimension with a plain symbol, e.g. '{plain}', or bind {symbol} with "
                        "another parameter's dimension")
                if symbol in self._names:
                    hint += f" (or pass {symbol} as ms.mutable(...))"
                raise self.parsed.error(
                    "E-COMPILE-ANNOTATION", self.parsed.param_node(name),
                    f"dim {axis} of parameter {name!r} is {dim}, but nothing binds {', '.join(missing)}: "
                    "a size expression needs its symbols bound by other dimensions", hint)

    def _compile(self, key: tuple) -> Version:
        with self._lock:
            version = self._versions.get(key)
            if version is None:
                kinds, inputs = self._kinds(key)
                self._check_annotation_symbols(kinds)
                compiler = FunctionCompiler(self, kinds)
                module = compiler.compile()
                returns = compiler.frame.returns_structure or NOTHING
                watched = tuple(index for index, (name, part) in enumerate(zip(self._names, key))
                                if name not in self.parsed.annotations and type(part) is tuple
                                and isinstance(part[0], np.dtype))
                version = Version(key, module, inputs, returns, self.options, watched)
                self._versions[key] = version
            self._latest = version
            return version

    # -- inspection ---------------------------------------------------------------------------------
    @property
    def bytecode(self) -> Module:
        """The Module of the most recently compiled version; ``str()`` of it is its disassembly."""
        if self._latest is None:
            guess = (f" (its float32 version, compiled at decoration, failed: {self._deferred.message})"
                     if self._deferred is not None else "")
            raise RuntimeError(
                f"{self.__name__} has not been compiled yet{guess}: call it once, or annotate every tensor "
                "parameter with ms.Tensor[...] (and give other parameters defaults) so that it compiles at "
                "decoration")
        return self._latest.module

    @property
    def versions(self) -> dict[tuple, Module]:
        """Compiled versions, signature key -> Module.

        One key part per parameter: an annotated tensor's dtype (None: left out); for unannotated ones
        (dtype, rank) of a tensor, (type, value) of a specialised value, "mutable" or "float".
        """
        return {key: v.module for key, v in self._versions.items()}

    def __repr__(self) -> str:
        return f"<ms.jit function {self.__qualname__} ({len(self._versions)} version(s))>"

    def __reduce__(self) -> tuple[Callable[[bytes], Any], tuple[bytes]]:
        """Pickled as its versions' MS-BC, its JIT options and its signature as plain data, never as
        Python code (``persist.ship``): the unpickled function serves the signatures compiled here."""
        from .persist import receive, ship

        return receive, (ship(self),)


def jit(fn: Callable[..., Any] | None = None, /, **options: Any) -> Any:
    """``@ms.jit`` or ``@ms.jit(cache_mode="bucket", ...)``: compile ``fn`` to MS-BC now, run it on the VM."""
    opts = parse_options(options)
    if fn is None:
        return lambda f: JitFunction(f, opts)
    return JitFunction(fn, opts)


__all__ = ["CACHE_MODES", "JitFunction", "JitOptions", "Version", "jit"]
