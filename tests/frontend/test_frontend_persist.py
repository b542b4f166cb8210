"""ms.save / ms.load: a compiled function saved to .msbc, loaded and run, gives identical results."""

# ms.Tensor["N", 3] reads to linters as string forward references: F821 is noise here. No
# `from __future__ import annotations` either: with it, ruff's UP037 "fix" unquotes the symbols.
# ruff: noqa: F821

from pathlib import Path

import numpy as np
import pytest

import msvm as ms
import msvm.ops
from msvm.frontend import LoadedModule, Tensor, jit, load, mutable, save

RNG = np.random.default_rng(1)


@jit
def model(x: Tensor["N", "C"], w: Tensor["C", "K"]):
    h = ms.ops.relu(x @ w)
    if x.shape[0] > 2:
        h = h[:2]
    for i in range(h.shape[1]):
        h = h + i * 0.5
    return ms.ops.softmax(h, axis=-1), h.shape[0]


@jit
def with_mutable(x, n):
    return x[:n] * 2


def test_round_trip_gives_identical_results(tmp_path: Path) -> None:
    """Bit-identical under the reference kernels: with the cost policy each program picks its kernel
    variants from the capability DB as it binds, which earlier tests of the suite change, so the two
    programs may run kernels that round differently (one CI run saw 1-ulp differences)."""
    path = tmp_path / "model.msbc"
    save(model, path)
    mod = load(path)
    assert isinstance(mod, LoadedModule)
    assert mod.module == model.bytecode
    policy = ms.context.CONTEXT.kernel_policy
    ms.set_context(kernel_policy="reference")
    try:
        for n in (1, 5):
            x = RNG.standard_normal((n, 3)).astype(np.float32)
            w = RNG.standard_normal((3, 4)).astype(np.float32)
            got, want = mod.model(x, w), model(x, w)
            np.testing.assert_array_equal(got[0], want[0])
            assert got[1] == want[1]
    finally:
        ms.set_context(kernel_policy=policy)


def test_locations_survive_and_save_is_byte_stable(tmp_path: Path) -> None:
    first, second = tmp_path / "a.msbc", tmp_path / "b.msbc"
    save(model, first)
    mod = load(first)
    save(mod.module, second)
    assert first.read_bytes() == second.read_bytes()
    locs = [ins.loc for _, _, _, _, ins in mod.module.addresses()]
    assert all(loc is not None and loc.file == __file__ for loc in locs)


def test_loaded_module_surface(tmp_path: Path) -> None:
    x = np.arange(6, dtype=np.float32)
    with_mutable(x, mutable(3))
    path = tmp_path / "m.msbc"
    save(with_mutable, path)
    mod = load(str(path))
    assert "with_mutable" in dir(mod)
    np.testing.assert_array_equal(mod.with_mutable(x, 4), x[:4] * 2)
    with pytest.raises(AttributeError, match="no function"):
        _ = mod.missing
    assert "with_mutable" in repr(mod)


def test_save_rejects_other_objects(tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        save(lambda x: x, tmp_path / "f.msbc")
