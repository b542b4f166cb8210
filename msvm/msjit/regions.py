"""JIT regions: a function's shape-stable instruction runs, and each as a standalone function.

The design is in ``docs/architecture.md``, "The JIT: a region is a standalone function".

Why regions stay inside basic blocks: a block's instructions run together or not at all, so a region
needs no side exits and its inputs are exactly the registers it reads from outside. Branches whose
conditions depend only on shapes are folded *per signature* by the cache rather than by the region:
the blocks of the arm a signature takes form their own regions, and only those get hot and compile
for that signature; the dispatch costs one key lookup per block instead of per instruction.

Rules, in order, for each instruction of a reachable block:
* inputs (``TENSOR_CREATE`` of an argument, ``SCALAR_ARG``), phis and terminators end a region silently;
* an op with a data-dependent output size (``nonzero``) ends it: its result's size is known only after
  it runs, so the next region starts with that size concrete (and usually unanchored, SCD below 1);
* an op the code generator cannot lower (``codegen.can_lower``) splits it, and the split says why;
* ``CMP`` (a run-time bool for a branch) and zeros of an entry-bound shape stay in the interpreter;
* everything else joins the current region. A region is worth compiling when it holds an ``OP_CALL``
  and its SCD (anchored dims / all dims of the tensors it defines) reaches ``scd_threshold``.

A region becomes a standalone, verified, straight-line function for the code generator: its tensor
inputs declared with ``TENSOR_CREATE``, its run-time scalars with ``SCALAR_ARG`` (or folded into
constants), constants and scalar chains it can recompute cloned in, and ``RET`` of its live-outs.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..bytecode.builder import ModuleBuilder
from ..bytecode.module import Instruction, Module, RegRef, make_instruction
from ..bytecode.opcodes import CONSTANTS, PHIS, TERMINATORS, Kind
from ..errors import format_address
from ..ops.registry import REGISTRY, OpDef, TensorType
from ..options import JitOptions
from ..shapes import ShapeSpec
from ..verifier import FunctionInfo
from .scd import TensorSCD, analyze_tensors, suggest_annotations, user_symbols

_SILENT = PHIS | TERMINATORS | {"SCALAR_ARG"}
_REMAT = CONSTANTS  # cheap, pure: recomputed rather than passed around
_DETACHABLE = ("SCALAR_CONST", "SCALAR_OP")  # left to the interpreter unless a tensor instruction needs them

CanLower = Callable[[OpDef, dict, list], "str | None"]


@dataclass(frozen=True)
class Split:
    """An instruction that ends a region and runs in the interpreter, and why."""

    address: int
    opcode: str
    kind: str  # "data-dependent" | "unlowerable" | "interpreter"
    reason: str
    parameters: tuple[str, ...] = ()  # unlowerable: the parameters whose symbolic shape stops the lowering

    def as_dict(self) -> dict:
        return {"address": self.address, "opcode": self.opcode, "kind": self.kind, "reason": self.reason,
                "parameters": list(self.parameters)}

    def __str__(self) -> str:
        return f"split at {_addr(self.address)} ({self.opcode}): {self.reason}"


@dataclass
class Region:
    """A maximal run of instructions of one block that the JIT may compile as a unit."""

    id: int
    function: str
    block: int
    addresses: tuple[int, ...]
    instructions: tuple[Instruction, ...]
    tensors: tuple[TensorSCD, ...]  # the tensors it defines
    threshold: float
    hot_threshold: int
    started_after: Split | None = None
    ended_by: Split | None = None

    @property
    def start(self) -> int:
        return self.addresses[0]

    @property
    def end(self) -> int:
        return self.addresses[-1]

    @property
    def n_calls(self) -> int:
        return sum(ins.name == "OP_CALL" for ins in self.instructions)

    @property
    def total_dims(self) -> int:
        return sum(t.rank for t in self.tensors)

    @property
    def anchored_dims(self) -> int:
        return sum(sum(t.anchored) for t in self.tensors)

    @property
    def scd(self) -> float:
        total = self.total_dims
        return 1.0 if total == 0 else self.anchored_dims / total

    @property
    def unanchored(self) -> list[str]:
        """One line per unanchored dim: where it is and why."""
        return [f"dim {axis} of {t.name} ({t.dims[axis]}): {t.reasons[axis]}"
                for t in self.tensors for axis, a in enumerate(t.anchored) if not a]

    @property
    def compilable(self) -> bool:
        return self.n_calls > 0 and self.scd >= self.threshold

    @property
    def reason(self) -> str:
        if self.n_calls == 0:
            return "no OP_CALL: nothing worth compiling"
        if self.scd < self.threshold:
            unanchored = self.unanchored
            return (f"SCD {self.scd:.2f} < threshold {self.threshold:.2f}, stays interpreted: "
                    f"{len(unanchored)} of {self.total_dims} dims are not anchored, first {unanchored[0]}")
        return (f"SCD {self.scd:.2f} >= threshold {self.threshold:.2f}: compiles once a cache key has run "
                f"{self.hot_threshold} times")

    def as_dict(self) -> dict:
        return {
            "id": self.id,
            "function": self.function,
            "block": self.block,
            "addresses": list(self.addresses),
            "start": self.start,
            "end": self.end,
            "n_calls": self.n_calls,
            "scd": self.scd,
            "threshold": self.threshold,
            "compilable": self.compilable,
            "reason": self.reason,
            "unanchored": self.unanchored,
            "started_after": None if self.started_after is None else self.started_after.as_dict(),
            "ended_by": None if self.ended_by is None else self.ended_by.as_dict(),
            "tensors": [t.register for t in self.tensors],
        }


def default_can_lower() -> CanLower:
    """The code generator's verdict on an op (imported on first use: ``import msvm`` stays cheap)."""
    from .codegen import can_lower

    return can_lower


