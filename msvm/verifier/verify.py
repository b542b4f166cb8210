"""The MS-BC verifier: one entry point, every problem reported, each at its address.

Passes run per function in a fixed order — operands, control flow, phis, SSA/dominance, inputs,
types and symbolic shapes, then frees — and later passes skip what an earlier one already
reported broken (its instructions and registers), so one mistake yields one diagnostic. A module
that verifies cannot make the interpreter fail on a structural error: every register read is
defined on every path, every index is in range, every op call matches its op's schema.
"""

from __future__ import annotations

import bisect
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from ..bytecode.module import MAX_REGS, Function, Instruction, Module, RegRef, attr_registers
from ..bytecode.opcodes import DEVICES, DTYPES, PHIS, PREDICATES, SCALAR_OP_INFO, SCALAR_OPS, Kind
from ..errors import ShapeError, VerifyError
from ..ops.registry import REGISTRY, Guard, InferContext, OpTypeError, TensorType
from ..shapes import UNKNOWN, Dim, ShapeSpec, prove_equal
from ..shapes.expr import is_symbol_name
from .cfg import CFG, build_cfg
from .diagnostics import CODES, Diagnostic, full_code, listing

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@dataclass(frozen=True)
class ScalarType:
    """An int64 shape scalar and the symbolic value it is known to hold."""

    value: Dim

    def __str__(self) -> str:
        return f"i64 = {self.value}"


@dataclass(frozen=True)
class BoolType:
    def __str__(self) -> str:
        return "bool"


BOOL = BoolType()
RegType = TensorType | ScalarType | BoolType


@dataclass
class FunctionInfo:
    """What the verifier proved about a function; the interpreter and the JIT build on it."""

    function: Function
    base: int  # address of the function's first instruction
    cfg: CFG
    types: list[RegType | None]
    entry_symbols: frozenset[str]
    attrs: dict[int, dict[str, Any]] = field(default_factory=dict)  # OP_CALL address → checked attrs
    guards: dict[int, list[Guard]] = field(default_factory=dict)  # run-time checks

    def address(self, block: int, index: int) -> int:
        return self.base + sum(len(b.instructions) for b in self.function.blocks[:block]) + index


@dataclass
class ModuleInfo:
    module: Module
    functions: dict[str, FunctionInfo]


class _Report(Exception):
    """Raised inside a check to abandon the current instruction after recording a diagnostic."""


MERGE_KEPT = 8  # cases a merged diagnostic keeps to spell out; the rest are only counted


class _Merged:
    """The cases of one kind of problem at one instruction, gathered while the passes run and written
    into its diagnostic once at the end: joining texts per case would cost the square of their number."""

    def __init__(self, index: int, message: str, found: Any) -> None:
        self.index = index  # of the diagnostic in the module's list
        self.count = 1
        self.messages = [message]
        self.founds = [] if found is None else [str(found)]

    def add(self, message: str, found: Any) -> None:
        self.count += 1
        if len(self.messages) < MERGE_KEPT:
            self.messages.append(message)
            if found is not None:
                self.founds.append(str(found))

    def merged(self, first: Diagnostic) -> Diagnostic:
        found = listing(self.founds, total=self.count) if self.founds else None
        return replace(first, message=listing(self.messages, "; ", self.count), found=found)


