"""From a verified straight-line function to a list of fused kernels: the fusion policy lives here.

Each register holds a lazy expression (``nodes``); OP_CALLs are lowered by the functions in
``registry.LOWERINGS``, which build expressions and, where an op needs memory (a GEMM, a reduction),
kernels. An expression is materialised — turned into a kernel writing a buffer — only when it must:

* it is returned (it is written straight into the caller's output array);
* more than one instruction reads it, it costs arithmetic, and some reader is not an elementwise op
  of its own shape (shared work is done once; elementwise readers instead fuse into one loop nest,
  where it is computed once per element, or recompute it from inputs they read anyway);
* an op needs it in memory (GEMM operands that are not strided views, im2col, …);
* it would be recomputed for every element of a broadcast, or its expression grew too deep.

A materialised expression whose value comes from a row kernel (softmax, layer_norm) at the same
index becomes that row kernel's epilogue; everything else becomes one elementwise loop nest.
Afterwards dead kernels are dropped, and a buffer whose last reader consumes it element for
element (a GEMM result feeding its bias+activation epilogue) is folded into that reader's output,
so the producer writes there directly and the epilogue runs in place.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...bytecode.module import Module, RegRef
from ...ops.registry import REGISTRY, Guard, OpDef, TensorType
from ...shapes import Dim
from ...verifier import FunctionInfo, ScalarType, analyze_module
from . import views
from .buffers import Buffer
from .emit_elementwise import COSTLY_OPS, ELEMENTWISE_OPS, ElementwiseKernel
from .emit_nn import conv_layouts
from .emit_reduce import NativeRows, RowKernel, RowResult, streams
from .errors import LoweringError
from .kernels import Kernel
from .nodes import Const, Expr, Index, Load, Map, is_compute, replace, walk
from .registry import LOWERINGS, REFUSALS
from .views import Shape, View, broadcast, numel, same, shape_of

MAX_DEPTH = 240  # deeper expressions are materialised (keeps emission recursion and IR size bounded)
FOLD_LIMIT = 1 << 20  # constant folding only for results up to this many elements
ALLOWED = frozenset(
    {
        "TENSOR_CREATE",
        "TENSOR_ALLOC",
        "TENSOR_FREE",
        "TENSOR_RESIZE",
        "LOAD_CONST",
        "SHAPE_PROPAGATE",
        "SCALAR_CONST",
        "SCALAR_ARG",
        "SCALAR_OP",
        "OP_CALL",
        "RET",
    }
)


def can_lower(op: OpDef, attrs: dict[str, Any], input_types: Sequence[TensorType]) -> str | None:
    """None when this OP_CALL can be compiled, else the reason it cannot (shown to users)."""
    if "data_dependent" in op.traits:
        return f"{op.name} has a data-dependent output shape (known only after it runs)"
    if op.name not in LOWERINGS:
        return f"the code generator has no lowering for {op.name}"
    refusal = REFUSALS.get(op.name)
    return refusal(attrs, input_types) if refusal is not None else None


@dataclass
class Output:
    """One value the region returns: a tensor buffer, or an int64 scalar given by its symbolic value."""

    buffer: Buffer | None = None
    scalar: Dim | None = None


@dataclass(frozen=True)
class Recipe:
    """A constant made from others: ``lower_nn.PACKS[kind](*sources, *args)[part]``. Why: the process
    that loads the code makes it again from its own arrays (where its pack cache has it already)
    rather than receive megabytes of packed weights through the compile worker's pipe."""

    kind: str
    sources: tuple[np.ndarray | None, ...]
    args: tuple[int, ...]
    part: int


@dataclass
class Plan:
    """Everything lowering decided: kernels in order, buffers, run-time parameters and checks."""

    kernels: list[Kernel]
    inputs: list[Buffer]  # tensor inputs, in argument order
    outputs: list[Buffer]  # distinct output buffers, in first-returned order
    returns: list[Output]
    params: list[str]  # run-time symbols, in call order
    scalar_args: dict[int, str]  # bytecode argument number -> symbol
    input_specs: dict[int, tuple[Shape, str]]  # bytecode argument number -> (declared shape, dtype)
    guards: list[Guard]  # the verifier's run-time checks plus the code generator's own
    ranges: dict[str, tuple[float, float]]  # param -> (min, max) for sizing
    exact: bool
    constants: list[np.ndarray] = field(default_factory=list)
    recipes: list[Recipe | None] = field(default_factory=list)  # per constant: how it was made, if known


