"""Kernel binding: the one place that decides which kernel an OP_CALL runs, per device, dtype and shape.

``bind_site`` is called once per OP_CALL when a function is prepared. It returns the reference
kernel itself (zero overhead) when nothing can be chosen — the policy is "reference", or the op
has no variant for the device and dtype — and otherwise a ``Dispatcher``: per call it looks the
exact input shapes up in a dict (one lookup on the steady path) and, for a new shape, decides:

* candidates are the variants whose dtype matches and whose ``when`` accepts the shapes and
  attributes, minus those a capability patch forbids; the reference kernel (host only) is always
  the last candidate;
* a patch's ``force`` rule wins when its variant applies; one candidate is "only variant";
* policy "cost" ranks candidates by the cost model, "autotune" by measurement (remembered
  process-wide). The cost model never makes a call wait for calibration: an op it has no
  calibrated rates for is decided on priors and queued for the background calibrator, and every
  site decides again once the capability DB changes.

The kernel variants (``msvm.kernels``) are imported when the first site of an op that has some is
bound (``variants.KERNEL_OPS``), so programs without such ops never pay for that import.

On a device where nothing can run an op (the reference kernels are host code), the call falls
back to the reference with one warning per op and device, or raises ``KernelNotFoundError`` when
``fallback`` is off. Large outputs of kernels that take ``out=`` come from the memory pool.

Limits: a candidate whose workspace (``Variant.workspace``, the reference's in
``REFERENCE_WORKSPACE``) is over ``max_tensor_bytes`` is not a candidate, and when no kernel fits the
call raises ``E-LIMIT-TENSOR`` before anything is allocated. A site whose outputs' sizes the entry
check cannot bound (``check_outputs``: a size only known at run time, or a broadcast the verifier
could not decide upstream) checks them with the op's shape function once per input shapes. Both
are decided per shape, so the steady path pays nothing; a change of the limit forgets the decisions.
Every decision is a ``Choice`` (variant, reason, device); ``Dispatcher.last_choice`` is the one
the current thread made last, which the traced interpreter reports.
"""

from __future__ import annotations

import functools
import inspect
import threading
import warnings
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from math import prod
from typing import Any, NamedTuple

import numpy as np

from ..context import CONTEXT, on_change
from ..errors import KernelNotFoundError
from ..ops.registry import InferContext, OpDef, TensorType
from ..runtime.limits import check_size, workspace_error
from ..runtime.mempool import POOL, POOLED_OUTPUT_MIN_BYTES
from ..shapes import ShapeSpec
from . import autotune, cost
from .background import CALIBRATOR
from .capability import (
    DB,
    REFERENCE,
    REFERENCE_DEVICE,
    REFERENCE_KIND,
    devices_with_variants,
    load_variants_for,
    variant_names,
)
from .variants import REFERENCE_WORKSPACE, Variant, variants_for

_MAX_SHAPES_PER_SITE = 1024  # decisions remembered per call site
_MAX_PICKS = 4096  # cost-model picks remembered for all sites (``_PICKS``)


@dataclass(frozen=True)
class Choice:
    """The kernel picked for one shape class at one call site, and why."""

    variant: str
    reason: str
    device: str
    kind: str
    run: Callable[..., Any] = field(repr=False, compare=False)


class Binding(NamedTuple):
    """What ``bind_site`` gives the interpreter: the callable and a description of the binding."""

    kernel: Callable[..., Any]
    variant: str  # the variant name, or "dispatch" when it is chosen per call
    reason: str
    dispatcher: Dispatcher | None = None


def binding_settings() -> tuple:
    """The context settings a binding depends on (a prepared function is re-bound when they change)."""
    return (CONTEXT.kernel_policy, CONTEXT.device, CONTEXT.fallback, CONTEXT.enable_mem_reuse)


def bind_kernel(
    op: OpDef,
    static_attrs: Mapping[str, Any],
    in_types: Sequence,
    out_types: Sequence,
    device: str | None = None,
) -> tuple[Callable, str]:
    """(kernel callable taking the input arrays and any register-valued attrs, variant name)."""
    binding = bind_site(op, static_attrs, in_types, out_types, device=device)
    return binding.kernel, binding.variant


