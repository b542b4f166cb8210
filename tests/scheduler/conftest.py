"""Fixtures for the scheduler tests: a clean scheduler per test and fake variants."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from scheduler_helpers import SETTINGS, Counting

from msvm.context import CONTEXT, set_context
from msvm.scheduler import CALIBRATOR, reset_capability_db, reset_dispatch_state
from msvm.scheduler.capability import load_variants
from msvm.scheduler.variants import VARIANTS


@pytest.fixture(autouse=True)
def clean_scheduler(tmp_path, monkeypatch):
    """Every test starts with no patches, no calibration, no remembered decisions, default settings,
    an empty on-disk cache of its own, a machine idle as far as saving goes, and no background
    calibration (it would run the fake variants and change decisions under the test's feet; tests
    that want it switch it on)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr("os.getloadavg", lambda: (0.0, 0.0, 0.0))  # saves do not depend on the machine
    monkeypatch.setattr(CALIBRATOR, "enabled", False)
    load_variants()  # real variants registered before any test replaces an op's list
    saved = {k: getattr(CONTEXT, k) for k in SETTINGS}
    reset_capability_db()
    reset_dispatch_state()
    yield
    set_context(**saved)
    reset_capability_db()
    reset_dispatch_state()


@pytest.fixture
def fake_variants(monkeypatch):
    """``fake_variants(op, [Counting, ...])`` replaces ``op``'s registered variants for one test."""

    def install(op: str, fakes: Sequence[Counting]) -> None:
        monkeypatch.setitem(VARIANTS, op, [f.variant for f in fakes])

    return install
