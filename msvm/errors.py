"""The msvm error hierarchy: every error is a value with a code, a location and a hint.

Locations are either a bytecode address (``msvm://bc/0x002a``), a source position
(``file:line:col``), or both; tools read the structured fields, people read ``str(err)``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SourceLoc:
    """A position in user source (a file or a notebook cell); ``col`` is 0-based like ``ast``."""

    file: str
    line: int
    col: int = 0

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col + 1}"


def format_address(address: int) -> str:
    """The canonical spelling of a bytecode address, shared by errors, disassembly and widgets."""
    return f"msvm://bc/0x{address:04x}"


class MsvmError(Exception):
    """Root of all msvm errors."""

    default_code = "E-MSVM"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        address: int | None = None,
        opcode: str | None = None,
        source: SourceLoc | None = None,
        hint: str | None = None,
    ) -> None:
        self.message = message
        self.code = code or self.default_code
        self.address = address
        self.opcode = opcode
        self.source = source
        self.hint = hint
        super().__init__(str(self))

    @property
    def location(self) -> str:
        parts = []
        if self.address is not None:
            where = format_address(self.address)
            if self.opcode:
                where += f" ({self.opcode})"
            parts.append(where)
        if self.source is not None:
            parts.append(str(self.source))
        return ", ".join(parts)

    def __str__(self) -> str:
        text = f"[{self.code}] "
        if self.location:
            text += f"at {self.location}: "
        text += self.message
        if self.hint:
            text += f"\n  hint: {self.hint}"
        return text

    def to_dict(self) -> dict:
        return {
            "code": self.code,
            "message": self.message,
            "address": self.address,
            "opcode": self.opcode,
            "source": str(self.source) if self.source else None,
            "hint": self.hint,
        }


class BytecodeFormatError(MsvmError):
    """A ``.msbc`` file or MS-BC text that cannot be read; names the byte offset or line:column."""

    default_code = "E-FORMAT"

    def __init__(self, message: str, *, offset: int | None = None, section: str | None = None, **kw) -> None:
        self.offset = offset
        self.section = section
        where = []
        if section is not None:
            where.append(f"section {section}")
        if offset is not None:
            where.append(f"byte offset {offset}")
        if where:
            message = f"{message} ({', '.join(where)})"
        super().__init__(message, **kw)


class VerifyError(MsvmError):
    """A module failed verification; ``diagnostics`` lists every problem found."""

    default_code = "E-VERIFY"

    def __init__(self, diagnostics: list, **kw) -> None:
        self.diagnostics = list(diagnostics)
        n = len(self.diagnostics)
        lines = [f"module failed verification with {n} error{'s' if n != 1 else ''}:"]
        lines += [f"  {d}" for d in self.diagnostics]
        first = self.diagnostics[0] if self.diagnostics else None
        super().__init__(
            "\n".join(lines),
            code=kw.pop("code", None) or (first.code if first else None),
            address=kw.pop("address", None) if first is None else first.address,
            opcode=None if first is None else first.opcode,
            **kw,
        )

    def __str__(self) -> str:
        return self.message


class CompileError(MsvmError):
    """Python source that the frontend cannot compile; carries file:line:col and what to write instead."""

    default_code = "E-COMPILE"


class ShapeError(MsvmError):
    """Shapes that do not agree at run time (or provably at compile time)."""

    default_code = "E-SHAPE"


class ResourceLimitError(MsvmError):
    """A configured limit (bytes per tensor or call, loop iterations) would be exceeded, or memory ran out.

    ``E-LIMIT-MEMORY`` is the machine itself running out of memory while a kernel ran (a MemoryError).
    """

    default_code = "E-LIMIT"


class KernelError(MsvmError):
    """A kernel failed at run time for a reason other than its inputs' shapes or memory.

    Kernels' ValueError/IndexError become ``ShapeError`` and MemoryError ``ResourceLimitError``; anything
    else (a bug in a kernel variant, an unexpected numpy error) is this. The message names the instruction
    and the original error, the hint the inputs.
    """

    default_code = "E-RUNTIME"


class KernelNotFoundError(MsvmError):
    """No usable kernel variant for an op on a device, and fallback is off."""

    default_code = "E-KERNEL"


class JitError(MsvmError):
    """Native compilation failed and the function was declared with ``fallback=False``."""

    default_code = "E-JIT"


class CapabilityPatchError(MsvmError, ValueError):
    """A capability patch (``ms.vm.load_capability_patch``) that does not fit the schema, or a patch file
    that cannot be read or parsed; ``path`` is the JSON path of the offending key ("$" for the whole)."""

    default_code = "E-CAPABILITY-PATCH"

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        super().__init__(f"capability patch: at {path}: {message}")


class OnnxImportError(MsvmError):
    """An ONNX model msvm cannot import: an unsupported op or attribute (naming the node, its op type,
    opset and what is supported), or a file that is malformed, truncated, oversized or unsafe."""

    default_code = "E-ONNX"


__all__ = [
    "BytecodeFormatError",
    "CapabilityPatchError",
    "CompileError",
    "JitError",
    "KernelError",
    "KernelNotFoundError",
    "MsvmError",
    "OnnxImportError",
    "ResourceLimitError",
    "ShapeError",
    "SourceLoc",
    "VerifyError",
    "format_address",
]
