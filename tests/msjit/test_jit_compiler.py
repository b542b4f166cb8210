"""The compiler thread's side of scheduling: when a starved compile borrows a core from the program."""

# ms.Tensor["N", 8] reads to linters as a string forward reference: noise here.
# ruff: noqa: F821

import threading
import time

import numpy as np
import pytest

import msvm as ms
from msvm.frontend import Tensor, jit
from msvm.kernels.threads import POOL
from msvm.msjit import compiler
from msvm.msjit.compiler import COMPILER
from msvm.native import blas


@pytest.fixture
def lends(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record lend/return calls instead of resizing the thread pools; a short starvation threshold."""
    calls: list[str] = []
    monkeypatch.setattr(blas, "lend_core", lambda: calls.append("lend") or True)
    monkeypatch.setattr(blas, "return_core", lambda: calls.append("return"))
    monkeypatch.setattr(POOL, "lend_core", lambda: calls.append("pool lend") or True)
    monkeypatch.setattr(POOL, "return_core", lambda: calls.append("pool return"))
    monkeypatch.setattr(compiler, "STARVED_S", 0.1)
    return calls


@pytest.mark.parametrize(("request_s", "calls", "region_calls", "asked_after_s", "lent"), [
    (0.01, compiler.WANTED_CALLS, 2, 0.0, False),  # answered before it counts as starved
    (0.6, compiler.WANTED_CALLS, 2, 0.0, True),  # starved, and the program keeps asking for it
    (0.6, compiler.WANTED_CALLS, 2, None, False),  # starved, but nobody waits for this code
    (0.6, compiler.WANTED_CALLS, 2, 0.3, True),  # the program starts asking while it is starved
    (0.08, compiler.HOT_CALLS, compiler.HOT_CALLS, 0.0, True),  # a loop on this code: lent before starved
    (0.08, compiler.HOT_CALLS - 1, compiler.HOT_CALLS - 1, 0.0, False),  # asked for, but not yet hot
    (0.08, compiler.HOT_CALLS, 2 * compiler.HOT_CALLS, 0.0, False),  # every other call: not a loop on it
    (0.6, compiler.HOT_CALLS, 2 * compiler.HOT_CALLS, 0.0, True),  # ... until it starves
])
def test_a_request_borrows_a_core_only_while_asked_for(lends, request_s, calls, region_calls, asked_after_s,
                                                       lent) -> None:
    t0 = time.monotonic()

    def asked() -> tuple[int, int]:
        if asked_after_s is None or time.monotonic() - t0 < asked_after_s:
            return 0, 0
        return calls, region_calls

    since = max((e["seq"] for e in ms.vm.jit_monitor().events()), default=0)
    with compiler._core_when_starved(asked, "jit_cache_test"):
        time.sleep(request_s)
    given_back = ["return", "pool return"]
    assert lends == (["lend", "pool lend", *given_back] if lent else given_back)
    events = [e for e in ms.vm.jit_monitor().events(since) if e["kind"].startswith("core-")]
    assert [e["kind"] for e in events] == (["core-lent", "core-returned"] if lent else [])
    assert all(e["entry"] == "jit_cache_test" for e in events)
    if lent:
        assert events[0]["blas"] is True and events[0]["pool"] is True and events[1]["ms"] > 0


@jit(cache_mode="exact")
def scale(x: Tensor["N", 8]):
    return x * 3.0 + 1.0


def test_runs_interpreted_while_an_entry_compiles_are_counted() -> None:
    """``waiting``: what the lending decision reads (and jit_info reports)."""
    from msvm.msjit.codegen import compile_region

    release = threading.Event()

    def blocked(*args, **kwargs):
        release.wait(30)
        return compile_region(*args, **kwargs)

    x = np.ones((4, 8), np.float32)
    COMPILER._use_backend(blocked)
    try:
        for _ in range(3 + 5):  # the third call makes the key hot; five more run while it compiles
            np.testing.assert_allclose(scale(x), x * 3 + 1)
        (entry,) = [e for e in ms.vm.jit_info() if e["function"] == "scale"]
        assert entry["status"] in ("queued", "compiling") and entry["waiting"] == 5
    finally:
        release.set()
        COMPILER._use_backend(None)
    assert ms.vm.wait_for_compiles(60)
    scale(x)
    (entry,) = [e for e in ms.vm.jit_info() if e["function"] == "scale"]
    assert entry["status"] == "compiled" and entry["waiting"] == 5 and entry["hits"] == 1


def test_a_request_starved_at_once_is_lent_on_the_programs_second_ask(lends) -> None:
    with compiler._core_when_starved(lambda: (compiler.WANTED_CALLS, 10), "jit_cache_test", starved_s=0.0):
        time.sleep(0.08)
    assert lends[:2] == ["lend", "pool lend"]


@jit(cache_mode="bucket", bucket_boundaries=(4, 64))
def shifted(x: Tensor["N", 8]):
    return x * 2.0 - 1.0


def test_the_next_bucket_of_a_compiled_region_counts_as_starved_at_once(monkeypatch) -> None:
    """It shares the first bucket's object code: a plan and a load, not worth idle gaps to wait for."""
    starved: list[float] = []
    lend = compiler._core_when_starved
    monkeypatch.setattr(compiler, "_core_when_starved",
                        lambda asked, entry, starved_s=compiler.STARVED_S: starved.append(starved_s)
                        or lend(asked, entry, starved_s))
    for rows in (40, 2):  # the 5-64 bucket, then the 1-4 one
        x = np.ones((rows, 8), np.float32)
        for _ in range(3):
            np.testing.assert_allclose(shifted(x), x * 2 - 1)
        assert ms.vm.wait_for_compiles(60)
    entries = [e for e in ms.vm.jit_info() if e["function"] == "shifted"]
    assert [e["status"] for e in entries] == ["compiled", "compiled"] and entries[1]["code_from"]
    assert starved[-2:] == [compiler.STARVED_S, 0.0]


def test_the_compiler_shortens_the_gil_switch_interval_only_while_it_works() -> None:
    """Its bursts between blocking calls hand the GIL over quickly while it works; the program's own
    interval comes back afterwards."""
    import sys

    seen: list[float] = []
    from msvm.msjit.codegen import compile_region

    def record(*args, **kwargs):
        seen.append(sys.getswitchinterval())
        return compile_region(*args, **kwargs)

    before = sys.getswitchinterval()
    COMPILER._use_backend(record)
    try:
        x = np.ones((4, 8), np.float32)
        for _ in range(3):
            scale(x)
        assert ms.vm.wait_for_compiles(60)
    finally:
        COMPILER._use_backend(None)
    assert seen == [compiler.GIL_SWITCH_S] and sys.getswitchinterval() == before