def form_regions(info: FunctionInfo, tensors: dict[int, TensorSCD], *, threshold: float, hot_threshold: int,
                 can_lower: CanLower, annotations: Mapping[str, str] | None = None
                 ) -> tuple[list[Region], list[Split]]:
    """Regions of a verified function in layout order, and the splits between them; ``annotations``
    (parameter -> ``ms.Tensor[...]`` to write) make an unlowerable split's hint exact."""
    regions: list[Region] = []
    splits: list[Split] = []
    reachable = info.cfg.reachable
    base = info.base
    for bi, block in enumerate(info.function.blocks):
        start, base = base, base + len(block.instructions)
        if bi not in reachable:
            continue
        run: list[tuple[int, Instruction]] = []
        before: Split | None = None
        for address, ins in enumerate(block.instructions, start=start):
            split = _boundary(ins, address, info, can_lower, annotations)
            if split is None:
                run.append((address, ins))
                continue
            reported = split if isinstance(split, Split) else None
            if run:
                regions.append(_region(len(regions), info, bi, run, tensors, threshold, hot_threshold, before,
                                       reported))
                run = []
            if reported is not None:
                splits.append(reported)
            before = reported
        if run:
            regions.append(_region(len(regions), info, bi, run, tensors, threshold, hot_threshold, before,
                                   None))
    return regions, splits


def _region(index: int, info: FunctionInfo, block: int, run: list[tuple[int, Instruction]],
            tensors: dict[int, TensorSCD], threshold: float, hot_threshold: int, before: Split | None,
            after: Split | None) -> Region:
    defined = tuple(tensors[r] for _, ins in run for r in ins.writes() if r in tensors)
    return Region(index, info.function.name, block, tuple(a for a, _ in run), tuple(i for _, i in run),
                  defined, threshold, hot_threshold, before, after)


