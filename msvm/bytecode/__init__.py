"""MS-BC: the opcode table, the module model, a builder, and the binary and text formats."""

from .builder import FunctionBuilder, ModuleBuilder, normalize_constant
from .module import Block, Function, Instruction, Module, RegRef, make_instruction
from .opcodes import BY_NAME, BY_NUMBER, OPCODES, Kind, OpcodeInfo

__all__ = [
    "BY_NAME",
    "BY_NUMBER",
    "OPCODES",
    "Block",
    "Function",
    "FunctionBuilder",
    "Instruction",
    "Kind",
    "Module",
    "ModuleBuilder",
    "OpcodeInfo",
    "RegRef",
    "make_instruction",
    "normalize_constant",
]
