"""The MS-BC text format: golden disassembly, exact round trips, and errors at exact positions."""

from __future__ import annotations

import linecache
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from msvm.bytecode.builder import ModuleBuilder
from msvm.bytecode.module import Block, Function, Module, RegRef, make_instruction
from msvm.bytecode.opcodes import DTYPES, OPCODES
from msvm.bytecode.text import MAX_REGS, assemble, default_source, disassemble
from msvm.errors import BytecodeFormatError, SourceLoc

try:
    from .strategies import modules
except ImportError:  # tests/ is not a package: pytest puts this directory on sys.path
    from strategies import modules

GOLDEN_FILE = "<golden cell>"
GOLDEN_SOURCE = "def scale(x, h):\n    y = ms.relu(x)\n    if x.shape[2] < h:\n"


def golden_module() -> Module:
    mb = ModuleBuilder("golden")
    f = mb.function("scale", ("x", "h"))
    x = f.tensor_input(0, "[N, 3, H, W]", "float32")
    h = f.scalar_arg(1, "h")
    d = f.shape_of(x, 2)
    hh = f.scalar_op("mul", d, h)
    f.load_const(np.array([0.5, -1.0, np.inf], dtype=np.float32))
    f.load_const(np.arange(20, dtype=np.int32))
    f.loc = SourceLoc(GOLDEN_FILE, 2, 8)
    y = f.call("relu", (x,), {})
    f.loc = SourceLoc(GOLDEN_FILE, 3, 4)
    c = f.cmp("lt", d, h)
    then, other = f.new_block(), f.new_block()
    f.br(c, then, other)
    f.loc = None
    f.set_block(then)
    attrs = {"axes": (2,), "starts": (0,), "stops": (RegRef(hh),), "scale": 1.0, "keep": True}
    s = f.call("slice", (y,), {**attrs, "mode": "edge", "pad": None})
    f.jmp(other)
    f.set_block(other)
    f.ret(f.tensor_phi(((0, y), (1, s))))
    f.function.names.update({y: "y", s: "y", 9: "out"})  # the frontend's register names
    return mb.build()


GOLDEN_TYPES = {("scale", 0): "float32[N, 3, H, W]", ("scale", 2): "i64 = H", ("scale", 7): "bool"}

GOLDEN_TEXT = """\
; MS-BC module: 1 function, 2 constants
module "golden"
source "<golden cell>"

const k0 = float32[3] [0.5, -1.0, inf]
const k1 = int32[20] base64"AAAAAAEAAAACAAAAAwAAAAQAAAAFAAAABgAAAAcAAAAIAAAACQAAAAoAAAALAAAADAAAAA0AAAAOAAAADwAAABAAAAARAAAAEgAAABMAAAA="

func @scale(x, h) regs=10 {
  names R6=y, R8=y, R9=out
bb0:
  R0 = TENSOR_CREATE 0, [N, 3, H, W], float32, cpu                ; msvm://bc/0x0000  x: float32[N, 3, H, W]
  R1 = SCALAR_ARG 1, h                                            ; msvm://bc/0x0001  h
  R2 = SHAPE_PROPAGATE R0, 2                                      ; msvm://bc/0x0002  i64 = H
  R3 = SCALAR_OP mul, R2, R1                                      ; msvm://bc/0x0003
  R4 = LOAD_CONST k0                                              ; msvm://bc/0x0004
  R5 = LOAD_CONST k1                                              ; msvm://bc/0x0005
  R6 = OP_CALL relu, (R0), {}  @2:9                               ; msvm://bc/0x0006  y  | y = ms.relu(x)
  R7 = CMP lt, R2, R1  @3:5                                       ; msvm://bc/0x0007  bool  | if x.shape[2] < h:
  BR R7, bb1, bb2  @3:5                                           ; msvm://bc/0x0008  | if x.shape[2] < h:
bb1:
  R8 = OP_CALL slice, (R6), {axes=(2,), starts=(0,), stops=(R3,), scale=1.0, keep=true, mode="edge", pad=none}  ; msvm://bc/0x0009  y
  JMP bb2                                                         ; msvm://bc/0x000a
bb2:
  R9 = TENSOR_PHI [bb0: R6, bb1: R8]                              ; msvm://bc/0x000b  out
  RET (R9)                                                        ; msvm://bc/0x000c
}
"""  # noqa: E501


