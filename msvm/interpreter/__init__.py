"""The BC-Interpreter: runs verified modules through generated Python, or one step at a time."""

from .program import Executable, Program
from .stepping import Execution, RegisterState

__all__ = ["Executable", "Execution", "Program", "RegisterState"]
