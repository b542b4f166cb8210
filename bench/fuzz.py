"""The reliability campaign in-house: mutated files and texts, differential programs, threads, worker kills.

``python -m bench fuzz --cases N --seed S [--kinds binary,text,diff,threads,kills] [--jobs J]`` runs
N cases of each kind in a pool of J worker processes (``python -m bench.fuzz --worker KIND``) and
prints one outcome table. Each case is classified as

- **success** — it ran and every check held;
- **msvm error** — an ``msvm.errors.MsvmError`` refused it (for binary and text: the expected answer
  to a damaged input; for diff, threads and kills, whose programs are all valid, a defect);
- **other exception** — any other exception escaped msvm (the traceback is printed);
- **mismatch** — a wrong answer: a module whose disassembly does not assemble back to it (or whose
  encoding does not decode back to it), or a result off numpy's beyond float tolerance;
- **hang** — the worker did not finish the case within its time bound (it is killed);
- **crash** — the worker died of a signal (a segfault, an abort) during the case;
- **oversize** — the worker's resident memory went over the bound (``--rss-mb``, 1 GiB), or memory
  ran out (``E-LIMIT-MEMORY``, a MemoryError): the workers set limits (64 MiB a tensor, 256 MiB a call)
  far below the bound, so only an allocation the limits do not cover gets there.

Every case but success and msvm error is a defect: it is printed with its traceback and a one-line
repro (``python -m bench fuzz --kinds KIND --seed S --case K``, which reruns the unit holding case K
and prints every case of it), and the exit status is 1. A crash, hang or oversize is attributed to
the case the worker was running, because each worker reports when it starts a unit and what each of
its cases came to; a worker that died is replaced and the campaign goes on.

The kinds:

- **binary**: a valid ``.msbc`` file from the seed corpus (modules the frontend compiles from the
  functions below, and the assembled texts of ``tests/data/invalid``) gets bit flips, byte edits,
  inserts, deletes, splices, a section length or a varint replaced by an interesting value; then it is
  decoded, disassembled and assembled back (the round trip must give the same module), re-encoded and
  decoded back, verified, and each function is run (interpreted) on small inputs made from its
  declarations.
- **text**: the same for the corpus's assembly text, mutated by token (numbers, names), line and
  character edits, and assembled.
- **diff**: random well-typed programs — elementwise, broadcasting, reductions, matmul and linear,
  reshapes, transposes, slices, concat, softmax, layer_norm, shape branches — each one expression over
  float32 or float64 inputs ``x, y [N, M], r [M], c [N, 1], w [M, K], v [K, M]``, against a numpy
  oracle (the same source run with numpy functions for ``ms.ops``; the tolerance grows with how far
  numpy's own result in the inputs' dtype is from float64's). A JIT compile takes 0.1–0.5 s, so the
  cases are batched: a unit is one jitted function of ``DIFF_UNIT`` cases (one output each); every
  case runs interpreted, and the function is then made hot, compiled and run natively, so every case
  is compared interpreter vs numpy and JIT vs numpy (the table's ``native`` column counts the cases
  whose native code ran; a region the JIT left interpreted is counted under ``jit fallbacks``). A
  unit whose interpreted run raises is rerun one case at a time to find the case.
- **threads**: ``THREADS`` threads call one jitted function of the diff generator with changing batch
  sizes while its compiles land; each call is a case, checked against numpy.
- **kills**: a jitted function's keys are made hot one after another and the compile worker
  (``msvm/native/worker.py``) is killed with SIGKILL while it works; each call is a case (right
  answer), and after the kills a last key must still compile and run natively (the worker heals).

``--plant K=crash|hang|raise|oversize|msvm`` replaces case K's work with a planted fault (a ctypes
segfault, a sleep, a KeyError, a large touched allocation, a ShapeError): how the tests check that the
classifier itself works. Run: ``python -m bench fuzz`` (1,000 cases of each kind).
"""

from __future__ import annotations

import argparse
import ctypes
import faulthandler
import json
import linecache
import math
import os
import random
import re
import resource
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import msvm as ms

from .harness import table

ROOT = Path(__file__).resolve().parent.parent  # the workers import ``bench`` from here
KINDS = ("binary", "text", "diff", "threads", "kills")
OUTCOMES = ("success", "msvm error", "other exception", "mismatch", "hang", "crash", "oversize")
WELL_TYPED = frozenset({"diff", "threads", "kills"})  # kinds whose every program is valid
DIFF_UNIT, THREADS, THREAD_CALLS, KILL_SHAPES = 16, 4, 20, 3
UNIT = {"binary": 1, "text": 1, "diff": DIFF_UNIT, "threads": THREADS * THREAD_CALLS,
        "kills": 3 * KILL_SHAPES + 2}  # cases per unit (kills: three calls per shape, two at the end)
TIMEOUT_UNITS = {"binary": 1, "text": 1, "diff": 12, "threads": 18, "kills": 18}  # × --case-timeout
DEFAULT_CASES, DEFAULT_TIMEOUT_S, DEFAULT_RSS_MB = 1000, 10.0, 1024
# the limits the workers run under: far below the RSS bound, so going over it is a limit not applied
LIMITS = {"max_tensor_bytes": 64 << 20, "max_call_bytes": 256 << 20, "max_loop_iterations": 100_000}
ADDRESS_HEADROOM = 4 << 30  # binary/text workers' address-space limit above their size at start
MAX_INPUT_ELEMENTS = 1 << 16  # a declared input bigger than this is not built (the case only loads)
PLANTS = ("crash", "hang", "raise", "oversize", "msvm")
SHOWN_DEFECTS = 20  # defects per kind printed with their traceback (the rest by their repro line)


class Mismatch(Exception):
    """A wrong answer: a round trip that changes the module, or a result off the oracle's."""


def outcome_of(exc: BaseException) -> str:
    """The outcome an exception escaping a case stands for."""
    from msvm.errors import MsvmError

    if isinstance(exc, MemoryError) or (isinstance(exc, MsvmError) and exc.code == "E-LIMIT-MEMORY"):
        return "oversize"
    if isinstance(exc, MsvmError):
        return "msvm error"
    # the entry check reports an argument of the wrong Python type as a TypeError with an msvm code
    if isinstance(exc, TypeError) and str(exc).startswith("[E-"):
        return "msvm error"
    return "mismatch" if isinstance(exc, Mismatch) else "other exception"


def is_defect(kind: str, outcome: str) -> bool:
    return outcome not in ("success", "msvm error") or (kind in WELL_TYPED and outcome == "msvm error")


def repro(kind: str, seed: int, case: int) -> str:
    return f"python -m bench fuzz --kinds {kind} --seed {seed} --case {case}"


# -- the seed corpus ----------------------------------------------------------------------------------
# Functions the frontend compiles into the corpus: realistic programs with every kind of instruction
# (inputs, mutable scalars, constants, branches, loops, phis, attributes, source locations).
def _mlp(x: Any, w1: Any, w2: Any) -> Any:
    h = ms.ops.gelu(ms.ops.linear(x, w1))
    return ms.ops.softmax(ms.ops.linear(h, w2), axis=-1)


def _conv_block(x: Any, w: Any) -> Any:
    y = ms.ops.relu(ms.ops.conv2d(x, w, padding=1) * 0.5 + 1.0)
    return ms.ops.max_pool2d(y, kernel_size=(2, 2), stride=(2, 2))


def _branches_and_loops(x: Any, n: Any) -> Any:
    if x.shape[0] > 2:
        x = x[1:] * 2.0
    else:
        x = x - 1.0
    for i in range(n):
        x = x * 1.5 - i
    return ms.ops.layer_norm(x, normalized_shape=(x.shape[1],)), x.shape[0]


