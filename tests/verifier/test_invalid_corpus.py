"""The invalid-module corpus: one small wrong program per verifier error code, with its exact diagnostics.

Every file in ``tests/data/invalid`` is MS-BC text whose header names what the verifier must say:

    ; expect: E-VERIFY-REG-UNDEFINED at 0x0003     (a diagnostic at that address)
    ; expect: E-VERIFY-NO-RETURN in @spin           (a diagnostic without an address, in that function)
    ; one line saying what is wrong

and the verifier must report exactly that set, nothing more (one mistake, one diagnostic). Codes the text
format cannot express (out-of-range indices and wrongly typed operands are format errors to the
assembler) are built with the builder API below; a test checks that every code in ``CODES`` is covered
by one or the other, so a new code without a test fails.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from msvm.bytecode.builder import ModuleBuilder
from msvm.bytecode.module import Instruction, Module, RegRef, make_instruction
from msvm.bytecode.opcodes import BY_NAME, Kind
from msvm.bytecode.text import assemble, disassemble
from msvm.errors import BytecodeFormatError, VerifyError, format_address
from msvm.verifier import CODES, Diagnostic, check_module, verify_module

CORPUS = Path(__file__).resolve().parent.parent / "data" / "invalid"
FILES = sorted(CORPUS.glob("*.msbc.txt"))
PREFIX = "E-VERIFY-"

_EXPECT = re.compile(
    r";\s*expect:\s*(?P<code>E-VERIFY-[A-Z0-9-]+)"
    r"(?:\s+at\s+(?P<address>0x[0-9a-f]{4,})|\s+in\s+@(?P<function>\w+))\s*$"
)

# Codes that no text can carry: the assembler rejects these as format errors (or cannot spell them).
TEXT_INEXPRESSIBLE = {"REG-RANGE", "BLOCK-RANGE", "CONST-RANGE", "OPERAND"}


@dataclass(frozen=True)
class Expected:
    code: str
    address: int | None
    function: str | None = None


def read_header(path: Path) -> tuple[list[Expected], str]:
    """The expected diagnostics and the one-line description from a corpus file's leading comments."""
    expected, description = [], ""
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith(";"):
            break
        m = _EXPECT.match(line)
        if m:
            address = int(m["address"], 16) if m["address"] else None
            expected.append(Expected(m["code"], address, m["function"]))
        elif line.lstrip("; ").startswith("expect"):
            raise AssertionError(f"{path.name}: malformed expect line {line!r}")
        elif line.strip("; "):
            description = line.strip("; ")
    return expected, description


def where(code: str, address: int | None, function: str | None) -> tuple[str, int | str | None]:
    """How a diagnostic is matched: by code and address, or by code and function when it has no address."""
    return (code, address) if address is not None else (code, function)


def found(diags: list[Diagnostic]) -> Counter:
    return Counter(where(d.code, d.address, d.function) for d in diags)


def check_diagnostic(module: Module, d: Diagnostic) -> None:
    """What every diagnostic carries: a registered code, a message, its address and opcode."""
    assert d.code.startswith(PREFIX) and d.code[len(PREFIX) :] in CODES
    assert d.message.strip()
    assert d.function
    text = str(d)
    assert d.code in text and d.message in text
    if d.address is not None:
        assert re.search(r"msvm://bc/0x[0-9a-f]{4}", text)
        assert format_address(d.address) in text
        if d.opcode is not None:
            _, _, _, ins = module.locate(d.address)
            assert d.opcode.split()[0] == ins.name
    if d.hint is not None:
        assert "hint: " + d.hint in text


