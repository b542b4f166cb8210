"""The benchmark suites still run against the current API (their figures are not checked here)."""

from __future__ import annotations

import importlib

import pytest

from bench.__main__ import SUITES


@pytest.mark.parametrize("suite", SUITES)
def test_every_suite_imports_and_has_a_main(suite):
    assert callable(importlib.import_module(f"bench.{suite}").main)


def test_the_interference_table_runs():
    from bench.codegen import bench_interference

    rows = bench_interference()
    assert rows[0][0] == "nothing compiling" and len(rows) == 3
    assert all(int(r[3]) >= 1 for r in rows[1:])  # compiles really ran beside the measured calls
