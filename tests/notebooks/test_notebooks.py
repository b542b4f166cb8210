"""Every tutorial notebook runs top to bottom with no error output, in under a minute, and is stored clean."""

from __future__ import annotations

import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
CELL_TIMEOUT_S = 120
NOTEBOOK_BUDGET_S = 60


def test_there_are_tutorials() -> None:
    assert [p.name for p in NOTEBOOKS][:1] == ["01_quickstart.ipynb"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_is_stored_without_outputs(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None, f"{path.name}: outputs stored"


# CPython 3.11's AST constructor keeps its recursion depth in interpreter-wide state, so two threads
# building ASTs at once can fail one of them (python/cpython#106905). In a fresh kernel, plotly's import
# of nbformat builds hundreds (jsonschema loads a lark grammar through ast.literal_eval) while a kernel
# thread builds its own: plotly prints the SystemError, goes on without nbformat, and the notebook is
# fine. Seen once (a fresh-clone run of .ci/run, notebook 07's first cell, before it imported msvm); a
# notebook failing only that way runs once more, and must then be clean.
UPSTREAM_RACE = ("Error importing optional module nbformat", "AST constructor recursion depth mismatch")


def run_notebook(path: Path, tmp_path: Path) -> tuple[list[str], float]:
    """(the errors and tracebacks the notebook's cells output, seconds it took)."""
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(tmp_path)}})
    start = time.monotonic()
    client.execute()
    took = time.monotonic() - start
    errors = []
    for index, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            if out.output_type == "error":
                errors.append(f"cell {index}: {out.ename}: {out.evalue}")
            elif out.output_type == "stream" and out.name == "stderr" and "Traceback" in out.text:
                errors.append(f"cell {index}: traceback on stderr:\n{out.text}")
    return errors, took


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_clean(path: Path, tmp_path: Path) -> None:
    errors, took = run_notebook(path, tmp_path)
    if errors and all(all(mark in error for mark in UPSTREAM_RACE) for error in errors):
        errors, took = run_notebook(path, tmp_path)
    assert not errors, f"{path.name}:\n" + "\n".join(errors)
    assert took < NOTEBOOK_BUDGET_S, f"{path.name} took {took:.1f} s"
