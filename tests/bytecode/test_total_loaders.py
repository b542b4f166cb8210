"""Total loaders: whatever bytes or text msvm reads, it answers with an msvm error or a module it can
print and read back, in time and memory that follow the input's size.

Property tests mutate valid ``.msbc`` files and assembly texts: only ``BytecodeFormatError`` may
escape the readers, the verifier answers with diagnostics (never an exception), and every module
that loads disassembles to text that assembles back to the same module. Regression cases pin the
inputs an outside campaign found: an empty constant of huge dims, names and file names with a NUL,
debug locations at the formats' bound, and capability patches too deep or not text at all.
"""

from __future__ import annotations

import json
import os
import threading
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from msvm.bytecode.binary import decode_module, encode_module, load_module
from msvm.bytecode.module import MAX_LOCATION, Block, Function, Module, make_instruction
from msvm.bytecode.text import assemble, disassemble
from msvm.errors import BytecodeFormatError, SourceLoc
from msvm.scheduler import patch as patch_module
from msvm.scheduler.patch import CapabilityPatchError, load_capability_patch
from msvm.validate import validate
from msvm.verifier import check_module

try:
    from .strategies import identifiers, modules
    from .test_hostile_bytes import SAMPLE, case_timer, sample_module
except ImportError:  # tests/ is not a package: pytest puts this directory on sys.path
    from strategies import identifiers, modules
    from test_hostile_bytes import SAMPLE, case_timer, sample_module

TEXT_GROWTH = 64  # a disassembly is at most this many times the bytes it came from (plus a page)
PAGE = 64 << 10


def check_loaded(module: Module, size: int) -> None:
    """What holds for every module a reader returns: it verifies or gets diagnostics, and its text
    is proportional to the input and reads back to the same module."""
    check_module(module)
    text = disassemble(module)
    assert len(text) <= TEXT_GROWTH * size + PAGE, f"{size} input bytes printed as {len(text)} characters"
    assert assemble(text) == module


def load_bytes(data: bytes) -> None:
    try:
        module = decode_module(data)
    except BytecodeFormatError:
        return
    check_loaded(module, len(data))


def load_text(text: str) -> None:
    try:
        module = assemble(text)
    except BytecodeFormatError:
        return
    check_loaded(module, len(text.encode("utf-8", "surrogatepass")))


# -------------------------------------------------------------------------------- mutated inputs
# Values that sit on a limit or mean something special to one reader: size bounds, NULs, reserved
# names, the zero dim, the encodings of 2**31 and 2**63.
HOSTILE_TEXT = ["\x00", '"\\u0000"', "max", "min", "ceildiv", "0", "1000000", "2147483647", "2147483648"]
HOSTILE_TEXT += ["9223372036854775807", "9223372036854775808", '""', 'base64""', "[1000000, 1000000, 0]"]
HOSTILE_TEXT += ["@", ":", ",", "(", ")", "[", "]", "{", "}", "\n", ";", "R0", "bb0", "k0", "nan", "-"]
HOSTILE_TEXT += ["names", "\n  names R0=x\n", "=", "R1048576"]
HOSTILE_BYTES = [0x00, 0x01, 0x7F, 0x80, 0xFF]


def mutate_bytes(data: bytes, draw: st.DrawFn) -> bytes:
    raw = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(raw) - 1))
        op = draw(st.sampled_from(["set", "insert", "delete", "varint"]))
        byte = draw(st.one_of(st.sampled_from(HOSTILE_BYTES), st.integers(0, 255)))
        if op == "set":
            raw[at] = byte
        elif op == "insert":
            raw.insert(at, byte)
        elif op == "delete" and len(raw) > 1:
            del raw[at]
        elif op == "varint":  # a long varint in place of a short one: a huge count, dim or line
            raw[at : at + 1] = bytes([0xFF] * draw(st.integers(1, 9))) + bytes([draw(st.integers(0, 1))])
    return bytes(raw)


def mutate_text(text: str, draw: st.DrawFn) -> str:
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(text)))
        j = draw(st.integers(i, min(len(text), i + 12)))
        text = text[:i] + draw(st.sampled_from(HOSTILE_TEXT)) + text[j:]
    return text


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_mutated_msbc_loads_totally_and_round_trips(data: st.DataObject) -> None:
    base = data.draw(st.one_of(st.just(SAMPLE), modules().map(encode_module)))
    with case_timer() as budget, budget("mutated .msbc"):
        load_bytes(mutate_bytes(base, data.draw))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_mutated_assembly_loads_totally_and_round_trips(data: st.DataObject) -> None:
    base = data.draw(st.one_of(st.just(sample_module()), modules()))
    with case_timer() as budget, budget("mutated text"):
        load_text(mutate_text(disassemble(base), data.draw))


