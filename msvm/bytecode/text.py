"""MS-BC text: the assembler and the disassembler, on one grammar.

Why a text format: people write bytecode by hand in notebooks and tests, and a disassembly is
only useful if it can be pasted back in. Both directions are generic: every operand is printed
and parsed by its :class:`~msvm.bytecode.opcodes.Kind` (one printer and one parser per kind),
so a new opcode needs no code here. Everything after ``;`` is a comment; that is where the
disassembler puts addresses, register types and source lines, so text -> module -> text is
stable. Debug locations in the file most instructions come from are written ``@line:col`` under a
``source "file"`` line after the module line, so a listing does not repeat a long path on every
instruction; other files keep ``@"file":line:col``. The assembler checks syntax, register ranges
and block labels only; meaning (types, dominance, op names, attributes) is the verifier's job.
Errors are ``BytecodeFormatError``\\ s with a ``SourceLoc`` (line, 0-based column) and say what
was expected and what was found. See ``docs/bytecode.md`` for the grammar.
"""

from __future__ import annotations

import base64
import binascii
import difflib
import json
import linecache
import math
import os
import re
import stat
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, NoReturn

import numpy as np

from ..errors import BytecodeFormatError, MsvmError, SourceLoc, format_address
from ..shapes import ShapeSpec, ShapeSyntaxError, parse_shape
from .builder import normalize_constant
from .module import (
    MAX_ATTR_DEPTH,
    MAX_LOCATION,
    MAX_RANK,
    MAX_REGS,
    Block,
    Function,
    Instruction,
    Module,
    RegRef,
)
from .opcodes import BY_NAME, DTYPES, Kind, OpcodeInfo

LITERAL_LIMIT = 16  # constants of 1 to this many elements are written as literals, others base64
NAMES_PER_LINE = 12  # register names per 'names' line of a disassembly
COMMENT_COLUMN = 64  # comments start here unless every instruction on the page is shorter
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1

#: How each operand kind is written: (what the error messages call it, an example). Also the docs.
KIND_SYNTAX: dict[Kind, tuple[str, str]] = {
    Kind.DST: ("a destination register", "R3 = ..."),
    Kind.DSTS: ("destination registers", "R3, R4 = ... (none: no '=')"),
    Kind.SRC: ("a register", "R3"),
    Kind.SRCS: ("a register tuple", "(R1, R2), (R1), ()"),
    Kind.IMM: ("an integer", "-1"),
    Kind.SHAPE: ("a shape", "[N, 3, H*2, ?]"),
    Kind.DTYPE: ("a dtype name", "float32"),
    Kind.DEVICE: ("a device name", "cpu"),
    Kind.CONST: ("a constant", "k0"),
    Kind.SYMBOL: ("a symbol name", "H"),
    Kind.SCALAR_OP: ("a scalar operator", "mul"),
    Kind.PRED: ("a predicate", "lt"),
    Kind.OP: ("an op name", "relu, nn.conv2d"),
    Kind.ATTRS: ("an attribute list", "{axis=1, starts=(0, R3)}"),
    Kind.BLOCK: ("a block label", "bb2"),
    Kind.PHI: ("a phi list", "[bb0: R4, bb2: R7]"),
}

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*\Z")
_WORDS: dict[str, Any] = {"true": True, "false": False, "none": None, "nan": math.nan, "inf": math.inf}


# ----------------------------------------------------------------------------- printing
def _string(s: str) -> str:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: keep the text writable as UTF-8
        return json.dumps(s)
    return json.dumps(s, ensure_ascii=False)


def _name(s: Any) -> str:
    """An identifier bare, anything else as a JSON string (the parser accepts both)."""
    s = str(s)
    return s if _IDENT.match(s) else _string(s)


def _reg(r: int) -> str:
    return f"R{r}"


def format_attr_value(v: Any) -> str:
    """One attribute value; floats via ``repr`` so they parse back bit-exactly (nan/inf by name)."""
    if v is None:
        return "none"
    if isinstance(v, (bool, np.bool_)):
        return "true" if v else "false"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        return repr(float(v))
    if isinstance(v, str):
        return _string(v)
    if isinstance(v, RegRef):
        return _reg(v.index)
    if isinstance(v, (tuple, list)):
        items = [format_attr_value(x) for x in v]
        return f"({items[0]},)" if len(items) == 1 else "(" + ", ".join(items) + ")"
    return f"<unprintable {type(v).__name__}>"  # the assembler rejects it, on purpose


