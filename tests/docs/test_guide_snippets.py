"""docs/guide.md cannot rot: its python, bash and ipython blocks all run, and every setting is in it.

Blocks run in document order in one scratch directory, so the command-line block can use the file the
saving block wrote. Each Python block runs in a fresh namespace, from a real file so that ``@ms.jit``
can read its source; bash blocks run with this checkout's ``msvm`` on PATH; ipython blocks run as the
cells of one IPython shell (a notebook) in a subprocess. JIT state, tracing and settings are restored
after every block.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import runpy
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import msvm as ms
from msvm.context import CONTEXT, Context
from msvm.frontend.jitfunction import JitOptions
from msvm.msjit.compiler import COMPILER
from msvm.observe.trace import TRACE

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guide.md"
TEXT = GUIDE.read_text(encoding="utf-8")
BLOCKS = [
    (m["lang"], m["body"], TEXT[: m.start()].count("\n") + 2)  # language, text, line of its first line
    for m in re.finditer(r"^```(?P<lang>\w*)\n(?P<body>.*?)^```$", TEXT, re.M | re.S)
]
SCRIPTS = [i for i, (lang, _, _) in enumerate(BLOCKS) if lang in ("python", "bash")]

# The notebook blocks run in their own process: IPython's global test shell can be started only once
# per process, and the widget tests start it for themselves.
NOTEBOOK = """
import json, sys
import msvm_widgets.magics as magics
from IPython.testing.globalipapp import start_ipython

shown = []
magics.display = lambda obj, **kw: shown.append(obj)
shell = start_ipython()
for line, cell in json.loads(sys.stdin.read()):
    before = len(shown)
    result = shell.run_cell(cell, store_history=True)
    if not result.success:
        sys.exit(f"guide.md line {line}: {result.error_before_exec or result.error_in_exec!r}")
    if cell.startswith("%%msvm") and len(shown) == before:
        sys.exit(f"guide.md line {line}: the cell magic displayed nothing")
"""


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The working directory of every block; ``msvm`` on PATH runs this checkout's command line."""
    root = tmp_path_factory.mktemp("guide")
    shim = root / "bin" / "msvm"
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m msvm "$@"\n', encoding="utf-8")
    shim.chmod(shim.stat().st_mode | stat.S_IEXEC)
    return root


@pytest.fixture(autouse=True)
def in_scratch(scratch: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.chdir(scratch)
    ms.vm.reset()
    yield


def run_block(index: int, scratch: Path) -> None:
    """Run block ``index``, then put the JIT, the tracer and the settings back as they were."""
    lang, body, line = BLOCKS[index]
    saved = dataclasses.asdict(CONTEXT)
    try:
        if lang == "python":
            path = scratch / f"guide_line{line}.py"
            path.write_text(body, encoding="utf-8")
            runpy.run_path(str(path), run_name="__guide__")
        else:
            env = {**os.environ, "PATH": f"{scratch / 'bin'}{os.pathsep}{os.environ['PATH']}"}
            result = subprocess.run(
                ["bash", "-e", "-c", body], cwd=scratch, env=env, capture_output=True, text=True, timeout=300
            )
            assert result.returncode == 0, f"guide.md line {line}:\n{result.stdout}\n{result.stderr}"
    finally:
        ms.vm.wait_for_compiles(60)
        ms.vm.reset()
        COMPILER._inject_fault(None)
        if TRACE.enabled:
            ms.vm.enable_bc_trace(False)
        ms.vm.clear_bc_trace()
        changed = {k: v for k, v in saved.items() if getattr(CONTEXT, k) != v}
        if changed:
            ms.set_context(**changed)


def test_the_guide_has_snippets() -> None:
    langs = [lang for lang, _, _ in BLOCKS]
    assert langs.count("python") >= 8 and "bash" in langs and langs.count("ipython") >= 3


@pytest.mark.parametrize("index", SCRIPTS, ids=lambda i: f"{BLOCKS[i][0]}-line{BLOCKS[i][2]}")
def test_snippet_runs(index: int, scratch: Path) -> None:
    for earlier in SCRIPTS[: SCRIPTS.index(index)]:  # once each, in order: a block may use an earlier's files
        done = scratch / f".done-{earlier}"
        if not done.exists():
            run_block(earlier, scratch)
            done.touch()
    run_block(index, scratch)
    (scratch / f".done-{index}").touch()


def test_notebook_blocks_run(scratch: Path) -> None:
    pytest.importorskip("IPython")
    pytest.importorskip("msvm_widgets.magics")
    cells = [(line, body) for lang, body, line in BLOCKS if lang == "ipython"]
    result = subprocess.run(
        [sys.executable, "-c", NOTEBOOK],
        input=json.dumps(cells),
        cwd=scratch,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]


def test_every_setting_and_jit_option_is_in_the_guide() -> None:
    for field in dataclasses.fields(Context):
        assert f"`{field.name}`" in TEXT, f"ms.set_context({field.name}=...) is not in docs/guide.md"
    for field in dataclasses.fields(JitOptions):
        assert f"`{field.name}`" in TEXT, f"@ms.jit({field.name}=...) is not in docs/guide.md"


def test_every_cell_magic_option_is_in_the_guide() -> None:
    magics = pytest.importorskip("msvm_widgets.magics")
    for action in magics.MsvmMagics.msvm_cell.parser._actions:
        for option in action.option_strings:
            if option.startswith("--") and option != "--help":
                assert f"`{option}" in TEXT, f"%%msvm {option} is not in docs/guide.md"