# Names are any string in both formats: control characters, a NUL, words of the text grammar.
odd_names = st.one_of(
    identifiers,
    st.sampled_from(["", "\x00", "a\x00b", "R3", "bb0", "k1", "true", "nan", "func", "max", "a b", ";"]),
    st.text(st.characters(codec="utf-8"), max_size=6),  # no lone surrogates: .msbc strings are UTF-8
)


@st.composite
def oddly_named_modules(draw: st.DrawFn) -> Module:
    """A random module whose function, parameter, register, symbol and file names are drawn from
    ``odd_names``."""
    module = draw(modules(with_locs=True))
    for fn in module.functions:
        fn.name = draw(odd_names)
        fn.params = tuple(draw(st.lists(odd_names, max_size=3)))
        fn.names = draw(st.dictionaries(st.integers(0, fn.num_regs - 1), odd_names, max_size=3))
        for _, _, ins in fn.instructions():
            if ins.name == "SCALAR_ARG":
                ins.args = (*ins.args[:2], draw(odd_names))
            if ins.loc is not None:
                ins.loc = SourceLoc(draw(odd_names), ins.loc.line, ins.loc.col)
    return module


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(oddly_named_modules())
def test_any_names_survive_both_formats(module: Module) -> None:
    data = encode_module(module)
    assert decode_module(data) == module
    check_loaded(decode_module(data), len(data))


# ------------------------------------------------------------------------------- regression cases
def one_function(*instructions, constants=(), regs: int = 1) -> Module:
    return Module("m", [Function("f", (), regs, [Block(list(instructions))])], list(constants))


def test_an_empty_constant_of_huge_dims_prints_in_a_line():
    """dims (10**6, 10**6, 0): no element, but its nested literal would be 10**12 lists."""
    empty = np.zeros((10**6, 10**6, 0), np.float32)
    empty.setflags(write=False)
    data = encode_module(one_function(make_instruction("LOAD_CONST", 0, 0), make_instruction("RET", (0,)),
                                      constants=[empty]))
    module = decode_module(data)
    tracemalloc.start()
    try:
        text = disassemble(module)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert 'const k0 = float32[1000000, 1000000, 0] base64""' in text
    assert peak < 1 << 20 and len(text) < 1000
    back = assemble(text)
    assert back == module and back.constants[0].shape == (10**6, 10**6, 0)


def test_small_empty_constants_still_read_as_literals():
    module = assemble("const k0 = float32[0, 5] []\n")
    assert module.constants[0].shape == (0, 5)
    assert assemble(disassemble(module)) == module


@pytest.fixture
def fifo(tmp_path: Path) -> str:
    path = tmp_path / "pipe"
    os.mkfifo(path)
    return str(path)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["nul", "fifo", "device", "directory", "missing"])
def test_debug_files_that_cannot_be_read_leave_no_source_line(kind: str, fifo: str, tmp_path: Path):
    """A location may name any file; the disassembler reads only regular files, so none blocks it."""
    file = {"nul": "model\x00.py", "fifo": fifo, "device": "/dev/zero", "directory": str(tmp_path),
            "missing": str(tmp_path / "gone.py")}[kind]
    module = one_function(make_instruction("RET", (), loc=SourceLoc(file, 1, 0)), regs=0)
    done: list[str] = []
    worker = threading.Thread(target=lambda: done.append(disassemble(module)), daemon=True)
    worker.start()
    worker.join(30)
    assert done, f"disassembling a location in {kind!r} did not return"
    assert "|" not in done[0].splitlines()[-2]  # the RET's comment holds no source line
    assert assemble(done[0]) == module
    data = encode_module(module)
    assert decode_module(data) == module


def test_a_regular_debug_file_still_shows_its_line(tmp_path: Path):
    source = tmp_path / "model.py"
    source.write_text("x = 1\ny = relu(x)\n")
    module = one_function(make_instruction("RET", (), loc=SourceLoc(str(source), 2, 0)), regs=0)
    assert "| y = relu(x)" in disassemble(module)


def located(line: int, col: int) -> Module:
    return one_function(make_instruction("RET", (), loc=SourceLoc("f.py", line, col)), regs=0)


def test_locations_at_the_bound_round_trip_in_both_formats():
    module = located(MAX_LOCATION, MAX_LOCATION - 1)  # col is 0-based: the text writes MAX_LOCATION
    assert decode_module(encode_module(module)) == module
    text = disassemble(module)
    assert f"@{MAX_LOCATION}:{MAX_LOCATION}" in text
    assert assemble(text) == module


