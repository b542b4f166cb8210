"""The size limits every allocation is checked against before it is made (``max_tensor_bytes``).

One place for the check and its error, shared by the interpreter's entry check and allocations,
the dispatcher (outputs known only at run time, kernel workspaces) and the JIT's launchers, so that
``E-LIMIT-TENSOR`` always means a limit was kept and ``E-LIMIT-MEMORY`` only that the machine ran out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..context import CONTEXT
from ..errors import ResourceLimitError, ShapeError

HINT = "raise it with ms.set_context(max_tensor_bytes=...) if this size is intended"


def nbytes_of(shape: Sequence[int], itemsize: int) -> int:
    nbytes = itemsize
    for d in shape:
        nbytes *= d
    return nbytes


def check_size(address: int | None, shape: tuple[int, ...], itemsize: int, opcode: str | None) -> None:
    """Raise before allocating a tensor with a negative or over-limit size."""
    if any(d < 0 for d in shape):
        raise ShapeError(
            f"negative size in shape {shape}", code="E-SHAPE-NEGATIVE", address=address, opcode=opcode
        )
    nbytes = nbytes_of(shape, itemsize)
    if nbytes > CONTEXT.max_tensor_bytes:
        raise ResourceLimitError(
            f"a tensor of shape {shape} needs {nbytes:,} bytes, "
            f"over max_tensor_bytes={CONTEXT.max_tensor_bytes:,}",
            code="E-LIMIT-TENSOR",
            address=address,
            opcode=opcode,
            hint=HINT,
        )


def workspace_error(op: str, shapes: str, needs: Mapping[str, int],
                    address: int | None) -> ResourceLimitError:
    """The error for a call no kernel can run within the limit: ``needs`` is each kernel's workspace."""
    listing = ", ".join(f"{name} {nbytes:,}" for name, nbytes in sorted(needs.items(), key=lambda kv: kv[1]))
    return ResourceLimitError(
        f"every kernel of {op} for inputs {shapes} needs a workspace over "
        f"max_tensor_bytes={CONTEXT.max_tensor_bytes:,} bytes ({listing})",
        code="E-LIMIT-TENSOR",
        address=address,
        opcode=f"OP_CALL {op}",
        hint=HINT,
    )


__all__ = ["HINT", "check_size", "nbytes_of", "workspace_error"]
