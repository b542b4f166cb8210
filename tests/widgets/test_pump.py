"""The update pump: coalesces updates from other threads and applies them on one loop, throttled."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
from collections.abc import Iterator

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


def test_updates_from_a_thread_are_coalesced_and_applied_on_the_loop() -> None:
    loop = asyncio.new_event_loop()
    pump = UpdatePump(loop, max_hz=20)
    widget = FakeWidget()

    def producer() -> None:
        for i in range(5000):
            pump.submit(widget, "value", lambda i=i: widget.set(i))

    async def scenario() -> None:
        thread = threading.Thread(target=producer, name="compiler")
        thread.start()
        while thread.is_alive():
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)  # one more tick delivers the last update

    loop.run_until_complete(scenario())
    loop.close()
    assert widget.values[-1] == 4999  # the latest update wins
    assert len(widget.values) < 50  # 5000 submissions, a few ticks
    assert widget.threads == {threading.current_thread().name}  # the loop's thread, never the producer's
    assert widget.syncs == len(widget.values)  # one hold_sync (one comm message) per tick


def test_the_rate_is_bounded() -> None:
    loop = asyncio.new_event_loop()
    pump = UpdatePump(loop, max_hz=10)
    widget = FakeWidget()
    times: list[float] = []

    async def scenario() -> None:
        end = loop.time() + 0.55
        i = 0
        while loop.time() < end:
            i += 1
            pump.submit(widget, "value", lambda: times.append(loop.time()))
            await asyncio.sleep(0.002)

    loop.run_until_complete(scenario())
    loop.run_until_complete(asyncio.sleep(0.15))
    loop.close()
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert len(times) <= 8
    assert all(g >= 0.09 for g in gaps)


def test_keys_are_independent_and_flush_works_without_a_loop() -> None:
    pump = UpdatePump(None)
    widget = FakeWidget()
    seen: list[str] = []
    pump.submit(widget, "a", lambda: seen.append("a1"))
    pump.submit(widget, "a", lambda: seen.append("a2"))
    pump.submit(widget, "b", lambda: seen.append("b"))
    assert seen == []
    assert pump.flush() == 2
    assert sorted(seen) == ["a2", "b"]
    assert pump.flush() == 0


def test_a_failing_update_does_not_stop_the_others(caplog: pytest.LogCaptureFixture) -> None:
    pump = UpdatePump(None)
    widget = FakeWidget()
    pump.submit(widget, "bad", lambda: 1 / 0)
    pump.submit(widget, "good", lambda: widget.set(1))
    pump.flush()
    assert widget.values == [1]
    assert "msvm widget update failed" in caplog.text


def test_rate_must_be_sane() -> None:
    with pytest.raises(ValueError):
        UpdatePump(None, max_hz=0)