# ------------------------------------------------------------------------------------------ text files
def test_corpus_is_large():
    assert len(FILES) >= 40


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_invalid_module(path: Path):
    expected, description = read_header(path)
    assert expected, f"{path.name} has no '; expect:' line"
    assert description, f"{path.name} has no comment saying what is wrong"
    assert path.name.startswith(expected[0].code[len(PREFIX) :].lower()), "name files after their code"

    module = assemble(path.read_text(encoding="utf-8"), str(path))
    diags = check_module(module)
    want = Counter(where(e.code, e.address, e.function) for e in expected)
    assert found(diags) == want, "one mistake, one diagnostic; found:\n" + "\n".join(map(str, diags))
    for d in diags:
        check_diagnostic(module, d)

    with pytest.raises(VerifyError) as err:
        verify_module(module)
    assert [d.to_dict() for d in err.value.diagnostics] == [d.to_dict() for d in diags]
    assert err.value.code == diags[0].code
    message = str(err.value)
    for d in diags:
        assert str(d).splitlines()[0] in message


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_invalid_module_survives_disassembly(path: Path):
    """The disassembly of a wrong module reads back to the same module and the same diagnostics."""
    module = assemble(path.read_text(encoding="utf-8"), str(path))
    again = assemble(disassemble(module), str(path))
    assert again == module
    assert [d.to_dict() for d in check_module(again)] == [d.to_dict() for d in check_module(module)]


def test_all_mistakes_of_the_corpus_at_once():
    """One module holding every corpus function reports every corpus diagnostic, each where it belongs."""
    combined = Module("everything")
    want: Counter = Counter()
    base = 0
    for path in FILES:
        module = assemble(path.read_text(encoding="utf-8"), str(path))
        prefix = path.name.removesuffix(".msbc.txt").replace("-", "_") + "__"
        shift = len(combined.constants)
        combined.constants.extend(module.constants)
        for fn in module.functions:
            fn.name = prefix + fn.name
            for _, _, ins in fn.instructions():
                ins.args = tuple(
                    v + shift if o.kind is Kind.CONST else v for o, v in zip(ins.opcode.operands, ins.args)
                )
            combined.functions.append(fn)
        for e in read_header(path)[0]:
            address = None if e.address is None else e.address + base
            want[where(e.code, address, e.function and prefix + e.function)] += 1
        base += sum(fn.size for fn in module.functions)
    assert found(check_module(combined)) == want


# ------------------------------------------------------------------------------------- builder cases
@dataclass(frozen=True)
class BuilderCase:
    name: str
    code: str  # suffix, e.g. "REG-RANGE"
    build: Callable[[], Module]
    address: int | None


def _one_input(name: str = "f") -> tuple[ModuleBuilder, object, int]:
    mb = ModuleBuilder(name)
    f = mb.function(name, ("x",))
    x = f.tensor_input(0, "[N, 4]", "float32")
    return mb, f, x


def _src_out_of_range() -> Module:
    mb, f, _ = _one_input()
    f.emit("OP_CALL", "relu", (f.new_reg(),), (7,), {})  # 0x0001: R7 of 2 registers
    f.ret(1)
    return mb.build()


def _attr_register_out_of_range() -> Module:
    mb, f, x = _one_input()
    y = f.call("slice", (x,), {"axes": (1,), "starts": (0,), "stops": (RegRef(40),)})  # 0x0001
    f.ret(y)
    return mb.build()


def _negative_register_count() -> Module:
    mb, f, x = _one_input()
    f.ret(x)
    f.function.num_regs = -1
    return mb.build()


def _branch_out_of_range() -> Module:
    mb, f, x = _one_input()
    n = f.shape_of(x, 0)
    c = f.cmp("gt", n, f.scalar_const(2))
    f.br(c, 1, 5)  # 0x0004: there is no bb5
    f.set_block(f.new_block())
    f.ret(x)
    return mb.build()


def _phi_block_out_of_range() -> Module:
    mb, f, x = _one_input()
    body = f.new_block()
    f.jmp(body)
    f.set_block(body)
    f.ret(f.tensor_phi([(3, x)]))  # 0x0002: incoming from bb3, which does not exist
    return mb.build()


def _const_out_of_range() -> Module:
    mb, f, x = _one_input()
    f.load_const([1.0, 2.0, 3.0, 4.0])
    f.emit("LOAD_CONST", f.new_reg(), 1)  # 0x0002: the pool holds k0 only
    f.ret(x)
    return mb.build()


def _imm_of_wrong_type() -> Module:
    mb, f, x = _one_input()
    f.emit("SHAPE_PROPAGATE", f.new_reg(), x, "0")  # 0x0001: the dim is a str
    f.ret(x)
    return mb.build()


def _shape_of_wrong_type() -> Module:
    mb = ModuleBuilder("f")
    f = mb.function("f", ("x",))
    f.emit("TENSOR_CREATE", f.new_reg(), 0, "[N, 4]", "float32", "cpu")  # 0x0000: text, not a ShapeSpec
    f.ret(0)
    return mb.build()