def bind_site(
    op: OpDef,
    static_attrs: Mapping[str, Any],
    in_types: Sequence,
    out_types: Sequence,
    *,
    device: str | None = None,
    address: int | None = None,
    check_outputs: bool = False,
) -> Binding:
    """Bind one OP_CALL site (see the module docstring for the rules). ``check_outputs``: the outputs'
    sizes are only known at run time, so the site checks them against the limit per input shapes."""
    load_variants_for(op.name)
    device = device or CONTEXT.device
    dtypes = {t.dtype for t in in_types if isinstance(t, TensorType)}
    dtype = next(iter(dtypes)) if len(dtypes) == 1 else ",".join(sorted(dtypes))
    variants = [] if CONTEXT.kernel_policy == "reference" else [
        v for v in variants_for(op.name, device) if dtypes <= set(v.dtypes)
    ]
    reference = _reference(op, static_attrs)
    if not variants and device != REFERENCE_DEVICE:
        kernel = fallback_kernel(op, device, dtype, address, reference)
        if not check_outputs:
            return Binding(kernel, REFERENCE, _fallback_reason(device))
    pooled = _pool_outputs(op, out_types, bool(variants))
    checks = check_outputs or op.name in REFERENCE_WORKSPACE  # the reference itself may not fit
    if not variants and not pooled and not checks:
        reason = "reference policy" if CONTEXT.kernel_policy == "reference" else (
            f"only variant (no kernel variants of {op.name} for {dtype} on {device})")
        return Binding(reference, REFERENCE, reason)
    site = Dispatcher(op, static_attrs, dtype, device, variants, reference, address, pooled, check_outputs)
    return Binding(site.call, "dispatch" if variants else REFERENCE, "chosen per input shapes", site)


def _reference(op: OpDef, static_attrs: Mapping[str, Any]) -> Callable[..., Any]:
    return functools.partial(op.kernel, **static_attrs) if static_attrs else op.kernel


def _fallback_reason(device: str) -> str:
    return f"fallback: no kernel on {device}, reference kernel on the host"


# -- devices without kernels -----------------------------------------------------------------------

_WARNED: set[tuple[str, str]] = set()


def fallback_kernel(op: OpDef, device: str, dtype: str, address: int | None,
                    reference: Callable[..., Any]) -> Callable[..., Any]:
    """The reference kernel, after warning once per op and device; raises when fallback is off."""
    if not CONTEXT.fallback:
        raise kernel_not_found(op.name, device, dtype, address)
    if (op.name, device) not in _WARNED:
        _WARNED.add((op.name, device))
        warnings.warn(
            f"no kernel for op {op.name} ({dtype}) on device {device}; running the reference kernel on the "
            f"host ({REFERENCE_DEVICE}) instead", RuntimeWarning, stacklevel=3)
    return reference


def kernel_not_found(op: str, device: str, dtype: str, address: int | None,
                     why: str = "") -> KernelNotFoundError:
    """The error for an op nothing can run on ``device``; its hint lists the devices that can."""
    have = [d for d in devices_with_variants() if variant_names(op, d)]
    listing = ", ".join(f"{d} ({', '.join(variant_names(op, d))})" for d in have)
    return KernelNotFoundError(
        f"Kernel not found for op {op} on device {device} (dtype {dtype}){why}",
        code="E-KERNEL-NOT-FOUND",
        address=address,
        opcode=f"OP_CALL {op}",
        hint=f"devices with kernels for {op}: {listing}; use ms.set_context(device=...) for one of them, or "
        "ms.set_context(fallback=True) to run the reference kernel on the host",
    )


def reset_dispatch_state() -> None:
    """Forget fallback warnings, autotuning winners and every call site's decisions (tests)."""
    _WARNED.clear()
    autotune.forget_winners()
    _forget_decisions()


# -- pooled outputs --------------------------------------------------------------------------------


