"""SCD analysis: anchored dims, their reasons, and the article's three "why didn't my function JIT" traps."""

# ms.Tensor["N", 3] reads to linters as string forward references ("?" as a syntax error): noise here.
# ruff: noqa: F821, F722

import numpy as np

import msvm as ms
import msvm.ops as ops
from msvm.bytecode import ModuleBuilder
from msvm.frontend import Tensor, jit, mutable
from msvm.interpreter import Program


def rand(*shape: int) -> np.ndarray:
    return np.random.default_rng(0).random(shape, dtype=np.float32)


@jit
def resize_block(x: Tensor["N", 3, "H", "W"], h):
    y = x[:, :, :h, :]
    z = ops.resize_nearest(y, size=(h * 2, x.shape[3] * 2))
    return ops.relu(z * 2.0 + 1.0)


def test_anchored_dims_with_symbols_and_concrete_sizes() -> None:
    x = rand(2, 3, 8, 8)
    a = ms.vm.scd_analysis(resize_block, x, mutable(4))
    by_op = {t.opcode: t for t in a.tensors}
    z = by_op["OP_CALL resize_nearest"]
    assert [str(d) for d in z.dims] == ["N", "3", "h*2", "W*2"]
    assert z.scd == 1.0 and all(z.anchored)
    assert z.shape_text() == "[N=2, 3, h*2=8, W*2=16]"
    assert by_op["OP_CALL relu"].summary() == "propagated from R11"
    assert a.tensors[0].name == "x" and a.tensors[0].reasons[0] == "bound by input x"
    assert len(a.regions) == 1 and a.regions[0].compilable and a.regions[0].scd == 1.0
    data = a.as_dict()
    assert data["tensors"][0]["dims"] == ["N", "3", "H", "W"] and data["regions"][0]["compilable"] is True


# -- pitfall 1: a plain Python int that should have been ms.mutable ---------------------------------------


@jit
def crop(x: Tensor["N", 8], h):
    return ops.relu(x[:h] * 2.0)


def test_pitfall_plain_int_is_specialised_per_value() -> None:
    x = rand(6, 8)
    for h in (2, 3, 4):
        for _ in range(3):
            crop(x, h)
    analysis = ms.vm.scd_analysis(crop, x, 4)
    (note,) = analysis.specialised
    assert note["parameter"] == "h" and note["versions"] == [2, 3, 4]
    assert "ms.mutable(h)" in note["message"] and "new version" in note["message"]
    assert "ms.mutable(h)" in analysis.text()
    ms.vm.wait_for_compiles(30)
    entries = [e for e in ms.vm.jit_info() if e["function"] == "crop"]
    assert len(entries) == 3 and len({e["name"] for e in entries}) == 3  # one entry per value
    assert any("another version of crop" in e["reason"] for e in entries)
    assert ms.vm.scd_analysis(crop, x, mutable(4)).specialised == []


# -- pitfall 2: h*2 computed outside the bytecode -----------------------------------------------------------


@jit
def upsample_to(x: Tensor["N", 3, "H", "W"], like: Tensor["?", "?"]):
    # the target size was computed in Python (h*2): it comes in through a tensor the bytecode cannot relate
    return ops.relu(ops.resize_nearest(x, size=(like.shape[0], like.shape[1])) + 1.0)


def test_pitfall_size_computed_outside_the_bytecode() -> None:
    x, like = rand(1, 3, 4, 4), np.zeros((8, 8), np.float32)
    analysis = ms.vm.scd_analysis(upsample_to, x, like)
    up = next(t for t in analysis.tensors if t.opcode == "OP_CALL resize_nearest")
    assert [str(d) for d in up.dims] == ["N", "3", "?", "?"] and up.anchored == (True, True, False, False)
    assert up.scd == 0.5
    reason = up.reasons[2]
    assert "unbound symbol" in reason and "outside the bytecode" in reason
    assert "ms.mutable" in reason and "ms.symbolic_mul" in reason
    (region,) = analysis.regions
    assert not region.compilable and "SCD 0.50 < threshold 0.80" in region.reason
    for _ in range(5):
        np.testing.assert_allclose(upsample_to(x, like), upsample_to.py_func(x, like))
    assert ms.vm.jit_info() == []  # below the threshold: never compiled


