"""Shared fixtures for the JIT tests: every test starts with an empty JIT cache and default settings.

The speed policy (demoting entries slower than the interpreter, skipping regions below the launch
overhead) is off unless a test asks for it with the ``speed_policy`` fixture: the tests' regions are
tiny, and whether native code beats the interpreter on them depends on the machine's load.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import msvm as ms
from msvm.context import CONTEXT, Context
from msvm.msjit.compiler import COMPILER
from msvm.msjit.runtime import POLICY

_JIT_SETTINGS = ("jit_enabled", "jit_cache_entries", "jit_cache_region_entries", "jit_adaptive_budget",
                 "compile_timeout_ms")


@pytest.fixture(autouse=True)
def fresh_jit(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Empty cache, no pending compiles, no injected fault, no speed policy; settings restored afterwards."""
    ms.vm.reset()
    COMPILER._inject_fault(None)
    monkeypatch.setattr(POLICY, "demote", False)
    monkeypatch.setattr(POLICY, "skip_small", False)
    yield
    COMPILER._inject_fault(None)
    ms.vm.wait_for_compiles(30)
    ms.vm.reset()
    defaults = Context()
    changed = {k: getattr(defaults, k) for k in _JIT_SETTINGS if getattr(CONTEXT, k) != getattr(defaults, k)}
    if changed:
        ms.set_context(**changed)



@pytest.fixture
def speed_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    """The speed policy as users get it: demotion and skipping regions that are too small."""
    monkeypatch.setattr(POLICY, "demote", True)
    monkeypatch.setattr(POLICY, "skip_small", True)