def _boundary(ins: Instruction, address: int, info: FunctionInfo, can_lower: CanLower,
              annotations: Mapping[str, str] | None = None) -> Split | bool | None:
    """None: the instruction joins the region; a Split: it ends it (reported); True: ends it quietly."""
    name = ins.name
    if name in _SILENT or (name == "TENSOR_CREATE" and ins["arg"] >= 0):
        return True
    if name == "TENSOR_CREATE":
        return Split(address, name, "interpreter",
                     "zeros of an entry-bound shape are created by the interpreter")
    if name == "CMP":
        return Split(address, name, "interpreter", "a run-time bool for a branch stays in the interpreter")
    if name != "OP_CALL":
        return None
    op = ins["op"]
    opcode = ins.label
    if "data_dependent" in REGISTRY[op].traits:
        return Split(address, opcode, "data-dependent",
                     f"{op} has a data-dependent output size: the region ends here and the next one starts "
                     "with its result's size known only at run time")
    inputs = [info.types[r] for r in ins["srcs"]]
    why = can_lower(REGISTRY[op], info.attrs[address], inputs)
    if why is not None:
        blockers = _blocking_parameters(REGISTRY[op], info.attrs[address], inputs, info, can_lower)
        hint = _hint(blockers, annotations)
        return Split(address, opcode, "unlowerable", f"{op} has no native lowering: {why}{hint}", blockers)
    return None


ANNOTATE_HINT = "annotate {names} with constant sizes"


def _blocking_parameters(op: OpDef, attrs: dict, inputs: list, info: FunctionInfo,
                         can_lower: CanLower) -> tuple[str, ...]:
    """The parameters whose symbolic dims, made constant, let ``op`` lower: each one alone, else all of
    them together; () when constants would not help. Why ask ``can_lower`` again rather than guess:
    it alone knows which operand must be static (conv2d's weight, not its input)."""
    owners: dict[str, str] = {}  # an entry symbol -> the parameter whose dim it is
    for reg, name in info.function.parameter_registers().items():
        t = info.types[reg]
        if isinstance(t, TensorType):
            for d in t.shape:
                if d.is_symbol:
                    owners.setdefault(d.name, name)
    used = {s for t in inputs if isinstance(t, TensorType) for d in t.shape for s in d.free_symbols}
    candidates = list(dict.fromkeys(owners[s] for s in sorted(used) if s in owners))

    def lowers(params: Sequence[str]) -> bool:
        one = {s: 1 for s, p in owners.items() if p in params}
        fixed = [TensorType(ShapeSpec(d.substitute(one) for d in t.shape), t.dtype)
                 if isinstance(t, TensorType) else t for t in inputs]
        return can_lower(op, attrs, fixed) is None

    alone = tuple(p for p in candidates if lowers([p]))
    if alone or not candidates:
        return alone
    return tuple(candidates) if lowers(candidates) else ()


def _hint(blockers: Sequence[str], annotations: Mapping[str, str] | None = None) -> str:
    """"; annotate w1 with constant sizes", or with the annotation to write when it is known."""
    if not blockers:
        return ""
    if annotations and all(p in annotations for p in blockers):
        return "; annotate " + " and ".join(f"`{p}` as `{annotations[p]}`" for p in blockers)
    return "; " + ANNOTATE_HINT.format(names=" and ".join(f"`{p}`" for p in blockers))


# -- a region as a standalone function ---------------------------------------------------------------------


@dataclass(frozen=True)
class RegionIO:
    """What crosses a region's boundary."""

    tensor_inputs: tuple[int, ...]  # tensor registers read from outside, in first-use order
    scalar_params: tuple[int, ...]  # run-time scalars read from outside that cannot be recomputed inside
    clones: tuple[Instruction, ...]  # outside definitions recomputed inside (constants, shape arithmetic)
    body: tuple[Instruction, ...]  # the region's instructions, without frees of outside registers
    detached: tuple[Instruction, ...]  # scalar arithmetic no tensor op needs: re-run by the interpreter
    live_outs: tuple[int, ...]  # registers the compiled region returns
    remat: tuple[Instruction, ...]  # constant live-outs, re-run by the interpreter after native code
    outer_frees: tuple[int, ...]  # outside registers the region frees


