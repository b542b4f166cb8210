"""Loading hostile ``.msbc`` bytes: only BytecodeFormatError (or, if it decodes, a VerifyError).

Truncations at every offset and seeded random flips / insertions / deletions of a realistic
module must never raise another exception type, hang, or allocate more than the file justifies.
Hand-crafted files check each documented rejection and that it names the offset and section.
"""

from __future__ import annotations

import math
import random
import signal
import struct
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from msvm.bytecode.binary import FORMAT_VERSION, MAGIC, decode_module, encode_module
from msvm.bytecode.builder import ModuleBuilder
from msvm.bytecode.module import Module, RegRef
from msvm.errors import BytecodeFormatError, SourceLoc, VerifyError

try:
    from .strategies import modules
except ImportError:  # tests/ is not a package: pytest puts this directory on sys.path
    from strategies import modules

try:
    from msvm.verifier import verify_module
except ImportError:  # the verifier is written concurrently; decoding is still fully checked
    verify_module = None

CASE_BUDGET_S = 2.0  # generous: a case normally takes well under a millisecond
PEAK_LIMIT = 4 << 20  # bytes traced while decoding one (small) hostile file


def sample_module() -> Module:
    """A small realistic program: inputs, constants, shape scalars, a branch, a phi, attrs, locs."""
    mb = ModuleBuilder("mlp")
    f = mb.function("forward", ("x", "limit"))
    f.loc = SourceLoc("model.py", 3, 4)
    x = f.tensor_input(0, "[B, 8]", "float32")
    limit = f.scalar_arg(1, "L")
    w = f.load_const(np.linspace(-1.0, 1.0, 32, dtype=np.float32).reshape(8, 4))
    b = f.load_const(np.array([0.5, -0.0, 1.0, -2.0], dtype=np.float32))
    f.loc = SourceLoc("model.py", 4, 8)
    h = f.call("matmul", (x, w))
    h = f.call("add", (h, b))
    rows = f.shape_of(x, 0)
    cond = f.cmp("gt", rows, limit)
    head = f.call("slice", (h,), {"axes": (0,), "starts": (0,), "stops": (RegRef(limit),), "steps": (1,)})
    then, other, join = f.new_block(), f.new_block(), f.new_block()
    f.br(cond, then, other)
    f.set_block(then)
    f.loc = SourceLoc("model.py", 6, 12)
    act = f.call("gelu", (h,), {"approximate": "tanh"})
    f.jmp(join)
    f.set_block(other)
    f.loc = None
    clipped = f.call("clamp", (h,), {"min": -0.5, "max": 6.0})
    f.jmp(join)
    f.set_block(join)
    out = f.tensor_phi(((then, act), (other, clipped)))
    total = f.scalar_op("add", rows, limit)
    wide = f.call("cast", (out,), {"dtype": "float64"})
    summed = f.call("sum", (wide,), {"axis": (0,), "keepdims": True})
    filled = f.call("full", (), {"shape": (RegRef(total), 4), "fill_value": 0.25, "dtype": "float64"})
    f.free(wide)
    f.ret(summed, filled, head)
    g = mb.function("helper", ("n",))
    n = g.scalar_arg(0, "N")
    z = g.tensor_alloc((n, n), "int64")
    g.ret(z)
    f.function.names.update({h: "h", out: "out", total: "total"})  # the frontend's register names
    mb.constant(np.array([[True, False]]))
    mb.constant(np.int32(7))
    return mb.build()


SAMPLE = encode_module(sample_module())


class CaseTimeout(Exception):
    pass


@contextmanager
def case_timer() -> Iterator[Callable[[str], object]]:
    """Per-case wall-clock budget via ITIMER_REAL, restoring any timer pytest-timeout had set."""
    usable = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    current = {"label": ""}

    def on_alarm(signum, frame):
        raise CaseTimeout(f"case {current['label']} exceeded {CASE_BUDGET_S}s")

    if usable:
        old_handler = signal.signal(signal.SIGALRM, on_alarm)
        old_delay, old_interval = signal.getitimer(signal.ITIMER_REAL)
    started = time.monotonic()

    @contextmanager
    def budget(label: str) -> Iterator[None]:
        current["label"] = label
        t0 = time.perf_counter()
        if usable:
            signal.setitimer(signal.ITIMER_REAL, CASE_BUDGET_S)
        try:
            yield
        finally:
            if usable:
                signal.setitimer(signal.ITIMER_REAL, 0)
        assert time.perf_counter() - t0 < CASE_BUDGET_S, f"case {label} was too slow"

    try:
        yield budget
    finally:
        if usable:
            signal.signal(signal.SIGALRM, old_handler)
            if old_delay:
                remaining = max(old_delay - (time.monotonic() - started), 0.001)
                signal.setitimer(signal.ITIMER_REAL, remaining, old_interval)


