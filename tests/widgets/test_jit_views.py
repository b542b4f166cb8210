"""SCDView, JITCacheView and JITMonitor against the real JIT: what they show is what ``ms.vm`` says."""

from __future__ import annotations

import html
import threading
import time
from typing import Any

import numpy as np
import pytest
from msvm_widgets import JITCacheView, JITMonitor, SCDView, UpdatePump, theme
from msvm_widgets.monitor import recent_events
from msvm_widgets.scd import tensor_row

import msvm.ops
from msvm import vm
from msvm.frontend import Tensor, jit, mutable

SPEC = Tensor["N", 3, "H", "W"]
VECTOR = Tensor["N"]
HOT = 8


def make_block() -> Any:
    @jit
    def block(x: SPEC, h):
        y = x[:, :, :h, :]
        return msvm.ops.relu(y * 2.0 + 1.0)

    return block


def make_data_dependent() -> Any:
    @jit
    def positions(x: VECTOR):  # nonzero's row count depends on the data: not anchored
        return msvm.ops.nonzero(x) * 2

    return positions


def hot(fn: Any, *args: Any) -> None:
    for _ in range(HOT):
        fn(*args)
    assert vm.wait_for_compiles(30)
    for _ in range(HOT):
        fn(*args)


@pytest.fixture(autouse=True)
def _fresh_jit() -> None:
    vm.reset()
    yield
    vm._inject_compile_fault(None)
    vm.reset()