def _layout(x: Any, h: Any) -> Any:
    y = x[:, :h][::-1]
    z = ms.ops.concat([y, y[:1]], axis=0).T
    return z.reshape(-1, 2), ms.ops.where(z > 0.0, z, 0.0).sum(axis=0)


def _attention(q: Any, k: Any, v: Any) -> Any:
    return ms.ops.scaled_dot_product_attention(q, k, v, is_causal=True)


def _reductions(x: Any) -> Any:
    m = ms.ops.max(x, axis=-1, keepdims=True)
    return ms.ops.log_softmax(x - m, axis=-1), ms.ops.argmax(x, axis=0), ms.ops.mean(x, axis=(0, 1))


T = ms.Tensor
# each with its annotations and, for a mutable scalar, the extra argument its first call passes
CORPUS_FUNCTIONS: list[tuple[Callable[..., Any], dict[str, Any], tuple]] = [
    (_mlp, {"x": T["N", 16], "w1": T[32, 16], "w2": T[8, 32]}, ()),
    (_conv_block, {"x": T["N", 3, "H", "W"], "w": T[4, 3, 3, 3]}, ()),
    (_branches_and_loops, {"x": T["N", 4]}, (ms.mutable(2),)),
    (_layout, {"x": T["N", "M"]}, (ms.mutable(2),)),
    (_attention, {"q": T["B", "L", 8], "k": T["B", "L", 8], "v": T["B", "L", 8]}, ()),
    (_reductions, {"x": T["N", "M"]}, ()),
]


def corpus_modules() -> list[tuple[str, Any]]:
    """The seed corpus, in a fixed order (a case names its seed module by index): frontend modules, then
    the assembled texts of ``tests/data/invalid`` where the repository has them."""
    from msvm.bytecode.text import assemble
    from msvm.errors import MsvmError

    out = []
    for fn, params, extra in CORPUS_FUNCTIONS:
        fn.__annotations__.update(params)
        jitted = ms.jit(fn)
        if extra:  # a mutable scalar: compiled by its first call's signature
            args = [np.ones((3, 4), np.float32), *extra]
            jitted(*args)
        out.append((fn.__name__, jitted.bytecode))
    invalid = ROOT / "tests" / "data" / "invalid"
    for path in sorted(invalid.glob("*.msbc.txt")) if invalid.is_dir() else ():
        try:
            out.append((path.name, assemble(path.read_text(), filename=path.name)))
        except MsvmError:
            continue  # a text the assembler itself rejects: in the text corpus only
    return out


def corpus_texts(modules: Sequence[Any]) -> list[str]:
    """The text corpus: the disassembly of every corpus module, then the raw invalid texts."""
    from msvm.bytecode.text import disassemble

    texts = [disassemble(m) for m in modules]
    invalid = ROOT / "tests" / "data" / "invalid"
    texts += [p.read_text() for p in sorted(invalid.glob("*.msbc.txt"))] if invalid.is_dir() else []
    return texts


# -- mutations ------------------------------------------------------------------------------------------
INTERESTING = (0, 1, 2, 7, 127, 128, 255, 256, 1 << 16, (1 << 31) - 1, 1 << 31, 1 << 32, 10**6, 10**12,
               1 << 53, (1 << 63) - 1, 1 << 63, (1 << 64) - 1)
INTERESTING_TEXT = ("0", "-1", "1", "2", "-0.0", "1e308", "nan", "inf", "1000000", "1000000000000",
                    "9223372036854775807", "9223372036854775808", "18446744073709551616", "9" * 30)
NAMES = ("max", "min", "ceildiv", "N", "M", "R0", "R99999", "bb0", "bb99", "func", "module", "float64",
         "int8", "bool", "float16", "cpu", "cuda", "x", "_", "regs", "source", "const")
CHARS = ("\x00", "(", ")", "[", "]", "{", "}", ",", ":", "=", '"', "\\", "é", "\u2028", "\n", ";", "%",
         "@", "-", "*", "?", "R", "0", " ")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def uvar(value: int) -> bytes:
    """LEB128, as the ``.msbc`` format writes unsigned varints."""
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _sections(data: bytes) -> list[int]:
    """Offsets of the section headers (id byte, u32 length) of a well-formed file."""
    pos, found = 8, []
    while pos + 5 <= len(data):
        found.append(pos)
        pos += 5 + int.from_bytes(data[pos + 1 : pos + 5], "little")
    return found


