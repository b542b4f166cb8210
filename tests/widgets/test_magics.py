"""``%%msvm`` and ``%msvm`` driven through a real IPython shell (no browser)."""

from __future__ import annotations

import csv
import inspect
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
from msvm_widgets.calls import TrackedJitFunction
from msvm_widgets.dashboard import Dashboard
from msvm_widgets.errors import MsvmCellError, strip_ansi
from msvm_widgets.magics import MsvmMagics, split_args

BLOCK = '''%%msvm{opts}
def block(x: Tensor["N", 3, "H", "W"], h):
    y = x[:, :, :h, :]
    return ms.ops.relu(y * 2.0 + 1.0)

outs = [block(np.ones((n, 3, 8, 8), np.float32), mutable(4)) for n in (1, 2, 5)]
outs[-1].shape
'''


def run(ip: Any, cell: str) -> Any:
    result = ip.run_cell(cell, store_history=True)
    return result


def test_load_ext_is_idempotent(shell: Any) -> None:
    shell.run_line_magic("load_ext", "msvm")
    shell.run_line_magic("reload_ext", "msvm")
    magics = shell.magics_manager.registry["MsvmMagics"]
    assert isinstance(magics, MsvmMagics)
    assert shell.find_cell_magic("msvm").__self__ is magics
    assert shell.find_line_magic("msvm").__self__ is magics


def test_cell_magic_documents_its_options(shell: Any) -> None:
    doc = shell.find_cell_magic("msvm").__doc__
    options = ("--trace", "--cache-mode", "--buckets", "--scd-threshold", "--no-widgets", "--debug", "--asm")
    for option in options:
        assert option in doc


def test_cell_functions_are_jitted_and_the_dashboard_shows_the_last_call(ip: Any, shown: list) -> None:
    result = run(ip, BLOCK.format(opts=""))
    assert result.success, result.error_in_exec
    assert result.result == (5, 3, 4, 8)  # the last expression is the cell's value
    block = ip.user_ns["block"]
    assert isinstance(block, TrackedJitFunction)
    assert "x[:, :, :h, :]" in inspect.getsource(block.py_func)  # the cell's source is in linecache
    (dashboard,) = shown
    assert isinstance(dashboard, Dashboard)
    assert dashboard.calls == 3
    regs = dashboard.registers.registers
    x, out = np.ones((5, 3, 8, 8), np.float32), ip.user_ns["outs"][-1]
    assert regs[0].shape == x.shape and regs[0].symbolic == "float32[N, 3, H, W]"
    assert regs[1].kind == "scalar" and regs[1].value == 4
    assert regs[2].shape == x[:, :, :4, :].shape
    assert regs[-1].shape == out.shape and regs[-1].strides == out.strides
    assert [row[3] for row in dashboard.registers.rows()][2] == str(list(x[:, :, :4, :].shape))
    assert [row[1] for row in dashboard.registers.rows()][:2] == ["x", "h"]  # the parameters' names
    np.testing.assert_allclose(dashboard.result, ip.user_ns["outs"][-1])
    bundle = dashboard._repr_mimebundle_()
    assert {"text/html", "text/plain", "application/vnd.jupyter.widget-view+json"} <= set(bundle)
    assert "float32[N, 3, H, W]" in bundle["text/plain"]


def test_options_become_jit_options(ip: Any, shown: list) -> None:
    assert run(ip, BLOCK.format(opts=" --buckets 1,8,32 --scd-threshold 0.5 --no-widgets")).success
    options = ip.user_ns["block"].options
    assert options.cache_mode == "bucket"
    assert options.bucket_boundaries == (1, 8, 32)
    assert options.scd_threshold == 0.5
    assert not shown  # --no-widgets prints a text summary instead
    assert run(ip, BLOCK.format(opts=" --cache-mode adaptive --no-widgets")).success
    assert ip.user_ns["block"].options.cache_mode == "adaptive"


def test_no_widgets_prints_the_registers_and_a_cell_without_calls_says_so(ip: Any, shown: list,
                                                                           capsys: Any) -> None:
    assert run(ip, BLOCK.format(opts=" --no-widgets")).success
    out = capsys.readouterr().out
    assert "msvm: block(x: float32[5, 3, 8, 8], h: mutable(4)) (3 msvm calls in this cell)" in out
    assert "float32[N, 3, min(H,h), W]" in out
    assert run(ip, "%%msvm\ndef unused(x: Tensor['N']):\n    return x * 2.0\n").success
    (summary,) = shown
    assert summary["text/plain"] == "msvm: jitted unused; no msvm call ran in this cell"


