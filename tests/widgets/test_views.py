"""RegisterView, Debugger, TraceTimeline and Dashboard on real runs, from Python (no magic, no browser)."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from msvm_widgets import Dashboard, Debugger, RegisterView, TraceTimeline, UpdatePump

import msvm.ops
from msvm import vm
from msvm.frontend import Tensor, jit, mutable
from msvm.observe.trace import TRACE

SPEC = Tensor["N", 3, "H", "W"]
MATRIX = Tensor["?", "?"]


@jit
def block(x: SPEC, h):
    y = x[:, :, :h, :]
    return msvm.ops.relu(y * 2.0 + 1.0)


def args(n: int = 2, size: int = 8, crop: int = 4) -> tuple:
    return np.ones((n, 3, size, size), np.float32), mutable(crop)


@pytest.fixture(autouse=True)
def _no_trace() -> None:
    yield
    TRACE.enable(False)
    TRACE.clear()


def assert_bundle(widget: object, *texts: str) -> None:
    bundle = widget._repr_mimebundle_()
    assert {"text/html", "text/plain", "application/vnd.jupyter.widget-view+json"} <= set(bundle)
    assert "--jp-content-font-color1" in bundle["text/html"]  # themed, with its own foreground colour
    for text in texts:
        assert text in bundle["text/plain"] and text in bundle["text/html"]


def test_register_view_shows_the_execution_registers() -> None:
    x, h = args(3, 16, 6)
    ex = block.debug(x, h)
    ex.run()
    view = RegisterView.from_execution(ex)
    assert "msvm-register-view" in view._dom_classes
    regs = {r.name: r for r in view.registers}
    assert regs["R0"].shape == x.shape and regs["R0"].strides == x.strides
    assert regs["R2"].shape == x[:, :, :6, :].shape
    assert regs["R7"].shape == ex.result.shape
    rows = {row[0]: row for row in view.rows()}
    assert rows["R0"][2] == "[3, 3, 16, 16]" and rows["R0"][3] == "float32[N, 3, H, W]"
    assert rows["R0"][7] == f"0x{x.__array_interface__['data'][0]:x}"
    assert rows["R2"][9] == "msvm://bc/0x0002" and rows["R2"][10] == "interp"
    assert_bundle(view, "float32[N, 3, min(H,h), W]", "msvm://bc/0x0007")


def test_debugger_steps_continues_and_stops_at_breakpoints() -> None:
    dbg = Debugger.for_call(block, *args())
    assert "msvm-debugger" in dbg._dom_classes
    assert dbg.execution.pc == 0 and "▶" in dbg._rows()[0][0][0]
    dbg.step()
    assert dbg.execution.pc == 1 and dbg.written == 0
    assert dbg.registers.registers[0].shape == (2, 3, 8, 8)
    dbg.toggle_breakpoint(6)
    dbg.continue_()
    assert dbg.execution.pc == 6 and "(breakpoint)" in dbg.state()
    assert "msvm-current" in dbg.listing.value
    dbg.step_over_region()
    assert dbg.execution.finished and dbg.buttons["Step"].disabled
    assert "finished" in dbg.state() and "float32[2, 3, 4, 8]" in dbg.state()
    dbg.restart()
    assert dbg.execution.pc == 0 and 6 in dbg.execution.breakpoints and not dbg.buttons["Step"].disabled
    dbg.toggle_breakpoint(6)
    assert not dbg.execution.breakpoints
    assert_bundle(dbg, "msvm://bc/0x0000")


def test_debugger_shows_a_run_time_error_instead_of_raising() -> None:
    @jit
    def matmul(a: MATRIX, b: MATRIX):
        return a @ b

    dbg = Debugger.for_call(matmul, np.ones((2, 3), np.float32), np.ones((4, 5), np.float32))
    dbg.continue_()
    assert dbg.error is not None and "stopped by an error" in dbg.state()
    assert dbg.buttons["Continue"].disabled


def test_timeline_draws_trace_events_in_lanes_by_mode() -> None:
    vm.enable_bc_trace(True, path=None)
    for n in (1, 2, 3):
        block(*args(n))
    events = vm.bc_trace_events()
    view = TraceTimeline(events, pump=UpdatePump(None))
    assert "msvm-timeline" in view._dom_classes
    interp = view.figure.data[0]
    assert len(interp.x) == len(events) == 27
    assert set(interp.y) == {"execution"}
    assert interp.orientation == "h" and min(interp.base) == 0.0
    assert interp.customdata[2][1] == "msvm://bc/0x0002" and interp.customdata[2][3] == "slice"
    calls = [(c, e) for c, e in zip(interp.customdata, events) if e.opcode == "OP_CALL"]
    assert calls and all(e.reason and c[7] == f" ({e.reason})" for c, e in calls)  # why that variant
    assert "27 events" in view.header.value
    assert_bundle(view, "slice")


def test_timeline_follows_events_from_another_thread_through_the_pump() -> None:
    pump = UpdatePump(None)
    view = TraceTimeline(pump=pump, live=True)
    vm.enable_bc_trace(True, path=None)
    thread = threading.Thread(target=lambda: [block(*args(n)) for n in (1, 2)])
    thread.start()
    thread.join()
    assert view.events == []  # nothing touched the widget from the VM thread
    pump.flush()
    assert len(view.events) == 18 and sum(len(t.x) for t in view.figure.data) == 18
    view.close()
    block(*args(3))
    pump.flush()
    assert len(view.events) == 18  # closed: unsubscribed


def test_dashboard_for_a_call_from_python() -> None:
    x, h = args(4, 8, 2)
    dash = Dashboard.for_call(block, x, h)
    assert "msvm-dashboard" in dash._dom_classes
    assert list(dash.tabs.titles) == ["Registers", "SCD", "Timeline", "Debugger", "JIT cache", "JIT monitor",
                                      "Bytecode"]
    assert dash.registers.registers[0].shape == x.shape
    np.testing.assert_allclose(dash.result, block(x, h))
    assert "func @block(x, h)" in dash.bytecode_text
    assert_bundle(dash, "block(x: float32[4, 3, 8, 8], h: mutable(2))")
