"""Bytecode → bytecode passes run on a verified module before the interpreter and the JIT see it.

``rewrite``: the pattern rewrites (``patterns.PATTERNS``), what ``Program`` runs once per prepared
module unless its options say ``rewrite=False``.
"""

from .patterns import PATTERNS
from .rewrite import Rewrite, rewrite_module

__all__ = ["PATTERNS", "Rewrite", "rewrite_module"]
