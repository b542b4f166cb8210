"""A torch user's code: torch tensors as inputs, torch's tensor-method spellings, and the calls whose
numpy and torch meanings differ (a warning naming both) or that only one library has (an error that
says the spelling that works)."""

# ruff: noqa: F821

import warnings

import numpy as np
import pytest

import msvm as ms
import msvm.nn.functional as F
from msvm.errors import CompileError
from msvm.frontend import PortingWarning

torch = pytest.importorskip("torch")
RNG = np.random.default_rng(26)
TABLE = RNG.standard_normal((10, 4)).astype(np.float32)


@ms.jit
def same(x):
    return x


@ms.jit
def lookup(ids: ms.Tensor["B", "S", np.int64]):
    return ms.ops.embedding(ids, TABLE)


class Producer:
    """Anything with ``__dlpack__``: here a wrapper of a numpy array, as cupy or jax arrays would be."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


def test_torch_tensors_are_read_in_place_and_typed_by_numpy_names() -> None:
    t = torch.arange(12, dtype=torch.int64).reshape(3, 4)
    out = same(t)
    assert type(out) is np.ndarray and out.dtype == np.int64
    assert np.shares_memory(out, t.numpy())  # zero-copy: the returned input is the tensor's memory
    assert list(same.versions) == [((np.dtype("int64"), 2),)]
    assert "int64[x_0, x_1]" in str(same.bytecode) and "torch." not in str(same.bytecode)


def test_any_dlpack_producer_is_accepted() -> None:
    a = RNG.standard_normal((2, 3)).astype(np.float32)
    out = same(Producer(a))
    assert np.shares_memory(out, a)
    np.testing.assert_array_equal(lookup(Producer(np.array([[1, 2]]))), TABLE[[[1, 2]]])


def test_torch_tensors_meet_the_dtype_checks_of_numpy_arrays() -> None:
    ids = torch.tensor([[1, 2], [3, 9]])
    np.testing.assert_array_equal(lookup(ids), TABLE[ids.numpy()])
    for wrong in (ids.int(), ids.float()):  # not cast on the way in: the pinned int64 refuses them
        with pytest.raises(TypeError, match=f"must have dtype int64 .* got {str(wrong.dtype)[6:]}"):
            lookup(wrong)
    grad = torch.randn(3, 2, dtype=torch.float64, requires_grad=True)
    out = same(grad)  # inference reads the detached values, in place
    assert out.dtype == np.float64 and np.shares_memory(out, grad.detach().numpy())


@ms.jit
def torch_methods(x):
    return (x.sum(dim=1, keepdim=True), x.mean(dim=(2, 3)), x.view(2, -1), x.size(1), x.size(), x.flatten(1),
            x.softmax(-1), x.swapaxes(1, 2), x.mT, ms.ops.concat([x, x], dim=1), ms.ops.arange(x.shape[0]),
            x.argmax(dim=1), x.permute(0, 2, 1, 3))


def test_torch_spellings_that_are_unambiguous_work() -> None:
    x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    t = torch.from_numpy(x)
    expected = (t.sum(dim=1, keepdim=True), t.mean(dim=(2, 3)), t.view(2, -1), t.size(1), tuple(t.size()),
                t.flatten(1), t.softmax(-1), t.swapaxes(1, 2), t.mT, torch.cat([t, t], dim=1),
                torch.arange(2), t.argmax(dim=1), t.permute(0, 2, 1, 3))
    for out, want in zip(torch_methods(x), expected):
        if isinstance(want, (int, tuple)):
            assert out == want
        else:
            np.testing.assert_allclose(out, want.numpy(), rtol=1e-6, atol=1e-6)


def test_transpose_of_both_axes_on_rank_2_warns_naming_both_meanings() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")

        @ms.jit
        def scores(q: ms.Tensor["L", "E"], k: ms.Tensor["S", "E"]):
            return q @ k.transpose(-2, -1).T  # <- the warning's line

    (warning,) = [w for w in caught if issubclass(w.category, PortingWarning)]
    text = str(warning.message)
    assert "numpy's identity permutation" in text and "torch's swaps the two dims" in text
    assert "x.mT" in text and "x.swapaxes(-2, -1)" in text and "F.transpose(x, -2, -1)" in text
    assert warning.filename == __file__
    with open(__file__) as source:
        assert "<- the warning's line" in source.readlines()[warning.lineno - 1]


def _compile_error(fn, *args) -> CompileError:
    with pytest.raises(CompileError) as info:
        fn(*args)
    return info.value


def test_errors_in_torch_style_say_the_msvm_spelling() -> None:
    x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    c = np.ones(3, np.float32)

    @ms.jit
    def swap(x):
        return x.transpose(1, 2)

    err = _compile_error(swap, x)
    assert "numpy's transpose takes every axis" in err.message
    assert "x.swapaxes(1, 2)" in err.hint and "F.transpose(x, 1, 2)" in err.hint

    @ms.jit
    def values(x):
        return x.max(dim=1)

    err = _compile_error(values, x)
    assert "(values, indices)" in err.message and "x.max(axis=...)" in err.hint and "x.argmax" in err.hint

    @ms.jit
    def train(x, c):
        return F.batch_norm(x, c, c, training=True)

    err = _compile_error(train, x, c)
    assert "training=True is not supported" in err.message and "training=False" in err.hint

    @ms.jit
    def legacy(x, c):  # the old msvm order: weight positional, normalized_shape by keyword
        return F.layer_norm(x, c, c, normalized_shape=(5,))

    err = _compile_error(legacy, x, c)
    assert "multiple values for 'normalized_shape'" in err.message
    assert "layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-05)" in err.hint

    @ms.jit
    def cast_in_softmax(x):
        return F.softmax(x, -1, dtype="float64")

    err = _compile_error(cast_in_softmax, x)
    assert "dtype='float64' is not supported" in err.message and "x.astype('float64')" in err.hint
