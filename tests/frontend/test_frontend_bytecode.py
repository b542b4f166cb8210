"""The bytecode the frontend produces: expected opcodes and ops, source locations, and it always verifies."""

# ms.Tensor["N", 3] reads to linters as string forward references: F821 is noise here. No
# `from __future__ import annotations` either: with it, ruff's UP037 "fix" unquotes the symbols.
# ruff: noqa: F821

import linecache

import numpy as np
import pytest
from frontend_helpers import op_call, opcodes, ops, source_position

import msvm as ms
import msvm.ops
from msvm.bytecode.module import RegRef
from msvm.errors import CompileError
from msvm.frontend import JitOptions, Tensor, jit, mutable, symbolic_mul
from msvm.verifier import verify_module


@jit
def add_relu(x: Tensor["N", 3], y: Tensor[3]):
    return ms.ops.relu(x + y)


def test_simple_function() -> None:
    module = add_relu.bytecode
    assert opcodes(module) == ["TENSOR_CREATE", "TENSOR_CREATE", "OP_CALL add", "OP_CALL relu", "RET"]
    assert module.name == add_relu.__qualname__
    assert [fn.name for fn in module.functions] == ["add_relu"]
    assert module.functions[0].params == ("x", "y")
    create = module.functions[0].blocks[0].instructions[0]
    assert str(create["shape"]) == "[N, 3]" and create["dtype"] == "float32"
    verify_module(module)


def test_every_instruction_has_its_source_location() -> None:
    module = add_relu.bytecode
    line, col = source_position(add_relu.py_func, "return ms.ops.relu", "ms.ops.relu")
    locs = [ins.loc for _, _, _, _, ins in module.addresses()]
    assert all(loc is not None and loc.file == __file__ for loc in locs)
    relu = op_call(module, "relu")
    assert (relu.loc.line, relu.loc.col) == (line, col)
    add = op_call(module, "add")
    assert (add.loc.line, add.loc.col) == (line, col + len("ms.ops.relu("))
    x_line, x_col = source_position(add_relu.py_func, "def add_relu", "x:")
    assert (locs[0].line, locs[0].col) == (x_line, x_col)


def test_disassembly_shows_source_lines() -> None:
    text = str(add_relu.bytecode)
    assert "OP_CALL relu" in text and "| return ms.ops.relu(x + y)" in text


@jit
def shapes(x: Tensor["N", 3, "H"]):
    a = x.shape[1] + x.shape[0] + x.shape[0]
    n, c, h = x.shape
    return x.reshape(a, -1), n * c * h


def test_constant_dims_fold_and_symbolic_dims_are_read_once() -> None:
    module = shapes.bytecode
    reads = [ins for _, _, _, _, ins in module.addresses() if ins.name == "SHAPE_PROPAGATE"]
    assert [(ins["src"], ins["dim"]) for ins in reads] == [(0, 0), (0, 2)]


@jit
def symbolic_scalars(x, n):
    m = symbolic_mul(n, 2)
    k = max(m, x.shape[0])
    return ms.ops.zeros((k, 3)) + n


def test_symbolic_scalars() -> None:
    symbolic_scalars(np.ones(4, np.float32), mutable(3))
    module = symbolic_scalars.bytecode
    names = opcodes(module)
    assert names.count("SCALAR_ARG") == 1
    sops = [ins["op"] for _, _, _, _, ins in module.addresses() if ins.name == "SCALAR_OP"]
    assert sops == ["mul", "max"]
    full = op_call(module, "full")
    assert isinstance(full["attrs"]["fill_value"], RegRef)
    assert full["attrs"]["dtype"] == "float32"  # numpy 2: a Python int next to float32 stays float32
    zeros = op_call(module, "zeros")
    assert isinstance(zeros["attrs"]["shape"][0], RegRef) and zeros["attrs"]["shape"][1] == 3


@jit
def branchy(x: Tensor["N", 4]):
    if x.shape[0] > 2:
        y = x[:2]
    else:
        y = x
    if x.ndim == 2:  # static: folded
        y = y * 2.0
    return y