def _exact_ufunc(op: OpDef) -> np.ufunc | None:
    """The numpy ufunc that *is* the op's reference (so it can write into a given ``out=``), if any."""
    ufunc = op.extra.get("numpy")
    exact = isinstance(ufunc, np.ufunc) and not op.attrs and ufunc.nout == 1 and ufunc.nin == len(op.inputs)
    return ufunc if exact else None


def _pool_outputs(op: OpDef, out_types: Sequence, has_variants: bool) -> bool:
    """Whether a site's single output may come from the pool: reuse is on and some kernel there can
    take ``out=``. A site with variants has a dispatcher anyway, which checks each concrete size;
    a site without one gets a dispatcher only for this when the statically known part of the output
    already reaches the threshold (a dispatcher costs every call a lookup)."""
    if not CONTEXT.enable_mem_reuse or len(out_types) != 1 or not isinstance(out_types[0], TensorType):
        return False
    if has_variants:
        return True
    if _exact_ufunc(op) is None:
        return False
    out = out_types[0]
    known = prod(d.value for d in out.shape if d.is_const)
    return known * np.dtype(out.dtype).itemsize >= POOLED_OUTPUT_MIN_BYTES


def _takes_out(kernel: Callable[..., Any]) -> bool:
    try:
        return "out" in inspect.signature(kernel).parameters
    except (TypeError, ValueError):
        return False


def _with_pooled_out(kernel: Callable[..., Any], shape: tuple[int, ...],
                     dtype: np.dtype) -> Callable[..., Any]:
    empty = POOL.empty

    def run(*arrays: Any, **dyn: Any) -> Any:
        return kernel(*arrays, out=empty(shape, dtype), **dyn)

    return run


# -- the dispatcher --------------------------------------------------------------------------------

_SITES: weakref.WeakSet[Dispatcher] = weakref.WeakSet()
# The cost model's picks per shape class, for every site of the same op, attributes, dtype, device and
# variants: a function defined again (a notebook cell run again) picks at once what one before it
# estimated — W1's 40 picks were 6–7 ms of a fresh function's first four calls. Forgotten with the
# sites' decisions when the capability DB changes.
_PICKS: dict[tuple, tuple[str | None, str]] = {}


def _forget_decisions() -> None:
    _PICKS.clear()
    for site in list(_SITES):
        site.forget()


DB.on_change(_forget_decisions)
_LIMIT = [CONTEXT.max_tensor_bytes]  # the limit the decisions were made under


def _limit_changed() -> None:
    """A decision depends on the limit (the workspaces that fit, the outputs checked): forget them."""
    if _LIMIT[0] != CONTEXT.max_tensor_bytes:
        _LIMIT[0] = CONTEXT.max_tensor_bytes
        _forget_decisions()


on_change(_limit_changed)


