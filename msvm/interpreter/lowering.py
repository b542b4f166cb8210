"""Lower each verified instruction to one line of Python over register variables.

The interpreter is a template compiler: every instruction becomes a Python statement such as
``r5 = K5(r3, r4)`` (kernels, constants and helpers are bound by name in the function's
namespace, never spelled into the source, so nothing from a module can inject code). The
fast path compiles the lines of a whole function into one Python function; the stepping
debugger and the tracer execute the same lines one at a time, so both share one semantics.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..bytecode.module import Instruction, Module, RegRef
from ..bytecode.opcodes import PHIS, PREDICATE_INFO, SCALAR_OP_INFO, Kind
from ..context import CONTEXT
from ..ops.registry import REGISTRY, OpDef, TensorType
from ..runtime.limits import check_size
from ..runtime.mempool import POOL
from ..scheduler import Choice, Dispatcher, bind_site
from ..scheduler.capability import REFERENCE_DEVICE, REFERENCE_KIND
from ..verifier import FunctionInfo


@dataclass
class Step:
    """One instruction ready to run: a Python statement and the names it refers to."""

    address: int
    block: int
    ins: Instruction
    line: str  # empty for phis and terminators (the code generator handles control flow)
    names: dict[str, Any] = field(default_factory=dict)
    variant: str = "reference"  # the kernel variant an OP_CALL is bound to ("dispatch": chosen per call)
    reason: str = ""  # why (shown by the debugger and the trace)
    dispatcher: Dispatcher | None = None  # set when the variant is chosen per call
    release: tuple[int, ...] = ()  # tensor registers that die here (deleted after the line runs)
    # its results' sizes are known only when it runs (``runtime_sized``): the entry check does not
    # bound them, its kernel checks them before allocating
    runtime_sized: bool = False

    @property
    def opname(self) -> str:
        return self.ins.label

    @property
    def choice(self) -> Choice:
        """The kernel this OP_CALL ran last on this thread, and why (its binding before any call)."""
        last = self.dispatcher.last_choice if self.dispatcher is not None else None
        return last or Choice(self.variant, self.reason, REFERENCE_DEVICE, REFERENCE_KIND, None)


def reg(r: int) -> str:
    return f"r{r}"


def lower_function(info: FunctionInfo, module: Module) -> list[Step]:
    steps = []
    unsound = unsound_types(info)
    for bi, ii, ins in info.function.instructions():
        address = info.address(bi, ii)
        step = Step(address, bi, ins, "", runtime_sized=address in unsound)
        if ins.name not in PHIS and not ins.opcode.is_terminator:
            _LOWER[ins.name](step, info, module)
        steps.append(step)
    if CONTEXT.enable_mem_reuse:
        mark_last_uses(info, steps)
    return steps


def unsound_types(info: FunctionInfo) -> set[int]:
    """Addresses of the instructions whose results' static types may not be their run-time shapes.

    A broadcast the verifier could not decide keeps one side as the result (``broadcast_dims``): when
    that side is a symbol that is 1 at run time and the other larger, numpy broadcasts to the other —
    ``a + b`` on unannotated (n, 1) and (1, n) is (n, n), typed (n, 1). Such a result, and everything
    computed from it (a fixed point over every register read, phis and attributes included), has its
    size checked where it is made rather than at entry from its type.
    """
    guarded = {a for a, guards in info.guards.items()
               if any(g.broadcast and not g.a.is_const for g in guards)}
    tainted: set[int] = set()
    unsound: set[int] = set()
    changed = True
    while changed:
        changed = False
        for bi, ii, ins in info.function.instructions():
            address = info.address(bi, ii)
            if address in unsound or not (address in guarded or any(r in tainted for r in ins.reads())):
                continue
            unsound.add(address)
            tainted.update(ins.writes())
            changed = True
    return unsound


def mark_last_uses(info: FunctionInfo, steps: list[Step]) -> None:
    """Set ``step.release``: tensor registers that no later instruction on any path reads.

    Deleting them right after their last use hands their buffers back to the memory pool (or to
    numpy) at once instead of at return. Liveness is the usual backward dataflow over the CFG
    (skipped for straight-line code); a phi's inputs count as used at the end of the predecessor.
    Terminators and TENSOR_FREE (which deletes already) release nothing. Only tensor registers
    matter, so only SRC/SRCS/DST/DSTS operands are read (attribute registers are scalars).
    """
    cfg = info.cfg
    tensor = [isinstance(t, TensorType) for t in info.types]
    blocks: dict[int, list[tuple[Step, list[int], list[int]]]] = {b: [] for b in cfg.rpo}
    end_uses: dict[int, set[int]] = {b: set() for b in cfg.rpo}
    phi_defs: dict[int, set[int]] = {b: set() for b in cfg.rpo}
    for step in steps:
        if step.block not in blocks:
            continue
        if step.ins.name in PHIS:
            phi_defs[step.block].add(step.ins["dst"])
            for pred, r in step.ins["incoming"]:
                if pred in end_uses:
                    end_uses[pred].add(r)
        else:
            blocks[step.block].append((step, *_tensor_operands(step.ins)))
    live_in: dict[int, set[int]] = {b: set() for b in cfg.rpo}

    def live_out(b: int) -> set[int]:
        out = set(end_uses[b])
        for succ in cfg.succs[b]:
            out |= live_in[succ] - phi_defs[succ]
        return out

    if len(cfg.rpo) > 1:
        gen: dict[int, set[int]] = {}  # read in the block before any write there
        kill: dict[int, set[int]] = {}  # written in the block
        for b, items in blocks.items():
            gen[b], kill[b] = set(), set()
            for _, reads, writes in items:
                gen[b].update(r for r in reads if r not in kill[b])
                kill[b].update(writes)
        changed = True
        while changed:
            changed = False
            for b in reversed(cfg.rpo):
                live = gen[b] | (live_out(b) - kill[b])
                if live != live_in[b]:
                    live_in[b], changed = live, True
    for b in cfg.rpo:
        live = live_out(b)
        for step, reads, writes in reversed(blocks[b]):
            if step.line and step.ins.name != "TENSOR_FREE":
                dead = {r for r in reads if r not in live and tensor[r]}
                dead.update(w for w in writes if w not in live and tensor[w])
                if dead:
                    step.release = tuple(sorted(dead))
            live.difference_update(writes)
            live.update(reads)


_OPERAND_LAYOUT: dict[str, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]] = {}


def _tensor_operands(ins: Instruction) -> tuple[list[int], list[int]]:
    """(registers read, registers written) through SRC/SRCS and DST/DSTS operands."""
    layout = _OPERAND_LAYOUT.get(ins.opcode.name)
    if layout is None:
        kinds = [o.kind for o in ins.opcode.operands]
        layout = _OPERAND_LAYOUT[ins.opcode.name] = tuple(
            tuple(i for i, k in enumerate(kinds) if k is kind)
            for kind in (Kind.SRC, Kind.SRCS, Kind.DST, Kind.DSTS)
        )
    src, srcs, dst, dsts = layout
    args = ins.args
    reads = [args[i] for i in src]
    for i in srcs:
        reads.extend(args[i])
    writes = [args[i] for i in dst]
    for i in dsts:
        writes.extend(args[i])
    return reads, writes


def _tensor_create(step: Step, info: FunctionInfo, module: Module) -> None:
    ins = step.ins
    dst = reg(ins["dst"])
    if ins["arg"] >= 0:
        step.line = f"{dst} = a{ins['arg']}"  # checked once per input signature at entry
    else:
        # zeros of an entry-bound shape: its sizes are evaluated with the call's bindings (B)
        step.line = f"{dst} = ZEROS(B[{step.address}], '{np.dtype(ins['dtype']).name}')"
        step.names["ZEROS"] = POOL.zeros if CONTEXT.enable_mem_reuse else np.zeros


def _tensor_alloc(step: Step, info: FunctionInfo, module: Module) -> None:
    ins = step.ins
    dims = ", ".join(reg(r) for r in ins["dims"])
    k = f"ALLOC{step.address}"
    step.names[k] = _allocator(step.address, np.dtype(ins["dtype"]))
    step.line = f"{reg(ins['dst'])} = {k}(({dims}{',' if len(ins['dims']) == 1 else ''}))"


def _allocator(address: int, dtype: np.dtype):
    zeros = POOL.zeros if CONTEXT.enable_mem_reuse else np.zeros

    def alloc(shape: tuple[int, ...]) -> np.ndarray:
        check_size(address, shape, dtype.itemsize, "TENSOR_ALLOC")
        return zeros(shape, dtype)

    return alloc


def _tensor_free(step: Step, info: FunctionInfo, module: Module) -> None:
    step.line = f"del {reg(step.ins['src'])}"


def _tensor_resize(step: Step, info: FunctionInfo, module: Module) -> None:
    ins = step.ins
    dims = ", ".join(reg(r) for r in ins["dims"])
    step.names["RESHAPE"] = np.reshape
    step.line = (
        f"{reg(ins['dst'])} = RESHAPE({reg(ins['src'])}, ({dims}{',' if len(ins['dims']) == 1 else ''}))"
    )


def _load_const(step: Step, info: FunctionInfo, module: Module) -> None:
    k = f"C{step.address}"
    step.names[k] = module.constants[step.ins["const"]]
    step.line = f"{reg(step.ins['dst'])} = {k}"


def _shape_propagate(step: Step, info: FunctionInfo, module: Module) -> None:
    ins = step.ins
    step.line = f"{reg(ins['dst'])} = {reg(ins['src'])}.shape[{int(ins['dim'])}]"


def _scalar_const(step: Step, info: FunctionInfo, module: Module) -> None:
    step.line = f"{reg(step.ins['dst'])} = {int(step.ins['value'])}"


def _scalar_arg(step: Step, info: FunctionInfo, module: Module) -> None:
    step.line = f"{reg(step.ins['dst'])} = a{int(step.ins['arg'])}"


def _scalar_op(step: Step, info: FunctionInfo, module: Module) -> None:
    ins = step.ins
    expr = SCALAR_OP_INFO[ins["op"]].python(reg(ins["a"]), reg(ins["b"]))
    step.line = f"{reg(ins['dst'])} = {expr}"


def _cmp(step: Step, info: FunctionInfo, module: Module) -> None:
    ins = step.ins
    step.line = f"{reg(ins['dst'])} = {reg(ins['a'])} {PREDICATE_INFO[ins['pred']].infix} {reg(ins['b'])}"


def _op_call(step: Step, info: FunctionInfo, module: Module) -> None:
    ins = step.ins
    op: OpDef = REGISTRY[ins["op"]]
    attrs = info.attrs[step.address]
    static = {k: v for k, v in attrs.items() if not has_reg(v)}
    dynamic = {k: v for k, v in attrs.items() if has_reg(v)}
    in_types = [info.types[r] for r in ins["srcs"]]
    out_types = [info.types[r] for r in ins["dsts"]]
    if not all(entry_evaluable(t, info) for t in out_types):
        step.runtime_sized = True
    # a site sized at run time gets a dispatcher that checks its outputs once per input shapes
    binding = bind_site(op, static, in_types, out_types, address=step.address,
                        check_outputs=step.runtime_sized)
    kernel = binding.kernel
    step.variant, step.reason, step.dispatcher = binding.variant, binding.reason, binding.dispatcher
    k = f"K{step.address}"
    step.names[k] = kernel
    args = [reg(r) for r in ins["srcs"]]
    for key, value in dynamic.items():
        args.append(f"{key}={_attr_expr(value, step, f'{k}_{key}')}")
    call = f"{k}({', '.join(args)})"
    dsts = ins["dsts"]
    if not dsts:
        step.line = call
    elif len(dsts) == 1 and op.num_outputs(attrs) == 1:
        step.line = f"{reg(dsts[0])} = {call}"
    else:
        step.line = f"{', '.join(reg(d) for d in dsts)}{',' if len(dsts) == 1 else ''} = {call}"


def is_call(step: Step, op: str, info: FunctionInfo) -> bool:
    """An OP_CALL of ``op`` with no attribute read from a register."""
    return (step.ins.name == "OP_CALL" and step.ins["op"] == op
            and not any(has_reg(v) for v in info.attrs[step.address].values()))


def has_reg(value: Any) -> bool:
    return isinstance(value, RegRef) or (isinstance(value, tuple) and any(has_reg(v) for v in value))


def _attr_expr(value: Any, step: Step, name: str) -> str:
    """Python expression for an attribute naming registers; constants are bound, not spelled."""
    if isinstance(value, RegRef):
        return reg(value.index)
    if isinstance(value, tuple):
        items = [_attr_expr(v, step, f"{name}_{i}") for i, v in enumerate(value)]
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    step.names[name] = value
    return name


def entry_evaluable(t: TensorType | None, info: FunctionInfo) -> bool:
    return isinstance(t, TensorType) and all(
        not d.is_unknown and d.free_symbols <= info.entry_symbols for d in t.shape
    )


_LOWER = {
    "TENSOR_CREATE": _tensor_create,
    "TENSOR_ALLOC": _tensor_alloc,
    "TENSOR_FREE": _tensor_free,
    "TENSOR_RESIZE": _tensor_resize,
    "LOAD_CONST": _load_const,
    "SHAPE_PROPAGATE": _shape_propagate,
    "SCALAR_CONST": _scalar_const,
    "SCALAR_ARG": _scalar_arg,
    "SCALAR_OP": _scalar_op,
    "CMP": _cmp,
    "OP_CALL": _op_call,
}