def _missing_operand() -> Module:
    mb, f, x = _one_input()
    info = BY_NAME["CMP"]
    f.function.blocks[0].instructions.append(Instruction(info, (f.new_reg(), "lt", x)))  # 0x0001: no b
    f.ret(x)
    return mb.build()


def _op_name_of_wrong_type() -> Module:
    mb, f, x = _one_input()
    f.function.blocks[0].instructions.append(make_instruction("OP_CALL", 7, (f.new_reg(),), (x,), {}))
    f.ret(1)
    return mb.build()


def _block_of_wrong_type() -> Module:
    mb, f, x = _one_input()
    f.emit("JMP", "bb1")  # 0x0001: the label text, not the block index
    f.set_block(f.new_block())
    f.ret(x)
    return mb.build()


def _const_of_wrong_type() -> Module:
    mb, f, x = _one_input()
    f.load_const([1.0, 2.0, 3.0, 4.0])
    f.emit("LOAD_CONST", f.new_reg(), 0.0)  # 0x0002: a float, not a pool index
    f.ret(x)
    return mb.build()


def _name_out_of_range() -> Module:
    mb, f, x = _one_input()
    f.ret(x)
    f.function.names[9] = "q"  # the function has one register: the text's names line cannot say R9
    return mb.build()


BUILDER_CASES = [
    BuilderCase("source register out of range", "REG-RANGE", _src_out_of_range, 1),
    BuilderCase("attribute register out of range", "REG-RANGE", _attr_register_out_of_range, 1),
    BuilderCase("negative register count", "REG-RANGE", _negative_register_count, None),
    BuilderCase("branch target out of range", "BLOCK-RANGE", _branch_out_of_range, 4),
    BuilderCase("phi block out of range", "BLOCK-RANGE", _phi_block_out_of_range, 2),
    BuilderCase("constant out of range", "CONST-RANGE", _const_out_of_range, 2),
    BuilderCase("immediate of the wrong type", "OPERAND", _imm_of_wrong_type, 1),
    BuilderCase("shape of the wrong type", "OPERAND", _shape_of_wrong_type, 0),
    BuilderCase("operand missing", "OPERAND", _missing_operand, 1),
    BuilderCase("op name of the wrong type", "OPERAND", _op_name_of_wrong_type, 1),
    BuilderCase("block of the wrong type", "OPERAND", _block_of_wrong_type, 1),
    BuilderCase("constant of the wrong type", "OPERAND", _const_of_wrong_type, 2),
    BuilderCase("register name out of range", "VAR-NAME", _name_out_of_range, None),
]


@pytest.mark.parametrize("case", BUILDER_CASES, ids=[c.name for c in BUILDER_CASES])
def test_builder_case(case: BuilderCase):
    module = case.build()
    diags = check_module(module)
    found = [(d.code, d.address) for d in diags]
    assert found == [(PREFIX + case.code, case.address)], "\n".join(map(str, diags))
    for d in diags:
        check_diagnostic(module, d)
    with pytest.raises(VerifyError) as err:
        verify_module(module)
    assert err.value.diagnostics == diags


@pytest.mark.parametrize("case", BUILDER_CASES, ids=[c.name for c in BUILDER_CASES])
def test_builder_case_has_no_text_form(case: BuilderCase):
    """Why these are builder cases: the text format cannot carry the mistake."""
    module = case.build()
    try:
        text = disassemble(module)
    except (TypeError, ValueError):
        return  # the printer cannot spell it
    try:
        again = assemble(text)
    except BytecodeFormatError:
        return  # the assembler rejects it as a format error
    assert PREFIX + case.code not in {d.code for d in check_module(again)}


def test_every_code_is_covered():
    text_codes = {e.code[len(PREFIX) :] for path in FILES for e in read_header(path)[0]}
    builder_codes = {case.code for case in BUILDER_CASES}
    assert text_codes | builder_codes == set(CODES), "every code needs a corpus file or a builder case"
    assert builder_codes - text_codes == TEXT_INEXPRESSIBLE
    assert not TEXT_INEXPRESSIBLE & text_codes