class Dispatcher:
    """One OP_CALL site with a choice to make: ``site(*arrays, **dynamic_attrs)`` runs the chosen kernel."""

    def __init__(self, op: OpDef, static_attrs: Mapping[str, Any], dtype: str, device: str,
                 variants: Sequence[Variant], reference: Callable[..., Any], address: int | None,
                 pooled: bool, check_outputs: bool = False) -> None:
        self.op = op
        self.static = dict(static_attrs)
        self.dtype = dtype
        self.device = device
        self.variants = list(variants)
        self.reference = reference
        self.address = address
        self.pooled = pooled  # large outputs of kernels taking ``out=`` come from the pool
        self.check_outputs = check_outputs  # the outputs' sizes are checked per input shapes
        self.decisions: dict[Any, Choice] = {}
        # shape class -> the cost model's pick, why, and its choice where not made for one shape only
        self.classes: dict[Any, tuple[Variant | None, str, Choice | None]] = {}
        self._kernels: dict[str, Callable[..., Any]] = {}
        self._takes_out: dict[str, bool] = {}  # variant name -> does its kernel take ``out=``
        self._tls = threading.local()
        self._lock = threading.Lock()
        self._picks_key = _picks_key(op, self.static, dtype, device, self.variants)
        self.call = self._entry()
        _SITES.add(self)

    def __call__(self, *arrays: Any, **dyn: Any) -> Any:
        return self.call(*arrays, **dyn)

    def _entry(self) -> Callable[..., Any]:
        """The callable the interpreter binds (``self.call``): one dict lookup per call once decided.

        A closure over locals rather than a method: attribute lookups on the hot path cost as much
        as everything else it does.
        """
        decisions, decide, tls = self.decisions, self.decide, self._tls

        def dispatch(*arrays: Any, **dyn: Any) -> Any:
            key = tuple([a.shape for a in arrays])
            if dyn:
                key = (key, tuple(dyn.items()))
            choice = decisions.get(key) or decide(key, arrays, dyn)
            tls.last = choice
            return choice.run(*arrays, **dyn)

        return dispatch

    def choose(self, *arrays: Any) -> Choice:
        """The choice a call on ``arrays`` (no dynamic attributes) runs — for a caller that runs it its own
        way (the interpreter's fused epilogues); it is this thread's last choice from now on."""
        return self.choose_shapes(tuple([a.shape for a in arrays]), lambda: arrays)

    def choose_shapes(self, shapes: tuple, arrays: Callable[[], Sequence[np.ndarray]]) -> Choice:
        """``choose`` for inputs of ``shapes``, made (``arrays()``) only for shapes not decided yet: the
        interpreter's NCHWc conv chains hold their tensors in another layout."""
        choice = self.decisions.get(shapes) or self.decide(shapes, arrays(), {})
        self._tls.last = choice
        return choice

    @property
    def last_choice(self) -> Choice | None:
        """The choice this thread's last call through this site used."""
        return getattr(self._tls, "last", None)

    def forget(self) -> None:
        self.decisions.clear()
        self.classes.clear()

    # -- deciding ----------------------------------------------------------------------------------
    def decide(self, key: Any, arrays: Sequence[np.ndarray], dyn: Mapping[str, Any]) -> Choice:
        """Pick the kernel for one new shape and remember it.

        Under the cost model, the shapes of one class (``shape_class``) share a pick while it applies
        to them: the model is smooth in the sizes, and a stream of lengths would otherwise pay for a
        pick (estimates of every candidate, ≈ 0.2 ms per site) on every call. They share the choice
        too, unless its output comes from the pool (the pooled call is made for one output shape).
        """
        shapes = tuple([a.shape for a in arrays])
        attrs = {**self.static, **dyn}
        if self.check_outputs:
            self._check_outputs(arrays, attrs)
        itemsize = _itemsize(arrays)
        cls = (shape_class(shapes), tuple(dyn.items())) if CONTEXT.kernel_policy == "cost" else None
        shared = self.classes.get(cls) if cls is not None else None
        if shared is not None and self._usable(shared[0], shapes, attrs, itemsize):
            variant, reason, choice = shared
            if choice is None:
                choice = self._choice(variant, reason, arrays, attrs)
        else:
            known = self._known_pick(cls, shapes, attrs, itemsize)
            variant, reason = known or self._pick(shapes, attrs, arrays, dyn, itemsize)
            choice = self._choice(variant, reason, arrays, attrs)
            if cls is not None:
                if len(self.classes) >= _MAX_SHAPES_PER_SITE:
                    self.classes.clear()
                if known is None:
                    reason = f"{reason} [shape class of {_fmt_shapes(shapes)}]"
                    if self._picks_key is not None:
                        if len(_PICKS) >= _MAX_PICKS:
                            _PICKS.clear()
                        _PICKS[(self._picks_key, cls)] = _name(variant), reason
                pooled = choice.run is not self._kernel(variant)  # made for this output shape
                self.classes[cls] = variant, reason, None if pooled else replace(choice, reason=reason)
        if len(self.decisions) >= _MAX_SHAPES_PER_SITE:
            self.decisions.clear()
        self.decisions[key] = choice
        return choice

    def _check_outputs(self, arrays: Sequence[np.ndarray], attrs: Mapping[str, Any]) -> None:
        """Raise before the kernel runs when an output of these inputs is over the limit (the op's
        shape function on the concrete shapes; a failure there is left to the kernel to report)."""
        for shape, dtype in _inferred_outputs(self.op, arrays, attrs) or ():
            check_size(self.address, shape, dtype.itemsize, f"OP_CALL {self.op.name}")

    def _usable(self, variant: Variant | None, shapes: tuple, attrs: Mapping[str, Any],
                itemsize: int) -> bool:
        """Does ``variant`` (None: the reference) apply to these shapes, within the workspace limit?"""
        if variant is not None and not _applies(variant, shapes, attrs):
            return False
        return self._workspace(variant, shapes, attrs, itemsize) <= CONTEXT.max_tensor_bytes

    def _workspace(self, variant: Variant | None, shapes: tuple, attrs: Mapping[str, Any],
                   itemsize: int) -> int:
        measure = REFERENCE_WORKSPACE.get(self.op.name) if variant is None else variant.workspace
        if measure is None:
            return 0
        try:
            return int(measure(shapes, attrs, itemsize))
        except Exception:  # shapes the kernel itself will reject: it reports them
            return 0

    def _known_pick(self, cls: Any, shapes: tuple, attrs: dict[str, Any], itemsize: int
                    ) -> tuple[Variant | None, str] | None:
        """The pick a site like this one made for the shape class ``cls`` (``_PICKS``), if it applies."""
        if cls is None or self._picks_key is None:
            return None
        known = _PICKS.get((self._picks_key, cls))
        if known is None:
            return None
        name, reason = known
        variant = next((v for v in self.variants if v.name == name), None)
        if variant is None and name != REFERENCE:
            return None
        return (variant, reason) if self._usable(variant, shapes, attrs, itemsize) else None

    def _pick(self, shapes: tuple, attrs: dict[str, Any], arrays: Sequence[np.ndarray],
              dyn: Mapping[str, Any], itemsize: int) -> tuple[Variant | None, str]:
        rules = DB.rules(self.device, self.op.name)
        applicable: list[Variant | None] = [
            v for v in self.variants if v.name not in rules.forbid and _applies(v, shapes, attrs)]
        if self.device == REFERENCE_DEVICE:
            applicable.append(None)  # the reference: always possible on the host, the last resort
        needs = {_name(c): self._workspace(c, shapes, attrs, itemsize) for c in applicable}
        candidates = [c for c in applicable if needs[_name(c)] <= CONTEXT.max_tensor_bytes]
        if applicable and not candidates:
            raise workspace_error(self.op.name, _fmt_shapes(shapes), needs, self.address)
        note = ""
        for rule in rules.force:
            if rule.matches(self.dtype, shapes):
                forced = next((c for c in candidates if _name(c) == rule.variant), False)
                if forced is not False:
                    return forced, "forced by patch"
                note = f" (forced {rule.variant} does not apply to {_fmt_shapes(shapes)})"
                break
        if not candidates:
            why = f": no variant applies to inputs {_fmt_shapes(shapes)}"
            if not CONTEXT.fallback:
                raise kernel_not_found(self.op.name, self.device, self.dtype, self.address, why)
            need = self._workspace(None, shapes, attrs, itemsize)
            if need > CONTEXT.max_tensor_bytes:
                raise workspace_error(self.op.name, _fmt_shapes(shapes), {REFERENCE: need}, self.address)
            fallback_kernel(self.op, self.device, self.dtype, self.address, self.reference)
            return None, _fallback_reason(self.device) + note
        if len(candidates) == 1:
            only = "reference policy" if CONTEXT.kernel_policy == "reference" else "only variant"
            return candidates[0], only + note
        if CONTEXT.kernel_policy == "autotune":
            return self._autotuned(candidates, shapes, attrs, arrays, dyn, note)
        return self._cheapest(candidates, shapes, attrs, note)

    def _cheapest(self, candidates: Sequence[Variant | None], shapes: tuple, attrs: dict[str, Any],
                  note: str) -> tuple[Variant | None, str]:
        if not DB.is_calibrated(self.device, self.op.name):
            CALIBRATOR.request(self.device, self.op.name)  # never waited for: decide from what is known
        ranked = cost.rank([cost.estimate(self.device, self.op.name, c, shapes, attrs) for c in candidates])
        best, runner_up = ranked[0], ranked[1]
        pick = next(c for c in candidates if _name(c) == best.name)
        prior = ""
        if best.rates.source == "prior":
            prior = " (prior rates: calibrating in the background)"
            if not CALIBRATOR.enabled:
                prior = " (prior rates)"
        reason = (f"cost: {cost.fmt_seconds(best.seconds)} est vs {cost.fmt_seconds(runner_up.seconds)} "
                  f"{runner_up.name}{note}{prior}")
        return pick, reason

    def _autotuned(self, candidates: Sequence[Variant | None], shapes: tuple, attrs: dict[str, Any],
                   arrays: Sequence[np.ndarray], dyn: Mapping[str, Any],
                   note: str) -> tuple[Variant | None, str]:
        names = [_name(c) for c in candidates]
        key = autotune.tuning_key(self.device, self.op.name, names, self.dtype, shapes, self.static)
        runs = []
        for c in candidates:
            run = self._choice(c, "", arrays, attrs).run
            runs.append((_name(c), functools.partial(run, *arrays, **dyn)))
        tuned = autotune.tune(key, runs)
        others = sorted((s, n) for n, s in tuned.seconds.items() if n != tuned.winner)
        versus = ", ".join(f"{cost.fmt_seconds(s)} {n}" for s, n in others[:2])
        reason = f"autotuned: {cost.fmt_seconds(tuned.seconds[tuned.winner])} vs {versus}{note}"
        return next(c for c in candidates if _name(c) == tuned.winner), reason

    # -- building the call -------------------------------------------------------------------------
    def _choice(self, variant: Variant | None, reason: str, arrays: Sequence[np.ndarray],
                attrs: dict[str, Any]) -> Choice:
        kernel = self._kernel(variant)
        out_kernel = self._out_kernel(variant, kernel)
        if out_kernel is not None and _may_reach_pool_size(self.op, arrays):
            out = _output_type(self.op, arrays, attrs)
            if out is not None and prod(out[0]) * out[1].itemsize >= POOLED_OUTPUT_MIN_BYTES:
                kernel = _with_pooled_out(out_kernel, *out)
        if variant is None:
            return Choice(REFERENCE, reason, REFERENCE_DEVICE, REFERENCE_KIND, kernel)
        return Choice(variant.name, reason, variant.device, variant.kind, kernel)

    def _kernel(self, variant: Variant | None) -> Callable[..., Any]:
        if variant is None:
            return self.reference
        kernel = self._kernels.get(variant.name)
        if kernel is None:
            with self._lock:
                kernel = self._kernels.get(variant.name)
                if kernel is None:
                    kernel = self._kernels[variant.name] = variant.make(self.static)
        return kernel

    def _out_kernel(self, variant: Variant | None, kernel: Callable[..., Any]) -> Callable[..., Any] | None:
        """The kernel as one taking ``out=`` (the op's ufunc for the reference), or None."""
        if not self.pooled:
            return None
        if variant is None:
            return _exact_ufunc(self.op)
        takes = self._takes_out.get(variant.name)
        if takes is None:  # inspect.signature costs 70 µs: once per variant, not per new shape
            takes = self._takes_out[variant.name] = _takes_out(kernel)
        return kernel if takes else None

    def __repr__(self) -> str:
        names = ", ".join([v.name for v in self.variants] + [REFERENCE])
        decided = len(self.decisions)
        return f"<Dispatcher {self.op.name} on {self.device} [{names}], {decided} shape(s) decided>"


