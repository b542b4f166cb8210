"""Shared fixtures for the JIT tests: every test starts with an empty JIT cache and default settings."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import msvm as ms
from msvm.context import CONTEXT, Context
from msvm.msjit.compiler import COMPILER

_JIT_SETTINGS = ("jit_enabled", "jit_cache_entries", "jit_cache_region_entries", "jit_adaptive_budget",
                 "compile_timeout_ms")


@pytest.fixture(autouse=True)
def fresh_jit() -> Iterator[None]:
    """Empty cache, no pending compiles, no injected fault; JIT settings restored afterwards."""
    ms.vm.reset()
    COMPILER._inject_fault(None)
    yield
    COMPILER._inject_fault(None)
    ms.vm.wait_for_compiles(30)
    ms.vm.reset()
    defaults = Context()
    changed = {k: getattr(defaults, k) for k in _JIT_SETTINGS if getattr(CONTEXT, k) != getattr(defaults, k)}
    if changed:
        ms.set_context(**changed)