@dataclass(frozen=True)
class DefUse:
    """Def-use facts of a function, computed once for all its regions."""

    defs: dict[int, Instruction]  # register -> the instruction writing it
    readers: dict[int, set[int]]  # register -> addresses of the instructions reading it (phis included)
    order: dict[int, int]  # id(instruction) -> position in layout order
    reads: dict[int, list[int]]  # id(instruction) -> registers it reads
    writes: dict[int, list[int]]  # id(instruction) -> registers it writes


def def_use(info: FunctionInfo) -> DefUse:
    defs: dict[int, Instruction] = {}
    readers: dict[int, set[int]] = {}
    order: dict[int, int] = {}
    reads: dict[int, list[int]] = {}
    writes: dict[int, list[int]] = {}
    for address, (_, _, ins) in enumerate(info.function.instructions(), start=info.base):
        order[id(ins)] = address
        reads[id(ins)] = ins.reads()
        writes[id(ins)] = ins.writes()
        for reg in writes[id(ins)]:
            defs[reg] = ins
        for reg in reads[id(ins)]:
            readers.setdefault(reg, set()).add(address)
    return DefUse(defs, readers, order, reads, writes)


def region_io(region: Region, info: FunctionInfo, facts: DefUse) -> RegionIO:
    """What crosses the region's boundary.

    Scalar arithmetic that no tensor instruction of the region needs (a loop counter, a size for a
    later branch) is *detached*: it stays with the interpreter, so its inputs do not become run-time
    scalars of the region — they would put a new value in the cache key at every loop iteration.
    """
    defs, reads, writes = facts.defs, facts.reads, facts.writes
    needed: set[int] = set()
    attached: list[Instruction] = []
    for ins in reversed(region.instructions):
        if ins.name not in _DETACHABLE or needed.intersection(writes[id(ins)]):
            attached.append(ins)
            needed.update(reads[id(ins)])
    attached.reverse()
    kept = set(map(id, attached))
    detached = tuple(ins for ins in region.instructions if id(ins) not in kept)
    inside = {facts.order[id(ins)] for ins in attached}
    defined = {r for ins in attached for r in writes[id(ins)]}
    body = [ins for ins in attached if not (ins.name == "TENSOR_FREE" and ins["src"] not in defined)]
    outer_frees = tuple(ins["src"] for ins in attached
                        if ins.name == "TENSOR_FREE" and ins["src"] not in defined)
    tensor_inputs: dict[int, None] = {}
    others: list[int] = []  # scalars and constants read from outside
    for ins in body:
        if ins.name == "TENSOR_FREE":
            continue
        for reg in reads[id(ins)]:
            if reg in defined:
                continue
            if isinstance(info.types[reg], TensorType) and defs[reg].name != "LOAD_CONST":
                tensor_inputs.setdefault(reg)
            else:
                others.append(reg)
    clones: dict[int, Instruction] = {}
    params: dict[int, None] = {}

    def need(reg: int) -> None:
        ins = defs[reg]
        if id(ins) in clones or reg in params:
            return
        recomputable = ins.name in _REMAT or (ins.name == "SHAPE_PROPAGATE" and ins["src"] in tensor_inputs)
        if ins.name == "SCALAR_OP":
            need(ins["a"])
            need(ins["b"])
            recomputable = True
        if recomputable:
            clones[id(ins)] = ins
        else:
            params.setdefault(reg)

    for reg in others:
        need(reg)
    live = [r for r in sorted(defined) if facts.readers.get(r, set()) - inside]
    remat = tuple(defs[r] for r in live if defs[r].name in _REMAT)
    cloned = tuple(sorted(clones.values(), key=lambda i: facts.order[id(i)]))
    returned = tuple(r for r in live if defs[r].name not in _REMAT)
    return RegionIO(tuple(tensor_inputs), tuple(params), cloned, tuple(body), detached, returned, remat,
                    outer_frees)


