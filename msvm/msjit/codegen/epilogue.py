"""Native kernels that finish their output tile in registers: bias, ReLU, + residual, ReLU.

The job kernels of ``msvm.kernels`` (the ``nchwc`` convolution, the pool GEMM) apply
``conv_common.Epilogue`` to a tile before its one store. The plan's ``fold_epilogues`` offers each
kernel the elementwise pass that alone reads its output; an ``EpilogueKernel`` takes it over when
that pass is ``relu?(relu?(out) + residual)`` read at the pass's own index — a ResNet block's skip
and activation, a transformer's residual add — so the tensor is written once instead of written,
read and written again.
"""

from __future__ import annotations

from ...kernels.conv_common import NO_EPILOGUE, Epilogue
from ...shapes import Dim
from .buffers import Buffer
from .emit_elementwise import ElementwiseKernel
from .kernels import Kernel
from .nodes import Expr, Load, Map
from .views import ZERO, Shape, View, numel, same


class EpilogueKernel(Kernel):
    """A native kernel that applies bias, ReLU, + residual, ReLU (``conv_common.Epilogue``) to its
    register tiles before it stores them, and so can take over the elementwise pass that computes
    those from its output (``out`` at ``out_offset``; ``residual`` read at the same index)."""

    out: Buffer
    bias: Buffer | None
    out_offset: Dim = ZERO
    residual: Load | None = None
    epilogue: Epilogue = NO_EPILOGUE

    def writes(self) -> list[Buffer]:
        return [self.out]

    def epilogue_steps(self) -> str:
        e = self.epilogue
        steps = ["bias"] if self.bias is not None else []
        steps += ["relu"] if e.relu else []
        steps += [f"+{self.residual.buffer.resolve().name}"] if self.residual is not None else []
        steps += ["relu"] if e.relu_out else []
        return f" ({','.join(steps)})" if steps else ""

    def absorb_epilogue(self, consumer: Kernel, buf: Buffer) -> bool:
        """Take over ``consumer`` when it computes ``relu?(relu?(buf) + residual)`` element for element."""
        if not isinstance(consumer, ElementwiseKernel) or buf is not self.out or self.epilogue != NO_EPILOGUE:
            return False
        view = consumer.view
        if consumer.out.dtype != self.out.dtype or not (view.is_contiguous() and _same_numel(view, buf)):
            return False
        expr, relu_out = _strip_relu(consumer.expr)
        parsed = _epilogue(expr, buf, view.shape)
        if parsed is None:
            return False
        relu, residual = parsed
        if residual is None:
            self.epilogue = Epilogue(relu=relu or relu_out)
        else:
            self.epilogue = Epilogue(relu=relu, residual=True, relu_out=relu_out)
        self.out, self.out_offset, self.residual = consumer.out, view.offset, residual
        return True


def _same_numel(view: View, buf: Buffer) -> bool:
    return same(numel(view.shape), numel(buf.shape))


def _strip_relu(expr: Expr) -> tuple[Expr, bool]:
    if isinstance(expr, Map) and expr.op == "relu":
        return expr.args[0], True
    return expr, False


def _epilogue(expr: Expr, buf: Buffer, shape: Shape) -> tuple[bool, Load | None] | None:
    """(ReLU of the kernel's result, residual) when ``expr`` is ``relu?(buf)`` or ``relu?(buf) + residual``
    read at the consumer's own index (every operand a dense view of ``shape``, the residual another
    buffer)."""

    def own(node: Expr) -> bool:
        return isinstance(node, Load) and node.buffer is buf and node.view == View.contiguous(shape)

    def result(node: Expr) -> tuple[bool] | None:
        inner, relu = _strip_relu(node)
        return (relu,) if own(inner) and node.dtype == buf.dtype else None

    if (hit := result(expr)) is not None:
        return hit[0], None
    if not (isinstance(expr, Map) and expr.op == "add" and expr.dtype == buf.dtype and len(expr.args) == 2):
        return None
    for a, other in (expr.args, expr.args[::-1]):
        hit = result(a)
        if (
            hit is not None
            and isinstance(other, Load)
            and other.buffer is not buf
            and other.dtype == buf.dtype
            and other.view.shape == tuple(shape)
            and other.view.is_contiguous()
        ):
            return hit[0], other
    return None
