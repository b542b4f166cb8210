"""RegisterView, Debugger, TraceTimeline and Dashboard on real runs, from Python (no magic, no browser)."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from msvm_widgets import Dashboard, Debugger, RegisterView, TraceTimeline, UpdatePump, theme
from msvm_widgets.calls import CallRecord
from msvm_widgets.timeline import CALL_COLOR, SELECTED_COLOR

import msvm.ops
from msvm import vm
from msvm.frontend import Tensor, jit, mutable
from msvm.observe.trace import TRACE, TraceEvent, split_calls

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
    assert rows["R0"][1] == "x" and rows["R1"][1] == "h"  # the parameters' names
    assert rows["R2"][1] == "y" and rows["R7"][1] == ""  # `y = x[...]` is y; the returned value has no name
    assert rows["R0"][3] == "[3, 3, 16, 16]" and rows["R0"][4] == "float32[N, 3, H, W]"
    assert rows["R0"][8] == f"0x{x.__array_interface__['data'][0]:x}"
    assert rows["R2"][10] == "msvm://bc/0x0002" and rows["R2"][11] == "interp"
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


def traced_calls(*sizes: int) -> list:
    """The trace of ``block`` on these batch sizes, interpreted (an earlier test's calls may have made its
    region hot, and a native run is one region event)."""
    msvm.set_context(jit_enabled=False)
    vm.enable_bc_trace(True, path=None)
    try:
        for n in sizes:
            block(*args(n))
    finally:
        vm.enable_bc_trace(False)
        msvm.set_context(jit_enabled=True)
    return vm.bc_trace_events()


def drawn(figure: object) -> list[tuple]:
    """Every bar of a figure: (base, length, text, hover fields), trace by trace."""
    return [(b, x, t, list(c)) for trace in figure.data
            for b, x, t, c in zip(trace.base, trace.x, trace.text, trace.customdata)]


def test_timeline_splits_the_trace_into_calls_and_shows_the_last() -> None:
    events = traced_calls(1, 2, 3)
    view = TraceTimeline(events, pump=UpdatePump(background=False))
    assert "msvm-timeline" in view._dom_classes and "msvm-fit" in view._dom_classes
    assert [len(c.events) for c in view.calls] == [9, 9, 9] and all(c.returned for c in view.calls)
    assert [c.events[0].shape for c in view.calls] == [[n, 3, 8, 8] for n in (1, 2, 3)]
    assert view.selected == 2 and view.picker.value == 2
    assert "call 3 of 3: block, 9 instructions" in view.picker.label
    assert "27 events (27 interpreted) in 3 calls" in view.header.value
    assert_bundle(view, "slice")


def test_the_call_view_gives_each_instruction_its_exact_duration_and_start() -> None:
    events = traced_calls(1, 2, 3)
    view = TraceTimeline(events, pump=UpdatePump(background=False))
    view.picker.value = 1  # the selector
    call = view.calls[1]
    scale, unit = theme.unit_of(call.dur_ns)
    assert view.call_figure.layout.xaxis.title.text == f"{unit} since the call started"
    assert view.call_figure.layout.xaxis.exponentformat == "none"  # never "0.5M µs"
    bars = drawn(view.call_figure)
    assert len(bars) == len(call.events)
    for (base, length, text, hover), e in zip(bars, call.events):
        assert base == pytest.approx((e.start_ns - call.start_ns) / scale)
        assert length == pytest.approx(e.dur_ns / scale)
        assert hover[2] == theme.exact_duration(e.dur_ns)  # the event's own duration, not the bar's end
        assert hover[3] == f"{theme.exact_duration(e.start_ns - call.start_ns)} into the call"
        assert text == (e.op if e.opcode == "OP_CALL" else e.opcode)
    assert "%{x" not in view.call_figure.data[0].hovertemplate
    assert view.call_figure.layout.uniformtext.mode == "hide"  # a label only where the slice is wide enough


def test_the_overview_shows_every_call_and_clicking_one_selects_it() -> None:
    events = traced_calls(1, 2, 3)
    view = TraceTimeline(events, pump=UpdatePump(background=False))
    calls = view.overview.data[0]
    origin = min(e.start_ns for e in events)
    scale, _unit = theme.unit_of(max(e.start_ns + e.dur_ns for e in events) - origin)
    assert list(calls.x) == pytest.approx([c.dur_ns / scale for c in view.calls])
    assert [hover[2] for hover in calls.customdata] == [theme.exact_duration(c.dur_ns) for c in view.calls]
    assert list(calls.marker.color) == [CALL_COLOR, CALL_COLOR, SELECTED_COLOR]

    class Points:
        point_inds = [0]

    view._clicked(Points())
    assert view.selected == 0 and view.picker.value == 0
    assert list(calls.marker.color) == [SELECTED_COLOR, CALL_COLOR, CALL_COLOR]
    assert len(drawn(view.call_figure)) == 9


def test_compile_events_get_their_own_lane_in_the_overview() -> None:
    compile_event = TraceEvent("block", 2, "COMPILE", "llvm", "jit_cache_x", 5_000_000, 38_000_000, 7,
                               "compile")
    events = [*traced_calls(1), compile_event]
    view = TraceTimeline(events, pump=UpdatePump(background=False))
    compiles = view.overview.data[1]
    assert list(compiles.y) == ["compiler"] and list(compiles.text) == ["llvm"]
    assert compiles.customdata[0][0] == "compile jit_cache_x · llvm"
    assert compiles.customdata[0][2] == "38.000000 ms"
    assert len(view.calls) == 1  # a compile belongs to no call


def test_split_calls_separates_a_call_that_raised_from_the_next() -> None:
    events = traced_calls(1, 2)
    first, second = split_calls(events)
    without_ret = [e for e in first.events if e.opcode != "RET"]
    again = split_calls(without_ret + second.events)
    assert [len(c.events) for c in again] == [8, 9] and [c.returned for c in again] == [False, True]


def test_nothing_traced_says_so_and_the_button_traces_the_call() -> None:
    x, h = args(2)
    record = CallRecord(block, (x, h))
    view = TraceTimeline(pump=UpdatePump(background=False), retrace=record.traced)
    assert "Nothing was traced in this cell" in view.header.value and "--trace" in view.header.value
    assert view.drawn.layout.display == "none" and view.empty.layout.display == "flex"
    assert not TRACE.enabled
    view.trace_again()
    assert not TRACE.enabled  # tracing was on only for the re-run
    assert [len(c.events) for c in view.calls] == [9]
    assert view.drawn.layout.display == "flex" and view.empty.layout.display == "none"


def test_timeline_follows_events_from_another_thread_through_the_pump() -> None:
    pump = UpdatePump(background=False)
    view = TraceTimeline(pump=pump, live=True)
    assert "no trace events yet" in view.header.value
    thread = threading.Thread(target=traced_calls, args=(1, 2))
    thread.start()
    thread.join()
    assert view.events == []  # nothing touched the widget from the VM thread
    pump.flush()
    assert len(view.events) == 18 and len(view.calls) == 2
    assert len(drawn(view.call_figure)) == 9 and view.selected == 1
    view.close()
    traced_calls(3)
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
    assert dash.timeline.retrace is not None and not dash.timeline.events
    dash.timeline.trace_again()  # nothing was traced: the button traces the dashboard's call
    assert [c.events[0].shape for c in dash.timeline.calls] == [[4, 3, 8, 8]]