class FunctionChecker:
    def __init__(self, module: Module, fn: Function, base: int, diags: list[Diagnostic]) -> None:
        self.module, self.fn, self.base, self.diags = module, fn, base, diags
        self.addr: dict[int, tuple[int, int]] = {}  # address → (block, index)
        self.where: dict[int, int] = {}  # id(instruction) → address
        address = base
        for bi, ii, ins in fn.instructions():
            self.addr[address] = (bi, ii)
            self.where[id(ins)] = address
            address += 1
        self.defs: list[tuple[int, int] | None] = [None] * min(max(fn.num_regs, 0), MAX_REGS + 1)
        self.bad_regs: set[int] = set()  # registers already reported; later passes stay quiet
        self.reported: set[int] = set()  # id() of instructions already reported; the type pass skips them
        self.merged: dict[tuple[str, int], _Merged] = {}  # (code, id(instruction)) → its cases so far
        self.types: list[RegType | None] = [None] * min(max(fn.num_regs, 0), MAX_REGS + 1)
        self.attrs: dict[int, dict[str, Any]] = {}
        self.guards: dict[int, list[Guard]] = {}
        self.entry_symbols: frozenset[str] = frozenset()
        self.quiet = False  # the type fixpoint iterations run quiet; only the last one reports

    # -- reporting ---------------------------------------------------------------------------
    def report(
        self,
        code: str,
        message: str,
        ins: Instruction | None = None,
        *,
        expected: Any = None,
        found: Any = None,
        hint: str | None = None,
    ) -> None:
        if self.quiet:
            return
        address = self.where.get(id(ins)) if ins is not None else None
        opcode = None
        if ins is not None:
            self.reported.add(id(ins))
            opcode = ins.label
            group = self.merged.get((code, id(ins)))
            if group is not None:  # one diagnostic per kind of problem per instruction, naming its cases
                group.add(message, found)
                return
            self.merged[(code, id(ins))] = _Merged(len(self.diags), message, found)
        self.diags.append(
            Diagnostic(
                full_code(code),
                message,
                address,
                opcode,
                self.fn.name,
                None if expected is None else str(expected),
                None if found is None else str(found),
                hint,
                ins.loc if ins is not None else None,
            )
        )

    def fail(self, code: str, message: str, ins: Instruction, **kw: Any) -> None:
        self.report(code, message, ins, **kw)
        raise _Report

    # -- pass 1: operands and block structure ------------------------------------------------
    def check_structure(self) -> bool:
        fn = self.fn
        ok = True
        if not fn.blocks:
            self.report(
                "EMPTY-FUNCTION", f"function {fn.name} has no blocks", hint="add an entry block ending in RET"
            )
            return False
        if not 0 <= fn.num_regs <= MAX_REGS:
            self.report(
                "REG-RANGE",
                f"function {fn.name} declares {fn.num_regs} registers",
                expected=f"0..{MAX_REGS}",
                found=fn.num_regs,
            )
            return False
        dup = next((p for p, n in Counter(fn.params).items() if n > 1), None)
        if dup is not None:
            self.report("DUPLICATE-PARAM", f"parameter {dup!r} appears twice in {fn.name}")
        self.check_names()
        for bi, block in enumerate(fn.blocks):
            if not block.instructions:
                self.report(
                    "EMPTY-BLOCK", f"block bb{bi} of {fn.name} is empty", hint="end it with JMP, BR or RET"
                )
                ok = False
                continue
            for ii, ins in enumerate(block.instructions):
                last = ii == len(block.instructions) - 1
                if ins.opcode.is_terminator and not last:
                    self.report(
                        "TERMINATOR-MID-BLOCK",
                        f"{ins.name} is not the last instruction of bb{bi}",
                        ins,
                        hint="split the block: instructions after a terminator never run",
                    )
                    ok = False
                if last and not ins.opcode.is_terminator:
                    self.report(
                        "UNTERMINATED-BLOCK",
                        f"block bb{bi} does not end with a terminator",
                        ins,
                        expected="BR, JMP or RET",
                        found=ins.name,
                    )
                    ok = False
                ok &= self.check_operands(ins)
        return ok

    def check_names(self) -> None:
        """The register-names table: each entry a register of the function and a Python identifier.

        One diagnostic per function lists the bad entries: names never change meaning, so nothing
        else is checked differently for them.
        """
        fn = self.fn
        if isinstance(fn.names, dict):
            bad = [f"{r!r}: {n!r}" for r, n in fn.names.items()
                   if not (_is_int(r) and 0 <= r < fn.num_regs and isinstance(n, str) and n.isidentifier())]
        else:
            bad = [f"a {type(fn.names).__name__}, not a dict"]
        if bad:
            self.report(
                "VAR-NAME",
                f"function {fn.name} names registers it does not have, or by names that are not identifiers",
                expected=f"R0..R{fn.num_regs - 1} named by Python identifiers",
                found=listing(bad),
                hint="the names table maps a register to the variable it holds, e.g. names R3=q",
            )

    def check_operands(self, ins: Instruction) -> bool:
        ok = True
        if len(ins.args) != len(ins.opcode.operands):
            self.report(
                "OPERAND",
                f"{ins.name} has {len(ins.args)} operands",
                ins,
                expected=len(ins.opcode.operands),
                found=len(ins.args),
            )
            return False
        for operand, value in zip(ins.opcode.operands, ins.args):
            try:
                self.check_operand(ins, operand.name, operand.kind, value)
            except _Report:
                ok = False
        return ok

    def check_reg(self, ins: Instruction, what: str, value: Any) -> None:
        if not _is_int(value):
            self.fail("OPERAND", f"{what} must be a register index", ins, found=repr(value))
        if not 0 <= value < self.fn.num_regs:
            self.fail(
                "REG-RANGE",
                f"{what} R{value} is out of range",
                ins,
                expected=f"R0..R{self.fn.num_regs - 1}",
                found=f"R{value}",
                hint="raise the function's register count or renumber",
            )

    def check_block(self, ins: Instruction, what: str, value: Any) -> None:
        if not _is_int(value):
            self.fail("OPERAND", f"{what} must be a block index", ins, found=repr(value))
        if not 0 <= value < len(self.fn.blocks):
            self.fail(
                "BLOCK-RANGE",
                f"{what} targets a block that does not exist",
                ins,
                expected=f"bb0..bb{len(self.fn.blocks) - 1}",
                found=f"bb{value}",
            )

    def check_operand(self, ins: Instruction, name: str, kind: Kind, value: Any) -> None:
        what = f"operand {name}"
        if kind in (Kind.DST, Kind.SRC):
            self.check_reg(ins, what, value)
        elif kind in (Kind.DSTS, Kind.SRCS):
            if not isinstance(value, tuple):
                self.fail("OPERAND", f"{what} must be a tuple of registers", ins, found=repr(value))
            for reg in value:
                self.check_reg(ins, what, reg)
        elif kind is Kind.IMM:
            if not _is_int(value) or not -(1 << 63) <= value < (1 << 63):
                self.fail("OPERAND", f"{what} must be an int64", ins, found=repr(value))
        elif kind is Kind.SHAPE:
            if not isinstance(value, ShapeSpec):
                self.fail("OPERAND", f"{what} must be a shape spec", ins, found=repr(value))
        elif kind is Kind.DTYPE:
            if value not in DTYPES:
                self.fail(
                    "BAD-DTYPE", f"unknown dtype {value!r}", ins, expected=", ".join(DTYPES), found=value
                )
        elif kind is Kind.DEVICE:
            if value not in DEVICES:
                self.fail(
                    "BAD-DEVICE", f"unknown device {value!r}", ins, expected=", ".join(DEVICES), found=value
                )
        elif kind is Kind.CONST:
            if not _is_int(value):
                self.fail("OPERAND", f"{what} must be a constant index", ins, found=repr(value))
            if not 0 <= value < len(self.module.constants):
                self.fail(
                    "CONST-RANGE",
                    f"constant k{value} does not exist",
                    ins,
                    expected=f"k0..k{len(self.module.constants) - 1}",
                    found=f"k{value}",
                )
        elif kind is Kind.SYMBOL:
            if not is_symbol_name(value):
                reserved = isinstance(value, str) and IDENT.match(value)  # min, max, ...: shape functions
                self.fail(
                    "BAD-SYMBOL",
                    f"symbol {value!r} is {'a shape function name' if reserved else 'not an identifier'}",
                    ins,
                    hint="rename the symbol" if reserved else None,
                )
        elif kind is Kind.SCALAR_OP:
            if value not in SCALAR_OPS:
                self.fail(
                    "BAD-SCALAR-OP",
                    f"unknown scalar operator {value!r}",
                    ins,
                    expected=", ".join(SCALAR_OPS),
                    found=value,
                )
        elif kind is Kind.PRED:
            if value not in PREDICATES:
                self.fail(
                    "BAD-PREDICATE",
                    f"unknown predicate {value!r}",
                    ins,
                    expected=", ".join(PREDICATES),
                    found=value,
                )
        elif kind is Kind.OP:
            if not isinstance(value, str):
                self.fail("OPERAND", f"{what} must be an op name", ins, found=repr(value))
        elif kind is Kind.ATTRS:
            if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
                self.fail("OPERAND", f"{what} must map names to values", ins, found=repr(value))
            for key, v in value.items():
                for reg in attr_registers(v):
                    self.check_reg(ins, f"attribute {key}", reg)
        elif kind is Kind.BLOCK:
            self.check_block(ins, what, value)
        elif kind is Kind.PHI:
            if not isinstance(value, tuple) or not all(isinstance(p, tuple) and len(p) == 2 for p in value):
                self.fail("OPERAND", f"{what} must list (block, register) pairs", ins, found=repr(value))
            for block, reg in value:
                self.check_block(ins, what, block)
                self.check_reg(ins, what, reg)

    # -- pass 2: control flow ----------------------------------------------------------------
    def check_cfg(self, cfg: CFG) -> None:
        reachable = cfg.reachable
        for b in range(len(self.fn.blocks)):
            if b not in reachable:
                first = self.fn.blocks[b].instructions[0]
                self.report(
                    "UNREACHABLE-BLOCK",
                    f"no path from the entry reaches bb{b}",
                    first,
                    hint="remove the block or branch to it",
                )
        if cfg.preds[0]:
            ins = self.fn.blocks[cfg.preds[0][0]].instructions[-1]
            self.report(
                "ENTRY-PREDECESSOR",
                "a branch targets the entry block bb0",
                ins,
                hint="inputs are declared in bb0; loop back to a header block instead",
            )
        if not any(self.fn.blocks[b].instructions[-1].name == "RET" for b in reachable):
            self.report(
                "NO-RETURN",
                f"function {self.fn.name} never returns",
                hint="every function needs a reachable RET",
            )

    # -- pass 3: phis ------------------------------------------------------------------------
    def check_phis(self, cfg: CFG) -> None:
        for bi, block in enumerate(self.fn.blocks):
            if bi not in cfg.reachable:
                continue  # reported as UNREACHABLE-BLOCK
            seen_other = False
            for ins in block.instructions:
                if ins.name not in PHIS:
                    seen_other = True
                    continue
                if seen_other:
                    self.report(
                        "PHI-POSITION",
                        f"{ins.name} follows a non-phi instruction in bb{bi}",
                        ins,
                        hint="phis come first in their block",
                    )
                incoming = [b for b, _ in ins["incoming"]]
                preds = sorted(cfg.preds[bi])
                if not preds:
                    self.report(
                        "PHI-PREDECESSORS",
                        f"{ins.name} in bb{bi}, which has no predecessors",
                        ins,
                        hint="a phi merges the values of the blocks that branch to it",
                    )
                elif sorted(incoming) != preds or len(set(incoming)) != len(incoming):
                    self.report(
                        "PHI-PREDECESSORS",
                        f"phi incoming blocks do not match the predecessors of bb{bi}",
                        ins,
                        expected=_blocks(preds),
                        found=_blocks(incoming),
                        hint="list exactly one value per predecessor block",
                    )

    # -- pass 4: SSA definitions, shape cycles and dominance ---------------------------------
    def check_ssa(self, cfg: CFG) -> None:
        for bi, ii, ins in self.fn.instructions():
            for reg in ins.writes():
                if self.defs[reg] is not None:
                    self.report(
                        "REG-REDEFINED",
                        f"R{reg} is written twice",
                        ins,
                        hint="registers are SSA: write a new register and merge with a phi",
                    )
                    self.bad_regs.add(reg)
                else:
                    self.defs[reg] = (bi, ii)
        self.check_cycles()
        reachable = cfg.reachable
        for bi, ii, ins in self.fn.instructions():
            if bi not in reachable:
                continue
            if ins.name in PHIS:
                if id(ins) in self.reported:
                    continue  # wrong incoming blocks (PHI-PREDECESSORS): their values mean nothing
                for pred, reg in ins["incoming"]:
                    self.check_dominated(cfg, ins, reg, pred, None)
            else:
                for reg in ins.reads():
                    self.check_dominated(cfg, ins, reg, bi, ii)

    def check_dominated(self, cfg: CFG, ins: Instruction, reg: int, block: int, index: int | None) -> None:
        """Is ``reg`` written before (block, index)? index None means at the end of the block."""
        if reg in self.bad_regs:
            return
        site = self.defs[reg]
        if site is None:
            self.report(
                "REG-UNDEFINED",
                f"R{reg} is read but never written",
                ins,
                hint="write it before this instruction",
            )
            self.bad_regs.add(reg)
            return
        db, di = site
        if db not in cfg.reachable or block not in cfg.reachable:
            return
        if db == block:
            ok = index is None or di < index
        else:
            ok = cfg.dominates(db, block)
        if not ok:
            self.report(
                "REG-NOT-DOMINATED",
                f"R{reg} may be read before it is written",
                ins,
                expected=f"R{reg} written on every path to here",
                found=f"written in bb{db} only",
                hint="define it in a dominating block, or merge the paths with a phi",
            )

    def check_cycles(self) -> None:
        """Dependency cycles through non-phi instructions (e.g. x's shape needs x.shape[2])."""
        deps: dict[int, list[int]] = {}
        at: dict[int, Instruction] = {}
        for _, _, ins in self.fn.instructions():
            if ins.name in PHIS:
                continue
            for reg in ins.writes():
                if reg not in self.bad_regs:
                    deps[reg] = ins.reads()
                    at[reg] = ins
        state: dict[int, int] = {}  # 1 = on the stack, 2 = done
        for root in deps:
            if state.get(root):
                continue
            stack = [(root, iter(deps[root]))]
            path = [root]
            state[root] = 1
            while stack:
                node, it = stack[-1]
                nxt = next(it, None)
                if nxt is None:
                    stack.pop()
                    path.pop()
                    state[node] = 2
                elif nxt in deps and state.get(nxt) == 1:
                    cycle = path[path.index(nxt) :]
                    chain = " -> ".join(f"R{r}" for r in [*cycle, nxt])
                    if not self.bad_regs.intersection(cycle):  # not another loop through a reported one
                        self.report(
                            "SHAPE-CYCLE",
                            f"shape cyclic dependency: {chain}",
                            at[nxt],
                            hint="a value cannot depend on itself; read the shape from an earlier tensor",
                        )
                    self.bad_regs.update(cycle)
                elif nxt in deps and not state.get(nxt):
                    state[nxt] = 1
                    path.append(nxt)
                    stack.append((nxt, iter(deps[nxt])))

    # -- pass 5: function inputs -------------------------------------------------------------
    def check_args(self) -> None:
        declared: dict[int, Instruction] = {}
        symbols: dict[str, Instruction] = {}
        bound: set[str] = set()
        # once, not per report: a function may have as many bad inputs as parameters
        names = listing(self.fn.params) or "no parameters"
        for bi, _, ins in self.fn.instructions():
            if ins.name not in ("TENSOR_CREATE", "SCALAR_ARG"):
                continue
            arg = ins["arg"]
            if ins.name == "TENSOR_CREATE" and arg == -1:
                continue
            if not 0 <= arg < len(self.fn.params):
                self.report(
                    "ARG-RANGE",
                    f"input #{arg} does not exist",
                    ins,
                    expected=f"0..{len(self.fn.params) - 1} ({names})",
                    found=arg,
                )
                continue
            if bi != 0:
                self.report(
                    "ARG-NOT-IN-ENTRY",
                    f"input #{arg} is declared in bb{bi}",
                    ins,
                    hint="declare every input in the entry block bb0",
                )
            if arg in declared:
                self.report("ARG-DUPLICATE", f"input #{arg} ({self.fn.params[arg]}) is declared twice", ins)
                continue
            declared[arg] = ins
            if ins.name == "SCALAR_ARG":
                sym = ins["symbol"]
                if sym in symbols:
                    self.report("DUPLICATE-SYMBOL", f"symbol {sym} is bound by two scalar inputs", ins)
                symbols[sym] = ins
                bound.add(sym)
            else:
                bound.update(d.name for d in ins["shape"] if d.is_symbol)
        for arg, name in enumerate(self.fn.params):
            if arg not in declared:
                self.report(
                    "ARG-MISSING",
                    f"parameter {name!r} (#{arg}) is never declared",
                    hint=f"declare it with TENSOR_CREATE {arg}, ... or SCALAR_ARG {arg}, ...",
                )
        self.entry_symbols = frozenset(bound)
        for ins in declared.values():
            if ins.name == "TENSOR_CREATE":
                self.check_bound(ins, ins["shape"], allow_unknown=True)

    def check_bound(self, ins: Instruction, spec: ShapeSpec, allow_unknown: bool) -> None:
        for axis, dim in enumerate(spec):
            if dim.is_unknown and not allow_unknown:
                self.report(
                    "UNBOUND-SYMBOL",
                    f"dim {axis} is ? and cannot be allocated",
                    ins,
                    hint="give the size as a constant or an input-bound symbol, or use TENSOR_ALLOC",
                )
            missing = sorted(dim.free_symbols - self.entry_symbols)
            if missing:
                self.report(
                    "UNBOUND-SYMBOL",
                    f"dim {axis} is {dim} but nothing binds {', '.join(missing)} at entry",
                    ins,
                    hint=f"bind {missing[0]} with an input dimension or SCALAR_ARG, or compute the "
                    "size with SCALAR_OP from a register holding it (symbolic_mul)",
                )

    # -- pass 6: types and symbolic shapes ---------------------------------------------------
    def infer(self, cfg: CFG) -> None:
        phis = [
            (ins, bi)
            for bi in cfg.rpo
            for ins in self.fn.blocks[bi].instructions
            if ins.name in PHIS
        ]
        self.quiet = bool(phis)
        for _ in range(12 if phis else 0):  # widen phis until their types are stable
            before = [self.types[ins["dst"]] for ins, _ in phis]
            self.type_pass(cfg)
            if [self.types[ins["dst"]] for ins, _ in phis] == before:
                break
        self.quiet = False
        self.type_pass(cfg)

    def type_pass(self, cfg: CFG) -> None:
        self.guards.clear()
        for bi in cfg.rpo:
            for ins in self.fn.blocks[bi].instructions:
                try:
                    if id(ins) in self.reported:
                        raise _Report  # an earlier pass reported it: its results stay untyped
                    self.type_instruction(ins)
                except _Report:
                    for reg in ins.writes():
                        if not self.quiet:
                            self.types[reg] = None
                for reg in self.bad_regs.intersection(ins.writes()):
                    self.types[reg] = None

    def src(self, ins: Instruction, reg: int, want: type, what: str) -> Any:
        t = self.types[reg]
        if t is None:
            raise _Report  # undefined or already broken: reported elsewhere
        if not isinstance(t, want):
            code = {TensorType: "EXPECTED-TENSOR", ScalarType: "EXPECTED-SCALAR", BoolType: "EXPECTED-BOOL"}[
                want
            ]
            expected = {TensorType: "a tensor", ScalarType: "an int64 scalar", BoolType: "a bool"}[want]
            self.fail(code, f"{what} R{reg} has the wrong kind", ins, expected=expected, found=_kind(t))
        return t

    def type_instruction(self, ins: Instruction) -> None:
        name = ins.name
        if name == "TENSOR_CREATE":
            if ins["arg"] == -1:
                self.check_bound(ins, ins["shape"], allow_unknown=False)
            self.types[ins["dst"]] = TensorType(ins["shape"], ins["dtype"])
        elif name == "TENSOR_ALLOC":
            dims = [self.src(ins, r, ScalarType, "dim").value for r in ins["dims"]]
            for axis, d in enumerate(dims):
                if d.is_const and d.value < 0:
                    self.fail("NEGATIVE-DIM", f"dim {axis} is {d.value}", ins, hint="sizes must be >= 0")
            self.types[ins["dst"]] = TensorType(ShapeSpec.of(dims), ins["dtype"])
        elif name == "TENSOR_FREE":
            self.src(ins, ins["src"], TensorType, "freed register")
        elif name == "TENSOR_RESIZE":
            self.types[ins["dst"]] = self.type_resize(ins)
        elif name in PHIS:
            self.type_phi(ins)
        elif name == "LOAD_CONST":
            arr = self.module.constants[ins["const"]]
            self.types[ins["dst"]] = TensorType(ShapeSpec.of(list(arr.shape)), arr.dtype.name)
        elif name == "SHAPE_PROPAGATE":
            t = self.src(ins, ins["src"], TensorType, "source")
            dim = ins["dim"]
            if not 0 <= dim < t.shape.rank:
                self.fail(
                    "DIM-RANGE",
                    f"R{ins['src']} has no dim {dim}",
                    ins,
                    expected=f"0..{t.shape.rank - 1} (rank {t.shape.rank})",
                    found=dim,
                )
            self.types[ins["dst"]] = ScalarType(t.shape[dim])
        elif name == "SCALAR_CONST":
            self.types[ins["dst"]] = ScalarType(Dim.const(ins["value"]))
        elif name == "SCALAR_ARG":
            self.types[ins["dst"]] = ScalarType(Dim.sym(ins["symbol"]))
        elif name == "SCALAR_OP":
            a = self.src(ins, ins["a"], ScalarType, "operand a").value
            b = self.src(ins, ins["b"], ScalarType, "operand b").value
            op = ins["op"]
            if SCALAR_OP_INFO[op].divides and b.is_const and b.value == 0:
                self.fail("ZERO-DIVISOR", f"{op} by the constant 0", ins)
            self.types[ins["dst"]] = ScalarType(_scalar_op(op, a, b))
        elif name == "CMP":
            ta, tb = self.types[ins["a"]], self.types[ins["b"]]
            if ta is None or tb is None:
                raise _Report
            both_bool = isinstance(ta, BoolType) and isinstance(tb, BoolType)
            if not (both_bool and ins["pred"] in ("eq", "ne")):
                self.src(ins, ins["a"], ScalarType, "operand a")
                self.src(ins, ins["b"], ScalarType, "operand b")
            self.types[ins["dst"]] = BOOL
        elif name == "OP_CALL":
            self.type_call(ins)
        elif name == "BR":
            self.src(ins, ins["cond"], BoolType, "condition")
        elif name == "RET":
            for reg in ins["srcs"]:
                if self.types[reg] is None:
                    raise _Report

    def type_resize(self, ins: Instruction) -> TensorType:
        t = self.src(ins, ins["src"], TensorType, "source")
        dims = [self.src(ins, r, ScalarType, "dim").value for r in ins["dims"]]
        infer_at = [i for i, d in enumerate(dims) if d.is_const and d.value == -1]
        if len(infer_at) > 1:
            self.fail(
                "RESIZE-INFER", f"{len(infer_at)} dims are -1", ins, hint="at most one dim can be inferred"
            )
        for axis, d in enumerate(dims):
            if d.is_const and d.value < -1:
                self.fail("NEGATIVE-DIM", f"dim {axis} is {d.value}", ins)
        ctx = InferContext()  # the reshape op's shape function is the one rule for -1 and element counts
        try:
            out = REGISTRY["reshape"].infer(ctx, t, shape=tuple(dims))
        except OpTypeError as exc:
            code = exc.code if exc.code in CODES else "SHAPE-MISMATCH"
            self.fail(
                code, f"cannot resize {t.shape} to {ShapeSpec.of(dims)}: {exc.message}", ins, hint=exc.hint
            )
        self.add_guards(ins, ctx)
        return out

    def type_phi(self, ins: Instruction) -> None:
        want = TensorType if ins.name == "TENSOR_PHI" else ScalarType
        known = [self.types[r] for _, r in ins["incoming"] if self.types[r] is not None]
        if not known:
            raise _Report
        for _, reg in ins["incoming"]:
            if self.types[reg] is not None:
                self.src(ins, reg, want, "phi input")
        if want is ScalarType:
            first = known[0].value
            same = all(prove_equal(first, t.value) for t in known[1:])
            self.types[ins["dst"]] = ScalarType(first if same else UNKNOWN)
            return
        first = known[0]
        for t in known[1:]:
            if t.shape.rank != first.shape.rank or t.dtype != first.dtype:
                self.fail(
                    "PHI-INCOMPATIBLE",
                    "phi inputs differ in rank or dtype",
                    ins,
                    expected=str(first),
                    found=str(t),
                    hint="the merged tensors must have the same rank and dtype",
                )
        dims = [
            d if all(prove_equal(d, t.shape[i]) for t in known[1:]) else UNKNOWN
            for i, d in enumerate(first.shape)
        ]
        self.types[ins["dst"]] = TensorType(ShapeSpec.of(dims), first.dtype)

    def type_call(self, ins: Instruction) -> None:
        opname, dsts, srcs, raw = ins["op"], ins["dsts"], ins["srcs"], ins["attrs"]
        op = REGISTRY.get(opname)
        if op is None:
            import difflib

            close = difflib.get_close_matches(opname[:64], REGISTRY, n=3)  # its cost grows with the name
            self.fail(
                "UNKNOWN-OP",
                f"no op named {opname!r}",
                ins,
                hint=f"did you mean {', '.join(close)}?" if close else "see ms.ops for the available ops",
            )
        inputs = [self.src(ins, r, TensorType, "input") for r in srcs]
        try:
            op.check_arity(len(inputs))
            attrs = op.check_attrs(raw)
        except OpTypeError as exc:
            self.fail(exc.code, exc.message, ins, hint=exc.hint)
        symbolic = {}
        for key, value in attrs.items():
            for reg in attr_registers(value):
                t = self.types[reg]
                if t is None:
                    raise _Report
                if not isinstance(t, ScalarType):
                    self.fail(
                        "ATTR-REG-TYPE",
                        f"attribute {key} names R{reg}, {_kind(t)}",
                        ins,
                        expected="an int64 scalar register",
                        found=_kind(t),
                    )
            symbolic[key] = self.substitute(value)
        n_out = op.num_outputs(symbolic)
        if len(dsts) != n_out:
            self.fail(
                "OUTPUT-COUNT", f"{opname} produces {n_out} output(s)", ins, expected=n_out, found=len(dsts)
            )
        ctx = InferContext()
        try:
            out = op.infer(ctx, *inputs, **symbolic)
        except OpTypeError as exc:
            code = exc.code if exc.code in CODES else "OP-INFER"
            self.fail(code, exc.message, ins, hint=exc.hint)
        except Exception as exc:  # a shape function bug must not crash verification
            self.fail("OP-INFER", f"shape function of {opname} failed: {type(exc).__name__}: {exc}", ins)
        outs = [out] if isinstance(out, TensorType) else list(out)
        for reg, t in zip(dsts, outs):
            self.types[reg] = t
        self.attrs[self.where[id(ins)]] = attrs
        self.add_guards(ins, ctx)

    def substitute(self, value: Any) -> Any:
        """Attribute value with scalar registers replaced by their symbolic values."""
        if isinstance(value, RegRef):
            t = self.types[value.index]
            return t.value if isinstance(t, ScalarType) else UNKNOWN
        if isinstance(value, tuple):
            return tuple(self.substitute(v) for v in value)
        return value

    def add_guards(self, ins: Instruction, ctx: InferContext) -> None:
        if ctx.guards:
            self.guards[self.where[id(ins)]] = list(ctx.guards)

    # -- pass 7: TENSOR_FREE (after types: only frees of tensors are checked) ----------------
    def check_frees(self, cfg: CFG) -> None:
        uses: dict[int, list[tuple[int, int | None, Instruction]]] = {}
        for bi, ii, ins in self.fn.instructions():
            if ins.name in PHIS:
                for pred, reg in ins["incoming"]:
                    uses.setdefault(reg, []).append((pred, None, ins))
            else:
                for reg in ins.reads():
                    uses.setdefault(reg, []).append((bi, ii, ins))
        broken = set(self.reported)  # instructions earlier passes reported: neither checked nor blamed here
        loops = _Retreats(cfg)
        # (id of a use, register) → (the use, addresses of the frees that can run before it)
        after_free: dict[tuple[int, int], tuple[Instruction, dict[int, None]]] = {}
        for bi, ii, ins in self.fn.instructions():
            if ins.name != "TENSOR_FREE" or bi not in cfg.reachable or id(ins) in broken:
                continue
            reg = ins["src"]
            if not isinstance(self.types[reg], TensorType):
                continue  # a register already reported broken
            db, di = self.defs[reg]
            producer = self.fn.blocks[db].instructions[di]
            if producer.name == "LOAD_CONST" or (producer.name == "TENSOR_CREATE" and producer["arg"] >= 0):
                self.report(
                    "FREE-NON-OWNED",
                    f"R{reg} is an input or constant and cannot be freed",
                    ins,
                    hint="free only tensors this function allocated",
                )
                continue  # the free itself is the mistake, not what comes after it
            later: set[int] | None = None
            for ub, ui, user in uses.get(reg, []):  # the free itself too: in a loop it may run again
                if id(user) in broken:
                    continue
                after = ub == bi and (ui is None or ui > ii)
                if not after and ub != db and ub in cfg.reachable and loops.may_reach(bi, ub, db):
                    if later is None:
                        # Passing the definition again (a loop) writes a fresh value: paths stop there.
                        later = cfg.reachable_from(cfg.succs[bi], barrier=db)
                    after = ub in later
                if after:
                    after_free.setdefault((id(user), reg), (user, {}))[1][self.where[id(ins)]] = None
        for (_, reg), (user, frees) in after_free.items():  # one report per use, naming every free before it
            double = user.name == "TENSOR_FREE"
            self.report(
                "DOUBLE-FREE" if double else "USE-AFTER-FREE",
                f"R{reg} is {'freed again' if double else 'read'} after TENSOR_FREE at "
                + ", ".join(f"0x{a:04x}" for a in frees),
                user,
                hint="move the TENSOR_FREE after the last use",
            )

    def check_returns(self, cfg: CFG) -> None:
        rets = [
            b.instructions[-1]
            for i, b in enumerate(self.fn.blocks)
            if i in cfg.reachable and b.instructions and b.instructions[-1].name == "RET"
        ]
        counts = {len(r["srcs"]) for r in rets}
        if len(counts) > 1:
            self.report(
                "RET-ARITY",
                "RETs return different numbers of values",
                rets[-1],
                expected=len(rets[0]["srcs"]),
                found=len(rets[-1]["srcs"]),
            )

    def run(self) -> FunctionInfo | None:
        try:
            return self.run_passes()
        finally:
            for group in self.merged.values():
                if group.count > 1:
                    self.diags[group.index] = group.merged(self.diags[group.index])

    def run_passes(self) -> FunctionInfo | None:
        if not self.check_structure():
            return None
        cfg = build_cfg(self.fn)
        self.check_cfg(cfg)
        self.check_phis(cfg)
        self.check_ssa(cfg)
        self.check_args()
        self.infer(cfg)
        self.check_frees(cfg)
        self.check_returns(cfg)
        return FunctionInfo(self.fn, self.base, cfg, self.types, self.entry_symbols, self.attrs, self.guards)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _kind(t: RegType) -> str:
    if isinstance(t, TensorType):
        return "a tensor " + str(t)
    return "a bool" if isinstance(t, BoolType) else str(t)


