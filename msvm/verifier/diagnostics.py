"""Verifier diagnostics: one stable code per kind of problem, each reported with its address.

The code table is the contract with tools and tests (``tests/data/invalid`` asserts codes);
add codes, never rename them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import SourceLoc, format_address

# code suffix → what it means (the full code is "E-VERIFY-" + suffix)
CODES: dict[str, str] = {
    # structure
    "EMPTY-FUNCTION": "a function has no blocks",
    "EMPTY-BLOCK": "a basic block has no instructions",
    "UNTERMINATED-BLOCK": "a basic block does not end with BR, JMP or RET",
    "TERMINATOR-MID-BLOCK": "BR, JMP or RET before the end of a block",
    "UNREACHABLE-BLOCK": "a block no path from the entry reaches",
    "ENTRY-PREDECESSOR": "a branch targets the entry block",
    "NO-RETURN": "a function with no reachable RET",
    "DUPLICATE-FUNCTION": "two functions with the same name",
    "DUPLICATE-PARAM": "two parameters with the same name",
    "VAR-NAME": "a register name for a register the function does not have, or not a Python identifier",
    "REG-RANGE": "a register index beyond the function's register count",
    "BLOCK-RANGE": "a block index beyond the function's blocks",
    "CONST-RANGE": "a constant index beyond the constant pool",
    # operands
    "OPERAND": "an operand of the wrong Python type for its kind",
    "BAD-DTYPE": "an unknown dtype name",
    "BAD-DEVICE": "an unknown device name",
    "BAD-SCALAR-OP": "an unknown SCALAR_OP operator",
    "BAD-PREDICATE": "an unknown CMP predicate",
    "BAD-SYMBOL": "a symbol name that is not an identifier, or is a shape function's (min, max, ...)",
    # arguments
    "ARG-RANGE": "an input index beyond the function's parameters",
    "ARG-DUPLICATE": "a parameter declared twice",
    "ARG-MISSING": "a parameter no TENSOR_CREATE/SCALAR_ARG declares",
    "ARG-NOT-IN-ENTRY": "an input declared outside the entry block",
    "DUPLICATE-SYMBOL": "two SCALAR_ARGs bind the same symbol",
    "UNBOUND-SYMBOL": "a shape refers to a symbol nothing binds at function entry",
    # SSA and data flow
    "REG-REDEFINED": "a register written by more than one instruction (SSA)",
    "REG-UNDEFINED": "a register read but never written",
    "REG-NOT-DOMINATED": "a register read on a path where it has not been written",
    "SHAPE-CYCLE": "a shape computation that depends on itself",
    "USE-AFTER-FREE": "a register read after its TENSOR_FREE",
    "DOUBLE-FREE": "a register freed twice",
    "FREE-NON-OWNED": "TENSOR_FREE of an input or constant the function does not own",
    # phis
    "PHI-POSITION": "a phi after a non-phi instruction in its block",
    "PHI-PREDECESSORS": "phi incoming blocks differ from the block's predecessors",
    "PHI-INCOMPATIBLE": "phi inputs of different rank, dtype or kind",
    # types
    "EXPECTED-TENSOR": "a scalar or boolean where a tensor is required",
    "EXPECTED-SCALAR": "a tensor or boolean where an int64 scalar is required",
    "EXPECTED-BOOL": "a non-boolean branch condition",
    "DIM-RANGE": "SHAPE_PROPAGATE of a dimension the tensor does not have",
    "NEGATIVE-DIM": "a size that is provably negative",
    "ZERO-DIVISOR": "a SCALAR_OP division or modulo by a constant zero",
    "RESIZE-INFER": "TENSOR_RESIZE with more than one -1",
    "RET-ARITY": "RETs of one function returning different numbers of values",
    # ops
    "UNKNOWN-OP": "OP_CALL of an op not in the registry",
    "ARITY": "an op called with the wrong number of input tensors",
    "OUTPUT-COUNT": "an OP_CALL with the wrong number of destination registers",
    "ATTR-UNKNOWN": "an attribute the op does not have",
    "ATTR-MISSING": "a required attribute left out",
    "ATTR-TYPE": "an attribute value of the wrong type",
    "ATTR-VALUE": "an attribute value out of range for the op",
    "ATTR-REG-TYPE": "an attribute register that does not hold a scalar",
    "SHAPE-MISMATCH": "input shapes that provably disagree",
    "BAD-AXIS": "an axis out of range for the tensor's rank",
    "DTYPE": "an input dtype the op does not accept",
    "RANK": "an input of a rank the op does not accept",
    "OP-INFER": "an op's shape function failed",
}


MAX_FIELD = 400  # characters kept of each text field of a diagnostic


def clip(text: str | None) -> str | None:
    """``text`` cut to ``MAX_FIELD`` characters, saying how much was left out.

    Why: a ``.msbc`` string table stores a name once however often it is used, so a long name that
    every instruction repeats would otherwise make the diagnostics quadratic in the file's size.
    """
    if text is None or len(text) <= MAX_FIELD:
        return text
    return f"{text[: MAX_FIELD - 40]}... ({len(text) - MAX_FIELD + 40} more characters)"


def listing(items: Sequence[str], sep: str = ", ", total: int | None = None) -> str:
    """``items`` joined by ``sep`` up to about ``MAX_FIELD`` characters, then ``... and N more``;
    ``total`` counts items beyond those given (a caller that kept only the first few)."""
    shown: list[str] = []
    size = 0
    for item in items:
        if shown and size + len(item) > MAX_FIELD:
            break
        shown.append(clip(item))
        size += len(shown[-1]) + len(sep)
    more = (len(items) if total is None else total) - len(shown)
    return sep.join([*shown, f"... and {more} more"] if more else shown)


@dataclass(frozen=True)
class Diagnostic:
    """One verifier finding: where (address, opcode), what was expected and found, and a hint.

    Text fields longer than ``MAX_FIELD`` characters are clipped (the function name when printed), so
    the size of a diagnostic's text is bounded.
    """

    code: str
    message: str
    address: int | None = None
    opcode: str | None = None
    function: str | None = None
    expected: str | None = None
    found: str | None = None
    hint: str | None = None
    source: SourceLoc | None = None

    def __post_init__(self) -> None:
        for name in ("message", "opcode", "expected", "found", "hint"):  # function: kept whole, to look up
            object.__setattr__(self, name, clip(getattr(self, name)))

    def __str__(self) -> str:
        where = "error"
        if self.address is not None:
            where += f" at {format_address(self.address)}"
            if self.opcode:
                where += f" ({self.opcode})"
        elif self.function:
            where += f" in function {clip(self.function)}"
        text = f"{where}: [{self.code}] {self.message}"
        if self.expected is not None or self.found is not None:
            text += f"; expected {self.expected}, found {self.found}"
        if self.source is not None:
            text += f" [{clip(str(self.source))}]"
        if self.hint:
            text += f"\n    hint: {self.hint}"
        return text

    def to_dict(self) -> dict:
        return {
            "code": self.code,
            "message": self.message,
            "address": self.address,
            "opcode": self.opcode,
            "function": self.function,
            "expected": self.expected,
            "found": self.found,
            "hint": self.hint,
            "source": clip(str(self.source)) if self.source else None,
        }


def full_code(suffix: str) -> str:
    if suffix not in CODES:
        raise KeyError(f"unregistered verifier code {suffix!r}")
    return "E-VERIFY-" + suffix