@pytest.fixture
def golden_source():
    linecache.cache[GOLDEN_FILE] = (len(GOLDEN_SOURCE), None, GOLDEN_SOURCE.splitlines(True), GOLDEN_FILE)
    yield
    linecache.cache.pop(GOLDEN_FILE, None)


def test_golden_disassembly(golden_source) -> None:
    module = golden_module()
    assert disassemble(module, GOLDEN_TYPES) == GOLDEN_TEXT
    assert assemble(GOLDEN_TEXT) == module


def test_source_lines_can_be_left_out(golden_source) -> None:
    text = disassemble(golden_module(), {}, source_lines=False)
    assert "|" not in text and "ms.relu" not in text
    assert '  R6 = OP_CALL relu, (R0), {}  @2:9' in text


def test_types_default_to_the_verifier_and_str_is_disassembly() -> None:
    module = golden_module()
    text = disassemble(module)  # asks msvm.verifier.infer_types; must not fail either way
    assert assemble(text) == module
    assert str(module) == text


def check_roundtrip(module: Module) -> str:
    text = disassemble(module, {})
    back = assemble(text)
    assert back == module
    assert disassemble(back, {}) == text
    return text


def every_opcode_module(with_locs: bool) -> Module:
    """One function using every opcode and every attribute value type."""
    mb = ModuleBuilder("every_opcode")
    f = mb.function("main", ("x", "n"))
    f.loc = SourceLoc("prog.py", 10, 4) if with_locs else None
    x = f.tensor_input(0, "[N, 3, H*2, ?]", "float32")
    z = f.tensor_zeros("[]", "int64")
    n = f.scalar_arg(1, "N")
    k = f.scalar_const(-(2**63))
    big = f.scalar_const(2**63 - 1)
    d0 = f.shape_of(x, 0)
    prod = f.scalar_op("ceildiv", d0, n)
    cond = f.cmp("ge", prod, big)
    c = f.load_const(np.arange(6, dtype=np.float32).reshape(2, 3))
    alloc = f.tensor_alloc((d0, n), "float16")
    f.loc = SourceLoc("<cell 7>", 1, 0) if with_locs else None
    resized = f.resize(x, (prod, k))
    out = f.call(
        "nn.custom",
        (resized, c, alloc, z),
        {
            "none": None,
            "t": True,
            "f": False,
            "int": 1,
            "neg": -1,
            "float": 1.0,
            "neg_zero": -0.0,
            "tiny": 5e-324,
            "big": 1e300,
            "nan": math.nan,
            "inf": math.inf,
            "ninf": -math.inf,
            "str": 'héllo "quoted" \\ end ; not a comment\t\u2028',
            "empty": "",
            "reg": RegRef(d0),
            "tuple": (1, 1.0, True, None, "s", RegRef(n), (), ((2,),)),
            "weird key!": 0,
        },
    )
    a, b = f.call("split", (out,), {"sizes": (RegRef(prod), 3)}, n_out=2)
    f.call("print", (a,), {}, n_out=0)
    f.free(out)
    then, other, join = f.new_block(), f.new_block(), f.new_block()
    f.br(cond, then, other)
    f.set_block(then)
    f.jmp(join)
    f.set_block(other)
    f.jmp(join)
    f.set_block(join)
    t = f.tensor_phi(((then, a), (other, b)))
    s = f.scalar_phi(((then, d0), (other, n)))
    f.ret(t, s)
    g = mb.function("empty_ret")
    g.ret()
    return mb.build()


def test_locations_in_the_most_frequent_file_are_short() -> None:
    """``source "file"`` names the file most instructions come from; its locations drop the file name."""
    module = every_opcode_module(True)  # "<cell 7>" for most instructions, prog.py for the first ones
    assert default_source(module) == "<cell 7>"
    text = check_roundtrip(module)
    lines = text.splitlines()
    assert lines[1:3] == ['module "every_opcode"', 'source "<cell 7>"']
    assert '"<cell 7>":' not in text and "@1:1" in text and '@"prog.py":10:5' in text
    assert text.count("  @") == sum(ins.loc is not None for *_, ins in module.addresses())
    assert "source" not in check_roundtrip(every_opcode_module(False))


def test_a_tie_between_files_goes_to_the_first_seen() -> None:
    mb = ModuleBuilder("tie")
    f = mb.function("f")
    for file in ("b.py", "a.py", "a.py", "b.py"):
        f.loc = SourceLoc(file, 1, 0)
        f.scalar_const(1)
    f.loc = None
    f.ret()
    module = mb.build()
    assert default_source(module) == "b.py"
    text = check_roundtrip(module)
    assert 'source "b.py"' in text and text.count('@"a.py":1:1') == 2 and text.count("@1:1") == 2


