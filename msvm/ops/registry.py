"""The op registry: one ``OpDef`` per tensor op, the single source of truth for it.

An op is its name, its inputs, an attribute schema, a symbolic shape function and a reference
kernel written in numpy. The verifier checks OP_CALLs against the schema and shape function,
the interpreter runs the reference kernel (the oracle every fast path is tested against), and
``ms.ops.<name>`` calls it eagerly. New ops never change the bytecode format.

Traits are the named properties an op declares once (``OpDef.traits``) so that later layers select
ops by property instead of by name. The vocabulary, and what each trait promises:

- ``elementwise``: each output element depends only on the input elements at the same position
  after broadcasting; the output has the broadcast shape (per-channel parameters, as in
  ``batch_norm``, count as broadcast).
- ``unary`` / ``binary`` / ``ternary``: an elementwise op over exactly 1 / 2 / 3 tensor inputs that
  broadcast together like numpy (``relu``, ``add``, ``where``).
- ``comparison``: a binary elementwise op whose output is bool.
- ``reduction``: each output element depends on a whole axis, row or window of the input — sums and
  arg-reductions, ``softmax``, the norms, pooling.
- ``layout``: output elements are copies of input elements (or a fill value) chosen by index
  arithmetic alone, with no arithmetic on the values: views, copies, padding and gathers
  (``take``, ``embedding``, ``resize_nearest``, but not the interpolating ``resize_bilinear``).
  Only these may return a view of an input.
- ``linalg``: contracts over a dimension, a GEMM at heart (``matmul``, ``linear``, ``conv2d``,
  attention).
- ``creation``: no tensor inputs; the output shape comes from the attributes.
- ``data_dependent``: the output shape depends on the input values (``?`` dims); the JIT ends a
  region there and the SCD analysis counts such dims as not anchored.
- ``multi_output``: the number of outputs depends on the attributes (``outputs`` is callable).
- ``nn``: a ``torch.nn.functional`` op with torch's semantics, defaults and argument forms
  (``stride=2`` for ``(2, 2)``, ``bias=None``): exactly the ops registered as an ``NnOpDef``.

The JIT and the SCD analysis read only ``data_dependent``; the others drive the docs (families in
docs/ops.md) and the op tests.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..bytecode.module import RegRef
from ..bytecode.opcodes import DTYPES
from ..shapes import Dim, ShapeSpec, as_dim, broadcast_shapes, prove_equal

REQUIRED = object()

# Attribute kinds and the Python values they accept (RegRef = a scalar register).
ATTR_KINDS = (
    "int",  # int
    "float",  # float (an int is accepted)
    "bool",  # bool
    "str",  # str, optionally one of ``choices``
    "dtype",  # one of the supported dtype names
    "ints",  # tuple of ints
    "ints_or_str",  # tuple of ints, or a str that is one of ``choices`` (conv2d's padding="same")
    "floats",  # tuple of floats
    "axes",  # None, an int, or a tuple of ints
    "dim",  # an int or a scalar register: a size or index known at run time
    "dims",  # tuple of ints / scalar registers
    "scalar",  # a number (int, float or bool) or a scalar register
)
_WORD_KINDS = ("str", "ints_or_str")  # the kinds whose values may be one of ``Attr.choices``


@dataclass(frozen=True)
class Attr:
    """One attribute of an op's schema: its kind (``ATTR_KINDS``), default, accepted words and doc.

    ``choices`` lists the strings a ``str`` or ``ints_or_str`` attribute accepts, so the schema says
    everything the checker will accept; ``doc`` is the line docs/ops.md shows (required there).
    """

    kind: str
    default: Any = REQUIRED
    choices: tuple = ()
    doc: str = ""

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


@dataclass(frozen=True)
class TensorType:
    """What the verifier knows about a tensor value: its symbolic shape and dtype."""

    shape: ShapeSpec
    dtype: str

    def __str__(self) -> str:
        return f"{self.dtype}{self.shape}"


class OpTypeError(Exception):
    """An OP_CALL whose inputs or attributes an op rejects; the verifier turns it into a diagnostic.

    ``code`` is the stable suffix of the verifier's error code (``E-VERIFY-<code>``).
    """

    def __init__(self, code: str, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.hint = hint


@dataclass(frozen=True)
class Guard:
    """A size relation the verifier could not prove, to be checked at run time.

    ``broadcast`` guards hold when ``b`` equals ``a`` or is 1 (numpy broadcasting); the others
    are strict equalities.
    """

    a: Dim
    b: Dim
    what: str
    broadcast: bool = False

    def holds(self, bindings: Mapping[str, int]) -> bool:
        a, b = self.a.evaluate(bindings), self.b.evaluate(bindings)
        return a == b or (self.broadcast and b == 1)

    def __str__(self) -> str:
        rel = "== or 1 vs" if self.broadcast else "=="
        return f"{self.b} {rel} {self.a} ({self.what})"


class InferContext:
    """Passed to shape functions: records the equalities that can only be checked at run time."""

    def __init__(self) -> None:
        self.guards: list[Guard] = []

    def require_equal(self, a: Dim | int, b: Dim | int, what: str) -> Dim:
        a, b = as_dim(a), as_dim(b)
        proven = prove_equal(a, b)
        if proven is False:
            raise OpTypeError("SHAPE-MISMATCH", f"{what}: {a} vs {b}", "the two sizes must be equal")
        if proven is None:
            self.guards.append(Guard(a, b, what))
        return b if a.is_unknown else a

    def broadcast(self, *shapes: ShapeSpec, what: str = "broadcast") -> ShapeSpec:
        from ..errors import ShapeError

        try:
            result, guards = broadcast_shapes(*shapes)
        except ShapeError as exc:
            raise OpTypeError(
                "SHAPE-MISMATCH",
                f"{what}: shapes {', '.join(map(str, shapes))} do not broadcast ({exc.message})",
                "sizes must match or be 1 (numpy broadcasting)",
            ) from None
        self.guards.extend(Guard(a, b, what, broadcast=True) for a, b in guards)
        return result

    @staticmethod
    def axis(axis: int, rank: int, what: str = "axis") -> int:
        """``axis`` normalised to [0, rank); negative axes count from the end."""
        if not -rank <= axis < rank:
            raise OpTypeError(
                "BAD-AXIS",
                f"{what} {axis} is out of range for rank {rank}",
                f"use an axis in [{-rank}, {rank - 1}]",
            )
        return axis % rank


@dataclass(frozen=True)
class CallOnly:
    """A parameter of an op's Python call that is no attribute (torch's ``training=``, ``inplace=``).

    It is checked where the call is written and then dropped: ``accepts`` says which values work
    (None: any, the parameter changes nothing msvm computes), ``hint`` what to write instead.
    """

    default: Any
    accepts: Callable[[Any], bool] | None = None
    hint: str = ""


Infer = Callable[..., "TensorType | Sequence[TensorType]"]
Kernel = Callable[..., "np.ndarray | tuple[np.ndarray, ...]"]
_POSITIONAL, _KEYWORD_ONLY = inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY


@dataclass
class OpDef:
    """A tensor op.

    ``inputs`` names the tensor inputs; a name starting with ``*`` takes a list of tensors.
    ``infer(ctx, *input_types, **attrs)`` returns the output type(s) — dim-valued attributes
    arrive as symbolic ``Dim``s. ``kernel(*arrays, **attrs)`` returns the output array(s) — dim
    attributes arrive as ints. ``outputs`` is the output count or a function of the attributes.

    The Python call (``ms.ops.<name>``, the frontend's calls, ``msvm.nn.functional``, the docs) is
    ``params``: the parameter names in call order, each an input, an attribute, a ``call_only``
    parameter or an ``aliases`` key (another name for an input or attribute: torch's ``dim`` for
    ``axis``); by default the inputs, then the attributes, then the call-only parameters. A ``"*"``
    among them makes the rest keyword-only, as in Python. Inputs and attributes are always accepted
    by keyword under their own names too.
    """

    name: str
    inputs: tuple[str, ...]
    attrs: Mapping[str, Attr]
    infer: Infer
    kernel: Kernel
    outputs: int | Callable[[Mapping[str, Any]], int] = 1
    traits: frozenset[str] = frozenset()
    doc: str = ""
    optional_inputs: int = 0  # trailing inputs that may be omitted (e.g. linear's bias)
    extra: dict = field(default_factory=dict)  # free-form data for later layers (lowering hints)
    params: tuple[str, ...] = ()
    aliases: Mapping[str, str] = field(default_factory=dict)
    call_only: Mapping[str, CallOnly] = field(default_factory=dict)

    @property
    def variadic(self) -> bool:
        return bool(self.inputs) and self.inputs[0].startswith("*")

    def num_outputs(self, attrs: Mapping[str, Any]) -> int:
        return self.outputs(attrs) if callable(self.outputs) else self.outputs

    def check_arity(self, n_inputs: int) -> None:
        if self.variadic:
            if n_inputs < 1:
                raise OpTypeError("ARITY", f"{self.name} needs at least one input tensor")
            return
        high = len(self.inputs)
        low = high - self.optional_inputs
        if not low <= n_inputs <= high:
            expected = str(high) if low == high else f"{low} to {high}"
            raise OpTypeError(
                "ARITY",
                f"{self.name} takes {expected} input tensor(s), got {n_inputs}",
                f"inputs are ({', '.join(self.inputs)})",
            )

    def check_attrs(self, attrs: Mapping[str, Any]) -> dict[str, Any]:
        """Validate ``attrs`` against the schema and fill in defaults."""
        for key in attrs:
            if key not in self.attrs:
                known = ", ".join(self.attrs) or "none"
                raise OpTypeError(
                    "ATTR-UNKNOWN", f"{self.name} has no attribute {key!r}", f"known attributes: {known}"
                )
        out: dict[str, Any] = {}
        for key, spec in self.attrs.items():
            if key in attrs:
                out[key] = _check_attr_value(self.name, key, spec, attrs[key])
            elif spec.required:
                raise OpTypeError("ATTR-MISSING", f"{self.name} requires attribute {key!r}", spec.doc or None)
            else:
                out[key] = spec.default
        return out

    # -- the Python call ------------------------------------------------------------------------------
    @property
    def call_params(self) -> tuple[str, ...]:
        """The parameters of the Python call, in order (without the ``"*"``)."""
        named = tuple(name for name in self.params if name != "*")
        return named or (*self.inputs, *self.attrs, *self.call_only)

    @property
    def positional_params(self) -> tuple[str, ...]:
        """The parameters a positional argument can fill: those before a ``"*"``."""
        return self.params[:self.params.index("*")] if "*" in self.params else self.call_params

    def target(self, name: str) -> str | None:
        """The input, attribute or call-only parameter a call's ``name`` fills (None: none)."""
        key = self.aliases.get(name, name)
        return key if key in self.inputs or key in self.attrs or key in self.call_only else None

    @property
    def __signature__(self) -> inspect.Signature:
        """The call's signature (``inspect.signature(ms.ops.conv2d)``), derived from ``call_params``."""
        positional = self.positional_params
        optional = set(self.inputs[len(self.inputs) - self.optional_inputs:])
        params = []
        for name in self.call_params:
            kind = _POSITIONAL if name in positional else _KEYWORD_ONLY
            key = self.target(name)
            if key in self.call_only:
                default: Any = self.call_only[key].default
            elif key in self.attrs:
                shown = self.shown_default(key, self.attrs[key].default)
                default = inspect.Parameter.empty if shown is REQUIRED else shown
            else:
                default = None if key in optional else inspect.Parameter.empty
            params.append(inspect.Parameter(name.lstrip("*"), kind, default=default))
        return inspect.Signature(params)

    def shown_default(self, key: str, default: Any) -> Any:
        """An attribute's default as the call's signature shows it."""
        return default

    def usage(self) -> str:
        return f"{self.name}{self.__signature__}"

    def bind(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        """Split a Python-style call into (inputs, attrs) by ``call_params``.

        ``None`` for an optional input means absent (torch's ``bias=None``); absent trailing inputs are
        dropped, and call-only parameters are checked and dropped here.
        """
        names = self.positional_params
        if len(args) > len(names):
            raise TypeError(f"{self.name}() takes at most {len(names)} positional arguments, got "
                            f"{len(args)}: {self.usage()}")
        given: dict[str, Any] = {}
        for name, value in [*zip(names, args), *kwargs.items()]:
            key = self.target(name)
            if key is None:
                raise TypeError(f"{self.name}() got an unexpected keyword argument {name!r}: {self.usage()}")
            if key in given:
                raise TypeError(f"{self.name}() got multiple values for {name!r}: {self.usage()}")
            given[key] = value
        for key, spec in self.call_only.items():
            value = given.pop(key, spec.default)
            if spec.accepts is not None and not spec.accepts(value):
                raise OpTypeError("ATTR-VALUE", f"{self.name}: {key}={value!r} is not supported",
                                  spec.hint or None)
        if self.variadic:
            first = given.pop(self.inputs[0], None)
            if first is None:
                raise TypeError(f"{self.name}() needs a list of tensors")
            inputs = list(first) if isinstance(first, (list, tuple)) else [first]
        else:
            inputs = [given.pop(name, None) for name in self.inputs]
            required = len(self.inputs) - self.optional_inputs
            while len(inputs) > required and inputs[-1] is None:
                inputs.pop()
            gaps = [name for name, value in zip(self.inputs, inputs) if value is None]
            if gaps and len(inputs) > required:
                raise TypeError(f"{self.name}() got {self.inputs[len(inputs) - 1]!r} but not {gaps[0]!r}: "
                                "optional inputs can only be left out from the end (pass an explicit "
                                f"{gaps[0]} instead)")
            if gaps:
                raise TypeError(f"{self.name}() is missing the input {gaps[0]!r}: {self.usage()}")
        return inputs, given

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Eager call with numpy arrays: runs the reference kernel."""
        return self.run(*self.bind(args, kwargs))

    def run(self, inputs: Sequence[Any], attrs: Mapping[str, Any]) -> Any:
        """The eager op on bound inputs and attributes (what ``bind`` gives)."""
        self.check_arity(len(inputs))
        return self.kernel(*eager_arrays(inputs), **self.check_attrs(attrs))


def eager_arrays(inputs: Sequence[Any]) -> list[np.ndarray]:
    """The inputs of an eager call as arrays, a Python scalar taking the dtype it meets (numpy 2's rule).

    Why not ``np.asarray`` alone: it makes ``1.5`` a float64 array, so ``ops.add(float32 x, 1.5)`` would
    be float64 where the compiled call (a weak Python scalar) and numpy's ``x + 1.5`` are float32.
    """
    arrays = [None if _python_scalar(x) else host_array(x) for x in inputs]
    tensors = [a for a in arrays if a is not None]
    if len(tensors) == len(arrays) or not tensors:
        return [np.asarray(x) if a is None else a for x, a in zip(inputs, arrays)]
    try:
        dtype = np.result_type(*tensors, *(x for x in inputs if _python_scalar(x)))
        return [np.asarray(x, dtype=dtype) if a is None else a for x, a in zip(inputs, arrays)]
    except (TypeError, OverflowError):  # e.g. 300 with an int8 tensor: the kernel's own promotion decides
        return [np.asarray(x) if a is None else a for x, a in zip(inputs, arrays)]


def host_array(value: Any) -> np.ndarray:
    """``value`` as a numpy array: a DLPack producer (torch, cupy, ...) zero-copy with its own dtype.

    A torch tensor that requires grad is read through its detached view (the same memory): msvm runs
    inference, and torch refuses to export the other. A tensor on a GPU raises BufferError/RuntimeError.
    """
    if isinstance(value, np.ndarray) or not hasattr(value, "__dlpack__"):
        return np.asarray(value)
    if getattr(value, "requires_grad", False):
        value = value.detach()
    return np.from_dlpack(value)


def _python_scalar(x: Any) -> bool:
    return isinstance(x, (bool, int, float, complex)) and not isinstance(x, np.generic)


def _check_attr_value(op: str, key: str, spec: Attr, value: Any) -> Any:
    def bad(expected: str) -> OpTypeError:
        return OpTypeError("ATTR-TYPE", f"{op}: attribute {key!r} must be {expected}, got {value!r}")

    if value is None and spec.default is None:
        return None
    kind = spec.kind
    if kind == "int":
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
            return int(value)
        raise bad("an int")
    if kind == "float":
        if isinstance(value, (int, float, np.number)) and not isinstance(value, bool):
            return float(value)
        raise bad("a number")
    if kind == "bool":
        if isinstance(value, (bool, np.bool_)):
            return bool(value)
        raise bad("a bool")
    if kind == "str":
        if isinstance(value, str) and (not spec.choices or value in spec.choices):
            return value
        raise bad("one of " + ", ".join(map(repr, spec.choices)) if spec.choices else "a string")
    if kind == "dtype":
        name = _dtype_name(value)
        if name in DTYPES:
            return name
        raise bad("a dtype (" + ", ".join(DTYPES) + ")")
    if kind == "ints_or_str":
        if isinstance(value, str):
            if value in spec.choices:
                return value
            raise bad("a tuple of ints or one of " + ", ".join(map(repr, spec.choices)))
        return _check_attr_value(op, key, Attr("ints"), value)
    if kind in ("ints", "floats", "dims"):
        items = value if isinstance(value, (tuple, list)) else None
        if items is None:
            raise bad(f"a tuple ({kind})")
        item_spec = Attr({"ints": "int", "floats": "float", "dims": "dim"}[kind])
        return tuple(_check_attr_value(op, key, item_spec, v) for v in items)
    if kind == "axes":
        if isinstance(value, (tuple, list)):
            return tuple(_check_attr_value(op, key, Attr("int"), v) for v in value)
        return _check_attr_value(op, key, Attr("int"), value)
    if kind == "dim":
        if isinstance(value, (RegRef, Dim)):
            return value
        return _check_attr_value(op, key, Attr("int"), value)
    if kind == "scalar":
        if isinstance(value, (RegRef, Dim, bool, int, float, np.number, np.bool_)):
            return value.item() if isinstance(value, (np.number, np.bool_)) else value
        raise bad("a number or a scalar register")
    raise AssertionError(f"unknown attribute kind {kind!r}")


def _dtype_name(value: Any) -> str | None:
    try:
        return np.dtype(value).name
    except TypeError:
        return None


REGISTRY: dict[str, OpDef] = {}


def register(op: OpDef) -> OpDef:
    if op.name in REGISTRY:
        raise ValueError(f"op {op.name!r} registered twice")
    for key, spec in op.attrs.items():
        if spec.kind not in ATTR_KINDS:
            raise ValueError(f"op {op.name}: attribute {key!r} has unknown kind {spec.kind!r}")
        if spec.choices and spec.kind not in _WORD_KINDS:
            raise ValueError(f"op {op.name}: attribute {key!r} of kind {spec.kind} cannot have choices "
                             f"(only {' and '.join(_WORD_KINDS)} accept words)")
        if spec.kind == "ints_or_str" and not spec.choices:
            raise ValueError(f"op {op.name}: attribute {key!r} of kind ints_or_str needs choices")
    check_call_params(op)
    REGISTRY[op.name] = op
    return op


def check_call_params(op: OpDef) -> None:
    """Each call parameter fills one input, attribute or call-only parameter; every input has one."""
    targets = [op.target(name) for name in op.call_params]
    if None in targets:
        raise ValueError(f"op {op.name}: call parameter {op.call_params[targets.index(None)]!r} fills "
                         "nothing")
    if len(set(targets)) != len(targets):
        raise ValueError(f"op {op.name}: two call parameters fill the same input or attribute")
    missing = [name for name in op.inputs if name not in targets]
    if missing:
        raise ValueError(f"op {op.name}: the inputs {missing} are not call parameters")
    op.__signature__  # noqa: B018  (a required parameter after an optional one raises ValueError here)


def get_op(name: str) -> OpDef:
    """The op named ``name``; a KeyError names close matches."""
    try:
        return REGISTRY[name]
    except KeyError:
        import difflib

        close = difflib.get_close_matches(name, REGISTRY, n=3)
        suffix = f" (did you mean {', '.join(close)}?)" if close else ""
        raise KeyError(f"unknown op {name!r}{suffix}") from None