class Planner:
    """Walks one verified function and lowers it; the context lowering functions build on."""

    def __init__(self, module: Module, function: str, bounds: dict[str, int] | None = None,
                 gemm: Mapping[str, Any] | None = None) -> None:
        """``gemm``: the BLAS entry per dtype (``native.blas.GemmEntry`` or None), when the caller chose
        them (the compile worker gets the parent's); else ``best_gemm`` chooses."""
        info, diags = analyze_module(module)
        if diags or function not in info.functions:
            first = diags[0] if diags else f"no function {function!r}"
            raise LoweringError(f"the region does not verify: {first}")
        self.module = module
        self.gemm = gemm
        self.info: FunctionInfo = info.functions[function]
        fn = self.info.function
        if len(fn.blocks) != 1:
            raise LoweringError(
                f"{function} has {len(fn.blocks)} blocks; a region is one straight-line block"
            )
        self.instructions = fn.blocks[0].instructions
        self.types = self.info.types
        self.kernels: list[Kernel] = []
        self.values: dict[int, Expr] = {}
        self.arena: list[Buffer] = []
        self.constants: list[np.ndarray] = []
        self.recipes: list[Recipe | None] = []
        self.guards: list[Guard] = [g for gs in self.info.guards.values() for g in gs]
        self.readers: dict[int, list[int]] = {}  # register -> addresses of the instructions reading it
        for address, ins in enumerate(self.instructions, self.info.base):
            if ins.name not in ("SHAPE_PROPAGATE", "TENSOR_FREE"):
                for r in ins.reads():
                    self.readers.setdefault(r, []).append(address)
        self.rows: dict[int, Load] = {}
        self.cheap: dict[int, tuple[bool, Expr]] = {}
        self.current: int | None = None
        self._scan_entry(bounds or {})
        self._make_outputs()

    # -- setup ----------------------------------------------------------------------------------------
    def _scan_entry(self, bounds: dict[str, int]) -> None:
        params: list[str] = []
        bound_syms: set[str] = set()
        self.inputs: list[Buffer] = []
        self.scalar_args: dict[int, str] = {}
        self.input_specs: dict[int, tuple[Shape, str]] = {}
        for address, ins in enumerate(self.instructions, self.info.base):
            if ins.name not in ALLOWED:
                raise LoweringError(
                    f"{ins.name} is not straight-line region code", address=address, opcode=ins.name
                )
            if ins.name == "TENSOR_CREATE" and ins["arg"] >= 0:
                spec = ins["shape"]
                for d in spec:
                    if d.is_unknown:
                        raise LoweringError(
                            "an input dim is '?'",
                            address=address,
                            opcode=ins.name,
                            hint="regions take inputs whose dims are constants or symbols",
                        )
                    if d.is_symbol:
                        bound_syms.add(d.name)
                    for s in sorted(d.free_symbols):
                        if s not in params:
                            params.append(s)
                buf = Buffer("input", ins["dtype"], tuple(spec), f"in{ins['arg']}", index=ins["arg"])
                self.inputs.append(buf)
                self.input_specs[ins["arg"]] = (tuple(spec), ins["dtype"])
                self.values[ins["dst"]] = Load.of(buf)
            elif ins.name == "SCALAR_ARG":
                self.scalar_args[ins["arg"]] = ins["symbol"]
                bound_syms.add(ins["symbol"])
                if ins["symbol"] not in params:
                    params.append(ins["symbol"])
        unbound = [p for p in params if p not in bound_syms]
        if unbound:
            raise LoweringError(
                f"symbol(s) {', '.join(unbound)} appear only inside input dim expressions "
                "and are never bound by a shape"
            )
        self.inputs.sort(key=lambda b: b.index)
        self.params = params
        self.exact = not params
        scalar_syms = set(self.scalar_args.values())
        self.ranges = {
            p: (-np.inf if p in scalar_syms else 0.0, float(bounds.get(p, np.inf))) for p in params
        }

    def _make_outputs(self) -> None:
        ret = self.instructions[-1]
        if ret.name != "RET":
            raise LoweringError("a region must end with RET")
        self.outputs: dict[int, Buffer] = {}
        for reg in ret["srcs"]:
            t = self.types[reg]
            if isinstance(t, TensorType) and reg not in self.outputs:
                self.outputs[reg] = Buffer(
                    "output", t.dtype, tuple(t.shape), f"out{len(self.outputs)}", index=len(self.outputs)
                )
        self.claimed: dict[Buffer, int] = {}

    # -- the walk -------------------------------------------------------------------------------------
    def run(self) -> Plan:
        returns: list[Output] = []
        for address, ins in enumerate(self.instructions, self.info.base):
            name = ins.name
            if (name == "TENSOR_CREATE" and ins["arg"] < 0) or name == "TENSOR_ALLOC":
                t = self.types[ins["dst"]]
                self.define(ins["dst"], Const(0, t.dtype, tuple(t.shape)))
            elif name == "TENSOR_RESIZE":
                t = self.types[ins["dst"]]
                self.define(ins["dst"], self.reshape(self.values[ins["src"]], tuple(t.shape)))
            elif name == "LOAD_CONST":
                self.define(ins["dst"], self.constant_expr(self.module.constants[ins["const"]]))
            elif name == "OP_CALL":
                self.call(ins, address)
            elif name == "RET":
                returns = self.ret(ins)
        self.dead_code()
        self.fold_epilogues()
        conv_layouts(self.kernels)
        self.coalesce()
        guards = list(dict.fromkeys(self.guards))
        return Plan(
            self.kernels,
            self.inputs,
            list(self.outputs.values()),
            returns,
            self.params,
            self.scalar_args,
            self.input_specs,
            guards,
            self.ranges,
            self.exact,
            self.constants,
            self.recipes,
        )

    def call(self, ins: Any, address: int) -> None:
        op = REGISTRY[ins["op"]]
        raw = self.info.attrs[address]
        in_types = [self.types[r] for r in ins["srcs"]]
        reason = can_lower(op, raw, in_types)
        if reason is not None:
            raise LoweringError(reason, address=address, opcode=f"OP_CALL {op.name}")
        attrs = {k: self._substitute(v) for k, v in raw.items()}
        out_types = [self.types[r] for r in ins["dsts"]]
        inputs = [self.values[r] for r in ins["srcs"]]
        self.current = ins["dsts"][0] if len(ins["dsts"]) == 1 else None
        outs = self._fold(op, inputs, attrs, out_types)
        if outs is None:
            try:
                outs = LOWERINGS[op.name](self, op, inputs, attrs, out_types)
            except LoweringError as exc:
                raise LoweringError(
                    exc.message, address=address, opcode=f"OP_CALL {op.name}", hint=exc.hint
                ) from None
        outs = [outs] if isinstance(outs, Expr) else list(outs)
        for reg, expr, t in zip(ins["dsts"], outs, out_types):
            assert len(expr.shape) == t.shape.rank, (op.name, expr.shape, t.shape)
            self.define(reg, expr)
        self.current = None

    def _substitute(self, value: Any) -> Any:
        if isinstance(value, RegRef):
            t = self.types[value.index]
            assert isinstance(t, ScalarType)
            if t.value.is_unknown:
                raise LoweringError(f"scalar register R{value.index} has no symbolic value")
            return t.value
        if isinstance(value, tuple):
            return tuple(self._substitute(v) for v in value)
        return value

    def _fold(
        self, op: OpDef, inputs: list[Expr], attrs: dict, out_types: list[TensorType]
    ) -> list[Expr] | None:
        """Run the reference kernel at lowering time when every input is a constant."""
        if not inputs or any(isinstance(v, Dim) for v in _flat(attrs.values())):
            return None
        arrays = [self.constant_value(e) for e in inputs]
        if any(a is None for a in arrays):
            return None
        if sum(int(np.prod([d.value for d in t.shape])) for t in out_types) > FOLD_LIMIT:
            return None
        try:
            result = op.kernel(*arrays, **attrs)
        except Exception:  # let the region fail at run time like the interpreter would
            return None
        results = [result] if isinstance(result, np.ndarray) else list(result)
        return [self.constant_expr(np.asarray(r, dtype=t.dtype)) for r, t in zip(results, out_types)]

    def define(self, reg: int, expr: Expr) -> None:
        shared = len(self.readers.get(reg, ())) > 1 and is_compute(expr) and not self._fuses_shared(reg, expr)
        if shared or expr.depth > MAX_DEPTH:
            expr = self.materialize(expr, self.result_buffer(expr.shape, expr.dtype, reg))
        self.values[reg] = expr

    def _fuses_shared(self, reg: int, expr: Expr) -> bool:
        """May a value read by several instructions stay an expression? Yes when it is cheap elementwise
        arithmetic on loads (no transcendental: readers that land in different kernels recompute it),
        it is not returned, and every reader is an elementwise op of its shape."""
        if reg in self.outputs or not self._cheap(expr):
            return False
        shape = self.types[reg].shape
        readers = [self.instructions[a - self.info.base] for a in self.readers[reg]]
        return all(
            ins.name == "OP_CALL"
            and ins["op"] in ELEMENTWISE_OPS
            and all(self.types[d].shape == shape for d in ins["dsts"])
            for ins in readers
        )

    def _cheap(self, expr: Expr) -> bool:
        """Only loads, constants, indices and elementwise ops outside ``COSTLY_OPS`` (memoised by node)."""
        hit = self.cheap.get(id(expr))
        if hit is None:
            if isinstance(expr, Map):
                ok = expr.op not in COSTLY_OPS and all(map(self._cheap, expr.args))
            else:
                ok = isinstance(expr, (Load, Const, Index))
            hit = self.cheap[id(expr)] = (ok, expr)  # the node is kept alive: its id stays its own
        return hit[0]

    def ret(self, ins: Any) -> list[Output]:
        returns = []
        for reg in ins["srcs"]:
            t = self.types[reg]
            if isinstance(t, ScalarType):
                if t.value.is_unknown:
                    raise LoweringError(f"returned scalar R{reg} has no symbolic value")
                returns.append(Output(scalar=t.value))
                continue
            if not isinstance(t, TensorType):
                raise LoweringError(f"R{reg} is a bool; regions return tensors and int64 scalars")
            buf = self.outputs[reg]
            expr = self.values[reg]
            if not (
                isinstance(expr, Load) and expr.buffer is buf and expr.view == View.contiguous(buf.shape)
            ):
                self.materialize(expr, buf)
                self.values[reg] = Load.of(buf)
            returns.append(Output(buffer=buf))
        return returns

    # -- the context lowering functions use -----------------------------------------------------------
    def new_buffer(self, shape: Shape, dtype: str, hint: str = "t") -> Buffer:
        buf = Buffer("arena", dtype, tuple(shape), f"{hint}{len(self.arena)}")
        self.arena.append(buf)
        return buf

    def result_buffer(self, shape: Shape, dtype: str, reg: int | None = None) -> Buffer:
        """The caller's output array when this value is what register ``reg`` (default: the one being
        defined) returns, else a fresh arena buffer. Only the register's own value may go there."""
        reg = self.current if reg is None else reg
        out = self.outputs.get(reg) if reg is not None else None
        if (
            out is not None
            and self.claimed.get(out, reg) == reg
            and out.dtype == dtype
            and same(numel(out.shape), numel(shape))
        ):
            self.claimed[out] = reg
            return out
        return self.new_buffer(shape, dtype)

    def result_layout(self, shape: Shape, dtype: str) -> tuple[Buffer, View]:
        """``result_buffer`` and the view to write the value through. A value whose only reader permutes
        its dims, keeping the last one last, is stored in the reader's order: the permuted value — what
        is read next — is then dense, so attention heads land straight in [L, H, D] rows (a view of
        [L, H·D]) instead of being copied there."""
        reg = self.current
        readers = self.readers.get(reg, []) if reg is not None else []
        perm = self._permutation(readers[0]) if len(readers) == 1 and reg not in self.outputs else None
        if perm is None or perm[-1] != len(shape) - 1 or self.types[reg].shape != tuple(shape):
            return self.result_buffer(shape, dtype), View.contiguous(shape)
        order = tuple(shape[a] for a in perm)
        inverse = [perm.index(i) for i in range(len(perm))]
        return self.new_buffer(order, dtype), View.contiguous(order).map(views.permute(order, inverse))

    def _permutation(self, address: int) -> list[int] | None:
        """The axis order of a transpose/permute at ``address`` (None for any other instruction)."""
        ins = self.instructions[address - self.info.base]
        if ins.name != "OP_CALL" or ins["op"] not in ("transpose", "permute"):
            return None
        return views.axis_order(ins["op"], self.info.attrs[address], self.types[ins["dsts"][0]].shape.rank)

    def add(self, kernel: Kernel) -> None:
        self.kernels.append(kernel)

    def guard(self, a: Dim, b: Dim, what: str) -> None:
        """A size relation the generated code assumes; checked by the launcher before every call."""
        self.guards.append(Guard(a, b, what))

    def constant_expr(self, array: np.ndarray, recipe: Recipe | None = None) -> Expr:
        """A constant: inline when it is one value, else a read-only buffer baked in by address
        (``recipe``: how it was made, when it was)."""
        shape = shape_of(array.shape)
        if array.size == 1:
            return Const(array.reshape(-1)[0].item(), array.dtype.name, shape)
        array = np.ascontiguousarray(array)
        array.setflags(write=False)
        self.constants.append(array)
        self.recipes.append(recipe)
        k = len(self.constants) - 1
        return Load.of(Buffer("const", array.dtype.name, shape, f"k{k}", index=k, array=array))

    def constant_value(self, expr: Expr) -> np.ndarray | None:
        """The numpy value of a constant expression, when it is one."""
        if (
            isinstance(expr, Const)
            and all(d.is_const for d in expr.shape)
            and not isinstance(expr.scalar, Dim)
        ):
            return np.full([d.value for d in expr.shape], expr.scalar, dtype=expr.dtype)
        dense = isinstance(expr, Load) and expr.view == View.contiguous(expr.buffer.shape)
        return expr.buffer.array if dense and expr.buffer.kind == "const" else None

    def broadcast(self, expr: Expr, shape: Shape) -> Expr:
        """``expr`` broadcast to ``shape``; computed values are stored first rather than recomputed."""
        shape = tuple(shape)
        if len(expr.shape) == len(shape) and all(same(a, b) for a, b in zip(expr.shape, shape)):
            return expr
        lead = len(shape) - len(expr.shape)
        for i, d in enumerate(expr.shape):
            target = shape[lead + i]
            if d != 1 and not same(d, target):
                self.guard(
                    d,
                    target,
                    f"broadcast dim {i} of {list(map(str, expr.shape))} to "
                    f"{list(map(str, shape))} (native code needs them equal, not 1)",
                )
        if is_compute(expr) and not same(numel(expr.shape), numel(shape)):
            expr = self.materialize(expr)
        return expr.relayout(broadcast(expr.shape, shape))

    def reshape(self, expr: Expr, shape: Shape) -> Expr:
        return expr.relayout(views.reshape(expr.shape, tuple(shape)))

    def map(self, op: str, inputs: Sequence[Expr], dtype: str, shape: Shape, attrs: tuple = ()) -> Expr:
        """An elementwise op with numpy broadcasting of its inputs to ``shape``."""
        return Map(op, [self.broadcast(e, shape) for e in inputs], dtype, attrs)

    def materialize(self, expr: Expr, dest: Buffer | None = None, view: View | None = None) -> Load:
        """Write ``expr`` to memory (``dest`` through ``view``, else a fresh arena buffer); read it back."""
        if isinstance(expr, RowResult) and dest is None and id(expr.spec) in self.rows:
            return self.rows[id(expr.spec)]
        dest = dest or self.new_buffer(expr.shape, expr.dtype)
        view = view or View.contiguous(expr.shape)
        expr = self._prepare(expr)
        if any(ld.buffer is dest and ld.view != view for ld in walk(expr) if isinstance(ld, Load)):
            expr = self.materialize(expr)
        rows = [n for n in _elementwise_reach(expr) if isinstance(n, RowResult)]
        if rows:
            spec = rows[0].spec
            needs = spec.needs_scratch() or streams(spec, dest, view)
            needs = needs and NativeRows.of(spec, expr, dest, view) is None  # a native job has its own
            scratch = self.new_buffer(spec.row_shape, spec.dtype, "row") if needs else None
            self.add(RowKernel(spec, expr, dest, view, scratch))
        else:
            self.add(ElementwiseKernel(dest, view, expr))
        result = Load(dest, View.contiguous(expr.shape))
        if isinstance(expr, RowResult):
            self.rows[id(expr.spec)] = result
        return result

    def _prepare(self, expr: Expr) -> Expr:
        """Row results read other than elementwise at the same index (or a second one) are stored first."""
        direct = [n for n in _elementwise_reach(expr) if isinstance(n, RowResult)]
        keep = direct[0] if direct else None

        def sub(node: Expr) -> Expr | None:
            if isinstance(node, RowResult) and node is not keep:
                return self.materialize(node)
            return None

        if not any(isinstance(n, RowResult) and n is not keep for n in walk(expr)):
            return expr
        return replace(expr, sub)

    def ready(self, expr: Expr) -> Expr:
        """``expr`` with every row result stored first (for kernels evaluating it outside its row kernel)."""
        if not any(isinstance(n, RowResult) for n in walk(expr)):
            return expr
        return replace(expr, lambda n: self.materialize(n) if isinstance(n, RowResult) else None)

    def gemm_entry(self, dtype: str) -> Any:
        if self.gemm is not None:
            return self.gemm.get(dtype)
        from ...native.blas import best_gemm

        return best_gemm(dtype) if dtype in ("float32", "float64") else None

    # -- after the walk ---------------------------------------------------------------------------------
    def dead_code(self) -> None:
        live = set(self.outputs.values())
        kept: list[Kernel] = []
        for kernel in reversed(self.kernels):
            if kernel.can_fail or any(b in live for b in kernel.writes()):
                kept.append(kernel)
                live.update(kernel.reads())
        self.kernels = kept[::-1]

    def fold_epilogues(self) -> None:
        """Let a kernel apply the elementwise pass that alone reads its output while it writes that output
        (``Kernel.absorb_epilogue``: a convolution's residual add and ReLU) — one pass over the tensor less.
        The producer moves to the consumer's place, after everything the epilogue reads."""
        readers = Counter(b for k in self.kernels for b in k.reads())
        i = 0
        while i < len(self.kernels):
            consumer = self.kernels[i]
            for j in range(i - 1, -1, -1) if isinstance(consumer, ElementwiseKernel) else ():
                producer = self.kernels[j]
                buf = producer.writes()[0]
                if buf.kind != "arena" or readers[buf] != 1 or buf not in consumer.reads():
                    continue
                inputs = set(producer.reads())
                if any(inputs.intersection(k.writes()) for k in self.kernels[j + 1 : i]):
                    continue
                if producer.absorb_epilogue(consumer, buf):
                    self.kernels[j : i + 1] = [*self.kernels[j + 1 : i], producer]
                    i -= 1
                    break
            i += 1

    def coalesce(self) -> None:
        """Fold a buffer into its last reader's output when that reader consumes it element by element;
        a copy that thereby reads what it writes is dropped."""
        readers: dict[Buffer, list[int]] = {}
        writers: dict[Buffer, list[int]] = {}
        for i, k in enumerate(self.kernels):
            for b in k.reads():
                readers.setdefault(b, []).append(i)
            for b in k.writes():
                writers.setdefault(b, []).append(i)
        for i, k in enumerate(self.kernels):
            source = k.inplace_source()
            out = k.writes()[0] if source is not None else None
            if out is None or writers.get(out) != [i] or readers.get(out, [i])[0] < i:
                continue
            view = getattr(k, "view", None)
            if view is None or not (
                view.is_contiguous() and view.offset == 0 and same(numel(view.shape), numel(out.shape))
            ):
                continue
            for buf in k.reads():
                if buf.kind != "arena" or buf.alias is not None or buf.dtype != out.dtype:
                    continue
                if max(readers[buf]) != i or len(writers.get(buf, [])) != 1 or writers[buf][0] >= i:
                    continue
                if not same(numel(buf.shape), numel(out.shape)) or buf in k.scratch():
                    continue
                exprs = [source] + (
                    [k.spec.src, k.spec.weight, k.spec.bias] if isinstance(k, RowKernel) else []
                )
                if all(_pointwise_reads(e, buf, view) for e in exprs if e is not None):
                    buf.alias = out
                    break
        self.kernels = [k for k in self.kernels if not (isinstance(k, ElementwiseKernel) and k.is_noop())]


def _pointwise_reads(expr: Expr, buf: Buffer, view: View) -> bool:
    """Every read of ``buf`` in ``expr`` is at the kernel's own index, through elementwise nodes only."""
    direct = {id(n) for n in _elementwise_reach(expr)}
    return all(
        id(ld) in direct and ld.view == view for ld in walk(expr) if isinstance(ld, Load) and ld.buffer is buf
    )


def _elementwise_reach(expr: Expr) -> list[Expr]:
    """Nodes reachable from ``expr`` through elementwise (index-preserving) nodes only."""
    out, seen, stack = [], set(), [expr]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        out.append(node)
        if isinstance(node, Map):
            stack.extend(node.children())
    return out


def _flat(values: Any) -> list[Any]:
    out = []
    for v in values:
        if isinstance(v, (tuple, list)):
            out.extend(_flat(v))
        else:
            out.append(v)
    return out