def mutate_bytes(rng: random.Random, data: bytes, corpus: Sequence[bytes]) -> tuple[bytes, str]:
    """One to four random edits of ``data``; returns the bytes and what was done.

    Most edits that change the size stay inside one section's payload and fix its length field, so
    that they get past the framing to the decoder's, verifier's and interpreter's checks."""
    buf, done = bytearray(data), []
    for _ in range(1 if rng.random() < 0.7 else rng.randint(2, 4)):
        n = len(buf)
        if n == 0:
            buf += bytes(rng.randrange(256) for _ in range(8))
            continue
        op = rng.choice(("bitflip", "set", "set", "insert", "delete", "splice", "duplicate", "length",
                         "varint", "varint", "truncate"))
        at, head = rng.randrange(n), None
        heads = [h for h in _sections(bytes(buf)) if 0 < _length(buf, h) <= n - h - 5]
        if op in ("insert", "delete", "splice", "duplicate", "varint") and heads and rng.random() < 0.8:
            head = rng.choice(heads)
            at = head + 5 + rng.randrange(_length(buf, head))
        before = len(buf)
        if op == "bitflip":
            bit = rng.randrange(8)
            buf[at] ^= 1 << bit
            done.append(f"bitflip@{at}.{bit}")
        elif op == "set":
            buf[at] = rng.choice((0, 1, 0x7F, 0x80, 0xFF, rng.randrange(256)))
            done.append(f"set@{at}={buf[at]:#x}")
        elif op == "insert":
            buf[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
            done.append(f"insert@{at}")
        elif op == "delete":
            room = 16 if head is None else min(16, head + 5 + _length(buf, head) - at)
            k = rng.randint(1, room)
            del buf[at : at + k]
            done.append(f"delete@{at}+{k}")
        elif op in ("splice", "duplicate"):
            other = rng.choice(corpus) if op == "splice" else bytes(buf)
            start, k = rng.randrange(len(other)), rng.randint(1, 32)
            piece = other[start : start + k]
            if rng.random() < 0.5 and head is None:
                buf[at : at + len(piece)] = piece
            else:
                buf[at:at] = piece
            done.append(f"{op}@{at}<-{start}+{len(piece)}")
        elif op == "length":
            heads = _sections(bytes(buf))
            if not heads:
                continue
            h = rng.choice(heads)
            old = _length(buf, h)
            new = rng.choice((0, old + 1, max(old - 1, 0), old * 2, 0xFFFFFFFF, rng.randrange(1 << 32)))
            buf[h + 1 : h + 5] = (new & 0xFFFFFFFF).to_bytes(4, "little")
            done.append(f"length@{h}={new & 0xFFFFFFFF}")
        elif op == "varint":
            end = at
            while end < n - 1 and buf[end] & 0x80 and end - at < 9:
                end += 1
            if head is not None:
                end = min(end, head + 4 + _length(buf, head))
            value = rng.choice(INTERESTING)
            buf[at : end + 1] = uvar(value)
            done.append(f"varint@{at}={value}")
        else:
            del buf[at:]
            done.append(f"truncate@{at}")
        if head is not None and len(buf) != before:
            buf[head + 1 : head + 5] = (_length(buf, head) + len(buf) - before).to_bytes(4, "little")
    return bytes(buf), " ".join(done)


def _length(buf: bytes | bytearray, head: int) -> int:
    return int.from_bytes(buf[head + 1 : head + 5], "little")


SHAPES = ("[0]", "[1000000, 1000000, 0]", "[N, N]", "[?]", "[N*1000000, 1000000]", "[]", "[N, 3]",
          "[65536, 65536]", "[1, 1, 1, 1, 1, 1, 1, 1, 1]")
STRINGS = ("max", "min", "ceildiv", "N", "M", "x\x00y", "", "é", "N" * 200, "float32", "cpu", "cuda:0",
           "add", "f", "gt", "a b")
LOCATIONS = (0, 1, 2, (1 << 31), (1 << 63) - 1, 1 << 63, (1 << 64) - 1)
CONSTANTS = ((lambda: np.zeros((10**6, 10**6, 0), np.float32)), (lambda: np.zeros((0,), np.int64)),
             (lambda: np.array(np.nan)), (lambda: np.arange(6, dtype=np.int32).reshape(2, 3)),
             (lambda: np.ones((3,), np.float64)), (lambda: np.array([True, False])))


def _new_operand(rng: random.Random, kind: Any, value: Any) -> Any:
    """A replacement for one operand of kind ``kind``: an edge value of the same Python shape, mostly."""
    from msvm.bytecode.opcodes import Kind
    from msvm.ops.registry import REGISTRY
    from msvm.shapes import ShapeSpec

    if kind is Kind.SHAPE:
        return ShapeSpec(rng.choice(SHAPES))
    if kind in (Kind.DSTS, Kind.SRCS, Kind.PHI):
        items = list(value)
        if items and rng.random() < 0.5:
            del items[rng.randrange(len(items))]
        elif items:
            items.insert(rng.randrange(len(items) + 1), rng.choice(items))
        return tuple(items)
    if kind is Kind.OP:
        return rng.choice(sorted(REGISTRY))
    if kind is Kind.ATTRS:
        attrs = dict(value)
        if attrs and rng.random() < 0.6:
            key = rng.choice(sorted(attrs))
            attrs[key] = rng.choice((rng.choice(INTERESTING), -1, 0, (), (rng.choice(INTERESTING),), 1.5,
                                     "x", None, True))
        elif attrs and rng.random() < 0.5:
            del attrs[rng.choice(sorted(attrs))]
        else:
            attrs[rng.choice(("axis", "shape", "dtype", "k"))] = rng.choice((0, -1, (1 << 63) - 1))
        return attrs
    if isinstance(value, int):
        return rng.choice((*INTERESTING[:12], -1, -(1 << 63), value + 1, value - 1))
    return rng.choice(STRINGS)


def mutate_module(rng: random.Random, module: Any) -> tuple[Any, str]:
    """One to three edits of a decoded module's structure (operands, constants, locations, names,
    instruction order): the file still decodes, so the verifier, interpreter and disassembler get it."""
    from msvm.bytecode.binary import decode_module, encode_module
    from msvm.bytecode.module import Instruction
    from msvm.errors import SourceLoc

    module = decode_module(encode_module(module))  # a copy (a deep copy would copy the opcode table's rows)
    done = []
    for _ in range(rng.choice((1, 1, 2, 3))):
        fn = rng.choice(module.functions)
        block = rng.choice(fn.blocks)
        op = rng.choice(("operand", "operand", "operand", "constant", "location", "name", "regs", "order"))
        if op == "operand" and block.instructions:
            ins = rng.choice(block.instructions)
            i = rng.randrange(len(ins.args))
            new = _new_operand(rng, ins.opcode.operands[i].kind, ins.args[i])
            ins.args = (*ins.args[:i], new, *ins.args[i + 1:])
            done.append(f"{fn.name}:{ins.name}.{ins.opcode.operands[i].name}={ins.args[i]!r}"[:120])
        elif op == "constant":
            value = rng.choice(CONSTANTS)()
            if module.constants and rng.random() < 0.7:
                module.constants[rng.randrange(len(module.constants))] = value
            else:
                module.constants.append(value)
            done.append(f"constant {value.dtype}{list(value.shape)}")
        elif op == "location" and block.instructions:
            ins = rng.choice(block.instructions)
            ins.loc = SourceLoc(rng.choice(("a\x00b", "", "model.py", "é")), rng.choice(LOCATIONS),
                                rng.choice(LOCATIONS))
            done.append(f"loc {ins.loc!r}"[:120])
        elif op == "name":
            fn.name = rng.choice((*STRINGS, module.functions[0].name))
            done.append(f"function name {fn.name!r}"[:60])
        elif op == "regs":
            fn.num_regs = rng.choice((0, 1, fn.num_regs - 1, fn.num_regs + 1, 1 << 20))
            done.append(f"{fn.name} regs={fn.num_regs}")
        elif block.instructions:
            items = block.instructions
            i, j = rng.randrange(len(items)), rng.randrange(len(items))
            how = rng.choice(("swap", "delete", "duplicate"))
            if how == "swap":
                items[i], items[j] = items[j], items[i]
            elif how == "delete":
                del items[i]
            else:
                items.insert(j, Instruction(items[i].opcode, items[i].args, items[i].loc))
            done.append(f"{fn.name}: {how} instruction {i}/{j}")
    return module, " ".join(done)


def mutate_text(rng: random.Random, text: str, corpus: Sequence[str]) -> tuple[str, str]:
    """One to four random edits of assembly text: tokens, lines, characters."""
    from msvm.ops.registry import REGISTRY

    done = []
    for _ in range(1 if rng.random() < 0.6 else rng.randint(2, 4)):
        op = rng.choice(("number", "number", "name", "name", "delete-line", "duplicate-line", "swap-lines",
                         "splice-line", "insert-char", "delete-chars", "truncate"))
        lines = text.splitlines(True) or [""]
        if op in ("number", "name"):
            spans = [m.span() for m in (_NUMBER if op == "number" else _NAME).finditer(text)]
            if not spans:
                continue
            a, b = rng.choice(spans)
            if op == "number":
                new = rng.choice(INTERESTING_TEXT)
            else:
                pool = (NAMES, tuple(sorted(REGISTRY)), tuple(m.group() for m in _NAME.finditer(text)))
                new = rng.choice(rng.choice(pool))
            text = text[:a] + new + text[b:]
            done.append(f"{op}@{a}={new[:20]!r}")
            continue
        i = rng.randrange(len(lines))
        if op == "delete-line":
            del lines[i]
        elif op == "duplicate-line":
            lines.insert(i, lines[i])
        elif op == "swap-lines":
            j = rng.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "splice-line":
            other = rng.choice(corpus).splitlines(True) or [""]
            lines.insert(i, rng.choice(other))
        if op.endswith("line") or op.endswith("lines"):
            text = "".join(lines)
            done.append(f"{op}@{i}")
            continue
        at = rng.randrange(len(text) + 1)
        if op == "insert-char":
            text = text[:at] + rng.choice(CHARS) * rng.choice((1, 1, 2, 100)) + text[at:]
        elif op == "delete-chars":
            text = text[:at] + text[at + rng.randint(1, 8):]
        else:
            text = text[:at]
        done.append(f"{op}@{at}")
    return text, " ".join(done)


# -- exercising a module: round trips, verification, running ----------------------------------------------
def inputs_for(fn: Any, rng: np.random.Generator) -> list[Any] | None:
    """Arguments for a bytecode function made from its SCALAR_ARG and input TENSOR_CREATE declarations
    (symbols bound to 0–4), or None when a declaration cannot be met by a small input."""
    args: list[Any] = [1] * len(fn.params)
    decls = [ins for block in fn.blocks[:1] for ins in block.instructions
             if ins.name == "SCALAR_ARG" or (ins.name == "TENSOR_CREATE" and ins["arg"] >= 0)]
    bindings: dict[str, int] = {}
    for ins in decls:
        names = {ins["symbol"]} if ins.name == "SCALAR_ARG" else set(ins["shape"].free_symbols)
        for name in sorted(names):
            bindings.setdefault(name, int(rng.choice([0, 1, 2, 3, 4], p=[0.1, 0.3, 0.3, 0.2, 0.1])))
    try:
        for ins in decls:
            arg = ins["arg"]
            if not 0 <= arg < len(args):
                return None
            if ins.name == "SCALAR_ARG":
                args[arg] = bindings[ins["symbol"]]
                continue
            shape = tuple(int(rng.integers(1, 4)) if d.is_unknown else d.evaluate(bindings)
                          for d in ins["shape"])
            if any(s < 0 for s in shape) or math.prod(shape) > MAX_INPUT_ELEMENTS:
                return None
            dtype = np.dtype(ins["dtype"])
            if dtype.kind == "b":
                args[arg] = rng.random(shape) < 0.5
            elif dtype.kind in "iu":
                args[arg] = rng.integers(0 if dtype.kind == "u" else -3, 4, shape).astype(dtype)
            else:
                args[arg] = rng.standard_normal(shape).astype(dtype)
    except (ArithmeticError, KeyError, TypeError, ValueError):  # an expression our bindings cannot meet
        return None
    return args


def exercise(module: Any, rng: np.random.Generator, stats: Counter) -> None:
    """Round-trip, verify and run a module that was read; raises what msvm raised, or Mismatch."""
    from msvm.bytecode.binary import decode_module, encode_module
    from msvm.errors import MsvmError
    from msvm.interpreter import Program

    text = ms.disassemble(module)
    try:
        again = ms.assemble(text)
    except MsvmError as exc:
        raise Mismatch(f"the disassembly does not assemble back: {exc}") from exc
    if again != module:
        raise Mismatch("assemble(disassemble(m)) != m")
    data = encode_module(module)
    try:
        decoded = decode_module(data)
    except MsvmError as exc:
        raise Mismatch(f"the encoding does not decode back: {exc}") from exc
    if decoded != module:
        raise Mismatch("decode_module(encode_module(m)) != m")
    stats["round-tripped"] += 1
    program = Program(module, {"jit": False})
    stats["verified"] += 1
    for name in program.function_names:
        args = inputs_for(module.function(name), rng)
        if args is not None:
            program.function(name)(*args)
            stats["ran"] += 1


# -- the differential generator ---------------------------------------------------------------------------
# Templates of an [N, M] value from [N, M] values {a} and {b}; "safe" ones are those the threads and
# kills campaigns use (the JIT compiles them), the others only run in diff.
UNARY = ("ms.ops.relu({a})", "ms.ops.tanh({a})", "ms.ops.sigmoid({a})", "ms.ops.abs({a})", "(-{a})",
         "ms.ops.exp(ms.ops.tanh({a}))", "ms.ops.sqrt(ms.ops.abs({a}) + 1.0)", "({a} * 1.5)", "({a} + 0.25)",
         "(2.0 - {a})", "ms.ops.silu({a})", "ms.ops.gelu({a}, approximate='tanh')")
BINARY = ("({a} + {b})", "({a} - {b})", "({a} * {b})", "({a} / (ms.ops.abs({b}) + 1.0))",
          "ms.ops.maximum({a}, {b})", "ms.ops.minimum({a}, {b})")
REDUCE = ("({a} * ms.ops.sum({b}, axis=-1, keepdims=True))", "({a} + ms.ops.max({b}, axis=0, keepdims=True))",
          "({a} - ms.ops.mean({b}, axis=-1, keepdims=True))", "ms.ops.softmax({a}, axis=-1)",
          "(({a} @ w) @ v)")
OTHER = ("ms.ops.log(ms.ops.abs({a}) + 1.0)", "ms.ops.gelu({a})", "ms.ops.clamp({a}, min=-0.5, max=0.5)",
         "ms.ops.where({a} > 0.0, {a}, {b})", "({a} - {b}.min(axis=-1, keepdims=True))",
         "ms.ops.softmax({a}, axis=0)", "ms.ops.log_softmax({a}, axis=-1)",
         "ms.ops.layer_norm({a}, normalized_shape=(x.shape[1],))",
         "ms.ops.layer_norm({a}, normalized_shape=x.shape[1])", "((v.T @ (w.T @ {a}.T)).T)",
         "(ms.ops.linear({a}, v) @ v)", "{a}.reshape(-1).reshape(x.shape[0], x.shape[1])",
         "{a}.reshape(x.shape[1], x.shape[0]).T", "{a}[::-1]", "{a}[:, ::-1]",
         "ms.ops.concat([{a}[:, 1:], {a}[:, :1]], axis=1)", "({a}.T * r[:, None]).T",
         "({a} if x.shape[0] > 2 else {b})", "({a} if x.shape[1] % 2 == 0 else {b})")
LEAVES = ("x", "y")
BROADCAST = ("r", "c", "1.5")


def expression(rng: random.Random, depth: int, safe: bool) -> str:
    """A random expression of an [N, M] value (its source, for ms.ops and for the numpy oracle alike)."""
    if depth == 0 or rng.random() < 0.15:
        return rng.choice(LEAVES)
    templates = UNARY + BINARY + REDUCE + (() if safe else OTHER)
    template = rng.choice(templates)
    a = expression(rng, depth - 1, safe)
    broadcast = template in BINARY and rng.random() < 0.3  # where an [M], [N, 1] or scalar operand fits
    # a Python number only as an operator's operand: an op of one (ms.ops.abs(1.5)) is a float64 value,
    # as numpy's is, whose dtype would then depend on the path a conditional takes (E-COMPILE-MERGE)
    choices = BROADCAST if "({b})" not in template else tuple(o for o in BROADCAST if not o[0].isdigit())
    b = rng.choice(choices) if broadcast else expression(rng, depth - 1, safe)
    return template.format(a=a, b=b)


def _gelu(a: np.ndarray, approximate: str = "none") -> np.ndarray:
    if approximate == "tanh":
        return 0.5 * a * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (a + 0.044715 * a**3)))
    erf = np.vectorize(math.erf, otypes=[np.float64])(a / math.sqrt(2.0)).astype(a.dtype)
    return 0.5 * a * (1.0 + erf)