_PRINT: dict[Kind, Callable[[Any], str]] = {
    Kind.DST: _reg,
    Kind.SRC: _reg,
    Kind.DSTS: lambda v: ", ".join(map(_reg, v)),
    Kind.SRCS: lambda v: "(" + ", ".join(map(_reg, v)) + ")",
    Kind.IMM: lambda v: str(int(v)),
    Kind.SHAPE: str,
    Kind.DTYPE: _name,
    Kind.DEVICE: _name,
    Kind.CONST: lambda v: f"k{v}",
    Kind.SYMBOL: _name,
    Kind.SCALAR_OP: _name,
    Kind.PRED: _name,
    Kind.OP: _name,
    Kind.ATTRS: lambda v: "{" + ", ".join(f"{_name(k)}={format_attr_value(x)}" for k, x in v.items()) + "}",
    Kind.BLOCK: lambda v: f"bb{v}",
    Kind.PHI: lambda v: "[" + ", ".join(f"bb{b}: R{r}" for b, r in v) + "]",
}


def format_instruction(ins: Instruction, source: str | None = None) -> str:
    """One instruction without comment: destinations before ``=``, other operands in table order.

    ``source`` is the module's default source file (its ``source "file"`` line): a location in that
    file is written ``@line:col``, any other ``@"file":line:col``.
    """
    dsts, rest = [], []
    for operand, value in zip(ins.opcode.operands, ins.args):
        if operand.kind in (Kind.DST, Kind.DSTS):
            if operand.kind is Kind.DST or value:
                dsts.append(_PRINT[operand.kind](value))
        else:
            rest.append(_PRINT[operand.kind](value))
    text = (", ".join(dsts) + " = " if dsts else "") + ins.opcode.name
    if rest:
        text += " " + ", ".join(rest)
    if ins.loc is not None:
        file = "" if ins.loc.file == source else f"{_string(ins.loc.file)}:"
        text += f"  @{file}{ins.loc.line}:{ins.loc.col + 1}"
    return text


def format_names(names: Mapping[int, str]) -> list[str]:
    """A function's register-names table as ``  names R2=q, R7=h`` lines, by register."""
    items = [f"R{reg}={_name(names[reg])}" for reg in sorted(names)]
    step = NAMES_PER_LINE
    return ["  names " + ", ".join(items[i : i + step]) for i in range(0, len(items), step)]


def _typed(name: str, type_text: str) -> str:
    """One defined register in a comment: ``q: float32[N, 4]``, ``q``, ``float32[N, 4]`` or ``?``."""
    if name and type_text:
        return f"{name}: {type_text}"
    return name or type_text or "?"


def _shown_name(name: str | None) -> str:
    """A variable's name for a comment: one line, and short (a comment is no place for a hostile name)."""
    if not name:
        return ""
    name = _one_line(name)
    return name if len(name) <= 40 else name[:37] + "..."


def default_source(module: Module) -> str | None:
    """The file most debug locations of ``module`` are in (the first seen among equals); None without any."""
    files = Counter(ins.loc.file for fn in module.functions for _, _, ins in fn.instructions() if ins.loc)
    return files.most_common(1)[0][0] if files else None


def _literal(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_literal(x) for x in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)  # int, or the exact Python float of a float16/32/64 element


def format_constant(index: int, array: np.ndarray) -> str:
    """``const kI = dtype[dims] value``: a literal of 1 to 16 elements, else little-endian base64 bytes.

    An empty constant is ``base64""``: its literal nests a list per index of the dims before the zero
    one, which for dims (10**6, 10**6, 0) is 10**12 lists.
    """
    arr = np.asarray(array)
    head = f"const k{index} = {arr.dtype.name}[{', '.join(map(str, arr.shape))}] "
    if 0 < arr.size <= LITERAL_LIMIT:
        return head + _literal(arr.tolist())
    raw = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<")).tobytes()
    return head + 'base64"' + base64.b64encode(raw).decode("ascii") + '"'


def _inferred_types(module: Module) -> Mapping[tuple[str, int], str]:
    """The verifier's register types, or none when it is unavailable or rejects the module."""
    try:
        from ..verifier import infer_types
    except ImportError:
        return {}
    try:
        return infer_types(module)
    except MsvmError:
        return {}