def _name(variant: Variant | None) -> str:
    return REFERENCE if variant is None else variant.name


def _picks_key(op: OpDef, static: Mapping[str, Any], dtype: str, device: str,
               variants: Sequence[Variant]) -> tuple | None:
    """What the cost model's pick depends on besides the shapes and the capability DB, with
    ``fallback`` (whether having no variant means the reference), as the site is bound (None:
    attributes that cannot be a key, e.g. an array; such a site picks on its own)."""
    key = (op.name, tuple(sorted(static.items())), dtype, device, tuple(v.name for v in variants),
           CONTEXT.fallback)
    try:
        hash(key)
    except TypeError:
        return None
    return key


def shape_class(shapes: Sequence[tuple[int, ...]]) -> tuple:
    """The shapes with every dim above 16 rounded up to a power of two (dims up to 16 stay exact)."""
    return tuple([tuple([d if d <= 16 else 1 << (d - 1).bit_length() for d in s]) for s in shapes])


def _applies(variant: Variant, shapes: tuple, attrs: Mapping[str, Any]) -> bool:
    try:
        return bool(variant.when(shapes, attrs))
    except Exception:  # a predicate that cannot judge these shapes does not claim them
        return False


def _may_reach_pool_size(op: OpDef, arrays: Sequence[np.ndarray]) -> bool:
    """False when the output is certainly too small to pool, without the op's shape function: a
    unary elementwise op's output has its input's elements, at most 8 bytes each (small tensors
    are the common case, and a shape function costs tens of µs per decision)."""
    return "unary" not in op.traits or arrays[0].size * 8 >= POOLED_OUTPUT_MIN_BYTES