def param_names(io: RegionIO, info: FunctionInfo) -> list[str]:
    """Readable, unique parameter names: the original argument's name where there is one."""
    by_reg = info.function.parameter_registers()
    names = []
    for reg in (*io.tensor_inputs, *io.scalar_params):
        name = by_reg.get(reg, f"r{reg}")
        names.append(name if name not in names else f"{name}_r{reg}")
    return names


def build_function(region: Region, io: RegionIO, info: FunctionInfo, module: Module,
                   specs: Sequence[ShapeSpec], scalars: Sequence[int | str], name: str) -> Module:
    """The region as a one-block MS-BC function: ``specs`` declare the tensor inputs; a scalar given as an
    int is folded into a constant, one given as a symbol name is a ``SCALAR_ARG`` bound to it."""
    mb = ModuleBuilder(name)
    names = param_names(io, info)
    n_tensors = len(io.tensor_inputs)
    params = names[:n_tensors] + [n for n, s in zip(names[n_tensors:], scalars) if isinstance(s, str)]
    fb = mb.function(name, params)
    remap: dict[int, int] = {}
    for arg, (reg, spec) in enumerate(zip(io.tensor_inputs, specs)):
        t = info.types[reg]
        fb.loc = None
        remap[reg] = fb.tensor_input(arg, spec, t.dtype)
    arg = n_tensors
    for reg, value in zip(io.scalar_params, scalars):
        if isinstance(value, str):
            remap[reg] = fb.scalar_arg(arg, value)
            arg += 1
        else:
            remap[reg] = fb.scalar_const(value)
    adopted: dict[int, int] = {}  # the function's constant index -> the region's

    def constant(k: int) -> int:
        if k not in adopted:
            adopted[k] = mb.adopt_constant(module.constants[k])
        return adopted[k]

    for ins in (*io.clones, *io.body):
        _copy(ins, fb, remap, constant)
    fb.loc = None
    fb.ret(*[remap[r] for r in io.live_outs])
    return mb.build()


def _copy(ins: Instruction, fb: Any, remap: dict[int, int], constant: Callable[[int], int]) -> None:
    args = []
    for operand, value in zip(ins.opcode.operands, ins.args):
        kind = operand.kind
        if kind is Kind.SRC:
            value = remap[value]
        elif kind is Kind.SRCS:
            value = tuple(remap[v] for v in value)
        elif kind is Kind.ATTRS:
            value = {k: _rename_attr(v, remap) for k, v in value.items()}
        elif kind is Kind.CONST:
            value = constant(value)
        args.append(value)
    for i, (operand, value) in enumerate(zip(ins.opcode.operands, args)):
        if operand.kind is Kind.DST:
            remap[value] = args[i] = fb.new_reg()
        elif operand.kind is Kind.DSTS:
            fresh = tuple(fb.new_reg() for _ in value)
            remap.update(zip(value, fresh))
            args[i] = fresh
    fb.function.blocks[fb.current].instructions.append(make_instruction(ins.name, *args, loc=ins.loc))


def _rename_attr(value: Any, remap: dict[int, int]) -> Any:
    if isinstance(value, RegRef):
        return RegRef(remap[value.index])
    if isinstance(value, tuple):
        return tuple(_rename_attr(v, remap) for v in value)
    return value


# -- the analysis report ------------------------------------------------------------------------------------