def _one_line(s: str) -> str:
    return " ".join(s.split())


SOURCE_READ_BUDGET = 64 << 20  # bytes of source files one disassembly may read from disk


class _SourceLines:
    """Source lines for the comments of one disassembly, read so that no location can make it block
    or read without bound: a location may name anything (a FIFO, ``/dev/zero``, a path with a NUL,
    a huge file). Files ``linecache`` already holds (notebook cells, imported modules) are used as
    they are; others only when they are regular files that fit what is left of the read budget."""

    def __init__(self) -> None:
        self.budget = SOURCE_READ_BUDGET
        self.readable: dict[str, bool] = {}

    def line(self, file: str, line: int) -> str:
        ok = self.readable.get(file)
        if ok is None:
            ok = self.readable[file] = file in linecache.cache or self.admit(file)
        return _one_line(linecache.getline(file, line)) if ok else ""

    def admit(self, file: str) -> bool:
        try:
            st = os.stat(file)
        except (OSError, ValueError):  # missing, unreadable, a NUL or a lone surrogate in the name
            return False
        if not stat.S_ISREG(st.st_mode) or st.st_size > self.budget:
            return False
        self.budget -= st.st_size
        return True


def disassemble(
    module: Module, types: Mapping[tuple[str, int], str] | None = None, *, source_lines: bool = True
) -> str:
    """Module -> text that :func:`assemble` reads back; comments add addresses, types, source lines.

    ``types`` maps (function name, register) to a display type; ``None`` asks the verifier.
    """
    if types is None:
        types = _inferred_types(module)
    nf, nc = len(module.functions), len(module.constants)
    out = [
        f"; MS-BC module: {nf} function{'' if nf == 1 else 's'}, {nc} constant{'' if nc == 1 else 's'}",
        f"module {_string(module.name)}",
    ]
    source = default_source(module)
    if source is not None:
        out.append(f"source {_string(source)}")
    if module.constants:
        out.append("")
    out += [format_constant(i, arr) for i, arr in enumerate(module.constants)]
    sources = _SourceLines()
    address = 0
    for fn in module.functions:
        out.append("")
        out.append(f"func @{_name(fn.name)}({', '.join(map(_name, fn.params))}) regs={fn.num_regs} {{")
        out += format_names(fn.names)
        variables = fn.variable_names()
        rows: list[tuple[str, str | None]] = []
        for bi, block in enumerate(fn.blocks):
            rows.append((f"bb{bi}:", None))
            for ins in block.instructions:
                notes = [format_address(address)]
                shown = [_one_line(str(types.get((fn.name, r)) or "")) for r in ins.writes()]
                named = [_shown_name(variables.get(r)) for r in ins.writes()]
                if any(shown) or any(named):
                    notes.append(", ".join(_typed(n, t) for n, t in zip(named, shown)))
                if source_lines and ins.loc is not None:
                    line = sources.line(ins.loc.file, ins.loc.line)
                    if line:
                        notes.append("| " + line)
                rows.append(("  " + format_instruction(ins, source), "  ".join(notes)))
                address += 1
        width = min(max((len(c) for c, n in rows if n is not None), default=0), COMMENT_COLUMN)
        out += [code if note is None else f"{code.ljust(width)}  ; {note}" for code, note in rows]
        out.append("}")
    return "\n".join(out) + "\n"


# ----------------------------------------------------------------------------- lexing
class _Tok(NamedTuple):
    kind: str  # name, int, float, string, punct, end
    text: str
    col: int
    value: Any = None  # decoded JSON string


_LEX = re.compile(
    r"""(?P<ws>\s+)
    |(?P<float>-?(?:\d+\.\d*(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)|-inf(?![\w.]))
    |(?P<int>-?\d+)
    |(?P<name>[A-Za-z_][A-Za-z0-9_.]*)
    |(?P<string>"(?:[^"\\\x00-\x1f]|\\.)*")
    |(?P<comment>;)
    |(?P<punct>.)""",
    re.ASCII | re.VERBOSE | re.DOTALL,
)


def _describe(tok: _Tok) -> str:
    if tok.kind == "end":
        return "end of line"
    text = tok.text if len(tok.text) <= 40 else tok.text[:37] + "..."
    return f"'{text}'"


