"""Fixtures for the Jupyter layer's tests: an IPython shell with ``%load_ext msvm``, what it displayed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msvm_widgets.magics as magics
import pytest
from IPython.testing.globalipapp import start_ipython
from msvm_widgets.progress import CellProgress

from msvm.observe.trace import TRACE


@pytest.fixture(scope="session")
def shell() -> Any:
    ip = start_ipython()
    ip.run_line_magic("load_ext", "msvm")
    return ip


@pytest.fixture
def ip(shell: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The shell with numpy and msvm imported, in a temporary working directory."""
    monkeypatch.chdir(tmp_path)
    shell.run_cell("import numpy as np\nimport msvm as ms\nfrom msvm.frontend import Tensor, jit, mutable",
                   store_history=True)
    yield shell
    TRACE.enable(False)
    TRACE.clear()


class Displayed(list):
    """What the magics displayed for the cell, in order; ``progress``: the running cells' progress lines."""

    def __init__(self) -> None:
        super().__init__()
        self.progress: list[CellProgress] = []


@pytest.fixture
def shown(monkeypatch: pytest.MonkeyPatch) -> Displayed:
    """Every object the magics display (widgets, or raw mime bundles), progress lines apart."""
    out = Displayed()

    def record(obj: Any, **_kw: Any) -> None:
        (out.progress if isinstance(obj, CellProgress) else out).append(obj)

    monkeypatch.setattr(magics, "display", record)
    return out
