"""The update pump: coalesces updates from other threads and applies them on its own thread, throttled,
whether or not anything else (an event loop, the kernel's thread) gets a turn."""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from msvm_widgets.pump import UpdatePump


class FakeWidget:
    """Records which thread applied updates and whether they ran inside ``hold_sync``."""

    def __init__(self) -> None:
        self.holding = False
        self.syncs = 0
        self.values: list[int] = []
        self.threads: set[str] = set()

    @contextlib.contextmanager
    def hold_sync(self) -> Iterator[None]:
        self.holding = True
        yield
        self.holding = False
        self.syncs += 1

    def set(self, value: int) -> None:
        assert self.holding, "updates must run inside hold_sync"
        self.values.append(value)
        self.threads.add(threading.current_thread().name)


def wait_until(condition: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def test_updates_from_a_thread_are_coalesced_and_applied_on_the_pump_thread() -> None:
    pump = UpdatePump(max_hz=20)
    widget = FakeWidget()

    def producer() -> None:
        for i in range(5000):
            pump.submit(widget, "value", lambda i=i: widget.set(i))

    thread = threading.Thread(target=producer, name="compiler")
    thread.start()
    thread.join()
    assert wait_until(lambda: widget.values and widget.values[-1] == 4999)  # the latest update wins
    assert len(widget.values) < 50  # 5000 submissions, a few ticks
    assert widget.threads == {"msvm-widget-pump"}  # never the producer's thread
    assert widget.syncs == len(widget.values)  # one hold_sync (one comm message) per tick


def test_updates_reach_the_widget_while_the_submitting_thread_stays_busy() -> None:
    """A running cell never yields to the kernel's event loop: the pump must not need it."""
    pump = UpdatePump(max_hz=20)
    widget = FakeWidget()
    deadline = time.monotonic() + 5
    n = 0
    while time.monotonic() < deadline and not widget.values:  # busy, like a cell's loop
        n += 1
        pump.submit(widget, "value", lambda n=n: widget.set(n))
        sum(range(2000))
    assert widget.values, "no update was applied while the submitting thread was busy"


def test_the_rate_is_bounded() -> None:
    pump = UpdatePump(max_hz=10)
    widget = FakeWidget()
    times: list[float] = []
    end = time.monotonic() + 0.55
    while time.monotonic() < end:
        pump.submit(widget, "value", lambda: times.append(time.monotonic()))
        time.sleep(0.002)
    time.sleep(0.15)
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert 2 <= len(times) <= 8
    assert all(g >= 0.09 for g in gaps)


def test_a_costly_update_waits_its_interval_after_the_last() -> None:
    pump = UpdatePump(max_hz=50)
    widget = FakeWidget()
    times: list[float] = []
    pump.submit(widget, "refresh", lambda: times.append(time.monotonic()), every=0.3)
    assert wait_until(lambda: len(times) == 1)  # the first one at once
    for _ in range(20):  # a burst of events right after it
        pump.submit(widget, "refresh", lambda: times.append(time.monotonic()), every=0.3)
        time.sleep(0.005)
    assert wait_until(lambda: len(times) == 2)
    time.sleep(0.1)
    assert len(times) == 2 and times[1] - times[0] >= 0.29  # coalesced, and no sooner than asked


def test_polls_run_on_every_tick_until_unpolled() -> None:
    pump = UpdatePump(max_hz=50)
    widget = FakeWidget()
    ticks: list[str] = []
    pump.poll(widget, "progress", lambda: ticks.append(threading.current_thread().name))
    assert wait_until(lambda: len(ticks) >= 3)  # nobody submitted anything: the poll ticks by itself
    pump.unpoll(widget, "progress")
    time.sleep(0.1)
    settled = len(ticks)
    time.sleep(0.2)
    assert len(ticks) == settled
    assert set(ticks) == {"msvm-widget-pump"}


def test_applying_keeps_the_pump_off_the_widgets() -> None:
    pump = UpdatePump(max_hz=50)
    widget = FakeWidget()
    with pump.applying():  # the kernel's thread redrawing a view on a click
        pump.submit(widget, "value", lambda: widget.set(1))
        time.sleep(0.2)
        assert widget.values == []
    assert wait_until(lambda: widget.values == [1])


def test_keys_are_independent_and_flush_works_without_a_thread() -> None:
    pump = UpdatePump(background=False)
    widget = FakeWidget()
    seen: list[str] = []
    pump.submit(widget, "a", lambda: seen.append("a1"))
    pump.submit(widget, "a", lambda: seen.append("a2"))
    pump.submit(widget, "b", lambda: seen.append("b"))
    time.sleep(0.05)
    assert seen == []
    assert pump.flush() == 2
    assert sorted(seen) == ["a2", "b"]
    assert pump.flush() == 0


def test_a_failing_update_does_not_stop_the_others(caplog: pytest.LogCaptureFixture) -> None:
    pump = UpdatePump(background=False)
    widget = FakeWidget()
    pump.submit(widget, "bad", lambda: 1 / 0)
    pump.submit(widget, "good", lambda: widget.set(1))
    pump.flush()
    assert widget.values == [1]
    assert "msvm widget update failed" in caplog.text


def test_rate_must_be_sane() -> None:
    with pytest.raises(ValueError):
        UpdatePump(max_hz=0)