def _numbered(prefix: str, tok: _Tok) -> int | None:
    """``R3`` -> 3 for prefix R (likewise k, bb); None if ``tok`` is not such a name."""
    if tok.kind != "name" or not tok.text.startswith(prefix):
        return None
    digits = tok.text[len(prefix) :]
    if not digits.isdigit() or (digits[0] == "0" and len(digits) > 1):
        return None
    return int(digits) if len(digits) <= 18 else INT64_MAX  # out of range anyway


# ----------------------------------------------------------------------------- parsing
class _Parser:
    """Line-oriented recursive descent: one token list per line, one method per operand kind."""

    def __init__(self, text: str, filename: str) -> None:
        self.filename = filename
        self.lines = text.split("\n")
        self.lineno = 0
        self.toks: list[_Tok] = [_Tok("end", "", 0)]
        self.pos = 0
        self.ctx = ""  # appended to "expected ..." messages, e.g. " for operand 2 (a) of CMP"
        self.fn_name = ""
        self.num_regs = 0
        self.source: str | None = None  # the file of @line:col locations (the 'source "file"' line)
        self.block_refs: list[tuple[int, int, int]] = []  # (block, line, col)
        self.const_refs: list[tuple[int, int, int]] = []
        self.operand_parsers: dict[Kind, Callable[[], Any]] = {
            Kind.SRC: self.reg,
            Kind.SRCS: self.reg_tuple,
            Kind.IMM: lambda: self.int64(self.take()),
            Kind.SHAPE: self.shape,
            Kind.DTYPE: lambda: self.name("a dtype name"),
            Kind.DEVICE: lambda: self.name("a device name"),
            Kind.CONST: self.const_ref,
            Kind.SYMBOL: lambda: self.name("a symbol name"),
            Kind.SCALAR_OP: lambda: self.name("a scalar operator"),
            Kind.PRED: lambda: self.name("a predicate"),
            Kind.OP: lambda: self.name("an op name"),
            Kind.ATTRS: self.attrs,
            Kind.BLOCK: self.block_ref,
            Kind.PHI: self.phi,
        }

    # -- tokens ---------------------------------------------------------------------------
    def lex(self, line: str) -> list[_Tok]:
        toks = []
        for m in _LEX.finditer(line):
            kind, text, col = m.lastgroup, m.group(), m.start()
            if kind == "ws":
                continue
            if kind == "comment":
                return [*toks, _Tok("end", "", col)]
            if kind == "punct" and text == '"':
                self.fail("unterminated string (or a raw control character inside it)", col=col)
            value = None
            if kind == "string":
                try:
                    value = json.loads(text)
                except ValueError as err:
                    self.fail(f"invalid string literal {text[:40]}: {err}", col=col)
            toks.append(_Tok(kind, text, col, value))
        return [*toks, _Tok("end", "", len(line.rstrip()))]

    def next_line(self) -> bool:
        """Advance to the next line with tokens; False at the end of the text."""
        while self.lineno < len(self.lines):
            self.lineno += 1
            self.toks, self.pos = self.lex(self.lines[self.lineno - 1]), 0
            if self.toks[0].kind != "end":
                return True
        return False

    def peek(self, ahead: int = 0) -> _Tok:
        return self.toks[min(self.pos + ahead, len(self.toks) - 1)]

    def take(self) -> _Tok:
        tok = self.toks[self.pos]
        if tok.kind != "end":
            self.pos += 1
        return tok

    def is_punct(self, text: str, ahead: int = 0) -> bool:
        tok = self.peek(ahead)
        return tok.kind == "punct" and tok.text == text

    def accept(self, text: str) -> bool:
        if self.is_punct(text):
            self.pos += 1
            return True
        return False

    def fail(self, message: str, tok: _Tok | None = None, col: int | None = None) -> NoReturn:
        if col is None:
            col = (tok or self.peek()).col
        raise BytecodeFormatError(message, source=SourceLoc(self.filename, self.lineno, col))

    def expected(self, what: str, tok: _Tok, where: str | None = None) -> NoReturn:
        self.fail(f"expected {what}{self.ctx if where is None else where}, found {_describe(tok)}", tok)

    def expect(self, text: str, where: str | None = None) -> _Tok:
        if not self.is_punct(text):
            self.expected(f"'{text}'", self.peek(), where)
        return self.take()

    def expect_end(self, after: str) -> None:
        if self.peek().kind != "end":
            self.fail(f"expected end of line after {after}, found {_describe(self.peek())}")

    def seq(self, open_: str, close: str, item: Callable[[], None]) -> None:
        """``open item, item, ... close`` (possibly empty)."""
        self.expect(open_)
        if self.accept(close):
            return
        while True:
            item()
            if self.accept(close):
                return
            if not self.accept(","):
                self.expected(f"',' or '{close}'", self.peek())

    # -- scalars and names ------------------------------------------------------------------
    def int64(self, tok: _Tok, lo: int = INT64_MIN, hi: int = INT64_MAX, what: str = "an integer") -> int:
        if tok.kind != "int":
            self.expected(what, tok)
        value = int(tok.text) if len(tok.text) <= 21 else INT64_MAX + 1
        if not lo <= value <= hi:
            fits = "does not fit int64" if (lo, hi) == (INT64_MIN, INT64_MAX) else f"must be in [{lo}, {hi}]"
            self.fail(f"integer {_describe(tok)} {fits}", tok)
        return value

    def float64(self, tok: _Tok) -> float:
        value = float(tok.text)
        if math.isinf(value) and "inf" not in tok.text:
            self.fail(f"float literal {_describe(tok)} is out of range (write inf or -inf)", tok)
        return value

    def name(self, what: str) -> str:
        tok = self.take()
        if tok.kind == "name":
            return tok.text
        if tok.kind == "string":
            return tok.value
        self.expected(what, tok)

    def reg(self) -> int:
        tok = self.take()
        n = _numbered("R", tok)
        if n is None:
            self.expected("a register (R<n>)", tok)
        if n >= self.num_regs:
            self.fail(
                f"{tok.text} is out of range: function {self.fn_name} declares regs={self.num_regs}", tok
            )
        return n

    # -- one parser per operand kind ----------------------------------------------------------
    def reg_tuple(self) -> tuple[int, ...]:
        regs: list[int] = []
        self.seq("(", ")", lambda: regs.append(self.reg()))
        return tuple(regs)

    def shape(self) -> ShapeSpec:
        start = self.peek()
        if not self.is_punct("["):
            self.expected("a shape like [N, 3, H*2, ?]", start)
        depth, j = 0, self.pos
        while True:
            tok = self.toks[j]
            if tok.kind == "end":
                self.fail("'[' of the shape is never closed", start)
            if tok.kind == "punct" and tok.text in "([":
                depth += 1
            elif tok.kind == "punct" and tok.text in ")]":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        self.pos = j + 1
        raw = self.lines[self.lineno - 1][start.col : tok.col + 1]
        try:
            return parse_shape(raw)
        except ShapeSyntaxError as err:
            self.fail(f"bad shape {raw[:60]}: {err.reason}", col=start.col + min(err.pos, len(raw)))
        except (ValueError, RecursionError) as err:
            self.fail(f"bad shape {raw[:60]}: {err}", start)

    def const_ref(self) -> int:
        tok = self.take()
        n = _numbered("k", tok)
        if n is None:
            self.expected("a constant (k<n>)", tok)
        self.const_refs.append((n, self.lineno, tok.col))
        return n

    def block_ref(self) -> int:
        tok = self.take()
        n = _numbered("bb", tok)
        if n is None:
            self.expected("a block label (bb<n>)", tok)
        self.block_refs.append((n, self.lineno, tok.col))
        return n

    def phi(self) -> tuple[tuple[int, int], ...]:
        items: list[tuple[int, int]] = []

        def item() -> None:
            block = self.block_ref()
            self.expect(":")
            items.append((block, self.reg()))

        self.seq("[", "]", item)
        return tuple(items)

    def attrs(self) -> dict[str, Any]:
        out: dict[str, Any] = {}

        def item() -> None:
            key_tok = self.peek()
            key = self.name("an attribute name")
            if key in out:
                self.fail(f"duplicate attribute {key!r}", key_tok)
            self.expect("=")
            out[key] = self.attr_value(0)

        self.seq("{", "}", item)
        return out

    def attr_value(self, depth: int) -> Any:
        tok = self.take()
        if tok.kind == "int":
            return self.int64(tok)
        if tok.kind == "float":
            return self.float64(tok)
        if tok.kind == "string":
            return tok.value
        if tok.kind == "name" and tok.text in _WORDS:
            return _WORDS[tok.text]
        if _numbered("R", tok) is not None:
            self.pos -= 1
            return RegRef(self.reg())
        if tok.kind == "punct" and tok.text == "(":
            if depth >= MAX_ATTR_DEPTH:
                self.fail(f"attribute tuples nest deeper than {MAX_ATTR_DEPTH} levels", tok)
            items = []
            while not self.accept(")"):
                items.append(self.attr_value(depth + 1))
                if self.is_punct(")") and len(items) == 1:
                    self.fail("a one-element tuple is written (x,)")
                if not self.is_punct(")") and not self.accept(","):
                    self.expected("',' or ')'", self.peek())
            return tuple(items)
        hint = " (strings are written in double quotes)" if tok.kind == "name" else ""
        self.fail(
            f"expected an attribute value (int, float, true, false, none, string, R<n> or tuple)"
            f"{self.ctx}, found {_describe(tok)}{hint}",
            tok,
        )

    def location(self) -> SourceLoc:
        tok = self.peek()
        if tok.kind == "string":
            self.take()
            file = tok.value
            self.expect(":", " in the debug location")
        elif tok.kind == "int":
            if self.source is None:
                self.fail("a location without a file name (@line:col) needs a 'source \"file\"' line "
                          "before the functions", tok)
            file = self.source
        else:
            self.expected("a debug location after '@' (@line:col, or @\"file\":line:col)", tok, "")
        line = self.int64(self.take(), 0, MAX_LOCATION, "a line number")
        self.expect(":", " in the debug location")
        col = self.int64(self.take(), 1, MAX_LOCATION, "a 1-based column")
        return SourceLoc(file, line, col - 1)

    # -- lines ------------------------------------------------------------------------------
    def instruction(self) -> Instruction:
        dst_toks: list[_Tok] = []
        dsts: list[int] = []
        if _numbered("R", self.peek()) is not None:
            self.ctx = " in the destination list"
            while True:
                dst_toks.append(self.peek())
                dsts.append(self.reg())
                if self.accept("="):
                    break
                if not self.accept(","):
                    self.expected("',' or '='", self.peek(), " after a destination register")
        op_tok = self.take()
        info = BY_NAME.get(op_tok.text) if op_tok.kind == "name" else None
        if info is None:
            if op_tok.kind == "name" and self.is_punct(":"):
                self.fail(f"expected a block label bb<n>, found {_describe(op_tok)}", op_tok)
            if op_tok.kind != "name":
                self.expected("an opcode", op_tok, "")
            close = difflib.get_close_matches(op_tok.text[:40].upper(), BY_NAME, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            self.fail(f"unknown opcode {_describe(op_tok)}{hint}", op_tok)
        kinds = {o.kind for o in info.operands}
        if Kind.DST in kinds and len(dsts) != 1:
            if not dsts:
                self.fail(f"{info.name} defines a register: write 'R<n> = {info.name} ...'", op_tok)
            self.fail(f"{info.name} defines one register, found {len(dsts)}", dst_toks[1])
        if dsts and not kinds & {Kind.DST, Kind.DSTS}:
            self.fail(f"{info.name} defines no register; remove '{dst_toks[0].text} ='", dst_toks[0])
        args: list[Any] = []
        n = 0
        for operand in info.operands:
            if operand.kind in (Kind.DST, Kind.DSTS):
                args.append(dsts[0] if operand.kind is Kind.DST else tuple(dsts))
                continue
            if n:
                self.ctx = ""
                if not self.accept(","):
                    self.fail(
                        f"expected ',' after operand {n} of {info.name}, found {_describe(self.peek())}"
                        + (f" ({_signature(info)})" if self.peek().kind == "end" else "")
                    )
            n += 1
            self.ctx = f" for operand {n} ({operand.name}) of {info.name}"
            args.append(self.operand_parsers[operand.kind]())
        self.ctx = ""
        loc = self.location() if self.accept("@") else None
        self.expect_end(f"operand {n} of {info.name}" if n else info.name)
        return Instruction(info, tuple(args), loc)

    def function(self) -> Function:
        self.take()  # 'func'
        where = " in the function header (func @name(params) regs=N {)"
        self.expect("@", where)
        self.ctx = where
        name = self.name("a function name")
        params: list[str] = []
        self.seq("(", ")", lambda: params.append(self.name("a parameter name")))
        tok = self.take()
        if tok.kind != "name" or tok.text != "regs":
            self.expected("'regs=N'", tok)
        self.expect("=", where)
        self.ctx = " after 'regs='"
        num_regs = self.int64(self.take(), 0, MAX_REGS, "the register count")
        self.expect("{", where)
        self.ctx = ""
        self.expect_end("'{'")
        self.fn_name, self.num_regs, self.block_refs = name, num_regs, []
        blocks: list[Block] = []
        names: dict[int, str] = {}
        while True:
            if not self.next_line():
                self.lineno = len(self.lines)
                self.fail(f"function {name} is not closed: expected '}}' before the end of the text", col=0)
            tok = self.peek()
            if self.accept("}"):
                self.expect_end("'}'")
                break
            if _numbered("bb", tok) is not None and self.is_punct(":", 1):
                if _numbered("bb", tok) != len(blocks):
                    self.fail(
                        f"expected label bb{len(blocks)} (blocks are numbered in order), found "
                        f"{_describe(tok)}",
                        tok,
                    )
                self.pos += 2
                self.expect_end(f"label {tok.text}:")
                blocks.append(Block())
            elif tok.kind == "name" and tok.text == "names":
                if blocks:
                    self.fail("'names' lines come before the first block label", tok)
                self.names_line(names)
            elif tok.kind == "name" and tok.text in ("func", "const", "module"):
                self.fail(f"expected '}}' to close function {name} before '{tok.text}'", tok)
            elif not blocks:
                self.fail("instruction before the first block label (write 'bb0:' first)", tok)
            else:
                blocks[-1].instructions.append(self.instruction())
        for block, line, col in self.block_refs:
            if block >= len(blocks):
                self.lineno = line
                self.fail(f"block bb{block} does not exist in function {name}", col=col)
        return Function(name, tuple(params), num_regs, blocks, names)

    def names_line(self, names: dict[int, str]) -> None:
        """``names R2=q, R7=h``: which Python variable each register holds (before the first block)."""
        self.take()  # 'names'
        self.ctx = " in the register names (names R<n>=name, ...)"
        while True:
            tok = self.peek()
            reg = self.reg()
            if reg in names:
                self.fail(f"{tok.text} is named twice (already {names[reg]!r})", tok)
            self.expect("=")
            names[reg] = self.name("a variable name")
            if self.peek().kind == "end":
                break
            self.expect(",")
        self.ctx = ""

    def constant(self, index: int) -> np.ndarray:
        self.take()  # 'const'
        tok = self.take()
        n = _numbered("k", tok)
        if n is None:
            self.expected(f"the constant name k{index}", tok, " after 'const'")
        if n != index:
            self.fail(f"expected k{index} (constants are numbered in order), found {_describe(tok)}", tok)
        self.expect("=", f" after k{index}")
        dtype_tok = self.take()
        if dtype_tok.kind != "name" or dtype_tok.text not in DTYPES:
            self.expected(f"a dtype ({', '.join(DTYPES)})", dtype_tok, f" for constant k{index}")
        dtype = dtype_tok.text
        shape: list[int] = []
        self.ctx = f" in the shape of constant k{index} (a static shape like [2, 3])"

        def dim() -> None:
            if len(shape) == MAX_RANK:
                self.fail(f"constants have at most {MAX_RANK} dimensions")
            shape.append(self.int64(self.take(), 0, INT64_MAX, "a dimension size"))

        self.seq("[", "]", dim)
        self.ctx = f" in the value of constant k{index}"
        size = math.prod(shape)
        start = self.peek()
        if start.text == "base64" and self.peek(1).kind == "string":
            self.take()
            tok = self.take()
            try:
                data = base64.b64decode(tok.value, validate=True)
            except (binascii.Error, ValueError) as err:
                self.fail(f"invalid base64 data: {err}", tok)
            need = size * np.dtype(dtype).itemsize
            if len(data) != need:
                self.fail(f"{dtype}{shape} needs {need} bytes, the base64 data holds {len(data)}", tok)
            if dtype == "bool" and any(b > 1 for b in data):
                self.fail("bool constant bytes must be 0 or 1", tok)
            build = lambda: np.frombuffer(data, dtype=np.dtype(dtype).newbyteorder("<"))  # noqa: E731
        else:
            flat: list[Any] = []
            self.literal(dtype, shape, 0, flat)
            build = lambda: np.array(flat, dtype=dtype)  # noqa: E731
        self.ctx = ""
        self.expect_end(f"the value of constant k{index}")
        try:
            return normalize_constant(build().reshape(shape))
        except (ValueError, TypeError, MemoryError) as err:
            self.fail(f"cannot build constant k{index}: {err}", start)

    def literal(self, dtype: str, shape: list[int], depth: int, flat: list[Any]) -> None:
        """A nested list matching ``shape`` exactly; elements are appended to ``flat``."""
        if depth == len(shape):
            flat.append(self.element(dtype))
            return
        size = shape[depth]
        self.expect("[", f" for dimension {depth} (size {size}) of the constant")
        count = 0
        while not self.is_punct("]"):
            if count:
                self.expect(",", f" between elements of dimension {depth}")
            if count == size:
                self.fail(f"dimension {depth} of the constant has size {size}, found more elements")
            self.literal(dtype, shape, depth + 1, flat)
            count += 1
        if count != size:
            self.fail(f"dimension {depth} of the constant has size {size}, found {count} elements")
        self.take()

    def element(self, dtype: str) -> Any:
        tok = self.take()
        if dtype == "bool":
            if tok.kind != "name" or tok.text not in ("true", "false"):
                self.expected("true or false", tok)
            return tok.text == "true"
        if dtype.startswith("int"):
            info = np.iinfo(dtype)
            return self.int64(tok, int(info.min), int(info.max), f"an {dtype} integer")
        if tok.kind == "int":
            value = float(self.int64(tok))
        elif tok.kind == "float":
            value = self.float64(tok)
        elif tok.kind == "name" and tok.text in ("nan", "inf"):
            value = _WORDS[tok.text]
        else:
            self.expected(f"a {dtype} number", tok)
        with np.errstate(over="ignore"):
            if math.isfinite(value) and not np.isfinite(np.dtype(dtype).type(value)):
                self.fail(f"{_describe(tok)} is out of range for {dtype}", tok)
        return value

    def source_line(self, tok: _Tok, late: bool) -> None:
        """``source "file"``: the file of the locations written ``@line:col`` (once, before the code)."""
        if self.source is not None:
            self.fail("a second 'source' line: a module has one default source file", tok)
        if late:
            self.fail("'source \"file\"' must come before 'const' and 'func' lines", tok)
        self.take()
        file_tok = self.take()
        if file_tok.kind != "string":
            self.expected("the file name in double quotes", file_tok, " after 'source'")
        self.source = file_tok.value
        self.expect_end("the source file name")

    def module(self) -> Module:
        name, constants, functions = "module", [], []
        first = True
        while self.next_line():
            tok = self.peek()
            if tok.kind == "name" and tok.text == "module":
                if not first:
                    self.fail("'module \"name\"' must come first", tok)
                self.take()
                name_tok = self.take()
                if name_tok.kind != "string":
                    self.expected("the module name in double quotes", name_tok, " after 'module'")
                name = name_tok.value
                self.expect_end("the module name")
            elif tok.kind == "name" and tok.text == "source":
                self.source_line(tok, bool(constants or functions))
            elif tok.kind == "name" and tok.text == "const":
                constants.append(self.constant(len(constants)))
            elif tok.kind == "name" and tok.text == "func":
                functions.append(self.function())
            else:
                self.expected("'module', 'source', 'const' or 'func'", tok, " at the top level")
            first = False
        for index, line, col in self.const_refs:
            if index >= len(constants):
                self.lineno = line
                self.fail(f"constant k{index} does not exist: the module has {len(constants)}", col=col)
        return Module(name, functions, constants)


def _signature(info: OpcodeInfo) -> str:
    names = [o.name for o in info.operands if o.kind not in (Kind.DST, Kind.DSTS)]
    return f"{info.name} takes {len(names)} operand{'' if len(names) == 1 else 's'}: {', '.join(names)}"


def assemble(text: str, filename: str = "<text>") -> Module:
    """Text -> Module; raises ``BytecodeFormatError`` at the exact line and column of a mistake."""
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as err:
            raise BytecodeFormatError(f"text is not UTF-8: {err}", source=SourceLoc(filename, 1, 0)) from None
    if not isinstance(text, str):
        raise BytecodeFormatError(
            f"expected text, got {type(text).__name__}", source=SourceLoc(filename, 1, 0)
        )
    return _Parser(text, filename).module()


__all__ = [
    "KIND_SYNTAX",
    "assemble",
    "default_source",
    "disassemble",
    "format_attr_value",
    "format_constant",
    "format_instruction",
]
