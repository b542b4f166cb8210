"""The helpers every native kernel call goes through: ``ptr`` and ``Frame``."""

from __future__ import annotations

import numpy as np

from msvm.kernels.native import DATA_OFFSET, Frame, ptr
from msvm.runtime import mempool


def test_ptr_is_the_first_elements_address_for_every_kind_of_array():
    base = np.arange(24.0).reshape(4, 6)
    frozen = base.copy()
    frozen.flags.writeable = False  # a model's constants: read-only, which the buffer protocol refuses
    leased = mempool.POOL.empty((64, 1024), np.float32)  # an ndarray subclass on a pool block
    for arr in (base, base[1:, 2:], base[::-1], base.T, frozen, frozen[2], np.empty((0, 3)), leased):
        assert ptr(arr) == arr.ctypes.data
    assert DATA_OFFSET is not None  # numpy's layout was found (else ptr takes numpy's slower route)


def test_frame_packs_named_fields_and_zeroes_the_rest():
    frame = Frame(("x", "n", "counter"), pointers=("x",), zeroed=("counter",))
    block = frame.pack(x=None, n=7)
    assert list(block) == [0, 7, 0]