def test_handwritten_source_lines() -> None:
    """A hand-written ``source`` names any file; ``@"file"`` locations stay valid next to ``@line:col``."""
    text = (
        'module "m"\n'
        'source "/home/u/model.py"\n'
        "func @f() regs=2 {\n"
        "bb0:\n"
        "  R0 = SCALAR_CONST 1  @12:5\n"
        '  R1 = SCALAR_CONST 2  @"/home/u/model.py":13:1\n'
        '  RET (R0)  @"other.py":1:1\n'
        "}\n"
    )
    ins = assemble(text).function("f").blocks[0].instructions
    assert [i.loc for i in ins] == [
        SourceLoc("/home/u/model.py", 12, 4),
        SourceLoc("/home/u/model.py", 13, 0),
        SourceLoc("other.py", 1, 0),
    ]
    printed = disassemble(assemble(text), {})
    assert "@12:5" in printed and "@13:1" in printed and '@"other.py":1:1' in printed
    assert assemble('source ""\nfunc @f() regs=1 {\nbb0:\n  RET ()  @1:1\n}').function("f").blocks[0] \
        .instructions[0].loc == SourceLoc("", 1, 0)


@pytest.mark.parametrize("with_locs", [False, True])
def test_every_opcode_roundtrips(with_locs: bool) -> None:
    module = every_opcode_module(with_locs)
    assert {ins.name for *_, ins in module.addresses()} == {info.name for info in OPCODES}
    text = check_roundtrip(module)
    assert "OP_CALL print, (R" in text  # zero outputs: no '='
    (custom,) = [i for *_, i in assemble(text).addresses() if i.name == "OP_CALL" and i["op"] == "nn.custom"]
    attrs = custom["attrs"]
    assert [type(v) for v in attrs.values()][:6] == [type(None), bool, bool, int, int, float]
    assert math.copysign(1.0, attrs["neg_zero"]) == -1.0
    assert list(attrs)[-1] == "weird key!"


def test_empty_module_functions_and_blocks() -> None:
    check_roundtrip(Module())
    check_roundtrip(Module("m", [Function("f", (), 0, [])]))
    check_roundtrip(Module("m", [Function("f", ("a",), 3, [Block(), Block()])]))
    assert assemble("") == Module()


def test_unusual_names_are_quoted() -> None:
    ins = make_instruction("OP_CALL", "my op", (0,), (), {"": "x"})
    module = Module('weird "name"', [Function("<lambda>", ("a b", ""), 1, [Block([ins])])])
    text = check_roundtrip(module)
    assert 'func @"<lambda>"("a b", "")' in text
    assert 'OP_CALL "my op", () , {""="x"}'.replace(" ,", ",") in text


CONSTANTS = [
    np.array(1.5, dtype=np.float32),
    np.array(True),
    np.array(-7, dtype=np.int64),
    np.zeros((0,), dtype=np.float32),
    np.zeros((2, 0, 3), dtype=np.int32),
    np.zeros((0, 2), dtype=np.bool_),
    np.array([0.1, -0.0, np.nan, np.inf, -np.inf, 1e-45, 3.4028235e38], dtype=np.float32),
    np.array([65504.0, -65504.0, 6e-8, np.nan, 0.1], dtype=np.float16),
    np.array([0.1, 1e308, 5e-324, -0.0, np.nan], dtype=np.float64),
    np.array([[-(2**31), 2**31 - 1]], dtype=np.int32),
    np.array([-(2**63), 2**63 - 1], dtype=np.int64),
    np.array([[True, False], [False, True]]),
    np.arange(16, dtype=np.float64).reshape(2, 2, 4),  # 16 elements: still a literal
    np.linspace(-1, 1, 17, dtype=np.float32),  # 17 elements: base64
    np.random.default_rng(0).standard_normal((8, 9)).astype(np.float16),
    np.arange(40, dtype=np.int64).reshape(2, 4, 5) - 20,
    np.arange(30) % 3 == 0,
]


