"""Shape Convergence Degree (DESIGN §5): which tensor dims are anchored at function entry, and why not.

Why per dim and with a reason: the SCD number says *that* a region will not compile; a user needs to
know *which* dim broke the chain and *where* — a data-dependent op, a merge of branches, a size made
outside the bytecode — to fix it. The analysis reads only the verifier's types, so it costs nothing at
run time and can be printed before the function ever runs.

A dim is anchored when it is a constant or an expression over symbols bound at entry (annotated input
dims, ``ms.mutable`` scalars). ``?`` dims, dims of data-dependent ops and fresh symbols nothing binds
are not. Every unanchored dim carries its *root* cause, which propagation keeps intact ("propagated
from R3: data-dependent: nonzero at 0x0012").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ..bytecode.module import Instruction, RegRef
from ..errors import format_address
from ..ops.registry import REGISTRY, TensorType
from ..shapes import Dim
from ..verifier import FunctionInfo, ScalarType

OUTSIDE_HINT = "pass it as ms.mutable or use ms.symbolic_mul"


@dataclass(frozen=True)
class TensorSCD:
    """One tensor register: its dims, which are anchored, and a reason for each dim."""

    register: int
    name: str  # the parameter name for an input, else "R5"
    address: int  # the instruction that defines it
    opcode: str  # e.g. "OP_CALL relu"
    dtype: str
    dims: tuple[Dim, ...]
    anchored: tuple[bool, ...]
    reasons: tuple[str, ...]
    causes: tuple[str | None, ...]  # the root cause of each unanchored dim (None where anchored)
    source: str | None = None  # file:line of the defining instruction
    values: tuple[int | None, ...] | None = None  # concrete sizes where example inputs bind them

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def scd(self) -> float:
        return 1.0 if not self.dims else sum(self.anchored) / len(self.dims)

    def shape_text(self) -> str:
        """``[N, 3, H*2, ?]``, with concrete sizes when known: ``[N=2, 3, H*2=16, ?]``."""
        items = []
        for i, d in enumerate(self.dims):
            value = None if self.values is None else self.values[i]
            items.append(f"{d}={value}" if value is not None and not d.is_const else str(d))
        return "[" + ", ".join(items) + "]"

    def summary(self) -> str:
        """The reasons of the anchored dims, without repeats ("propagated from x")."""
        seen = dict.fromkeys(r for r, a in zip(self.reasons, self.anchored) if a and r != "constant")
        if seen:
            return "; ".join(seen)
        if not self.dims:
            return "rank 0"
        if all(self.anchored):
            return "constant shape"
        return "only constant dims anchored" if any(self.anchored) else "nothing anchored"

    def as_dict(self) -> dict:
        return {
            "register": self.register,
            "name": self.name,
            "address": self.address,
            "opcode": self.opcode,
            "dtype": self.dtype,
            "dims": [str(d) for d in self.dims],
            "anchored": list(self.anchored),
            "reasons": list(self.reasons),
            "causes": list(self.causes),
            "scd": self.scd,
            "source": self.source,
            "values": None if self.values is None else list(self.values),
        }


def is_anchored(dim: Dim, entry_symbols: frozenset[str]) -> bool:
    return not dim.is_unknown and dim.free_symbols <= entry_symbols


def user_symbols(info: FunctionInfo) -> dict[str, tuple[str, int | None]]:
    """symbol -> (parameter, axis) of the entry symbols a user named: an annotated dim (``"H"``) or an
    ``ms.mutable`` scalar (axis None). The frontend calls the dims of an unannotated ``x`` ``x_0``,
    ``x_1``…: those are made up, and left out."""
    params = info.function.parameter_registers()
    out: dict[str, tuple[str, int | None]] = {}
    for reg, name in params.items():
        t = info.types[reg]
        if isinstance(t, TensorType):
            for axis, d in enumerate(t.shape):
                if d.is_symbol and d.name != f"{name}_{axis}":
                    out.setdefault(d.name, (name, axis))
        elif isinstance(t, ScalarType) and t.value.is_symbol:
            out.setdefault(t.value.name, (name, None))
    return out


def analyze_tensors(info: FunctionInfo, bindings: Mapping[str, int] | None = None, *,
                    explain: bool = True) -> dict[int, TensorSCD]:
    """SCD of every tensor register of a verified function, keyed by register (in definition order).

    ``explain=False`` skips the reasons (empty strings; causes None): what the JIT needs at run time.
    """
    return _Analyzer(info, bindings, explain).run()


class _Analyzer:
    def __init__(self, info: FunctionInfo, bindings: Mapping[str, int] | None, explain: bool) -> None:
        self.info = info
        self.explain = explain
        self.fn = info.function
        self.entry = info.entry_symbols
        self.bindings = bindings
        self.roots: dict[tuple[int, int], str] = {}  # (register, axis) -> root cause of an unanchored dim
        self.scalar_roots: dict[int, str] = {}  # scalar register -> root cause of its unanchored value
        self.out: dict[int, TensorSCD] = {}
        self.loop_headers = {dst for _, dst in info.cfg.back_edges()}
        self.params = self.fn.parameter_registers()

    def run(self) -> dict[int, TensorSCD]:
        starts, address = [], self.info.base
        for block in self.fn.blocks:
            starts.append(address)
            address += len(block.instructions)
        for bi in self.info.cfg.rpo:
            for address, ins in enumerate(self.fn.blocks[bi].instructions, start=starts[bi]):
                self.visit(ins, address, bi)
        return dict(sorted(self.out.items()))

    # -- naming --------------------------------------------------------------------------------
    def name(self, reg: int) -> str:
        return self.params.get(reg, f"R{reg}")

    def scalar_text(self, reg: int) -> str:
        t = self.info.types[reg]
        return f"R{reg} = {t.value}" if isinstance(t, ScalarType) else f"R{reg}"

    # -- per instruction -----------------------------------------------------------------------
    def visit(self, ins: Instruction, address: int, block: int) -> None:
        if ins.name in ("SHAPE_PROPAGATE", "SCALAR_OP", "SCALAR_PHI"):
            if self.explain:
                self.visit_scalar(ins, address, block)
            return
        for reg in ins.writes():
            t = self.info.types[reg]
            if isinstance(t, TensorType) and not self.explain:
                self.record(ins, address, reg, t, [""] * t.shape.rank, [None] * t.shape.rank)
            elif isinstance(t, TensorType):
                reasons = [self.dim_reason(ins, address, block, reg, a, d) for a, d in enumerate(t.shape)]
                causes = [self.roots.get((reg, a)) for a in range(t.shape.rank)]
                self.record(ins, address, reg, t, reasons, causes)

    def visit_scalar(self, ins: Instruction, address: int, block: int) -> None:
        dst = ins["dst"]
        t = self.info.types[dst]
        if not isinstance(t, ScalarType) or is_anchored(t.value, self.entry):
            return
        if ins.name == "SHAPE_PROPAGATE":
            root = self.roots.get((ins["src"], ins["dim"]))
        elif ins.name == "SCALAR_OP":
            root = next((self.scalar_roots[r] for r in (ins["a"], ins["b"]) if r in self.scalar_roots), None)
        else:
            root = next((self.scalar_roots[r] for _, r in ins["incoming"] if r in self.scalar_roots), None)
            root = root or f"merge of paths with different values at {_addr(address)}"
        self.scalar_roots[dst] = root or self.fresh(t.value)

    def record(self, ins: Instruction, address: int, reg: int, t: TensorType, reasons: list[str],
               causes: list[str | None]) -> None:
        anchored = tuple(is_anchored(d, self.entry) for d in t.shape)
        values = None
        if self.bindings is not None:
            values = tuple(d.evaluate(self.bindings) if a else None for d, a in zip(t.shape, anchored))
        opcode = ins.name + (f" {ins['op']}" if ins.name == "OP_CALL" else "")
        source = f"{ins.loc.file}:{ins.loc.line}" if ins.loc is not None else None
        self.out[reg] = TensorSCD(reg, self.name(reg), address, opcode, t.dtype, tuple(t.shape), anchored,
                                  tuple(reasons), tuple(causes), source, values)

    def dim_reason(self, ins: Instruction, address: int, block: int, reg: int, axis: int, d: Dim) -> str:
        """The reason for one dim; for an unanchored dim also records its root cause."""
        if is_anchored(d, self.entry):
            return self.anchored_reason(ins, d)
        reason, root = self.unanchored(ins, address, block, axis, d)
        self.roots[(reg, axis)] = root
        return reason

    def anchored_reason(self, ins: Instruction, d: Dim) -> str:
        if d.is_const:
            return "constant"
        if ins.name == "TENSOR_CREATE":
            return f"bound by input {self.fn.params[ins['arg']]}" if ins["arg"] >= 0 else "entry-bound"
        for src in ins.reads():
            t = self.info.types[src]
            if isinstance(t, TensorType) and d in tuple(t.shape):
                return f"propagated from {self.name(src)}"
        for src in ins.reads():
            t = self.info.types[src]
            if isinstance(t, ScalarType) and t.value == d:
                return f"from {self.scalar_text(src)} (bound at entry)"
        return f"{d} over entry-bound symbols"

    def unanchored(self, ins: Instruction, address: int, block: int, axis: int, d: Dim) -> tuple[str, str]:
        """(reason, root cause) of a dim that is ``?`` or uses a symbol nothing binds."""
        if not d.is_unknown:
            root = self.fresh(d)
            return root, root
        name = ins.name
        if name == "TENSOR_CREATE":
            param = self.fn.params[ins["arg"]] if ins["arg"] >= 0 else "a zeros tensor"
            root = (f"declared ? by input {param}: a size made outside the bytecode (like h*2 computed in "
                    f"Python) is bound to nothing — name it, {OUTSIDE_HINT}")
            return root, root
        if name == "TENSOR_PHI":
            for _, src in ins["incoming"]:
                if (src, axis) in self.roots:
                    return self.propagated(src, axis)
            if block in self.loop_headers:
                root = f"loop-carried size changes at {_addr(address)}"
            else:
                root = f"merge of branches with different sizes at {_addr(address)}"
            return root, root
        if name in ("TENSOR_ALLOC", "TENSOR_RESIZE"):
            dims = ins["dims"]
            src = dims[axis] if axis < len(dims) else None
            if src is not None and src in self.scalar_roots:
                root = self.scalar_roots[src]
                return f"size from {self.scalar_text(src)}: {root}", root
            root = f"{name} at {_addr(address)} infers it from an empty size"
            return root, root
        if name == "OP_CALL":
            return self.unanchored_call(ins, address, axis)
        root = f"{name} at {_addr(address)}"
        return root, root

    def unanchored_call(self, ins: Instruction, address: int, axis: int) -> tuple[str, str]:
        op = ins["op"]
        if "data_dependent" in REGISTRY[op].traits:
            root = f"data-dependent: {op} at {_addr(address)}"
            return root, root
        for key, value in ins["attrs"].items():
            for reg in _attr_regs(value):
                if reg in self.scalar_roots:
                    root = self.scalar_roots[reg]
                    return f"{op} {key} from {self.scalar_text(reg)}, an unbound symbol: {root}", root
        srcs = [r for r in ins["srcs"] if isinstance(self.info.types[r], TensorType)]
        candidates = [(r, axis) for r in srcs if (r, axis) in self.roots]
        candidates += [(r, a) for r in srcs for a in range(self.info.types[r].shape.rank)
                       if (r, a) in self.roots]
        if candidates:
            return self.propagated(*candidates[0])
        root = (f"{op} at {_addr(address)} computes this size outside the shape algebra "
                f"(give the size explicitly: {OUTSIDE_HINT})")
        return root, root

    def propagated(self, src: int, axis: int) -> tuple[str, str]:
        root = self.roots[(src, axis)]
        return f"propagated from {self.name(src)}: {root}", root

    def fresh(self, d: Dim) -> str:
        missing = ", ".join(sorted(d.free_symbols - self.entry)) or "?"
        return (f"{d} uses {missing}, which nothing binds (a broken propagation chain: {d} computed outside "
                f"the bytecode) — {OUTSIDE_HINT}")


# Names for the dims of an unannotated array that took several values, by its rank (NCHW and friends).
_DIM_NAMES = {1: ("N",), 2: ("N", "D"), 3: ("N", "L", "D"), 4: ("N", "C", "H", "W"),
              5: ("N", "C", "D", "H", "W")}


def suggest_annotations(seen: Mapping[str, Sequence[tuple[int, ...]]],
                        taken: Iterable[str] = ()) -> dict[str, str]:
    """parameter -> the annotation to write for it, from the shapes it came with (one per recorded call
    combination, aligned across parameters): ``ms.Tensor[16, 3, 3, 3]`` for a weight whose shape never
    changed, ``ms.Tensor[2, 3, "H", "W"]`` for a frame whose sizes did.

    A dim that took several values gets its rank's usual letter, shared with the dims of other
    parameters that took the very same values call by call (the binding the user means), or
    ``x_2`` when the letter is taken (``taken``: symbols the function names already) by other values.
    """
    owner: dict[str, tuple[int, ...]] = {}  # letter -> the values it stands for
    blocked = set(taken)
    out = {}
    for name, shapes in seen.items():
        if not shapes or len({len(s) for s in shapes}) != 1:
            continue
        letters = _DIM_NAMES.get(len(shapes[0]), ())
        dims = []
        for axis in range(len(shapes[0])):
            values = tuple(s[axis] for s in shapes)
            if len(set(values)) == 1:
                dims.append(str(values[0]))
                continue
            letter = letters[axis] if axis < len(letters) else f"{name}_{axis}"
            if letter in blocked or owner.setdefault(letter, values) != values:
                letter = f"{name}_{axis}"
            dims.append(f'"{letter}"')
        out[name] = f"ms.Tensor[{', '.join(dims)}]"
    return out


def _attr_regs(value: object) -> list[int]:
    if isinstance(value, RegRef):
        return [value.index]
    if isinstance(value, tuple):
        return [r for v in value for r in _attr_regs(v)]
    return []


def _addr(address: int) -> str:
    return format_address(address).removeprefix("msvm://bc/")


__all__ = ["OUTSIDE_HINT", "TensorSCD", "analyze_tensors", "is_anchored", "suggest_annotations",
           "user_symbols"]