@pytest.mark.parametrize("line, col", [(MAX_LOCATION + 1, 0), (1, MAX_LOCATION), (2**63, 0)])
def test_locations_past_the_bound_are_rejected_by_both_formats(line: int, col: int):
    with pytest.raises(BytecodeFormatError, match="DEBUG"):
        encode_module(located(line, col))
    with pytest.raises(BytecodeFormatError, match="must be in"):
        assemble(f'func @f() regs=0 {{\nbb0:\n  RET ()  @"f.py":{line}:{col + 1}\n}}\n')


def test_a_column_past_the_bound_in_bytes_is_rejected():
    data = encode_module(located(1, MAX_LOCATION - 1))
    at = data.index(b"\xfe\xff\xff\xff\x07")  # the column, MAX_LOCATION - 1
    with pytest.raises(BytecodeFormatError, match=r"column .* out of range"):
        decode_module(data[:at] + b"\xff\xff\xff\xff\x07" + data[at + 5 :])


def test_a_line_past_the_bound_in_bytes_is_rejected():
    data = encode_module(located(MAX_LOCATION, 0))
    at = data.index(b"\xff\xff\xff\xff\x07")
    with pytest.raises(BytecodeFormatError, match=r"line .* out of range"):
        decode_module(data[:at] + b"\x80\x80\x80\x80\x08" + data[at + 5 :])


# --------------------------------------------------------------------------- capability patches
@pytest.fixture
def no_apply(monkeypatch: pytest.MonkeyPatch) -> None:
    """Patches are validated, not applied: the capability database is process-wide."""
    monkeypatch.setattr(patch_module.DB, "apply_patch", lambda normalised: None)


@pytest.mark.parametrize(
    "content",
    [
        b"[" * 100_000 + b"]" * 100_000,  # nested deeper than the recursion limit
        b'{"devices": ' * 50_000 + b"{}" + b"}" * 50_000,
        b"\xff\xfe{}",  # not UTF-8
        b'{"version": 1, "devices": {"cpu": {"bandwidth_gbps": 1e999}}}',  # inf
        b'{"version": 1, "devices": {"cpu": {"bandwidth_gbps": 1' + b"0" * 400 + b"}}}",  # no float
        b'{"version": 1, "devices": {"cpu": {"bandwidth_gbps": 1' + b"0" * 5000 + b"}}}",  # no int
        b'{"version": 1, "devices": {"cpu": {"bandwidth_gbps": NaN}}}',
        b"",
    ],
    ids=["deep-array", "deep-object", "not-utf8", "inf", "huge-int", "huger-int", "nan", "empty"],
)
def test_bad_patch_files_raise_patch_errors(content: bytes, tmp_path: Path, no_apply: None):
    path = tmp_path / "patch.json"
    path.write_bytes(content)
    with pytest.raises(CapabilityPatchError):
        load_capability_patch(path)


def test_an_unreadable_patch_file_is_a_patch_error(tmp_path: Path, no_apply: None):
    with pytest.raises(CapabilityPatchError, match="cannot read"):
        load_capability_patch(tmp_path / "missing.json")
    with pytest.raises(CapabilityPatchError, match="cannot read"):
        load_capability_patch(tmp_path)  # a directory


VALID_PATCH = json.dumps({"version": 1, "devices": {"cpu": {
    "bandwidth_gbps": 12.0, "gemm_half": {"m": 8, "n": 40, "k": 12},
    "ops": {"matmul": {"forbid": [], "force": [{"variant": "reference", "dtype": "float32",
                                                "shapes": [[None, 64], [64, None]]}]}}}}})


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_patch_files_raise_only_patch_errors(data: st.DataObject, tmp_path_factory) -> None:
    text = VALID_PATCH
    pieces = ["[", "]", "{", "}", '"', ",", ":", "null", "true", "-1", "1e999", "NaN", "0", "\\", "\x00"]
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(text)))
        text = text[:i] + data.draw(st.sampled_from(pieces)) + text[data.draw(st.integers(i, len(text))):]
    path = tmp_path_factory.mktemp("patch") / "p.json"
    path.write_text(text, encoding="utf-8")
    original = patch_module.DB.apply_patch
    patch_module.DB.apply_patch = lambda normalised: None
    try:
        load_capability_patch(path)
    except CapabilityPatchError:
        pass
    finally:
        patch_module.DB.apply_patch = original


def test_a_path_with_a_nul_is_an_io_format_error():
    for read in (load_module, validate):
        with pytest.raises(BytecodeFormatError) as err:
            read(Path("model\x00.msbc"))
        assert err.value.code == "E-FORMAT-IO"
