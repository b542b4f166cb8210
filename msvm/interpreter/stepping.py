"""The stepping debugger: run a function one instruction at a time and look at every register.

It executes the very lines the fast path is compiled from (one at a time, over a dict of
registers), so stepping to the end gives the same result as calling the function.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..bytecode.module import Instruction
from ..bytecode.opcodes import PHIS
from ..context import CONTEXT
from ..errors import MsvmError, format_address
from .codegen import code_name
from .lowering import Step

if TYPE_CHECKING:
    from .program import Executable


@dataclass(frozen=True)
class RegisterState:
    """What a register holds right now, with the metadata the widgets show (``docs/architecture.md``,
    "Observability")."""

    index: int
    kind: str  # "tensor" | "scalar" | "bool" | "empty"
    symbolic: str | None  # the verifier's type, e.g. float32[N, 3, H*2, W]
    value: Any = None
    shape: tuple[int, ...] | None = None
    dtype: str | None = None
    device: str | None = None
    strides: tuple[int, ...] | None = None
    data_address: int | None = None
    nbytes: int | None = None
    producer: int | None = None  # address of the instruction that wrote it
    produced_by: str | None = None  # "interpreter" | "jit"

    @property
    def name(self) -> str:
        return f"R{self.index}"

    def summary(self) -> str:
        if self.kind == "empty":
            return f"{self.name}: -"
        if self.kind == "tensor":
            return f"{self.name}: {self.dtype}{list(self.shape)}  ({self.symbolic})"
        return f"{self.name}: {self.value!r}  ({self.symbolic})"


def register_state(
    index: int,
    value: Any,
    symbolic: str | None,
    producer: int | None,
    produced_by: str = "interpreter",
    device: str = "cpu",
) -> RegisterState:
    if isinstance(value, np.ndarray):
        return RegisterState(
            index,
            "tensor",
            symbolic,
            value,
            tuple(value.shape),
            value.dtype.name,
            device,
            tuple(value.strides),
            value.__array_interface__["data"][0],
            value.nbytes,
            producer,
            produced_by,
        )
    if value is None:
        return RegisterState(index, "empty", symbolic)
    kind = "bool" if isinstance(value, (bool, np.bool_)) else "scalar"
    return RegisterState(index, kind, symbolic, value, producer=producer, produced_by=produced_by)


class Execution:
    """A paused call: ``step()``, ``run(until=address)``, ``continue_()``, ``registers``, ``result``."""

    def __init__(self, exe: Executable, args: Iterable[Any]) -> None:
        self.exe = exe
        self.args = tuple(args)
        if len(self.args) != len(exe.params):
            raise TypeError(f"{exe.name}() takes {len(exe.params)} argument(s), got {len(self.args)}")
        created = exe.check_signature(self.args)  # validates the inputs exactly as a call does
        self.namespace: dict[str, Any] = exe._names(False)
        for step in exe.steps:
            self.namespace.update(step.names)
        self.regs: dict[str, Any] = {f"a{i}": a for i, a in enumerate(self.args)}
        self.regs["B"] = created
        self.blocks: dict[int, list[Step]] = {}
        for step in exe.steps:
            self.blocks.setdefault(step.block, []).append(step)
        self.block, self.index = 0, 0
        self.pending_phis: dict[int, Any] = {}
        self.finished = False
        self.result: Any = None
        self.breakpoints: set[int] = set()
        self.iterations = 0
        self.history: list[int] = []  # addresses executed, in order
        self._code: dict[int, Any] = {}

    # -- where we are --------------------------------------------------------------------------
    @property
    def current_step(self) -> Step | None:
        return None if self.finished else self.blocks[self.block][self.index]

    @property
    def pc(self) -> int | None:
        """Address of the next instruction to execute (None once finished)."""
        step = self.current_step
        return None if step is None else step.address

    @property
    def current_instruction(self) -> Instruction | None:
        step = self.current_step
        return None if step is None else step.ins

    @property
    def registers(self) -> list[RegisterState]:
        info = self.exe.info
        producers = {}
        for step in self.exe.steps:
            for r in step.ins.writes():
                producers[r] = step.address
        out = []
        for r in range(info.function.num_regs):
            t = info.types[r]
            out.append(
                register_state(r, self.regs.get(f"r{r}"), str(t) if t is not None else None, producers.get(r))
            )
        return out

    def register(self, index: int) -> RegisterState:
        return self.registers[index]

    # -- moving --------------------------------------------------------------------------------
    def step(self) -> RegisterState | None:
        """Execute one instruction; returns the state of the register it wrote, if any."""
        if self.finished:
            raise RuntimeError("the execution has finished")
        step = self.blocks[self.block][self.index]
        ins = step.ins
        self.history.append(step.address)
        try:
            if ins.name in PHIS:
                self.regs[f"r{ins['dst']}"] = self.pending_phis.pop(ins["dst"])
                self.index += 1
            elif ins.opcode.is_terminator:
                self._terminate(step)
            else:
                code = self._code.get(step.address)
                if code is None:
                    code = self._code[step.address] = compile(step.line, code_name(self.exe.name), "exec")
                exec(code, self.namespace, self.regs)
                self.index += 1
        except MsvmError:
            raise
        except Exception as exc:
            raise self.exe.runtime_error(step, exc, self.regs) from exc
        written = ins.writes()
        return self.register(written[0]) if written else None

    def _terminate(self, step: Step) -> None:
        ins = step.ins
        if ins.name == "RET":
            values = []
            for r in ins["srcs"]:
                v = self.regs[f"r{r}"]
                values.append(v.copy() if isinstance(v, np.ndarray) and not v.flags.writeable else v)
            self.result = None if not values else values[0] if len(values) == 1 else tuple(values)
            self.finished = True
            return
        if ins.name == "JMP":
            target = ins["target"]
        else:
            target = ins["then"] if self.regs[f"r{ins['cond']}"] else ins["else"]
        if (self.block, target) in self.exe.info.cfg.back_edges():
            self.iterations += 1
            if self.iterations > CONTEXT.max_loop_iterations:
                self.exe.loop_limit(step.address)
        self.pending_phis = {
            s.ins["dst"]: self.regs[f"r{dict(s.ins['incoming'])[self.block]}"]
            for s in self.blocks[target]
            if s.ins.name in PHIS
        }
        self.block, self.index = target, 0

    def run(self, until: int | None = None) -> Any:
        """Run until the instruction at ``until`` is next (or a breakpoint, or the end)."""
        first = True
        while not self.finished:
            pc = self.pc
            if not first and (pc == until or pc in self.breakpoints):
                break
            self.step()
            first = False
        return self.result

    def continue_(self) -> Any:
        return self.run()

    def step_over_region(self) -> None:
        """Run to the next block boundary (the unit the JIT compiles and the debugger skips over)."""
        start = self.block
        self.step()
        while not self.finished and self.block == start and self.index > 0:
            if self.pc in self.breakpoints:
                break
            self.step()

    def add_breakpoint(self, address: int) -> None:
        if address not in self.exe.by_address:
            raise ValueError(f"{format_address(address)} is not an instruction of {self.exe.name}")
        self.breakpoints.add(address)

    def __repr__(self) -> str:
        where = "finished" if self.finished else f"at {format_address(self.pc)} {self.current_step.opname}"
        return f"<Execution of {self.exe.name} {where}>"