def _softmax(a: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(a - a.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _layer_norm(a: np.ndarray, normalized_shape: Any, eps: float = 1e-5) -> np.ndarray:
    axes = tuple(range(-len(normalized_shape) if isinstance(normalized_shape, tuple) else -1, 0))
    mean = a.mean(axis=axes, keepdims=True)
    return (a - mean) / np.sqrt(((a - mean) ** 2).mean(axis=axes, keepdims=True) + eps)


class _Oracle:
    """What the generated source calls ``ms`` when numpy runs it: ``ms.ops.*`` written with numpy."""

    class Tensor:
        def __class_getitem__(cls, item: Any) -> None:
            return None

    class ops:
        relu = staticmethod(lambda a: np.maximum(a, 0))
        tanh, abs, exp, sqrt, log = (staticmethod(f) for f in (np.tanh, np.abs, np.exp, np.sqrt, np.log))
        sigmoid = staticmethod(lambda a: 1.0 / (1.0 + np.exp(-a)))
        silu = staticmethod(lambda a: a / (1.0 + np.exp(-a)))
        gelu = staticmethod(_gelu)
        clamp = staticmethod(lambda a, min, max: np.clip(a, min, max))
        maximum, minimum, where = (staticmethod(f) for f in (np.maximum, np.minimum, np.where))
        sum = staticmethod(lambda a, axis, keepdims: a.sum(axis=axis, keepdims=keepdims))
        mean = staticmethod(lambda a, axis, keepdims: a.mean(axis=axis, keepdims=keepdims))
        max = staticmethod(lambda a, axis, keepdims: a.max(axis=axis, keepdims=keepdims))
        softmax = staticmethod(_softmax)
        log_softmax = staticmethod(lambda a, axis=-1: np.log(_softmax(a, axis)))
        layer_norm = staticmethod(_layer_norm)
        linear = staticmethod(lambda a, weight: a @ weight.T)
        concat = staticmethod(lambda items, axis: np.concatenate(items, axis=axis))


@dataclass
class FuzzProgram:
    """A generated function: its name and source, the jitted function and the oracle's twin."""

    name: str
    source: str
    jitted: Any
    oracle: Callable[..., Any]
    dtype: str


def build_program(tag: str, expressions: Sequence[str], dtype: str, hot_threshold: int = 1) -> FuzzProgram:
    """Compile ``expressions`` (one output each) as one jitted function and as its numpy twin."""
    name = "fuzz_" + re.sub(r"\W", "_", tag)
    d = repr(dtype)
    params = (f"x: ms.Tensor['N', 'M', {d}], y: ms.Tensor['N', 'M', {d}], r: ms.Tensor['M', {d}], "
              f"c: ms.Tensor['N', 1, {d}], w: ms.Tensor['M', 'K', {d}], v: ms.Tensor['K', 'M', {d}]")
    body = "".join(f"    o{i} = {e}\n" for i, e in enumerate(expressions))
    outs = ", ".join(f"o{i}" for i in range(len(expressions)))
    source = f"def {name}({params}):\n{body}    return ({outs},)\n"
    filename = f"<{tag}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    code = compile(source, filename, "exec")
    real: dict[str, Any] = {"ms": ms}
    twin: dict[str, Any] = {"ms": _Oracle}
    exec(code, real)  # our own generated source, registered in linecache so the frontend can read it
    exec(code, twin)
    jitted = ms.jit(hot_threshold=hot_threshold)(real[name])
    return FuzzProgram(name, source, jitted, twin[name], dtype)


def program_inputs(rng: np.random.Generator, dtype: str, n: int, m: int, k: int) -> list[np.ndarray]:
    shapes = ((n, m), (n, m), (m,), (n, 1), (m, k), (k, m))
    scale = (1, 1, 1, 1, 1 / math.sqrt(max(m, 1)), 1 / math.sqrt(max(k, 1)))  # matmuls keep magnitudes
    return [(rng.uniform(-1, 1, s) * f).astype(dtype) for s, f in zip(shapes, scale)]


def check_outputs(prog: FuzzProgram, args: Sequence[np.ndarray], got: Any, who: str) -> list[str | None]:
    """Per output, None or why it is off numpy's (the same dtype; values within a tolerance that grows
    with how far numpy's own result in the inputs' dtype is from float64's)."""
    want = prog.oracle(*args)
    if not isinstance(got, tuple):  # an executable returns one output bare (the jitted function a tuple)
        got = (got,)
    ref = prog.oracle(*[a.astype(np.float64) for a in args])
    rtol = 1e-3 if prog.dtype == "float32" else 1e-9
    out: list[str | None] = []
    for i, (g, w, r) in enumerate(zip(got, want, ref)):
        g = np.asarray(g)
        if g.shape != w.shape or g.dtype != w.dtype:
            out.append(f"{who} output o{i}: {g.dtype}{list(g.shape)}, numpy {w.dtype}{list(w.shape)}")
            continue
        scale = max(1.0, float(np.max(np.abs(r), initial=0.0)))
        budget = rtol * scale + rtol * np.abs(w) + 4 * np.abs(w.astype(np.float64) - r)
        err = np.abs(g.astype(np.float64) - w.astype(np.float64))
        bad = ~(err <= budget) & ~(np.isnan(g) & np.isnan(w))
        out.append(f"{who} output o{i}: max error {float(np.max(err)):.3g} "
                   f"(budget {float(np.min(budget)):.3g})"
                   if bad.any() else None)
    return out


# -- the targets: one per kind, run inside a worker ------------------------------------------------------
Emit = Callable[[int, str, str], None]


class Target:
    """Runs one unit of a kind's cases and emits (case, outcome, detail) for each."""

    kind = ""
    rss_bound = DEFAULT_RSS_MB << 20  # the worker's: a planted oversize allocates past it

    def __init__(self, seed: int, stats: Counter) -> None:
        self.seed, self.stats = seed, stats

    def cases(self, unit: int) -> range:
        return range(unit * UNIT[self.kind], (unit + 1) * UNIT[self.kind])

    def rng(self, index: int, what: str = "case") -> random.Random:
        return random.Random(f"{self.kind}:{self.seed}:{what}:{index}")

    def run_unit(self, unit: int, emit: Emit, plant: dict[int, str]) -> None:
        raise NotImplementedError


def classify(work: Callable[[], None]) -> tuple[str, str]:
    """Run one case's work: its outcome and, unless it succeeded, what happened."""
    try:
        work()
    except Exception as exc:  # the classification is the point: nothing escapes a case unrecorded
        outcome = outcome_of(exc)
        detail = str(exc).splitlines()[0] if outcome == "msvm error" else traceback.format_exc()
        return outcome, detail
    return "success", ""


def planted(fault: str, rss_bound: int) -> None:
    """The planted faults the tests check the classifier with."""
    from msvm.errors import ShapeError

    if fault == "crash":
        ctypes.string_at(0)  # a segfault
    elif fault == "hang":
        time.sleep(3600)
    elif fault == "raise":
        raise KeyError("planted")
    elif fault == "oversize":
        block = np.ones(rss_bound // 8 + (64 << 17))  # touched: resident
        block.sum()
    else:
        raise ShapeError("planted")


class MutationTarget(Target):
    """binary and text: a mutated seed read, round-tripped, verified and run."""

    def __init__(self, seed: int, stats: Counter) -> None:
        super().__init__(seed, stats)
        from msvm.bytecode.binary import encode_module
        from msvm.errors import MsvmError

        self.modules = [m for _, m in corpus_modules()]
        if self.kind == "binary":
            self.corpus: list[Any] = []
            for module in self.modules:
                try:
                    self.corpus.append(encode_module(module))
                except MsvmError:  # an invalid text's module the binary format cannot hold (a bad dtype)
                    continue
        else:
            self.corpus = corpus_texts(self.modules)
        # half the cases start from a module the frontend compiled (valid, so they get as far as running)
        self.primary = len(CORPUS_FUNCTIONS)

    def case_input(self, case: int) -> tuple[Any, str]:
        """Case ``case``'s input: half the cases edit a frontend module's structure (then encode or
        disassemble it), the others the bytes or text of any seed."""
        from msvm.bytecode.binary import encode_module

        rng = self.rng(case)
        if rng.random() < 0.5:
            index = rng.randrange(self.primary)
            module, how = mutate_module(rng, self.modules[index])
            try:
                data = encode_module(module) if self.kind == "binary" else ms.disassemble(module)
                return data, f"seed #{index}: {how}"
            except Exception:  # the encoder refuses what the format cannot hold: edit the seed's bytes
                pass  # (and a disassembler failure is the binary kind's to report)
        index = rng.randrange(self.primary if rng.random() < 0.5 else len(self.corpus))
        mutate = mutate_bytes if self.kind == "binary" else mutate_text
        data, how = mutate(rng, self.corpus[index], self.corpus)
        return data, f"seed #{index}: {how}"

    def run_unit(self, unit: int, emit: Emit, plant: dict[int, str]) -> None:
        from msvm.bytecode.binary import decode_module
        from msvm.bytecode.text import assemble

        for case in self.cases(unit):
            data, how = self.case_input(case)
            rng = np.random.default_rng([self.seed, case])

            def work(data: Any = data, case: int = case, rng: np.random.Generator = rng) -> None:
                if case in plant:
                    planted(plant[case], self.rss_bound)
                module = decode_module(data) if self.kind == "binary" else assemble(data, f"<case {case}>")
                self.stats["read"] += 1
                exercise(module, rng, self.stats)

            outcome, detail = classify(work)
            emit(case, outcome, f"{how}\n{detail}" if outcome != "success" else "")


class BinaryTarget(MutationTarget):
    kind = "binary"


class TextTarget(MutationTarget):
    kind = "text"


class DiffTarget(Target):
    """diff: DIFF_UNIT generated expressions as one jitted function; interpreter and native vs numpy."""

    kind = "diff"
    safe = False
    jit_every = 1  # ``--jit-every``: the units whose function is also compiled and run natively

    def unit_setup(self, unit: int) -> tuple[str, tuple[int, int, int], list[int], list[str]]:
        """A unit's dtype, (N, M, K), cases and their expressions (each drawn from its case's own seed)."""
        rng = self.rng(unit, "unit")
        dtype = "float32" if rng.random() < 0.75 else "float64"
        dims = (rng.randint(1, 5), rng.randint(1, 7), rng.randint(1, 5))
        cases = list(self.cases(unit))
        return dtype, dims, cases, [expression(self.rng(c), rng.randint(1, 3), self.safe) for c in cases]

    def run_native(self, prog: FuzzProgram, args: Sequence[np.ndarray], n: int) -> list[str | None]:
        """Make the function hot, compile it, run it natively: per output None or what is wrong."""
        try:
            prog.jitted(*args)  # hot at once: the compile is queued
            ms.vm.wait_for_compiles(60)
            before = sum(e["hits"] for e in ms.vm.jit_info() if e["function"] == prog.name)
            got = prog.jitted(*args)
            entries = [e for e in ms.vm.jit_info() if e["function"] == prog.name]
            for e in entries:
                if e["status"] == "fallback":
                    self.stats["jit fallbacks"] += 1
                    self.stats[f"fallback: {e['reason'][:100]}"] += 1
            if sum(e["hits"] for e in entries) <= before:
                return [None] * n  # no native code ran (a fallback, or no compilable region)
            self.stats["native"] += n
            return check_outputs(prog, args, got, "JIT")
        except Exception as exc:
            return [f"JIT run raised {type(exc).__name__}: {exc}\n{traceback.format_exc()}"] * n
        finally:
            ms.vm.reset()

    def run_unit(self, unit: int, emit: Emit, plant: dict[int, str]) -> None:
        from msvm.interpreter import Program

        dtype, dims, cases, exprs = self.unit_setup(unit)
        args = program_inputs(np.random.default_rng([self.seed, unit]), dtype, *dims)
        for case in cases:
            if case in plant:
                outcome, detail = classify(lambda case=case: planted(plant[case], self.rss_bound))
                emit(case, outcome, detail)
        exprs = [e for c, e in zip(cases, exprs) if c not in plant]
        cases = [c for c in cases if c not in plant]
        if not cases:
            return
        state: dict[str, Any] = {}

        def interpret() -> None:
            prog = state["prog"] = build_program(f"fuzz-diff-{self.seed}-{unit}", exprs, dtype)
            state["interp"] = Program(prog.jitted.bytecode, {"jit": False}).function(prog.name)(*args)

        outcome, detail = classify(interpret)
        if outcome != "success":  # find the case: each alone, interpreted
            singles = []
            for case, e in zip(cases, exprs):
                def alone(case: int = case, e: str = e) -> None:
                    prog = build_program(f"fuzz-diff-{self.seed}-{unit}-case{case}", [e], dtype)
                    got = Program(prog.jitted.bytecode, {"jit": False}).function(prog.name)(*args)
                    problems = [p for p in check_outputs(prog, args, got, "interpreter") if p]
                    if problems:
                        raise Mismatch(f"{e}\n{problems[0]}")

                singles.append(classify(alone))
            blamed = any(o != "success" for o, _ in singles)
            for case, e, (o, d) in zip(cases, exprs, singles):
                if blamed:
                    emit(case, o, f"{e}\n{d}" if o != "success" else "")
                else:  # only the unit as a whole fails
                    emit(case, outcome, f"the unit's function fails as a whole:\n{detail}")
            return
        prog = state["prog"]
        self.stats["interpreted"] += len(cases)
        interp = check_outputs(prog, args, state["interp"], "interpreter")
        native = [None] * len(cases)
        if unit % self.jit_every == 0:
            native = self.run_native(prog, args, len(cases))
        for case, e, a, b in zip(cases, exprs, interp, native):
            problem = a or b
            outcome = "success" if problem is None else "mismatch"
            if problem and problem.startswith("JIT run raised"):
                outcome = "other exception"
            emit(case, outcome, f"{e}\n{problem}\nsource:\n{prog.source}" if problem else "")


class ThreadsTarget(DiffTarget):
    """threads: THREADS threads call one jitted function with changing N while its compiles land."""

    kind = "threads"
    safe = True

    def run_unit(self, unit: int, emit: Emit, plant: dict[int, str]) -> None:

        rng = self.rng(unit, "unit")
        dtype = "float32" if rng.random() < 0.75 else "float64"
        m, k = rng.randint(1, 7), rng.randint(1, 5)
        sizes = [rng.randint(1, 9) for _ in range(3)]
        exprs = [expression(self.rng(unit * 4 + i, "expr"), rng.randint(1, 3), True) for i in range(4)]
        prog = build_program(f"fuzz-threads-{self.seed}-{unit}", exprs, dtype, hot_threshold=2)
        results: dict[int, tuple[str, str]] = {}
        base = unit * UNIT[self.kind]

        def work(t: int) -> None:
            trng = np.random.default_rng([self.seed, unit, t])
            for i in range(THREAD_CALLS):
                if i == THREAD_CALLS // 2:  # the first half's compiles land: the second half runs native
                    ms.vm.wait_for_compiles(60)
                case = base + t * THREAD_CALLS + i
                n = sizes[int(trng.integers(len(sizes)))]
                args = program_inputs(trng, dtype, n, m, k)

                def call(case: int = case, n: int = n, args: list[np.ndarray] = args) -> None:
                    if case in plant:
                        planted(plant[case], self.rss_bound)
                    got = prog.jitted(*args)
                    problems = [p for p in check_outputs(prog, args, got, "threaded call") if p]
                    if problems:
                        raise Mismatch(f"N={n}: {problems[0]}")

                results[case] = classify(call)

        threads = [threading.Thread(target=work, args=(t,), name=f"fuzz-{t}") for t in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        ms.vm.wait_for_compiles(60)
        self.stats["native calls"] += sum(e["hits"] for e in ms.vm.jit_info() if e["function"] == prog.name)
        ms.vm.reset()
        for case in sorted(results):
            outcome, detail = results[case]
            emit(case, outcome, f"{detail}\nsource:\n{prog.source}" if outcome != "success" else "")


class KillsTarget(DiffTarget):
    """kills: each of KILL_SHAPES keys gets hot and the compile worker is killed while it compiles it;
    every call must be right, and a last key must still compile (the worker heals)."""

    kind = "kills"
    safe = True

    def run_unit(self, unit: int, emit: Emit, plant: dict[int, str]) -> None:
        from msvm.msjit.compiler import COMPILER

        rng = self.rng(unit, "unit")
        dtype = "float32"
        m, k = rng.randint(1, 7), rng.randint(1, 5)
        exprs = [expression(self.rng(unit * 4 + i, "expr"), rng.randint(1, 3), True) for i in range(4)]
        prog = build_program(f"fuzz-kills-{self.seed}-{unit}", exprs, dtype, hot_threshold=1)
        nrng = np.random.default_rng([self.seed, unit])
        case = unit * UNIT[self.kind]

        def call(n: int, expect_native: bool = False) -> None:
            nonlocal case
            args = program_inputs(nrng, dtype, n, m, k)

            def run(case: int = case) -> None:
                if case in plant:
                    planted(plant[case], self.rss_bound)
                before = sum(e["hits"] for e in ms.vm.jit_info() if e["function"] == prog.name)
                problems = [p for p in check_outputs(prog, args, prog.jitted(*args), f"N={n}") if p]
                if problems:
                    raise Mismatch(problems[0])
                if expect_native:
                    entries = [e for e in ms.vm.jit_info() if e["function"] == prog.name]
                    if sum(e["hits"] for e in entries) <= before:
                        raise Mismatch("after the kills a new key did not run native code: "
                                       + "; ".join(f"{e['status']}: {e['reason']}" for e in entries))

            outcome, detail = classify(run)
            emit(case, outcome, f"{detail}\nsource:\n{prog.source}" if outcome != "success" else "")
            case += 1

        for n in range(1, KILL_SHAPES + 1):
            call(n)  # hot: its compile is queued
            time.sleep(rng.uniform(0.0, 0.05))
            worker = COMPILER._worker  # the JIT's compile worker (it may not have started yet)
            deadline = time.monotonic() + 2.0
            while (worker is None or worker.pid is None) and time.monotonic() < deadline:
                time.sleep(0.005)
                worker = COMPILER._worker
            if worker is not None and worker.pid is not None:
                try:
                    os.kill(worker.pid, signal.SIGKILL)
                    self.stats["kills"] += 1
                except ProcessLookupError:
                    pass
            call(n)
            call(n)
        ms.vm.wait_for_compiles(60)
        last = KILL_SHAPES + 1
        call(last)
        ms.vm.wait_for_compiles(60)
        call(last, expect_native=True)
        ms.vm.reset()


TARGETS: dict[str, type[Target]] = {"binary": BinaryTarget, "text": TextTarget, "diff": DiffTarget,
                                    "threads": ThreadsTarget, "kills": KillsTarget}


# -- the worker process -------------------------------------------------------------------------------------
def _status_bytes(field: str) -> int:
    """A ``/proc/self/status`` size (``VmSize``, ``VmHWM``) in bytes; 0 where there is none."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) << 10
    return 0


def worker_main(kind: str, seed: int, rss_bound: int, plant: dict[int, str], jit_every: int = 1) -> int:
    """Read unit numbers on stdin; for each, report ``start``, every case, ``end`` as JSON lines."""
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # anything msvm prints goes to stderr: stdout is the protocol's
    faulthandler.enable()
    ms.set_context(**LIMITS)
    if kind in ("binary", "text"):
        ms.set_context(jit_enabled=False)
        # a stop for allocations far past the bound (a 70 GiB zeros would be lazy, its fill is not)
        limit = _status_bytes("VmSize") + ADDRESS_HEADROOM
        hard = resource.getrlimit(resource.RLIMIT_AS)[1]
        soft = limit if hard == resource.RLIM_INFINITY else min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    stats: Counter = Counter()
    target = TARGETS[kind](seed, stats)
    target.rss_bound = rss_bound
    if isinstance(target, DiffTarget):
        target.jit_every = max(1, jit_every)

    def send(message: dict[str, Any]) -> None:
        proto.write(json.dumps(message) + "\n")

    for line in sys.stdin:
        unit = int(line)
        send({"start": unit})
        over = False

        def emit(case: int, outcome: str, detail: str) -> None:
            nonlocal over
            # VmHWM, not ru_maxrss: Linux carries ru_maxrss over fork and exec, so a worker started
            # by a big parent (a whole test session) would read the parent's peak as its own
            peak = _status_bytes("VmHWM")
            if peak > rss_bound and not over:  # the peak only grows: this worker ends after the unit
                over = True
                why = f"peak RSS {peak >> 20} MiB over {rss_bound >> 20} MiB"
                outcome, detail = "oversize", f"{why}\n{detail}"
            send({"case": case, "outcome": outcome, "detail": detail})

        target.run_unit(unit, emit, plant)
        send({"end": unit, "stats": dict(stats)})
        stats.clear()
        if over:
            return 0
    return 0


# -- the parent: a pool of workers ---------------------------------------------------------------------
@dataclass
class Result:
    kind: str
    case: int
    outcome: str
    detail: str


@dataclass
class KindReport:
    kind: str
    counts: Counter = field(default_factory=Counter)
    stats: Counter = field(default_factory=Counter)
    defects: list[Result] = field(default_factory=list)
    results: list[Result] = field(default_factory=list)  # every case, only when asked (--case, tests)
    seconds: float = 0.0

    @property
    def cases(self) -> int:
        return sum(self.counts.values())


@dataclass
class _Worker:
    proc: subprocess.Popen
    log: Any
    buffer: bytes = b""
    unit: int | None = None
    started: float = 0.0
    reported: set[int] = field(default_factory=set)
    heard: bool = False  # it sent something: a death before that is the campaign's failure, not a case's
    killed_for: tuple[str, str] | None = None  # (outcome, why) when the parent killed it


class Campaign:
    """Runs the units of one kind over ``jobs`` workers, replacing any that dies or is killed."""

    def __init__(self, kind: str, seed: int, units: Sequence[int], jobs: int, timeout_s: float,
                 rss_bound: int, plant: dict[int, str], keep_all: bool, jit_every: int = 1) -> None:
        self.kind, self.seed, self.jobs, self.jit_every = kind, seed, max(1, jobs), jit_every
        self.pending = list(units)
        self.timeout_s, self.rss_bound, self.plant = timeout_s, rss_bound, plant
        self.report = KindReport(kind)
        self.keep_all = keep_all
        self.selector = selectors.DefaultSelector()

    def _spawn(self) -> _Worker:
        env = dict(os.environ, MSVM_BACKGROUND_CALIBRATION="0", MSVM_JIT_CACHE="0")
        plant = ",".join(f"{k}={v}" for k, v in sorted(self.plant.items()))
        cmd = [sys.executable, "-m", "bench.fuzz", "--worker", self.kind, "--seed", str(self.seed),
               "--rss-mb", str(self.rss_bound >> 20), "--jit-every", str(self.jit_every)]
        cmd += ["--plant", plant] if plant else []
        log = tempfile.TemporaryFile()  # noqa: SIM115 - the worker's stderr, closed in _died or run
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=log)
        os.set_blocking(proc.stdout.fileno(), False)
        worker = _Worker(proc, log)
        self.selector.register(proc.stdout, selectors.EVENT_READ, worker)
        return worker

    def _record(self, case: int, outcome: str, detail: str) -> None:
        result = Result(self.kind, case, outcome, detail)
        self.report.counts[outcome] += 1
        if is_defect(self.kind, outcome):
            self.report.defects.append(result)
            print(f"[fuzz] {self.kind} case {case}: {outcome} ({repro(self.kind, self.seed, case)})",
                  file=sys.stderr, flush=True)  # as found: a long campaign's finds are not held back
        if self.keep_all:
            self.report.results.append(result)

    def _assign(self, worker: _Worker) -> None:
        if self.pending and worker.unit is None:
            unit = self.pending.pop(0)
            worker.unit, worker.started, worker.reported = unit, time.monotonic(), set()
            worker.proc.stdin.write(f"{unit}\n".encode())
            worker.proc.stdin.flush()

    def _handle(self, worker: _Worker, message: dict[str, Any]) -> None:
        worker.heard = True
        if "start" in message:
            worker.started = time.monotonic()
        elif "case" in message:
            worker.reported.add(message["case"])
            self._record(message["case"], message["outcome"], message["detail"])
        elif "end" in message:
            self.report.stats.update(message["stats"])
            worker.unit = None

    def _died(self, worker: _Worker) -> None:
        """The worker's output ended: charge its unit's unreported cases, and forget it."""
        self.selector.unregister(worker.proc.stdout)
        try:
            code = worker.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            worker.proc.kill()
            code = worker.proc.wait()
        worker.log.seek(0)
        tail = worker.log.read().decode("utf-8", "replace")[-3000:]
        if not worker.heard and worker.killed_for is None:
            raise RuntimeError(f"a {self.kind} worker failed to start (exit status {code}):\n{tail}")
        if worker.unit is not None:
            if worker.killed_for is not None:
                outcome, why = worker.killed_for
            else:
                name = signal.Signals(-code).name if code < 0 else f"exit status {code}"
                outcome, why = "crash", f"the worker died ({name})"
            cases = [c for c in range(worker.unit * UNIT[self.kind], (worker.unit + 1) * UNIT[self.kind])
                     if c not in worker.reported]
            for case in cases:
                self._record(case, outcome, f"{why} in unit {worker.unit}\n{tail}")
        worker.log.close()
        worker.proc.stdin.close()
        worker.proc.stdout.close()

    def _watch(self, worker: _Worker) -> None:
        """Kill a worker over its unit's time bound or the RSS bound; ``_died`` then charges the unit."""
        if worker.unit is None or worker.killed_for is not None:
            return
        elapsed = time.monotonic() - worker.started
        if elapsed > self.timeout_s:
            worker.killed_for = ("hang", f"over the {self.timeout_s:g} s bound")
        else:
            try:
                status = Path(f"/proc/{worker.proc.pid}/status").read_text()
                rss = int(status.split("VmRSS:")[1].split()[0]) << 10
            except (OSError, IndexError, ValueError):
                return
            if rss > self.rss_bound:
                worker.killed_for = ("oversize", f"RSS {rss >> 20} MiB over {self.rss_bound >> 20} MiB")
        if worker.killed_for is not None:
            worker.proc.kill()

    def run(self) -> KindReport:
        t0 = time.monotonic()
        workers: list[_Worker] = []
        try:
            while self.pending or any(w.unit is not None for w in workers):
                busy = sum(w.unit is not None for w in workers)
                while len(workers) < min(self.jobs, len(self.pending) + busy):
                    workers.append(self._spawn())
                for w in workers:
                    self._assign(w)
                for key, _ in self.selector.select(timeout=0.05):
                    worker = key.data
                    try:
                        chunk = os.read(key.fileobj.fileno(), 1 << 16)
                    except BlockingIOError:
                        continue
                    if not chunk:
                        self._died(worker)
                        workers.remove(worker)
                        continue
                    worker.buffer += chunk
                    *lines, worker.buffer = worker.buffer.split(b"\n")
                    for line in lines:
                        self._handle(worker, json.loads(line))
                for w in workers:
                    self._watch(w)
        finally:
            for w in workers:
                w.proc.stdin.close()  # an idle worker's loop ends at EOF
            for w in workers:
                try:
                    w.proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    w.proc.kill()
                    w.proc.wait()
                w.proc.stdout.close()
                w.log.close()
        self.report.seconds = time.monotonic() - t0
        return self.report


def run_campaign(kinds: Sequence[str], cases: int, seed: int, *, jobs: int = 2, case: int | None = None,
                 timeout_s: float = DEFAULT_TIMEOUT_S, rss_mb: int = DEFAULT_RSS_MB,
                 plant: dict[int, str] | None = None, keep_all: bool = False,
                 jit_every: int = 1) -> dict[str, KindReport]:
    """Run ``cases`` cases of each kind (rounded up to whole units), or only the unit holding ``case``."""
    reports = {}
    for kind in kinds:
        size = UNIT[kind]
        units = [case // size] if case is not None else list(range(-(-cases // size)))
        campaign = Campaign(kind, seed, units, jobs, timeout_s * TIMEOUT_UNITS[kind], rss_mb << 20,
                            plant or {}, keep_all or case is not None, jit_every)
        reports[kind] = campaign.run()
    return reports


def print_report(reports: dict[str, KindReport], seed: int, command: str) -> int:
    """Print the defects, their repro lines and the outcome table; the number of defects."""
    defects = 0
    for kind, report in reports.items():
        for i, d in enumerate(report.defects):
            defects += 1
            head = d.detail.strip().splitlines()[0] if d.detail.strip() else ""
            print(f"\nDEFECT {kind} case {d.case}: {d.outcome}: {head[:200]}")
            if i < SHOWN_DEFECTS:
                print("\n".join("    " + line for line in d.detail.strip().splitlines()[-40:]))
            print(f"  repro: {repro(kind, seed, d.case)}")
    rows = []
    for kind, report in reports.items():
        notes = ", ".join(f"{k} {v}" for k, v in sorted(report.stats.items())
                          if not k.startswith("fallback:"))
        rows.append([kind, report.cases, *(report.counts.get(o, 0) for o in OUTCOMES),
                     sum(1 for _ in report.defects), f"{report.seconds:.1f}", notes])
    header = ["kind", "cases", *OUTCOMES, "defects", "s", "notes"]
    print(table(f"Reliability campaign: {command}", header, rows))
    reasons = Counter()
    for report in reports.values():
        reasons.update({k: v for k, v in report.stats.items() if k.startswith("fallback:")})
    for reason, n in reasons.most_common(10):
        print(f"  jit {reason} (×{n})")
    return defects


def _plants(spec: str) -> dict[int, str]:
    out = {}
    for item in filter(None, spec.split(",")):
        case, _, fault = item.partition("=")
        if fault not in PLANTS:
            raise argparse.ArgumentTypeError(f"unknown planted fault {fault!r}; faults: {', '.join(PLANTS)}")
        out[int(case)] = fault
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench fuzz", description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=DEFAULT_CASES, help="cases of each kind")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kinds", default=",".join(KINDS), help=f"comma-separated, of {','.join(KINDS)}")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    parser.add_argument("--case", type=int, default=None, help="rerun only the unit holding this case")
    parser.add_argument("--case-timeout", type=float, default=DEFAULT_TIMEOUT_S,
                        help="seconds a binary/text case may take (other kinds' units: a multiple)")
    parser.add_argument("--rss-mb", type=int, default=DEFAULT_RSS_MB, help="a worker's resident memory bound")
    parser.add_argument("--plant", type=_plants, default={}, help="K=crash|hang|raise|oversize|msvm,…")
    parser.add_argument("--jit-every", type=int, default=1,
                        help="diff: compile and run natively every K-th unit (all run interpreted)")
    parser.add_argument("--worker", choices=KINDS, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(list(argv or []))
    if args.worker is not None:
        return worker_main(args.worker, args.seed, args.rss_mb << 20, args.plant, args.jit_every)
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown or (args.case is not None and len(kinds) != 1):
        parser.error(f"--kinds takes {', '.join(KINDS)}" if unknown else "--case needs exactly one kind")
    command = "python -m bench fuzz " + " ".join(argv or [])
    reports = run_campaign(kinds, args.cases, args.seed, jobs=args.jobs, case=args.case,
                           timeout_s=args.case_timeout, rss_mb=args.rss_mb, plant=args.plant,
                           jit_every=args.jit_every)
    if args.case is not None:
        for r in reports[kinds[0]].results:
            print(f"case {r.case}: {r.outcome}" + (f"\n{r.detail.rstrip()}" if r.detail.strip() else ""))
    return 1 if print_report(reports, args.seed, command.strip()) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
