"""The Op-Scheduler: binds each OP_CALL to a kernel variant for its device, dtypes and shapes."""

from .dispatch import bind_kernel

__all__ = ["bind_kernel"]