def test_explicit_decorator_options_win(ip: Any, shown: list) -> None:
    cell = '''%%msvm --cache-mode adaptive
@jit(cache_mode="exact")
def twice(x: Tensor["N"]):
    return x * 2.0

twice(np.ones(3, np.float32))
'''
    assert run(ip, cell).success
    assert isinstance(ip.user_ns["twice"], TrackedJitFunction)
    assert ip.user_ns["twice"].options.cache_mode == "exact"


def test_a_call_with_keywords_is_shown(ip: Any, shown: list) -> None:
    call = "block(h=mutable(2), x=np.ones((1, 3, 4, 4), np.float32))"
    cell = BLOCK.format(opts="").replace("outs[-1].shape", call)
    assert run(ip, cell).success
    (dashboard,) = shown
    assert dashboard.registers.registers[0].shape == (1, 3, 4, 4)
    assert dashboard.scd.data is not None and dashboard.scd.data["function"] == "block"
    assert dashboard.debugger.execution.args[0].shape == (1, 3, 4, 4)


def test_trace_option_fills_the_timeline(ip: Any, shown: list) -> None:
    assert run(ip, BLOCK.format(opts=" --trace")).success
    (dashboard,) = shown
    timeline = dashboard.timeline
    assert len(timeline.events) == 3 * 9  # three calls of nine instructions
    assert [len(c.events) for c in timeline.calls] == [9, 9, 9]
    assert sum(len(t.x) for t in timeline.call_figure.data) == 9  # the last call's instructions
    assert {e.function for e in timeline.events} == {"block"}


def test_debug_option_opens_the_debugger_on_the_first_call(ip: Any, shown: list) -> None:
    assert run(ip, BLOCK.format(opts=" --debug")).success
    (dashboard,) = shown
    assert dashboard.tabs.titles[dashboard.tabs.selected_index] == "Debugger"
    assert dashboard.debugger.execution.args[0].shape == (1, 3, 8, 8)  # the first call, not the last


def test_compile_error_points_at_the_cell_line(ip: Any, shown: list) -> None:
    cell = '''%%msvm
def bad(x: Tensor["N"]):
    y = x + 1
    print(y)
    return y
'''
    result = run(ip, cell)
    assert not result.success
    error = result.error_in_exec
    assert isinstance(error, MsvmCellError)
    text = strip_ansi("\n".join(error._render_traceback_()))
    count = ip.execution_count - 1
    assert f"at In[{count}]:3:5" in text  # line 3 of the cell body, column 5
    assert "print(y)\n      ^" in text
    assert "hint:" in text
    assert "Traceback" not in text and "frontend" not in text


def test_shape_error_points_at_the_bytecode_address(ip: Any, shown: list) -> None:
    cell = '''%%msvm
def mm(a: Tensor["N", "K"], b: Tensor["K", "M"]):
    return a @ b

mm(np.ones((2, 3), np.float32), np.ones((4, 5), np.float32))
'''
    result = run(ip, cell)
    assert not result.success
    text = strip_ansi(str(result.error_in_exec))
    assert "msvm://bc/0x" in text


def test_user_errors_keep_their_python_traceback(ip: Any, shown: list) -> None:
    result = run(ip, "%%msvm\nundefined_name + 1\n")
    assert isinstance(result.error_in_exec, NameError)


def test_asm_cell_binds_callables(ip: Any, shown: list) -> None:
    cell = '''%%msvm --asm
module "hand"
func @double(x) regs=3 {
bb0:
  R0 = TENSOR_CREATE 0, [N], float32, cpu
  R1 = OP_CALL add, (R0, R0), {}
  RET (R1)
}
'''
    assert run(ip, cell).success
    out = ip.user_ns["double"](np.arange(3, dtype=np.float32))
    np.testing.assert_array_equal(out, [0, 2, 4])
    (summary,) = shown
    assert "double(x)" in summary["text/plain"] and "text/html" in summary