def _itemsize(arrays: Sequence[Any]) -> int:
    """The largest item size among the array operands (what a workspace of theirs is made of)."""
    return max([a.itemsize for a in arrays if isinstance(a, np.ndarray)], default=1)


def _output_type(op: OpDef, arrays: Sequence[np.ndarray],
                 attrs: Mapping[str, Any]) -> tuple[tuple[int, ...], np.dtype] | None:
    """The single output's concrete shape and dtype, from the op's own shape function (once per shape).

    A unary elementwise op's output has its input's shape and a dtype that depends on nothing else:
    that is asked once per op, dtype and attributes (the shape function was ~35 µs of W3's GELU site
    at every new sequence length)."""
    if "unary" in op.traits and len(arrays) == 1:
        try:
            key = (op.name, arrays[0].dtype, tuple(sorted(attrs.items())))
            dtype = _UNARY_DTYPES.get(key)
        except TypeError:  # an unhashable attribute: the shape function every time
            key = dtype = None
        if dtype is None:
            out = _inferred_type(op, arrays, attrs)
            if out is None or out[0] != arrays[0].shape:
                return out
            dtype = out[1]
            if key is not None:
                _UNARY_DTYPES[key] = dtype
        return arrays[0].shape, dtype
    return _inferred_type(op, arrays, attrs)