def flushed(pump: UpdatePump, timeout: float = 10.0) -> int:
    """Flush the pump once the compiler thread has handed it something (it dispatches events itself)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        applied = pump.flush()
        if applied:
            return applied
        time.sleep(0.01)
    return 0


def x_and_h() -> tuple:
    return np.ones((2, 3, 16, 16), np.float32), mutable(8)


def test_scd_view_rows_match_the_analysis() -> None:
    block = make_block()
    analysis = vm.scd_analysis(block, *x_and_h())
    view = SCDView(analysis)
    assert "msvm-scd-view" in view._dom_classes
    data = analysis.as_dict()
    assert [row[0] for row in view.tensor_rows()] == [t["name"] for t in data["tensors"]]
    assert [row[5] for row in view.tensor_rows()] == [f"{t['scd']:.2f}" for t in data["tensors"]]
    assert [row[5] for row in view.region_rows()] == ["compiles" if r["compilable"] else "interpreted"
                                                      for r in data["regions"]]
    assert view.threshold == block.options.scd_threshold
    assert "x" in view.static_text() and "compiles" in view.static_text()


def test_scd_view_gives_the_reason_for_each_unanchored_dim() -> None:
    positions = make_data_dependent()
    analysis = vm.scd_analysis(positions, np.ones(5, np.float32))
    view = SCDView(analysis)
    data = analysis.as_dict()
    below = [t for t in data["tensors"] if t["scd"] < data["threshold"]]
    assert below, "nonzero's data-dependent size must leave a tensor below the threshold"
    for t in below:
        why = tensor_row(t)[6]
        assert why and all(f"dim {axis}" in why for axis, ok in enumerate(t["anchored"]) if not ok)
    assert "msvm-bad" in view.value


def test_scd_view_for_call_reports_a_failing_analysis() -> None:
    view = SCDView.for_call(object())
    assert view.unavailable and "SCD analysis failed" in view.unavailable


def test_scd_view_tells_which_unannotated_weight_to_annotate_and_how() -> None:
    import msvm.nn.functional as F

    @jit
    def conv(x, w):
        return F.relu(F.conv2d(x, w, padding=1))

    w = np.ones((4, 3, 3, 3), np.float32)
    for hw in (8, 12):
        conv(np.ones((1, 3, hw, hw), np.float32), w)
    view = SCDView.for_call(conv, np.ones((1, 3, 8, 8), np.float32), w)
    advice = "annotate `w` as `ms.Tensor[4, 3, 3, 3]`"
    assert advice in view.static_text() and html.escape(advice) in view.value
    assert 'annotate `x` as `ms.Tensor[1, 3, "H", "W"]`' in view.static_text()


def test_cache_view_matches_jit_info_and_shows_listings() -> None:
    block = make_block()
    hot(block, *x_and_h())
    view = JITCacheView(function="block", pump=UpdatePump(background=False))
    entries = [e for e in vm.jit_info() if e["function"] == "block"]
    assert entries and [e["name"] for e in view.entries] == [e["name"] for e in entries]
    assert list(view.picker.options) == [e["name"] for e in entries]
    compiled = next(e for e in entries if e["status"] == "compiled")
    assert "compile_cpu_ms" in view.table.value  # wall and CPU time of each compile side by side
    assert "waiting" in view.table.value  # runs interpreted while it compiled
    view.picker.value = compiled["name"]
    for kind in ("bytecode", "llvm", "llvm-opt", "asm"):
        view.kind.value = kind
        assert html.escape(vm.disassemble(compiled["name"], kind)) in view.code.value
    assert "hit rate" in view.static_text()


def test_cache_view_says_which_bucket_shares_which_code() -> None:
    @jit(cache_mode="bucket", bucket_boundaries=(8, 64))
    def bucketed(x: VECTOR):
        return msvm.ops.relu(x * 2.0 + 1.0)

    hot(bucketed, np.ones(5, np.float32))
    hot(bucketed, np.ones(40, np.float32))
    view = JITCacheView(function="bucketed", pump=UpdatePump(background=False))
    first, second = view.entries
    assert first["code_from"] is None and second["code_from"] == first["name"]
    assert "code_from" in view.table.value
    view.picker.value = second["name"]
    assert f"shares the machine code of {first['name']}" in view.code.value


def test_fallback_entries_are_red_with_their_reason() -> None:
    vm._inject_compile_fault("error")
    block = make_block()
    hot(block, *x_and_h())
    view = JITCacheView(pump=UpdatePump(background=False))
    fallback = [e for e in view.entries if e["status"] == "fallback"]
    assert fallback and fallback[0]["reason"]
    assert 'class="msvm-bad"' in view.table.value
    assert html.escape(fallback[0]["reason"]) in view.table.value


def test_monitor_updates_only_through_the_pump() -> None:
    pump = UpdatePump(background=False)
    monitor = JITMonitor(pump=pump)
    assert "msvm-jit-monitor" in monitor._dom_classes
    before = monitor.redraws
    block = make_block()
    worker = threading.Thread(target=hot, args=(block, *x_and_h()))
    worker.start()
    worker.join()
    assert monitor.redraws == before  # the compiler thread's events did not touch the widget
    assert flushed(pump) >= 1
    assert monitor.redraws >= before + 1
    assert [e["name"] for e in monitor.cache] == [e["name"] for e in vm.jit_info()]
    assert any(e["kind"] == "installed" for e in monitor.events)
    monitor.close()
    hot(make_block(), np.ones((3, 3, 8, 8), np.float32), mutable(4))
    assert pump.flush() == 0  # closed: unsubscribed


def test_line_magics_show_the_jit(ip: Any, shown: list) -> None:
    ip.user_ns["block"] = make_block()
    ip.user_ns["args"] = x_and_h()
    ip.run_cell("for _ in range(8): block(*args)\nms.vm.wait_for_compiles(30)")
    ip.run_line_magic("msvm", "info")
    ip.run_line_magic("msvm", "monitor")
    ip.run_line_magic("msvm", "scd block args[0] args[1]")
    cache, monitor, scd = shown
    assert isinstance(cache, JITCacheView) and cache.entries
    assert isinstance(monitor, JITMonitor) and monitor.cache
    assert isinstance(scd, SCDView) and scd.data["function"] == "block"
    monitor.close()
    ip.run_line_magic("msvm", "reset")
    assert vm.jit_info() == []


CONSTS = [np.full((8, 8), 0.9 + i / 100, np.float32) for i in range(30)]


def test_the_monitor_shows_quick_code_landing_and_its_tier_up() -> None:
    @jit
    def chain(x: Tensor[8, 8]):
        for c in CONSTS:  # a long loop module over small tensors: quick code first
            x = msvm.ops.maximum(x * c + 0.1, x - 0.05)
        return x

    monitor = JITMonitor(pump=UpdatePump(background=False))
    hot(chain, np.ones((8, 8), np.float32))
    assert vm.wait_for_compiles(30)
    monitor.refresh()
    (entry,) = [e for e in monitor.cache if e["function"] == "chain"]
    assert entry["tier"] == 2 and entry["source"] == "compiled"
    kinds = [e["kind"] for e in monitor.events if e["entry"] == entry["name"]]
    assert "installed" in kinds and "tier-up" in kinds
    assert "tier-up" in monitor.static_text() and 'class="msvm-good"' in monitor.view.value
    monitor.close()


def test_recent_events_keep_compile_events_and_collapse_periodic_samples() -> None:
    compiles = [{"seq": i, "kind": kind, "entry": f"e{i}"}
                for i, kind in enumerate(["queued", "started", "installed"] * 5)]
    samples = [{"seq": 100 + i, "kind": "hit-rate", "entry": None, "rate": i / 100} for i in range(60)]
    shown = recent_events(compiles + samples)
    assert [e["kind"] for e in shown[:-1]] == [e["kind"] for e in compiles[-12:]]  # none pushed out
    assert shown[-1]["kind"] == "hit-rate ×60" and shown[-1]["rate"] == 0.59  # the latest sample, counted


def test_the_monitor_shows_the_head_of_a_long_queue_and_the_newest_entries() -> None:
    monitor = JITMonitor(pump=UpdatePump(background=False), live=False)
    monitor.queue = [{"name": f"q{i}", "function": "f"} for i in range(25)]
    monitor.cache = [{"name": f"e{i}", "function": "f", "status": "compiled"} for i in range(30)]
    text = monitor.static_text()
    assert "Compile queue (25; the next 10 shown, %msvm info lists all)" in text
    assert "Cache (30; the newest 10 shown" in text
    assert "q9" in text and "q10" not in text and "e29" in text and "e19" not in text


def test_views_show_per_function_hit_rates() -> None:
    block, other = make_block(), make_data_dependent()
    hot(block, *x_and_h())
    other(np.ones(5, np.float32))
    monitor = JITMonitor(pump=UpdatePump(background=False), live=False)
    rows = {r["function"]: r for r in monitor.functions}
    rate = vm.jit_monitor().hit_rate("block")
    assert 0 < rate <= 1 and rows["block"]["hit_rate"] == rate
    assert rows["block"]["hits"] == sum(e["hits"] for e in vm.jit_info() if e["function"] == "block")
    assert vm.jit_monitor().hit_rate("positions") == 0.0
    view = JITCacheView(function="block", pump=UpdatePump(background=False), live=False)
    assert f"hit rate of block {theme.cell_text(rate, 'rate')}" in view.summary()
    empty = JITCacheView(function="positions", pump=UpdatePump(background=False), live=False)
    others = f"({len(vm.jit_info())} of other functions: %msvm info lists them)"
    assert f"0 cache entries of positions {others}" in empty.summary()


def test_numbers_carry_sensible_precision() -> None:
    assert theme.cell_text(216.165, "compile_ms") == "216 ms"
    assert theme.cell_text(0.0421, "native_ms") == "42.1 µs"
    assert theme.cell_text(0.9312, "hit_rate") == "93.1 %"
    assert theme.cell_text(12_345, "code_bytes") == "12.1 KiB"
    assert theme.cell_text({"lower": 1.234, "llvm": 38.12}, "phase_ms") == "lower=1.23 ms, llvm=38.1 ms"
    assert theme.exact_duration(41_377_218) == "41.377218 ms"


def test_views_say_what_a_reset_dropped_and_never_list_it() -> None:
    block = make_block()
    hot(block, *x_and_h())
    pump = UpdatePump(background=False)
    monitor, cache = JITMonitor(pump=pump), JITCacheView(pump=pump)
    names = [e["name"] for e in cache.entries]
    assert names and cache.picker.value == names[0]
    flushed(pump, timeout=0.3)
    vm.reset()
    assert flushed(pump) >= 1  # the reset reached both views through the compiler thread and the pump
    assert monitor.cache == [] and monitor.reset_at is not None
    assert "ms.vm.reset() emptied the JIT cache" in monitor.view.value
    assert cache.entries == [] and list(cache.picker.options) == [] and cache.code.value == ""
    assert cache.gone == names and "gone" in cache.table.value and names[0] in cache.static_text()
    assert "average compile time none compiled yet" in cache.summary()
    hot(block, *x_and_h())  # the same entries come back: no longer gone
    flushed(pump)
    cache.refresh()
    assert [e["name"] for e in cache.entries] == names and cache.gone == []
    monitor.close()
    cache.close()
