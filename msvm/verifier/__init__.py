"""The verifier: structure, SSA and dominance, phis, frees, types and symbolic shapes."""

from .cfg import CFG, build_cfg
from .diagnostics import CODES, Diagnostic
from .verify import (
    BOOL,
    BoolType,
    FunctionInfo,
    ModuleInfo,
    RegType,
    ScalarType,
    analyze_module,
    check_module,
    infer_types,
    verify_module,
)

__all__ = [
    "BOOL",
    "CFG",
    "CODES",
    "BoolType",
    "Diagnostic",
    "FunctionInfo",
    "ModuleInfo",
    "RegType",
    "ScalarType",
    "analyze_module",
    "build_cfg",
    "check_module",
    "infer_types",
    "verify_module",
]