def test_asm_cell_with_a_verifier_error_reports_the_address(ip: Any, shown: list) -> None:
    cell = '''%%msvm --asm
func @broken(x) regs=2 {
bb0:
  R0 = TENSOR_CREATE 0, [N], float32, cpu
  RET (R1)
}
'''
    result = run(ip, cell)
    assert not result.success
    text = strip_ansi(str(result.error_in_exec))
    assert "msvm://bc/0x0001" in text and "REG-UNDEFINED" in text
    assert "broken" not in ip.user_ns


def test_asm_cell_with_a_syntax_error_points_at_the_cell_line(ip: Any, shown: list) -> None:
    cell = """%%msvm --asm
func @f(x) regs=2 {
bb0:
  R0 = TENSOR_CREAT 0, [N], float32, cpu
  RET (R0)
}
"""
    result = run(ip, cell)
    assert not result.success
    text = strip_ansi("\n".join(result.error_in_exec._render_traceback_()))
    assert f"In[{ip.execution_count - 1}]:3:8" in text
    assert "TENSOR_CREAT 0" in text and "^" in text


def test_trace_line_commands_write_csv_and_chrome(ip: Any, tmp_path: Path, capsys: Any) -> None:
    ip.run_line_magic("msvm", f"trace on {tmp_path / 'bclog'}")
    assert run(ip, BLOCK.format(opts=" --no-widgets")).success
    ip.run_line_magic("msvm", "trace off")
    ip.run_line_magic("msvm", f"trace csv {tmp_path / 'trace.csv'}")
    ip.run_line_magic("msvm", f"trace chrome {tmp_path / 'trace.json'}")
    with open(tmp_path / "trace.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) >= 27 and {r["function"] for r in rows} == {"block"}
    events = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    assert any(e["ph"] == "X" for e in events)
    assert list((tmp_path / "bclog").glob("*.bclog"))
    assert "wrote" in capsys.readouterr().out


def test_line_magic_usage_errors(ip: Any) -> None:
    from IPython.core.error import UsageError

    for line in ("", "bogus", "trace sideways", "scd"):
        try:
            ip.run_line_magic("msvm", line)
        except UsageError:
            continue
        raise AssertionError(f"%msvm {line} should be a usage error")


def test_split_args_respects_brackets_and_quotes() -> None:
    assert split_args("f x ms.mutable(4)") == ["f", "x", "ms.mutable(4)"]
    assert split_args("f np.ones((2, 3)), 'a b'") == ["f", "np.ones((2, 3))", "'a b'"]


def test_a_cell_shows_its_progress_while_it_runs(ip: Any, shown: list) -> None:
    ip.user_ns["shown"] = shown
    cell = BLOCK.format(opts="").replace("outs[-1].shape", """import time
progress = shown.progress[-1]
deadline = time.monotonic() + 10
while "3 calls of block" not in progress.value and time.monotonic() < deadline:
    sum(range(1000))  # busy, as a long cell is: the kernel's loop gets no turn
seen_while_running = progress.value
""")
    assert run(ip, cell).success
    seen = ip.user_ns["seen_while_running"]
    assert "running" in seen and "3 calls of block" in seen
    (progress,) = shown.progress
    assert "ran" in progress.value and "3 calls of block" in progress.value and "native" in progress.value
    assert not progress.pump._polls  # polling stopped
    (dashboard,) = shown
    assert isinstance(dashboard, Dashboard)


def test_a_failing_cell_ends_its_progress_line_with_the_failure(ip: Any, shown: list) -> None:
    result = run(ip, "%%msvm\nundefined_name + 1\n")
    assert not result.success
    (progress,) = shown.progress
    assert "failed: NameError" in progress.value and not progress.pump._polls


def test_loading_the_extension_imports_no_plotly_and_starts_no_thread() -> None:
    code = ("import sys, threading\n"
            "from IPython.testing.globalipapp import start_ipython\n"
            "ip = start_ipython()\n"
            "before = {t.name for t in threading.enumerate()}\n"
            "ip.run_line_magic('load_ext', 'msvm')\n"
            "print('plotly' in sys.modules, sorted({t.name for t in threading.enumerate()} - before))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         check=True)
    assert out.stdout.split("\n")[-2] == "False []"