@pytest.mark.parametrize("value", CONSTANTS, ids=lambda a: f"{a.dtype}{list(a.shape)}")
def test_constants_roundtrip(value: np.ndarray) -> None:
    mb = ModuleBuilder()
    mb.function("f").load_const(value)
    text = check_roundtrip(mb.build())
    const_line = next(line for line in text.splitlines() if line.startswith("const"))
    assert ("base64" in const_line) == (not 0 < value.size <= 16)  # empty: base64"", never nested lists
    (back,) = assemble(text).constants
    assert back.dtype == value.dtype and back.shape == value.shape
    assert back.tobytes() == value.tobytes() or np.isnan(value).any()
    assert np.array_equal(back, value, equal_nan=value.dtype.kind == "f")
    assert back.flags.c_contiguous and not back.flags.writeable and back.dtype.isnative


def test_constant_text_forms() -> None:
    module = assemble(
        "const k0 = float32[2, 3] [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]\n"
        "const k1 = float64[] 1\n"  # ints are fine in float constants
        'const k2 = int32[2] base64"AQAAAP////8="\n'  # base64 is fine for small constants
        "const k3 = bool[] true\n"
        "const k4 = float16[2] [nan, -inf]\n"
        "const k5 = float32[0, 5] []\n"
    )
    k0, k1, k2, k3, k4, k5 = module.constants
    assert k0.tolist() == [[1, 2, 3], [4, 5, 6]] and k0.dtype == np.float32
    assert k1.shape == () and k1.dtype == np.float64 and k1 == 1.0
    assert k2.tolist() == [1, -1]
    assert k3.dtype == np.bool_ and bool(k3)
    assert np.isnan(k4[0]) and k4[1] == -np.inf and k4.dtype == np.float16
    assert k5.shape == (0, 5)
    assert "const k2 = int32[2] [1, -1]" in disassemble(module, {})


def test_comments_blank_lines_and_crlf() -> None:
    text = (
        "; header\r\n\r\n"
        'module "m"   ; trailing\r\n'
        "func @f(x) regs=2 {  ; c\r\n"
        "bb0:  ; label comment\r\n"
        '  R0 = SCALAR_CONST 1   ; msvm://bc/0x0000 anything ; here "even quotes\r\n'
        '  R1 = OP_CALL p, (), {s="a;b"}  @"f.py":1:1 ; x\r\n'
        "  RET (R0)\r\n"
        "}\r\n"
    )
    module = assemble(text)
    ins = module.function("f").blocks[0].instructions
    assert ins[0]["value"] == 1
    assert ins[1]["attrs"] == {"s": "a;b"} and ins[1].loc == SourceLoc("f.py", 1, 0)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(modules())
def test_random_modules_roundtrip(module: Module) -> None:
    check_roundtrip(module)


MUTATIONS = ["", "\n", "\\", '"', "\u00e9", "\x00", "(", ")", "[", "]", "{", "}", ",", "=", ":", "-", ";"]
MUTATIONS += ["@", "R9", "bb9", "k9", "x", "nan", "1e999", "99999999999999999999", "base64"]


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_mutated_text_raises_only_format_errors(data: st.DataObject) -> None:
    """Hostile edits of valid text either assemble or raise BytecodeFormatError, nothing else."""
    text = disassemble(every_opcode_module(True), {})
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(text)))
        j = data.draw(st.integers(i, min(len(text), i + 8)))
        piece = data.draw(st.sampled_from(MUTATIONS))
        text = text[:i] + piece + text[j:]
    try:
        assemble(text)
    except BytecodeFormatError as err:
        assert err.source is not None and err.source.line >= 1 and err.source.col >= 0


def fn(*lines: str, regs: int = 12) -> str:
    """A function around instruction lines: the first instruction is on line 3."""
    return "\n".join([f"func @f(x) regs={regs} {{", "bb0:", *lines, "}"])


def col(line: str, token: str) -> int:
    return line.index(token)


L_SOP = "  R3 = SCALAR_OP mul R2, R1"
L_CAL = "  R0 = OP_CAL relu, (R1), {}"
L_R12 = "  R12 = SCALAR_CONST 1"
L_JMP = "  JMP bb5"
L_STR = '  R0 = OP_CALL f, (), {s="abc}'
L_SHP = "  R0 = TENSOR_CREATE 0, [N, 3*], float32, cpu"
L_BIG = "  R0 = SCALAR_CONST 9223372036854775808"
L_TUP = "  R0 = OP_CALL f, (), {axes=(1)}"
L_DUP = "  R0 = OP_CALL f, (), {a=1, a=2}"
L_NEST = "  R0 = OP_CALL f, (), {a=" + "(" * 40 + ")" * 40 + "}"
L_BR = "  R1 = BR R0, bb0, bb0"
L_NODST = "  SCALAR_CONST 1"
L_MISS = "  R1 = SCALAR_OP mul, R0"
L_TAIL = "  R1 = SCALAR_CONST 1 2"
L_LOC = '  R1 = SCALAR_CONST 1  @"f.py":3:0'
L_BARE = "  R0 = OP_CALL f, (), {mode=edge}"
L_K = "  R0 = LOAD_CONST k3"
L_TWO = "  R0, R1 = SCALAR_CONST 1"
L_PHI = "  R0 = TENSOR_PHI [bb0 R1]"
L_SHORT = "  R1 = SCALAR_CONST 1  @3:1"
L_NOLOC = "  R1 = SCALAR_CONST 1  @x:3:1"