def _blocks(blocks: Iterable[int]) -> str:
    return "[" + ", ".join(f"bb{b}" for b in blocks) + "]"


class _Retreats:
    """Which uses a free can reach without searching the CFG, so checking frees is not quadratic.

    A use of a register is dominated by its definition ``db``, and a path that avoids ``db`` cannot
    enter ``db``'s dominator subtree from outside; so from the free to the use it stays inside, and
    goes backwards in reverse postorder only over a retreating edge whose target is inside too.
    """

    def __init__(self, cfg: CFG) -> None:
        self.cfg = cfg
        self.order = {b: i for i, b in enumerate(cfg.rpo)}
        self.targets = sorted(
            {cfg.tree_span[t][0] for b in cfg.rpo for t in cfg.succs[b] if self.order[t] <= self.order[b]}
        )

    def may_reach(self, free_block: int, use_block: int, def_block: int) -> bool:
        """False only where no path from ``free_block`` to ``use_block`` avoids ``def_block``."""
        if self.order[use_block] > self.order[free_block] or def_block not in self.cfg.tree_span:
            return True  # (a definition in an unreachable block is reported there; search anyway)
        low, high = self.cfg.tree_span[def_block]  # a target strictly inside: its number is in (low, high]
        i = bisect.bisect_right(self.targets, low)
        return i < len(self.targets) and self.targets[i] <= high