def load_outcome(data: bytes, label: str) -> str:
    """'format', 'verify' or 'ok'; any other exception fails the test, naming the case."""
    try:
        module = decode_module(data)
    except BytecodeFormatError as exc:
        assert exc.section, f"{label}: error names no section: {exc}"
        assert exc.offset is not None and 0 <= exc.offset <= len(data), f"{label}: bad offset in {exc}"
        return "format"
    except CaseTimeout:
        raise
    except Exception as exc:  # pragma: no cover - this is the failure being tested for
        pytest.fail(f"{label}: decode raised {type(exc).__name__}: {exc}")
    if verify_module is None:
        return "decoded"
    try:
        verify_module(module)
    except VerifyError:
        return "verify"
    except CaseTimeout:
        raise
    except Exception as exc:  # pragma: no cover
        pytest.fail(f"{label}: bytes decoded but verify_module raised {type(exc).__name__}: {exc}")
    return "ok"


def mutations(seed: int, count: int) -> Iterator[tuple[str, bytes]]:
    rng = random.Random(seed)
    n = len(SAMPLE)
    for i in range(count):
        data = bytearray(SAMPLE)
        kind = ("flip", "bitflip", "insert", "delete", "multi")[i % 5]
        if kind == "flip":
            data[rng.randrange(n)] = rng.randrange(256)
        elif kind == "bitflip":
            data[rng.randrange(n)] ^= 1 << rng.randrange(8)
        elif kind == "insert":
            at = rng.randrange(n + 1)
            data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 4)))
        elif kind == "delete":
            at = rng.randrange(n)
            del data[at : at + rng.randint(1, 4)]
        else:
            for _ in range(rng.randint(2, 6)):
                at = rng.randrange(len(data))
                data[at] = rng.choice((0x00, 0xFF, 0x7F, 0x80, rng.randrange(256)))
        yield f"{kind}#{i}(seed={seed})", bytes(data)


def run_cases(cases: Iterator[tuple[str, bytes]], peak_every: int = 20) -> dict[str, int]:
    outcomes: dict[str, int] = {}
    with case_timer() as budget:
        for i, (label, data) in enumerate(cases):
            traced = i % peak_every == 0
            if traced:
                tracemalloc.start()
            try:
                with budget(label):
                    outcome = load_outcome(data, label)
            finally:
                if traced:
                    peak = tracemalloc.get_traced_memory()[1]
                    tracemalloc.stop()
            if traced:
                assert peak < PEAK_LIMIT, f"{label}: peak allocation {peak} bytes"
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
    return outcomes


def test_sample_is_realistic() -> None:
    module = decode_module(SAMPLE)
    assert module == sample_module()
    assert len(module.constants) == 4 and len(module.function("forward").blocks) == 4
    assert any(ins.loc for _, _, _, _, ins in module.addresses())
    if verify_module is None:
        pytest.skip("msvm.verifier is not importable yet: the verify half of the hostile tests is skipped")
    verify_module(module)  # the unmutated sample is a valid program


def test_truncation_at_every_offset() -> None:
    cases = ((f"truncate@{k}", SAMPLE[:k]) for k in range(len(SAMPLE)))
    outcomes = run_cases(cases, peak_every=37)
    # cutting exactly before an optional section (DEBUG, then NAMES) leaves a valid module without it
    assert outcomes.pop("format") == len(SAMPLE) - 2
    assert sum(outcomes.values()) == 2
    stripped = decode_module(SAMPLE[: _section_offset(SAMPLE, 5)])
    assert all(ins.loc is None for _, _, _, _, ins in stripped.addresses())
    assert all(not fn.names for fn in stripped.functions)
    unnamed = decode_module(SAMPLE[: _section_offset(SAMPLE, 6)])
    assert not any(fn.names for fn in unnamed.functions)
    assert any(ins.loc for _, _, _, _, ins in unnamed.addresses())