ERRORS = [
    # (text, line, 0-based column, message: exact if it starts with '=', else a substring)
    (fn(L_SOP), 3, col(L_SOP, "R2"), "=expected ',' after operand 1 of SCALAR_OP, found 'R2'"),
    (fn(L_CAL), 3, col(L_CAL, "OP_CAL"), "=unknown opcode 'OP_CAL' (did you mean OP_CALL?)"),
    (fn(L_R12), 3, col(L_R12, "R12"), "=R12 is out of range: function f declares regs=12"),
    (fn(L_JMP), 3, col(L_JMP, "bb5"), "=block bb5 does not exist in function f"),
    (fn(L_STR), 3, col(L_STR, '"'), "unterminated string"),
    (fn(L_SHP), 3, col(L_SHP, "]"), "bad shape [N, 3*]"),
    (fn(L_BIG), 3, col(L_BIG, "9"), "integer '9223372036854775808' does not fit int64"),
    (fn(L_TUP), 3, col(L_TUP, ")}"), "a one-element tuple is written (x,)"),
    (fn(L_DUP), 3, col(L_DUP, "a=2"), "duplicate attribute 'a'"),
    (fn(L_NEST), 3, col(L_NEST, "a=(") + 2 + 16, "attribute tuples nest deeper than 16 levels"),
    (fn(L_BR), 3, col(L_BR, "R1"), "BR defines no register; remove 'R1 ='"),
    (fn(L_NODST), 3, col(L_NODST, "SCALAR_CONST"), "SCALAR_CONST defines a register"),
    (fn(L_MISS), 3, len(L_MISS), "found end of line (SCALAR_OP takes 3 operands: op, a, b)"),
    (fn(L_TAIL), 3, col(L_TAIL, "2"), "=expected end of line after operand 1 of SCALAR_CONST, found '2'"),
    (fn(L_LOC), 3, col(L_LOC, "0"), "integer '0' must be in [1, 2147483647]"),
    (fn(L_BARE), 3, col(L_BARE, "edge"), "found 'edge' (strings are written in double quotes)"),
    (fn(L_K), 3, col(L_K, "k3"), "=constant k3 does not exist: the module has 0"),
    (fn(L_TWO), 3, col(L_TWO, "R1"), "=SCALAR_CONST defines one register, found 2"),
    (fn(L_PHI), 3, col(L_PHI, "R1"), "=expected ':' for operand 1 (incoming) of TENSOR_PHI, found 'R1'"),
    (fn(L_SOP, regs=1 << 21), 1, len("func @f(x) regs="), "must be in [0, 1048576]"),
    ("func @f() regs=1 {\n  RET ()\n}", 2, 2, "instruction before the first block label"),
    ("func @f() regs=1 {\nbb1:\n}", 2, 0, "=expected label bb0 (blocks are numbered in order), found 'bb1'"),
    ("func @f() regs=1 {\nbb0:\n  RET ()\n", 4, 0, "function f is not closed"),
    ("func @f() regs=1 {\nbb0:\nfunc @g() regs=1 {\n}", 3, 0, "expected '}' to close function f before"),
    ("const k1 = float32[] 1.0", 1, 6, "=expected k0 (constants are numbered in order), found 'k1'"),
    ("const k0 = float32[2, 2] [[1.0, 2.0], [3.0]]", 1, 42, "dimension 1 of the constant has size 2, found"),
    ("const k0 = float32[2] [1.0, 2.0, 3.0]", 1, 33, "dimension 0 of the constant has size 2, found more"),
    ('const k0 = float32[2] base64"AAAA"', 1, 28, "=float32[2] needs 8 bytes, the base64 data holds 3"),
    ("const k0 = float16[] 70000.0", 1, 21, "=[E-FORMAT]"),
    ("const k0 = bool[1] [1]", 1, 20, "expected true or false"),
    ("const k0 = float8[1] [1]", 1, 11, "expected a dtype (float16, float32"),
    ("const k0 = float64[] 1e400", 1, 21, "out of range (write inf or -inf)"),
    ("const k0 = int32[] 2147483648", 1, 19, "must be in [-2147483648, 2147483647]"),
    ('module "a"\nmodule "b"', 2, 0, "must come first"),
    ("\n\n  hello world", 3, 2, "expected 'module', 'source', 'const' or 'func' at the top level, found"),
    (fn(L_SHORT), 3, col(L_SHORT, "3:1"), "needs a 'source \"file\"' line before the functions"),
    (fn(L_NOLOC), 3, col(L_NOLOC, "x"), "=expected a debug location after '@' (@line:col, or "
     '@"file":line:col), found \'x\''),
    ('source "a.py"\nsource "b.py"', 2, 0, "=a second 'source' line: a module has one default source file"),
    ('const k0 = int64[] 1\nsource "a.py"', 2, 0, "must come before 'const' and 'func' lines"),
    ("source a.py", 1, 7, "=expected the file name in double quotes after 'source', found 'a.py'"),
    ('source "a.py"\nmodule "m"', 2, 0, "must come first"),
    # the register-names lines of a function
    ("func @f() regs=2 {\n  names R2=q\n", 2, 8, "=R2 is out of range: function f declares regs=2"),
    ("func @f() regs=2 {\n  names R1=q, R1=k\n", 2, 14, "=R1 is named twice (already 'q')"),
    ("func @f() regs=2 {\n  names R1=q R0=k\n", 2, 13, "=expected ',' in the register names (names "
     "R<n>=name, ...), found 'R0'"),
    ("func @f() regs=2 {\n  names R1 q\n", 2, 11, "expected '=' in the register names"),
    ("func @f() regs=2 {\n  names\n", 2, 7, "expected a register (R<n>) in the register names"),
    ("func @f() regs=2 {\nbb0:\n  names R1=q\n", 3, 2, "='names' lines come before the first block label"),
]