@dataclass
class ScdAnalysis:
    """What ``ms.vm.scd_analysis`` returns: every tensor's SCD, the regions, why each will (not) compile."""

    function: str
    threshold: float
    hot_threshold: int
    tensors: list[TensorSCD]
    regions: list[Region]
    splits: list[Split]
    specialised: list[dict] = field(default_factory=list)  # plain-int parameters folded into this version
    verdicts: list[str] = field(default_factory=list)  # what the JIT decided at run time (too small, demoted)
    annotations: list[dict] = field(default_factory=list)  # unannotated arrays: the ms.Tensor[...] to write

    def as_dict(self) -> dict:
        return {
            "function": self.function,
            "threshold": self.threshold,
            "hot_threshold": self.hot_threshold,
            "tensors": [t.as_dict() for t in self.tensors],
            "regions": [r.as_dict() for r in self.regions],
            "splits": [s.as_dict() for s in self.splits],
            "specialised": list(self.specialised),
            "verdicts": list(self.verdicts),
            "annotations": list(self.annotations),
        }

    def text(self) -> str:
        """The printed report; the root cause of every unanchored dim is listed once, as a footnote."""
        causes: dict[str, int] = {}

        def note(reason: str, cause: str) -> str:
            n = causes.setdefault(cause, len(causes) + 1)
            if reason == cause:  # the dim where it started: the cause's first clause
                return f"{cause if len(cause) <= 60 else re.split(r':| —| [(]', cause)[0]} [{n}]"
            head = reason[: -len(cause)].rstrip(": ") if reason.endswith(cause) else reason
            return f"{head} [{n}]"

        lines = [f"SCD analysis of {self.function} (scd_threshold {self.threshold:.2f}, "
                 f"hot_threshold {self.hot_threshold})"]
        lines += [f"  ! {s['message']}" for s in self.specialised]
        lines += [f"  ! {a['message']}" for a in self.annotations]
        lines.append("tensors:")
        for t in self.tensors:
            where = f"  {t.source}" if t.source else ""
            lines.append(f"  {t.name:<6} {_addr(t.address)} {t.opcode:<24} {t.dtype}{t.shape_text()}  "
                         f"SCD={t.scd:.2f}  ({t.summary()}){where}")
            for axis, cause in enumerate(t.causes):
                if cause is not None:
                    lines.append(f"           dim {axis} ({t.dims[axis]}): {note(t.reasons[axis], cause)}")
        lines.append("regions:")
        for r in self.regions:
            verdict = "compiles" if r.compilable else "interpreted"
            why = r.reason if r.compilable or r.n_calls == 0 else (
                f"SCD {r.scd:.2f} < threshold {r.threshold:.2f}: {r.total_dims - r.anchored_dims} of "
                f"{r.total_dims} dims are not anchored")
            lines.append(f"  region {r.id} bb{r.block} {_addr(r.start)}..{_addr(r.end)} "
                         f"({len(r.addresses)} instructions, {r.n_calls} op calls) SCD={r.scd:.2f} "
                         f"{verdict}: "
                         f"{why}")
        lines += [f"  {s}" for s in self.splits]
        if self.verdicts:
            lines.append("at run time:")
            lines += [f"  {v}" for v in self.verdicts]
        if causes:
            lines.append("causes of unanchored dims:")
            lines += [f"  [{n}] {cause}" for cause, n in causes.items()]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.text()


def analyze_executable(exe: Any, args: Sequence[Any] | None = None, *, can_lower: CanLower | None = None,
                       specialised: Sequence[dict] = (),
                       seen: Mapping[str, Sequence[tuple[int, ...]]] | None = None) -> ScdAnalysis:
    """The analysis of an interpreter Executable; ``args`` (optional) show concrete sizes; ``seen``: the
    shapes unannotated array parameters came with (``JitFunction.shapes_seen``), for the annotations."""
    settings = JitOptions.of(exe.program.options)
    bindings = exe.bind_inputs(tuple(args)) if args is not None else None
    tensors = analyze_tensors(exe.info, bindings)
    suggested = suggest_annotations(seen or {}, user_symbols(exe.info))
    regions, splits = form_regions(exe.info, tensors, threshold=settings.scd_threshold,
                                   hot_threshold=settings.hot_threshold,
                                   can_lower=can_lower or default_can_lower(), annotations=suggested)
    return ScdAnalysis(exe.name, settings.scd_threshold, settings.hot_threshold, list(tensors.values()),
                       regions, splits, list(specialised), run_time_verdicts(exe),
                       annotation_notes(suggested, splits, seen or {}))