def test_branches_make_blocks_and_a_phi() -> None:
    module = branchy.bytecode
    fn = module.functions[0]
    assert len(fn.blocks) == 4
    names = opcodes(module)
    assert names.count("BR") == 1 and names.count("TENSOR_PHI") == 1
    phi = next(ins for _, _, _, _, ins in module.addresses() if ins.name == "TENSOR_PHI")
    types = verify_module(module).functions["branchy"].types
    assert str(types[phi["dst"]]) == "float32[?, 4]"


@jit
def looped(x: Tensor["N", 4], n: int = 3):
    acc = x * 0.0
    for i in range(x.shape[0]):
        acc = acc + x[i]
    for _ in range(n):
        acc = acc * 2.0
    return acc


def test_loops_have_header_phis() -> None:
    module = looped.bytecode
    fn = module.functions[0]
    names = opcodes(module)
    assert names.count("SCALAR_PHI") == 2 and names.count("TENSOR_PHI") == 2
    assert names.count("CMP") == 2 and names.count("BR") == 2
    headers = [b for b in fn.blocks if b.instructions[0].name == "SCALAR_PHI"]
    assert all(len(b.instructions[0]["incoming"]) == 2 for b in headers)
    assert "SCALAR_ARG" not in names  # n has a default: it is a specialised int


CONST = np.arange(4, dtype=np.float32)


@jit
def captured(x: Tensor[4]):
    return x * CONST + CONST


@jit
def folded():
    return np.float32(2.0) * CONST + CONST


def test_captured_arrays_are_constants_loaded_once() -> None:
    x = np.ones(4, np.float32)
    np.testing.assert_array_equal(captured(x), captured.py_func(x))
    module = captured.bytecode
    assert ops(module) == ["mul", "add"]
    loads = [ins for _, _, _, _, ins in module.addresses() if ins.name == "LOAD_CONST"]
    assert len(loads) == 1  # the same array object is loaded once, in the entry block
    assert module.functions[0].blocks[0].instructions[1] is loads[0]
    np.testing.assert_array_equal(module.constants[loads[0]["const"]], CONST)


def test_static_expressions_fold_to_constants() -> None:
    np.testing.assert_array_equal(folded(), 3 * CONST)
    assert opcodes(folded.bytecode) == ["LOAD_CONST", "RET"]


def test_bytecode_before_any_version_is_a_clear_error() -> None:
    @jit
    def f(x):
        return x

    with pytest.raises(RuntimeError, match="call it once"):
        _ = f.bytecode
    f(np.ones(2))
    assert f.bytecode.functions[0].name == "f"


def test_notebook_cell_locations() -> None:
    """IPython registers each cell in linecache; locations are lines of the cell."""
    cell = ("import numpy as np\n\n@jit\ndef good(x):\n    return x * 2\n\n@jit\ndef bad(x):\n    y = x * "
            "2\n    return np.sin(y)\n")
    filename = "/tmp/ipykernel_1234/2860512911.py"
    linecache.cache[filename] = (len(cell), None, cell.splitlines(True), filename)
    namespace = {"jit": jit}
    exec(compile(cell, filename, "exec"), namespace)
    good, bad = namespace["good"], namespace["bad"]
    good(np.ones(3, np.float32))
    mul = next(ins for _, _, _, _, ins in good.bytecode.addresses() if ins.name == "OP_CALL")
    assert (mul.loc.file, mul.loc.line, mul.loc.col) == (filename, 5, 11)
    assert "| return x * 2" in str(good.bytecode)
    with pytest.raises(CompileError) as info:
        bad(np.ones(3, np.float32))
    assert (info.value.source.file, info.value.source.line, info.value.source.col) == (filename, 10, 11)
    assert not bad.versions  # the failed version was not cached


def test_indented_source_columns() -> None:
    class Holder:
        @staticmethod
        def make():
            @jit
            def inner(x: Tensor["N"]):
                return x + 1.0
            return inner

    fn = Holder.make()
    line, col = source_position(fn.py_func, "return x + 1.0", "x + 1.0")
    add = next(ins for _, _, _, _, ins in fn.bytecode.addresses() if ins.name == "OP_CALL")
    assert (add.loc.line, add.loc.col) == (line, col)


