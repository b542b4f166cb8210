"""Round trips through the binary ``.msbc`` format: exact values, byte-identical re-encoding."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from msvm.bytecode.binary import FORMAT_VERSION, MAGIC, decode_module, encode_module, load_module, save_module
from msvm.bytecode.builder import ModuleBuilder, normalize_constant
from msvm.bytecode.module import Block, Function, Module, RegRef, make_instruction
from msvm.bytecode.opcodes import DTYPES, OPCODES
from msvm.errors import BytecodeFormatError, SourceLoc
from msvm.shapes import ShapeSpec, parse_shape

try:
    from .strategies import modules
except ImportError:  # tests/ is not a package: pytest puts this directory on sys.path
    from strategies import modules


def roundtrip(module: Module) -> Module:
    data = encode_module(module)
    back = decode_module(data)
    assert back == module
    assert encode_module(back) == data
    return back


def every_opcode_module(with_locs: bool) -> Module:
    """One function using every opcode, every attribute value type and every dtype."""
    mb = ModuleBuilder("every_opcode")
    f = mb.function("main", ("x", "n"))
    loc = SourceLoc("prog.py", 10, 4) if with_locs else None
    f.loc = loc
    x = f.tensor_input(0, "[N, 3, H*2, ?]", "float32")
    z = f.tensor_zeros("[]", "int64")
    n = f.scalar_arg(1, "N")
    k = f.scalar_const(-(2**63))
    big = f.scalar_const(2**63 - 1)
    d0 = f.shape_of(x, 0)
    prod = f.scalar_op("mul", d0, n)
    cond = f.cmp("lt", prod, big)
    c = f.load_const(np.arange(6, dtype=np.float32).reshape(2, 3))
    alloc = f.tensor_alloc((d0, n), "float16")
    f.loc = SourceLoc("<cell 7>", 1, 0) if with_locs else None
    resized = f.resize(x, (prod, k))
    out = f.call(
        "custom",
        (resized, c, alloc, z),
        {
            "none": None,
            "t": True,
            "f": False,
            "int": 1,
            "float": 1.0,
            "neg_zero": -0.0,
            "nan": math.nan,
            "inf": -math.inf,
            "str": 'héllo "quoted" \\ end',
            "empty": "",
            "reg": RegRef(d0),
            "tuple": (1, 1.0, True, None, "s", RegRef(n), (), ((2,),)),
        },
    )
    a, b = f.call("split", (out,), {"sizes": (RegRef(prod), 3)}, n_out=2)
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
    g = mb.function("empty_fn")
    g.ret()
    for dtype in DTYPES:
        mb.constant(np.ones((2,), dtype=dtype))
    module = mb.build()
    used = {ins.name for fn in module.functions for _, _, ins in fn.instructions()}
    assert used == {info.name for info in OPCODES}
    return module


@pytest.mark.parametrize("with_locs", [False, True])
def test_every_opcode_roundtrips(with_locs: bool) -> None:
    module = every_opcode_module(with_locs)
    back = roundtrip(module)
    ins = back.function("main").blocks[0].instructions
    if with_locs:
        assert ins[0].loc == SourceLoc("prog.py", 10, 4)
        assert ins[10].loc == SourceLoc("<cell 7>", 1, 0)
    else:
        assert all(i.loc is None for _, _, i in back.function("main").instructions())
    attrs = next(i for i in ins if i.name == "OP_CALL")["attrs"]
    assert type(attrs["int"]) is int and type(attrs["float"]) is float and type(attrs["t"]) is bool
    assert math.copysign(1.0, attrs["neg_zero"]) == -1.0
    assert math.isnan(attrs["nan"]) and attrs["inf"] == -math.inf
    assert attrs["tuple"] == (1, 1.0, True, None, "s", RegRef(2), (), ((2,),))
    assert isinstance(ins[0]["shape"], ShapeSpec) and ins[0]["shape"] == parse_shape("[N, 3, H*2, ?]")


def test_debug_section_only_when_locs() -> None:
    without = encode_module(every_opcode_module(False))
    with_ = encode_module(every_opcode_module(True))
    assert len(with_) > len(without)
    # the DEBUG section (id 5) is the last one and is absent without locations
    assert _section_ids(without) == [1, 2, 3, 4]
    assert _section_ids(with_) == [1, 2, 3, 4, 5]


def test_register_names_are_an_optional_last_section() -> None:
    plain = every_opcode_module(True)
    before = encode_module(plain)
    named = every_opcode_module(True)
    named.functions[0].names = {2: "q", 0: "x", 1: "h"}
    data = encode_module(named)
    assert _section_ids(data) == [1, 2, 3, 4, 5, 6]
    back = roundtrip(named)
    assert list(back.functions[0].names.items()) == [(0, "x"), (1, "h"), (2, "q")]  # by register
    # a file without names (every file written before the section existed) reads as it always did
    assert decode_module(before).functions[0].names == {} and decode_module(before) == plain


@pytest.mark.parametrize("names", [{99: "q"}, {-1: "q"}, {"R1": "q"}, {1: 3}])
def test_encoder_rejects_names_it_cannot_write(names: dict) -> None:
    module = every_opcode_module(False)
    module.functions[0].names = names
    with pytest.raises(BytecodeFormatError) as info:
        encode_module(module)
    assert info.value.section == "NAMES"


def _section_ids(data: bytes) -> list[int]:
    pos, ids = 8, []
    while pos < len(data):
        sid, length = struct.unpack_from("<BI", data, pos)
        ids.append(sid)
        pos += 5 + length
    assert pos == len(data)
    return ids


def test_header_layout() -> None:
    data = encode_module(Module("m"))
    assert data[:4] == MAGIC == b"MSBC"
    assert struct.unpack_from("<HH", data, 4) == (FORMAT_VERSION, 0)
    assert roundtrip(Module("m")).name == "m"


def test_module_name_and_strings_are_shared() -> None:
    mb = ModuleBuilder("shared_names")
    f = mb.function("shared_names", ("shared_names",))
    f.call("shared_names", (), {"shared_names": "shared_names"})
    data = encode_module(mb.build())
    assert data.count(b"shared_names") == 1
    roundtrip(mb.build())


SPECIAL_FLOATS = [0.0, -0.0, math.inf, -math.inf, math.nan, 1.5, -2.25]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(), (0,), (3, 0, 2), (2, 3), (1, 1, 1, 5)])
def test_constants_roundtrip(dtype: str, shape: tuple[int, ...]) -> None:
    size = math.prod(shape)
    if dtype.startswith("float"):
        values = np.array([SPECIAL_FLOATS[i % len(SPECIAL_FLOATS)] for i in range(size)], dtype=dtype)
    elif dtype == "bool":
        values = np.array([i % 3 == 0 for i in range(size)], dtype=dtype)
    else:
        info = np.iinfo(dtype)
        values = np.array([(info.min, -1, 0, 1, info.max)[i % 5] for i in range(size)], dtype=dtype)
    arr = normalize_constant(values.reshape(shape))
    back = roundtrip(Module("c", [], [arr]))
    got = back.constants[0]
    assert got.dtype == np.dtype(dtype) and got.shape == shape
    assert got.tobytes() == arr.tobytes()  # bit-exact: -0.0 and NaN payloads survive
    assert not got.flags.writeable
    assert got.flags.c_contiguous and got.dtype.isnative
    with pytest.raises(ValueError):
        got[...] = 0


def test_constants_non_native_and_non_contiguous_inputs() -> None:
    big_endian = np.arange(12, dtype=">i4").reshape(3, 4)
    strided = np.arange(20, dtype=np.float64).reshape(4, 5)[:, ::2]
    module = Module("c", [], [big_endian, strided])
    back = decode_module(encode_module(module))
    assert np.array_equal(back.constants[0], big_endian) and back.constants[0].dtype.isnative
    assert np.array_equal(back.constants[1], strided) and back.constants[1].flags.c_contiguous


def test_nan_payload_attr_is_bit_exact() -> None:
    weird_nan = struct.unpack("<d", struct.pack("<Q", 0x7FF8_0000_DEAD_BEEF))[0]
    fn = Function("f", (), 1, [Block([make_instruction("OP_CALL", "op", (0,), (), {"x": weird_nan})])])
    back = roundtrip(Module("m", [fn]))
    value = back.functions[0].blocks[0].instructions[0]["attrs"]["x"]
    assert struct.pack("<d", value) == struct.pack("<d", weird_nan)


def test_empty_blocks_and_functions() -> None:
    roundtrip(Module("m", [Function("f", (), 0, []), Function("g", ("a",), 3, [Block(), Block()])]))


def test_save_load_save_is_byte_identical(tmp_path) -> None:
    module = every_opcode_module(True)
    first, second = tmp_path / "a.msbc", tmp_path / "b.msbc"
    save_module(module, first)
    loaded = load_module(first)
    assert loaded == module
    save_module(loaded, str(second))
    assert first.read_bytes() == second.read_bytes()


def test_load_missing_file_names_the_path(tmp_path) -> None:
    path = tmp_path / "nope" / "missing.msbc"
    with pytest.raises(BytecodeFormatError) as info:
        load_module(path)
    assert info.value.code == "E-FORMAT-IO"
    assert "missing.msbc" in str(info.value)
    with pytest.raises(BytecodeFormatError) as info:
        load_module(tmp_path)  # a directory
    assert info.value.code == "E-FORMAT-IO"


def test_save_to_unwritable_path(tmp_path) -> None:
    with pytest.raises(BytecodeFormatError) as info:
        save_module(Module("m"), tmp_path / "no" / "dir" / "x.msbc")
    assert info.value.code == "E-FORMAT-IO"


def _one(name: str, *args, num_regs: int = 4, n_blocks: int = 1, consts: int = 0) -> Module:
    blocks = [Block([make_instruction(name, *args)])] + [Block() for _ in range(n_blocks - 1)]
    return Module("m", [Function("f", (), num_regs, blocks)], [np.zeros(1)] * consts)


@pytest.mark.parametrize(
    "module, needle",
    [
        (_one("TENSOR_FREE", 4), "register 4"),
        (_one("TENSOR_FREE", -1), "register -1"),
        (_one("TENSOR_FREE", True), "must be an int, got bool"),
        (_one("TENSOR_FREE", np.int64(1)), "must be an int, got int64"),
        (_one("JMP", 1), "block 1"),
        (_one("LOAD_CONST", 0, 0), "constant 0"),
        (_one("SCALAR_CONST", 0, 2**63), "signed 64-bit"),
        (_one("TENSOR_CREATE", 0, 0, "[N]", "float32", "cpu"), "ShapeSpec"),
        (_one("TENSOR_CREATE", 0, 0, ShapeSpec.of([1]), "complex64", "cpu"), "dtype"),
        (_one("OP_CALL", "op", (), (), {"x": np.float32(1)}), "unsupported attribute value"),
        (_one("OP_CALL", "op", (), (), {"x": [1, 2]}), "unsupported attribute value"),
        (_one("OP_CALL", "op", (), (), {"x": RegRef(9)}), "register 9"),
        (_one("OP_CALL", "op", (), (), {"x": "\ud800"}), "UTF-8"),
        (_one("OP_CALL", "op", (), (), {1: 2}), "expected a str"),
        (_one("TENSOR_PHI", 0, ((0, 7),)), "register 7"),
        (Module("m", [Function("f", (), (1 << 20) + 1, [])]), "num_regs"),
        (Module("m", [Function("f", ["x"], 0, [])]), "tuple"),
        (Module("m", [], [np.array(["a"])]), "unsupported dtype"),
        (Module("m", [], [np.zeros(1, dtype=np.complex64)]), "unsupported dtype"),
        (Module(3), "expected a str"),
    ],
)
def test_encoder_rejects_what_it_cannot_roundtrip(module: Module, needle: str) -> None:
    with pytest.raises(BytecodeFormatError) as info:
        encode_module(module)
    assert needle in str(info.value)


def test_encoder_rejects_too_deep_attr_tuples() -> None:
    value: object = 1
    for _ in range(16):
        value = (value,)
    roundtrip(_one("OP_CALL", "op", (), (), {"x": value}))
    with pytest.raises(BytecodeFormatError, match="nested deeper"):
        encode_module(_one("OP_CALL", "op", (), (), {"x": (value,)}))


def test_encoder_error_names_the_address() -> None:
    module = every_opcode_module(False)
    fn = module.function("empty_fn")
    fn.blocks[0].instructions.insert(0, make_instruction("TENSOR_FREE", 99))
    with pytest.raises(BytecodeFormatError) as info:
        encode_module(module)
    assert info.value.address == module.function_base(fn)
    assert info.value.opcode == "TENSOR_FREE"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(modules())
def test_random_modules_roundtrip_byte_identically(module: Module) -> None:
    roundtrip(module)
