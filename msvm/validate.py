"""``ms.validate``: read a module from anywhere (path, bytes, text, Module) and verify it."""

from __future__ import annotations

import os
from pathlib import Path

from .bytecode.binary import MAGIC, decode_module
from .bytecode.module import Module
from .bytecode.text import assemble
from .errors import BytecodeFormatError
from .verifier import ModuleInfo, verify_module


def read_module(source: Module | bytes | str | os.PathLike) -> Module:
    """A Module from a Module, .msbc bytes, a path to .msbc or MS-BC text, or MS-BC text itself."""
    if isinstance(source, Module):
        return source
    if isinstance(source, bytes):
        return decode_module(source)
    if isinstance(source, str) and ("\n" in source or source.lstrip().startswith(("module", "func", ";"))):
        return assemble(source)
    path = Path(source)
    try:
        data = path.read_bytes()
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        message = getattr(exc, "strerror", None) or exc
        raise BytecodeFormatError(f"cannot read {path}: {message}", code="E-FORMAT-IO") from None
    if data.startswith(MAGIC):
        return decode_module(data)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise BytecodeFormatError(
            f"{path} is neither an .msbc file (bad magic) nor UTF-8 MS-BC text", offset=0, section="header"
        ) from None
    return assemble(text, filename=str(path))


def validate(source: Module | bytes | str | os.PathLike) -> ModuleInfo:
    """Read and verify; raises BytecodeFormatError (unreadable) or VerifyError (invalid)."""
    return verify_module(read_module(source))