@jit
def upsample_bound(x: Tensor["N", 3, "H", "W"]):
    return ops.relu(ops.resize_nearest(x, size=(x.shape[2] * 2, x.shape[3] * 2)) + 1.0)


def test_symbolic_mul_keeps_the_chain_anchored() -> None:
    analysis = ms.vm.scd_analysis(upsample_bound, rand(1, 3, 4, 4))
    up = next(t for t in analysis.tensors if t.opcode == "OP_CALL resize_nearest")
    assert [str(d) for d in up.dims] == ["N", "3", "H*2", "W*2"] and up.scd == 1.0
    assert analysis.regions[0].compilable


# -- pitfall 3: a data-dependent op --------------------------------------------------------------------------


@jit
def positives(x: Tensor["N", 4]):
    y = ops.relu(x * 2.0 - 1.0)
    v = ops.masked_select(y, y > 0.5)
    return ops.exp(v) * 2.0


def test_pitfall_data_dependent_op_ends_the_region() -> None:
    x = rand(5, 4)
    analysis = ms.vm.scd_analysis(positives, x)
    selected = next(t for t in analysis.tensors if t.opcode == "OP_CALL masked_select")
    assert [str(d) for d in selected.dims] == ["?"] and selected.scd == 0.0
    assert selected.reasons[0].startswith("data-dependent: masked_select at 0x")
    first, second = analysis.regions
    assert first.compilable and first.end < selected.address < second.start
    assert not second.compilable
    assert "propagated from R8: data-dependent: masked_select" in second.unanchored[0]
    (split,) = analysis.splits
    assert split.kind == "data-dependent" and split.address == selected.address
    assert first.ended_by == split and second.started_after == split
    text = analysis.text()
    assert "data-dependent: masked_select at 0x0008" in text and "split at 0x0008" in text


def test_below_threshold_never_compiles_but_the_rest_does() -> None:
    x = rand(5, 4)
    for _ in range(4):
        np.testing.assert_allclose(positives(x), positives.py_func(x), rtol=1e-6)
    assert ms.vm.wait_for_compiles(30)
    regions = {e["region"] for e in ms.vm.jit_info() if e["function"] == "positives"}
    assert regions == {0}


# -- other causes -------------------------------------------------------------------------------------------


@jit
def branches(x: Tensor["N", 4], y: Tensor["M", 4]):
    if x.shape[0] > 2:
        z = x * 2.0
    else:
        z = y + 1.0
    return ops.relu(z)


def test_merge_of_branches_with_different_sizes() -> None:
    analysis = ms.vm.scd_analysis(branches, rand(3, 4), rand(5, 4))
    phi = next(t for t in analysis.tensors if t.opcode == "TENSOR_PHI")
    assert phi.anchored == (False, True)
    assert phi.reasons[0].startswith("merge of branches with different sizes")
    arms = [r for r in analysis.regions if r.n_calls and r.compilable]
    assert len(arms) == 2  # each arm is its own region; a signature makes only one of them hot
    assert any(s.opcode == "CMP" for s in analysis.splits)


def test_fresh_symbol_nothing_binds_is_not_anchored() -> None:
    mb = ModuleBuilder("m")
    f = mb.function("f", ["x"])
    x = f.tensor_input(0, "[N, 4]", "float32")
    f.ret(f.call("relu", [x]))
    exe = Program(mb.build()).function("f")
    exe.info.entry_symbols = frozenset()  # as if N were a symbol made up inside the function
    analysis = ms.vm.scd_analysis(exe, rand(2, 4))
    relu = analysis.tensors[-1]
    assert relu.anchored == (False, True)
    assert "nothing binds" in relu.causes[0] and "ms.symbolic_mul" in relu.causes[0]


def test_print_scd_analysis(capsys) -> None:
    ms.vm.print_scd_analysis(upsample_to, rand(1, 3, 4, 4), np.zeros((8, 8), np.float32))
    out = capsys.readouterr().out
    assert "SCD=0.50" in out and "float32[N=1, 3, ?, ?]" in out
    assert "causes of unanchored dims:" in out and "declared ? by input like" in out