def annotation_notes(suggested: Mapping[str, str], splits: Sequence[Split],
                     seen: Mapping[str, Sequence[tuple[int, ...]]]) -> list[dict]:
    """One note per unannotated array parameter: the annotation to write and what it fixes — first
    those whose symbolic sizes keep an op out of the native regions."""
    notes = []
    for name, annotation in suggested.items():
        blocks = [s for s in splits if name in s.parameters]
        n = len(seen[name])
        basis = f"from the {n} shapes its calls brought" if n > 1 else "from the one shape its calls brought"
        if blocks:
            ops = ", ".join(f"{s.opcode.split()[-1]} at {_addr(s.address)}" for s in blocks)
            why = f"its sizes are symbols, which keeps {ops} out of the native regions"
        else:
            why = "its sizes then read as numbers and names instead of symbol arithmetic"
        notes.append({"parameter": name, "annotation": annotation, "blocks": [s.address for s in blocks],
                      "message": f"annotate `{name}` as `{annotation}` ({basis}): {why}"})
    notes.sort(key=lambda n: not n["blocks"])
    return notes


def run_time_verdicts(exe: Any) -> list[str]:
    """Why regions of ``exe`` that did run are not native: keys too small to compile, demoted entries."""
    from .cache import CACHE

    verdicts: list[tuple[int, str]] = []
    for rt in CACHE.regions():
        if rt.exe_name != exe.name or rt.info is not exe.info:
            continue
        with rt.lock:
            verdicts += [(rt.region.id, reason) for reason in rt.too_small.values()]
            verdicts += [(rt.region.id, f"{e.name} demoted: {e.reason}") for e in rt.entries
                         if e.status == "demoted"]
    return [f"region {region}: {text}" for region, text in sorted(verdicts, key=lambda v: v[0])]


def analyze(target: Any, *args: Any) -> ScdAnalysis:
    """``target``: a ``@ms.jit`` function (with example arguments picking its version) or an Executable."""
    if hasattr(target, "program_for"):
        program, name, bc_args = target.program_for(*args)
        seen = target.shapes_seen(*args) if hasattr(target, "shapes_seen") else None
        return analyze_executable(program.function(name), bc_args, specialised=specialisations(target, args),
                                  seen=seen)
    return analyze_executable(target, args if args else None)


def specialisations(jitfn: Any, args: Sequence[Any]) -> list[dict]:
    """Plain Python ints folded into the bytecode (the first "why no JIT" pitfall): one version per value.

    Only a ``@ms.jit`` function parsed from Python folds ints; a target without Python source (an
    imported ONNX model's function) takes tensors only, so it has none.
    """
    parsed = getattr(jitfn, "parsed", None)
    if parsed is None:
        return []
    names = list(parsed.signature.parameters)
    out = []
    for index, (name, value) in enumerate(zip(names, args)):
        if type(value) is not int or name in parsed.annotations:
            continue
        parts = [key[index] for key in jitfn.versions if len(key) > index]
        seen = sorted({part[1] for part in parts if isinstance(part, tuple) and part[:1] == (int,)})
        out.append({
            "parameter": name,
            "value": value,
            "versions": seen,
            "message": (f"{name}={value} is a plain Python int: it is folded into the bytecode, so every new "
                        f"value compiles a new version (and new JIT entries); values so far: "
                        f"{', '.join(map(str, seen))} — pass ms.mutable({name}) to keep one version"),
        })
    return out


def _addr(address: int) -> str:
    return format_address(address).removeprefix("msvm://bc/")


__all__ = [
    "DefUse",
    "Region",
    "RegionIO",
    "ScdAnalysis",
    "Split",
    "analyze",
    "analyze_executable",
    "annotation_notes",
    "build_function",
    "def_use",
    "default_can_lower",
    "form_regions",
    "param_names",
    "region_io",
    "run_time_verdicts",
]