@pytest.mark.parametrize(("text", "line", "column", "message"), ERRORS)
def test_syntax_errors_have_exact_positions(text: str, line: int, column: int, message: str) -> None:
    with pytest.raises(BytecodeFormatError) as info:
        assemble(text, "prog.msbc")
    err = info.value
    assert err.source == SourceLoc("prog.msbc", line, column), str(err)
    if message == "=[E-FORMAT]":
        assert str(err).startswith(f"[E-FORMAT] at prog.msbc:{line}:{column + 1}: ")
    elif message.startswith("="):
        assert err.message == message[1:]
    else:
        assert message in err.message


def test_register_names_round_trip_any_name() -> None:
    """A names table prints one line per 12 registers and reads back, names that are no identifier too."""
    module = golden_module()
    fn = module.functions[0]
    fn.names = {r: f"v{r}" for r in range(fn.num_regs)} | {3: "two words", 4: "é", 5: "R0", 7: "bb1"}
    text = disassemble(module, {})
    assert [line.count("=") for line in text.splitlines() if line.startswith("  names ")] == [10]
    assert '  names R0=v0, R1=v1, R2=v2, R3="two words", R4="é", R5=R0' in text
    assert assemble(text) == module and assemble(text).functions[0].names == fn.names


def test_limits() -> None:
    assert assemble(fn("  RET ()", regs=MAX_REGS)).functions[0].num_regs == MAX_REGS
    with pytest.raises(BytecodeFormatError, match="at most 32 dimensions"):
        assemble("const k0 = float32[" + "1, " * 33 + "1] 0.0")
    with pytest.raises(BytecodeFormatError, match="cannot build constant"):
        assemble("const k0 = float32[0, 4611686018427387904, 4611686018427387904] []")
    with pytest.raises(BytecodeFormatError, match="nesting deeper"):
        assemble(fn("  R0 = TENSOR_CREATE 0, [" + "(" * 200 + "N" + ")" * 200 + "], float32, cpu"))
    with pytest.raises(BytecodeFormatError):
        assemble(fn("  R0 = SCALAR_CONST " + "9" * 5000))
    with pytest.raises(BytecodeFormatError, match="not UTF-8"):
        assemble(b"\xff")


def test_dtypes_cover_the_table() -> None:
    assert {str(a.dtype) for a in CONSTANTS} == set(DTYPES)