def _scalar_op(op: str, a: Dim, b: Dim) -> Dim:
    """``a op b`` as a symbolic dim, or ``?`` where the expression outgrows the shape algebra's limits
    (huge constants, runaway products): its value is then known only at run time, like any ``?``."""
    try:
        return SCALAR_OP_INFO[op].dims(a, b)
    except ShapeError:
        return UNKNOWN


def analyze_module(module: Module) -> tuple[ModuleInfo, list[Diagnostic]]:
    """Check everything; returns what was proved and every diagnostic found."""
    diags: list[Diagnostic] = []
    infos: dict[str, FunctionInfo] = {}
    base = 0
    seen: set[str] = set()
    for fn in module.functions:
        if fn.name in seen:
            diags.append(
                Diagnostic(
                    full_code("DUPLICATE-FUNCTION"),
                    f"function {fn.name!r} is defined twice",
                    address=base,
                    function=fn.name,
                )
            )
        seen.add(fn.name)
        info = FunctionChecker(module, fn, base, diags).run()
        if info is not None:
            infos.setdefault(fn.name, info)
        base += fn.size
    return ModuleInfo(module, infos), diags


def check_module(module: Module) -> list[Diagnostic]:
    return analyze_module(module)[1]


def verify_module(module: Module) -> ModuleInfo:
    """Verify ``module``; raises VerifyError listing every problem."""
    info, diags = analyze_module(module)
    if diags:
        raise VerifyError(diags)
    return info


def infer_types(module: Module) -> dict[tuple[str, int], str]:
    """Display types of every register the verifier could type (for disassembly comments)."""
    info, _ = analyze_module(module)
    return {(name, reg): str(t) for name, fi in info.functions.items() for reg, t in enumerate(fi.types) if t}