def _section_offset(data: bytes, sid: int) -> int:
    pos = 8
    while data[pos] != sid:
        pos += 5 + struct.unpack_from("<I", data, pos + 1)[0]
    return pos


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_mutations(seed: int) -> None:
    outcomes = run_cases(mutations(seed, 1000))
    assert sum(outcomes.values()) == 1000
    assert outcomes.get("format", 0) > 500  # most damage is caught by the decoder itself


def test_huge_input_is_rejected_without_allocating() -> None:
    # claims of huge counts/lengths that the bytes do not back up
    cases = [
        ("strings-count", _file(_sec(1, _uv(2**40)))),
        ("string-length", _file(_sec(1, _uv(1) + _uv(2**60) + b"ab"))),
        ("const-dims", _file(*_base(consts=_uv(1) + b"\x01" + _uv(2) + _uv(2**31) + _uv(2**31)))),
        (
            "tuple-count",
            _file(*_base(funcs=_fn(_ins(13, _uv(1), _uv(0), _uv(0), _uv(1), _uv(1), b"\x07" + _uv(2**50))))),
        ),
        ("blocks", _file(*_base(funcs=_uv(1) + _uv(0) + _uv(0) + _uv(1) + _uv(2**32)))),
        ("section-length", _file(b"\x01" + struct.pack("<I", 0xFFFFFFFF))),
    ]
    outcomes = run_cases(iter(cases), peak_every=1)
    assert outcomes == {"format": len(cases)}


def _decode_only(data: bytes) -> None:
    try:
        decode_module(data)
    except BytecodeFormatError as exc:
        assert exc.section and exc.offset is not None and 0 <= exc.offset <= len(data)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200), st.sampled_from([b"", MAGIC, MAGIC + b"\x01\x00\x00\x00"]))
def test_random_bytes_after_a_header(tail: bytes, head: bytes) -> None:
    _decode_only(head + tail)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(modules(), st.data())
def test_mutated_random_modules(module: Module, data: st.DataObject) -> None:
    """Damage anywhere in any module's encoding: the decoder raises only BytecodeFormatError."""
    raw = bytearray(encode_module(module))
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(raw) - 1))
        op = data.draw(st.sampled_from(["set", "insert", "delete"]))
        byte = data.draw(st.integers(0, 255))
        if op == "set":
            raw[at] = byte
        elif op == "insert":
            raw.insert(at, byte)
        elif len(raw) > 1:
            del raw[at]
    _decode_only(bytes(raw))


# ------------------------------------------------------------------------------------------------
# hand-crafted files, written from the documented layout (not with the encoder's helpers)
# ------------------------------------------------------------------------------------------------