# -- options ------------------------------------------------------------------------------------------


def test_options_are_validated_and_frozen() -> None:
    @jit(cache_mode="bucket", bucket_boundaries=[8, 16, 32], scd_threshold=1, hot_threshold=5)
    def f(x: Tensor["N"]):
        return x

    assert f.options == JitOptions("bucket", (8, 16, 32), True, False, 1.0, 5)
    assert add_relu.options == JitOptions()
    with pytest.raises(AttributeError):
        f.options.cache_mode = "exact"  # type: ignore[misc]


@pytest.mark.parametrize("options, error", [
    ({"cache_mode": "lru"}, ValueError),
    ({"cache_mode": 3}, TypeError),
    ({"bucket_boundaries": [16, 8]}, ValueError),
    ({"bucket_boundaries": [0, 8]}, ValueError),
    ({"bucket_boundaries": [1.5]}, TypeError),
    ({"bucket_boundaries": 8}, TypeError),
    ({"fallback": 1}, TypeError),
    ({"mem_optimize": "yes"}, TypeError),
    ({"scd_threshold": 1.5}, ValueError),
    ({"scd_threshold": "high"}, TypeError),
    ({"hot_threshold": 0}, ValueError),
    ({"hot_threshold": 2.0}, TypeError),
    ({"speed": "max"}, TypeError),
])
def test_bad_options(options: dict, error: type) -> None:
    with pytest.raises(error):
        jit(**options)


@jit
def _scaled(h):
    inner = h * 3.0
    return inner


@jit
def named_variables(x: Tensor["N", 4], w: Tensor[4, 4]):
    q = x @ w
    k = q
    h = ms.ops.relu(k)
    for i in range(3):  # noqa: B007 - the induction variable is named too
        h = h + 1.0
    if x.shape[0] > 2:
        z = _scaled(h)
    else:
        z = h
    return z


def _defined_by(module, opcode: str) -> list[int]:
    return [ins.writes()[0] for _, _, _, _, ins in module.addresses() if ins.name == opcode]


def test_registers_are_named_after_the_variables_they_hold() -> None:
    """The register-names table: assignments, the loop's phis, the if's phi; the first name stays."""
    module = named_variables.bytecode
    fn = module.functions[0]
    names = fn.variable_names()
    matmul, relu = (op_call(module, "matmul").writes()[0], op_call(module, "relu").writes()[0])
    assert names[0] == "x" and names[1] == "w"
    assert names[matmul] == "q"  # `k = q` keeps the register q's
    assert names[relu] == "h"
    (induction,) = _defined_by(module, "SCALAR_PHI")
    carried, joined = _defined_by(module, "TENSOR_PHI")
    assert names[induction] == "i" and names[carried] == "h" and names[joined] == "z"
    assert "inner" not in names.values()  # an inlined helper's locals are not the caller's variables
    assert "k" not in names.values()
    assert fn.parameter_registers() == {0: "x", 1: "w"}
    text = module.__str__()
    assert f"names R{matmul}=q" in text and "q: float32[N, 4]" in text
    verify_module(module)


def test_a_rolled_back_loop_round_forgets_its_names() -> None:
    """A loop whose carried type widens compiles its body twice: names of the undone round go too."""

    @jit
    def grow(x: Tensor["N"], n):
        acc = x[:1]
        for i in range(n):  # noqa: B007
            step = ms.ops.concat((acc, x[:1]), axis=0)
            acc = step
        return acc

    grow(np.ones(3, np.float32), ms.mutable(2))
    module = grow.bytecode
    fn = module.functions[0]
    concats = {ins.writes()[0] for _, _, _, _, ins in module.addresses() if ins.name == "OP_CALL"
               and ins["op"] == "concat"}
    assert {r for r, n in fn.names.items() if n == "step"} == concats  # not a register of the undone round
    (carried,) = _defined_by(module, "TENSOR_PHI")
    assert fn.names[carried] == "acc" and fn.names[_defined_by(module, "SCALAR_PHI")[0]] == "i"
    verify_module(module)