_UNARY_DTYPES: dict[tuple, np.dtype] = {}


def _inferred_type(op: OpDef, arrays: Sequence[np.ndarray],
                   attrs: Mapping[str, Any]) -> tuple[tuple[int, ...], np.dtype] | None:
    outs = _inferred_outputs(op, arrays, attrs)
    return outs[0] if outs is not None and len(outs) == 1 else None


def _inferred_outputs(op: OpDef, arrays: Sequence[np.ndarray],
                      attrs: Mapping[str, Any]) -> list[tuple[tuple[int, ...], np.dtype]] | None:
    """Each output's concrete shape and dtype by the op's shape function on the arrays' shapes (those
    whose size depends on the data left out); None when it rejects them."""
    try:
        types = [TensorType(ShapeSpec.of(list(a.shape)), a.dtype.name) for a in arrays]
        result = op.infer(InferContext(), *types, **attrs)
    except Exception:
        return None
    results = [result] if isinstance(result, TensorType) else list(result)
    return [(tuple(t.shape.evaluate({})), np.dtype(t.dtype)) for t in results
            if isinstance(t, TensorType) and t.shape.is_static]


def _fmt_shapes(shapes: tuple) -> str:
    return ", ".join("x".join(map(str, s)) or "scalar" for s in shapes)