def _uv(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _sv(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        done = (n == 0 and not byte & 0x40) or (n == -1 and byte & 0x40)
        out.append(byte | (0 if done else 0x80))
        if done:
            return bytes(out)


def _str_table(*items: str) -> bytes:
    return _uv(len(items)) + b"".join(_uv(len(s.encode())) + s.encode() for s in items)


def _sec(sid: int, payload: bytes) -> bytes:
    return struct.pack("<BI", sid, len(payload)) + payload


def _file(*sections: bytes, version: int = FORMAT_VERSION, flags: int = 0) -> bytes:
    return MAGIC + struct.pack("<HH", version, flags) + b"".join(sections)


STRINGS = ("m", "f", "op", "[N, 3]", "k", "cpu", "file.py")


def _base(
    strings: bytes | None = None,
    consts: bytes = b"\x00",
    funcs: bytes = b"\x00",
    debug: bytes | None = None,
) -> list[bytes]:
    sections = [
        _sec(1, _str_table(*STRINGS) if strings is None else strings),
        _sec(2, _uv(0)),
        _sec(3, consts),
        _sec(4, funcs),
    ]
    if debug is not None:
        sections.append(_sec(5, debug))
    return sections


def _ins(opcode: int, *operands: bytes) -> bytes:
    return bytes([opcode]) + b"".join(operands)


def _fn(*instructions: bytes, num_regs: int = 4, n_blocks: int = 1) -> bytes:
    """FUNCTIONS payload: one function 'f' whose first block holds ``instructions``."""
    body = _uv(len(instructions)) + b"".join(instructions) + b"\x00" * (n_blocks - 1)
    return _uv(1) + _uv(1) + _uv(0) + _uv(num_regs) + _uv(n_blocks) + body


def _offset_of_functions_payload(consts: bytes = b"\x00") -> int:
    return len(_file(*_base(consts=consts)[:3])) + 5


def _call(attr_value: bytes) -> bytes:
    """OP_CALL op() -> () {k = attr_value}."""
    return _ins(13, _uv(2), _uv(0), _uv(0), _uv(1), _uv(4), attr_value)


def _deep_tuple(depth: int) -> bytes:
    return (b"\x07" + _uv(1)) * depth + b"\x00"


def _const(code: int, dims: tuple[int, ...], data: bytes) -> bytes:
    return _uv(1) + bytes([code]) + _uv(len(dims)) + b"".join(_uv(d) for d in dims) + data


CRAFTED: list[tuple[str, bytes, str, str]] = [
    # (label, file, section named, message fragment)
    ("empty", b"", "header", "truncated"),
    ("bad-magic", b"MSBX" + bytes(4), "header", "bad magic"),
    ("elf", b"\x7fELF\x02\x01\x01\x00", "header", "bad magic"),
    ("short-header", MAGIC + b"\x01", "header", "truncated"),
    (
        "newer-version",
        _file(version=FORMAT_VERSION + 1),
        "header",
        f"file has format version {FORMAT_VERSION + 1}, but this msvm reads format version {FORMAT_VERSION}",
    ),
    ("version-0", _file(version=0), "header", "invalid format version 0"),
    ("flags", _file(flags=1), "header", "flags"),
    ("no-sections", _file(), "STRINGS", "missing STRINGS"),
    ("missing-module", _file(_sec(1, _str_table("m")), _sec(3, b"\x00")), "MODULE", "missing MODULE"),
    ("missing-functions", _file(*_base()[:3]), "FUNCTIONS", "missing FUNCTIONS"),
    ("unknown-section", _file(*_base(), _sec(9, b"")), "FUNCTIONS", "unknown section id 9"),
    ("unknown-section-id", _file(_sec(9, b"")), "header", "unknown section id 9"),
    ("duplicate", _file(*_base()[:2], _base()[1]), "MODULE", "duplicate MODULE"),
    ("out-of-order", _file(*_base()[:3], _base()[1]), "MODULE", "out of order"),
    ("stray-byte-after-debug", _file(*_base(debug=b"\x00")) + b"\x00", "DEBUG", "unknown section id 0"),
    ("stray-byte-after-functions", _file(*_base()) + b"\x04", "FUNCTIONS", "duplicate FUNCTIONS"),
    ("short-section-header", _file(*_base()) + b"\x05\x00", "DEBUG", "truncated section length"),
    ("payload-past-end", _file(*_base())[:-1], "FUNCTIONS", "runs past the end"),
    ("unconsumed", _file(*_base(funcs=b"\x00\x00")), "FUNCTIONS", "1 unused bytes"),
    ("non-utf8", _file(*_base(strings=_str_table("m")[:-1] + b"\xff")), "STRINGS", "UTF-8"),
    ("surrogate", _file(*_base(strings=_uv(1) + _uv(3) + b"\xed\xa0\x80")), "STRINGS", "UTF-8"),
    ("duplicate-string", _file(*_base(strings=_str_table("m", "m"))), "STRINGS", "duplicate string"),
    ("string-count", _file(*_base(strings=_uv(2**40))), "STRINGS", "needs at least"),
    ("string-length", _file(*_base(strings=_uv(1) + _uv(99) + b"x")), "STRINGS", "truncated string bytes"),
    ("overlong-varint", _file(*_base(strings=b"\x80\x00")), "STRINGS", "non-minimal varint"),
    ("long-varint", _file(*_base(strings=b"\xff" * 11)), "STRINGS", "longer than 10 bytes"),
    ("varint-65-bits", _file(*_base(strings=b"\xff" * 9 + b"\x7f")), "STRINGS", "exceeds 64 bits"),
    (
        "module-name-index",
        _file(_sec(1, _str_table("m")), _sec(2, _uv(1))),
        "MODULE",
        "module name 1 out of range",
    ),
    ("dtype-code", _file(*_base(consts=_const(6, (), b""))), "CONSTANTS", "unknown dtype code 6"),
    ("rank", _file(*_base(consts=_const(0, (1,) * 33, b""))), "CONSTANTS", "rank 33 exceeds"),
    ("const-overflow", _file(*_base(consts=_const(4, (2**62, 2**62), b""))), "CONSTANTS", "too large"),
    ("const-zero-overflow", _file(*_base(consts=_const(4, (0, 2**61), b""))), "CONSTANTS", "too large"),
    ("const-short", _file(*_base(consts=_const(4, (3,), bytes(16)))), "CONSTANTS", "needs 24 bytes"),
    ("const-count", _file(*_base(consts=_uv(2**20))), "CONSTANTS", "needs at least"),
    ("bool-data", _file(*_base(consts=_const(5, (2,), b"\x01\x02"))), "CONSTANTS", "bool data"),
    ("num-regs", _file(*_base(funcs=_fn(num_regs=(1 << 20) + 1))), "FUNCTIONS", "num_regs"),
    ("unknown-opcode", _file(*_base(funcs=_fn(b"\x00"))), "FUNCTIONS", "unknown opcode number 0"),
    ("unknown-opcode-99", _file(*_base(funcs=_fn(b"\x63"))), "FUNCTIONS", "unknown opcode number 99"),
    ("register-range", _file(*_base(funcs=_fn(_ins(3, _uv(4))))), "FUNCTIONS", "register 4 out of range"),
    ("block-range", _file(*_base(funcs=_fn(_ins(15, _uv(2)), n_blocks=2))), "FUNCTIONS", "block index 2"),
    ("const-index", _file(*_base(funcs=_fn(_ins(6, _uv(0), _uv(0))))), "FUNCTIONS", "constant index 0"),
    (
        "phi-block",
        _file(*_base(funcs=_fn(_ins(5, _uv(0), _uv(1), _uv(1), _uv(0))))),
        "FUNCTIONS",
        "block index 1",
    ),
    (
        "string-index",
        _file(*_base(funcs=_fn(_ins(9, _uv(0), _sv(0), _uv(50))))),
        "FUNCTIONS",
        "string index 50",
    ),
    (
        "dtype-operand",
        _file(*_base(funcs=_fn(_ins(2, _uv(0), _uv(0), b"\x09", _uv(5))))),
        "FUNCTIONS",
        "unknown dtype code 9",
    ),
    (
        "bad-shape",
        _file(*_base(funcs=_fn(_ins(1, _uv(0), _sv(0), _uv(2), b"\x01", _uv(5))))),
        "FUNCTIONS",
        "invalid shape spec 'op'",
    ),
    (
        "imm-range",
        _file(*_base(funcs=_fn(_ins(8, _uv(0), b"\xff" * 9 + b"\x01")))),
        "FUNCTIONS",
        "outside the 64-bit range",
    ),
    ("imm-overlong", _file(*_base(funcs=_fn(_ins(8, _uv(0), b"\xff\x7f")))), "FUNCTIONS", "non-minimal"),
    ("attr-tag", _file(*_base(funcs=_fn(_call(b"\x08")))), "FUNCTIONS", "unknown attribute value tag 8"),
    ("attr-reg", _file(*_base(funcs=_fn(_call(b"\x06" + _uv(4))))), "FUNCTIONS", "register 4 out of range"),
    ("attr-depth", _file(*_base(funcs=_fn(_call(_deep_tuple(17))))), "FUNCTIONS", "nested deeper than 16"),
    ("attr-depth-10k", _file(*_base(funcs=_fn(_call(_deep_tuple(10_000))))), "FUNCTIONS", "nested deeper"),
    (
        "attr-float-short",
        _file(*_base(funcs=_fn(_call(b"\x04\x00\x00")))),
        "FUNCTIONS",
        "truncated attribute float",
    ),
    (
        "attr-dup-key",
        _file(*_base(funcs=_fn(_ins(13, _uv(2), _uv(0), _uv(0), _uv(2), _uv(4), b"\x00", _uv(4), b"\x00")))),
        "FUNCTIONS",
        "duplicate attribute key 'k'",
    ),
    (
        "debug-function",
        _file(*_base(funcs=_fn(_ins(16, _uv(0))), debug=_uv(1) + _uv(1) + _uv(0) + _uv(6) + _uv(1) + _uv(0))),
        "DEBUG",
        "function index 1",
    ),
    (
        "debug-pc",
        _file(*_base(funcs=_fn(_ins(16, _uv(0))), debug=_uv(1) + _uv(0) + _uv(1) + _uv(6) + _uv(1) + _uv(0))),
        "DEBUG",
        "pc 1 out of range",
    ),
    (
        "debug-order",
        _file(
            *_base(
                funcs=_fn(_ins(16, _uv(0))), debug=_uv(2) + (_uv(0) + _uv(0) + _uv(6) + _uv(1) + _uv(0)) * 2
            )
        ),
        "DEBUG",
        "not after the previous entry",
    ),
    # NAMES: (function, register, name) entries; 'f' has 4 registers
    (
        "names-register",
        _file(*_base(funcs=_fn(_ins(16, _uv(0)))), _sec(6, _uv(1) + _uv(0) + _uv(4) + _uv(0))),
        "NAMES",
        "register of a name in function 'f' 4 out of range",
    ),
    (
        "names-function",
        _file(*_base(funcs=_fn(_ins(16, _uv(0)))), _sec(6, _uv(1) + _uv(1) + _uv(0) + _uv(0))),
        "NAMES",
        "function index 1",
    ),
    (
        "names-order",
        _file(*_base(funcs=_fn(_ins(16, _uv(0)))), _sec(6, _uv(2) + (_uv(0) + _uv(1) + _uv(0)) * 2)),
        "NAMES",
        "not after the previous entry",
    ),
    ("names-string", _file(*_base(funcs=_fn(_ins(16, _uv(0)))), _sec(6, _uv(1) + _uv(0) + _uv(1) + _uv(99))),
     "NAMES", "variable name 99 out of range"),
    # NAMES is the last section: DEBUG after it is as trailing as any byte
    ("debug-after-names", _file(*_base(), _sec(6, b"\x00"), _sec(5, b"\x00")), "NAMES", "trailing bytes"),
]


@pytest.mark.parametrize("label, data, section, fragment", CRAFTED, ids=[c[0] for c in CRAFTED])
def test_crafted_files_are_rejected(label: str, data: bytes, section: str, fragment: str) -> None:
    with case_timer() as budget, budget(label), pytest.raises(BytecodeFormatError) as info:
        decode_module(data)
    err = info.value
    assert err.section == section, str(err)
    assert fragment in err.message, str(err)
    assert err.offset is not None and 0 <= err.offset <= len(data)
    assert f"byte offset {err.offset}" in str(err) and f"section {section}" in str(err)


def test_offsets_are_absolute() -> None:
    base = _offset_of_functions_payload()
    funcs = _fn(_ins(16, _uv(0)), _ins(3, _uv(7)))
    data = _file(*_base(funcs=funcs))
    with pytest.raises(BytecodeFormatError) as info:
        decode_module(data)
    # payload: count, name, nparams, num_regs, nblocks, ninstr, RET, 0, TENSOR_FREE, then the register
    assert info.value.offset == base + 9
    assert data[info.value.offset] == 7
    assert info.value.address == 1 and info.value.opcode == "TENSOR_FREE"


def test_crafted_minimal_files_decode() -> None:
    """The hand-written layout agrees with the decoder when the file is valid."""
    module = decode_module(
        _file(
            *_base(
                consts=_const(1, (2,), struct.pack("<2f", 1.5, -math.inf)),
                funcs=_fn(_ins(16, _uv(0))),
                debug=_uv(1) + _uv(0) + _uv(0) + _uv(6) + _uv(3) + _uv(2),
            )
        )
    )
    assert module.name == "m"
    assert module.constants[0].tolist() == [1.5, -math.inf]
    ret = module.function("f").blocks[0].instructions[0]
    assert ret.name == "RET" and ret.args == ((),) and ret.loc == SourceLoc("file.py", 3, 2)
    zero_size = decode_module(_file(*_base(consts=_const(2, (0, 2**40), b""))))
    assert zero_size.constants[0].shape == (0, 2**40)


def test_only_format_errors_for_non_bytes_like_prefixes() -> None:
    for k in range(len(MAGIC) + 1):
        with pytest.raises(BytecodeFormatError):
            decode_module(MAGIC[:k])
    with pytest.raises(TypeError):
        decode_module("MSBC")  # type: ignore[arg-type]
