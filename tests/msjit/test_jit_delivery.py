"""Compiled code reaches a busy program: a fresh process's loop that never pauses gets native code, quick
code lands first where it pays and its optimised tier replaces it, and a host's launch overhead is
measured once."""



from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import msvm as ms
from msvm import Tensor, jit, ops
from msvm.msjit.cache import CACHE, TIER_UP_HITS

ROOT = Path(__file__).resolve().parents[2]
CONSTS = tuple(np.random.default_rng(i).standard_normal((8, 8)).astype(np.float32) * 0.1 + 0.95
               for i in range(30))


@jit
def chain(x: Tensor[8, 8]):
    for c in CONSTS:  # unrolled: one region of 90 small ops, a long loop module over 64 elements
        x = ops.maximum(x * c + 0.1, x - 0.05)
    return x


def interpreted(x: np.ndarray) -> np.ndarray:
    ms.set_context(jit_enabled=False)
    try:
        return chain(x)
    finally:
        ms.set_context(jit_enabled=True)


def the_entry():
    (entry,) = [e for e in CACHE.all() if e.function == "chain"]
    return entry


def test_quick_code_lands_first_and_its_optimised_tier_replaces_it_with_the_same_results() -> None:
    x = np.random.default_rng(1).standard_normal((8, 8)).astype(np.float32)
    want = interpreted(x)
    for _ in range(3):
        np.testing.assert_allclose(chain(x), want, rtol=1e-5, atol=1e-6)
    entry = the_entry()
    for _ in range(200_000):  # no wait: waiting for compiles would compile the tier-up at once too
        if entry.status == "compiled":
            break
        np.testing.assert_allclose(chain(x), want, rtol=1e-5, atol=1e-6)
    assert entry.status == "compiled" and entry.tier == 1 and entry.hit_count == 0
    for _ in range(TIER_UP_HITS):
        np.testing.assert_allclose(chain(x), want, rtol=1e-5, atol=1e-6)  # the quick code's results
    assert entry.hit_count == TIER_UP_HITS
    assert ms.vm.wait_for_compiles(60)
    info = next(e for e in ms.vm.jit_info() if e["function"] == "chain")
    assert info["tier"] == 2 and info["status"] == "compiled" and info["source"] == "compiled"
    kinds = [e["kind"] for e in ms.vm.jit_monitor().events() if e["entry"] == entry.name]
    assert kinds.count("installed") == 1 and kinds.count("tier-up") == 1
    hits = entry.hit_count
    for _ in range(3):
        np.testing.assert_allclose(chain(x), want, rtol=1e-5, atol=1e-6)
    assert entry.hit_count == hits + 3  # the optimised code runs
    assert entry.compiled.lowered.tier == 2 and "tier2 lower" in info["phase_ms"]


def test_the_quick_tier_is_for_long_loop_modules_over_small_tensors() -> None:
    from msvm.msjit.codegen.region import LoweredRegion, lower

    def lowered(fn, x) -> LoweredRegion:
        for _ in range(3):
            fn(x)
        assert ms.vm.wait_for_compiles(60)
        (entry,) = [e for e in CACHE.all() if e.function == fn.__name__]
        return lower(entry.module, entry.module.functions[0].name, bounds=entry.bounds or None)

    small = lowered(chain, np.ones((8, 8), np.float32))
    assert small.small and small.tier_for(1) == 1 and small.tier_for(2) == 2

    @jit
    def wide(x: Tensor[64, 64]):  # 4096 elements: unoptimised loops would lose to numpy
        for c in CONSTS[:10]:
            x = ops.maximum(x * c[0, 0] + 0.1, x - 0.05)
        return x

    big = lowered(wide, np.ones((64, 64), np.float32))
    assert not big.small and big.tier_for(1) == 2

    @jit
    def short(x: Tensor[8, 8]):
        return ops.relu(x * 2.0 + 1.0)

    assert lowered(short, np.ones((8, 8), np.float32)).tier_for(1) == 2  # O2 is cheap on it: one compile


LOOP = textwrap.dedent("""
    import json, sys, time
    import numpy as np
    import msvm as ms

    @ms.jit(cache_mode=sys.argv[1])
    def block(x: ms.Tensor["N", 64]):
        h = ms.ops.layer_norm(x, normalized_shape=(64,))
        return ms.ops.gelu(h * 1.5 + 0.5) + x

    x = np.random.default_rng(0).standard_normal((32, 64)).astype(np.float32)
    calls, t0 = 0, time.monotonic()
    while time.monotonic() - t0 < 120 and calls < 200_000:  # never pauses, never waits for compiles
        block(x)
        calls += 1
        if calls % 64 == 0 and sum(e["hits"] for e in ms.vm.jit_info()) > 0:
            break
    info = ms.vm.jit_info()
    print(json.dumps({"calls": calls, "hits": sum(e["hits"] for e in info),
                      "native_ns": [e["native_ns"] for e in info], "hot_ns": [e["hot_ns"] for e in info],
                      "warm": [e for e in ms.vm.jit_monitor().events() if e["kind"] == "warm"]}))
""")


def loop_child(mode: str, tmp_path: Path) -> dict:
    path = tmp_path / "loop.py"
    path.write_text(LOOP)
    env = {**os.environ, "MSVM_JIT_CACHE": "0"}
    out = subprocess.run([sys.executable, str(path), mode], env=env, capture_output=True, text=True,
                         timeout=240, cwd=ROOT, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.parametrize("mode", ["exact", "bucket"])
def test_a_fresh_process_looping_without_a_pause_reaches_native_code(mode, tmp_path) -> None:
    got = loop_child(mode, tmp_path)
    assert got["hits"] > 0, got
    assert all(n is not None and n > h for n, h in zip(got["native_ns"], got["hot_ns"]) if n is not None)


def test_the_launch_overhead_is_measured_once_per_host_and_kept(tmp_path) -> None:
    """The first process on a host times a probe region and keeps the figure in the capability DB's
    on-disk cache; the next process reads it there instead of compiling the probe."""
    first = loop_child("exact", tmp_path)["warm"]
    second = loop_child("exact", tmp_path)["warm"]
    assert len(first) == 1 and len(second) == 1 and second[0].get("cached") is True
    assert second[0]["launch_overhead"]


def test_an_optimised_tier_slower_than_the_quick_code_gives_way_to_it() -> None:
    """A tier-up never makes a call slower: optimised code whose runs are slower than the quick code's at
    the same key is replaced by the quick code again, for good."""
    import dataclasses
    import time

    from msvm.msjit.codegen import compile_region
    from msvm.msjit.compiler import COMPILER

    def backend(*args, **kwargs):
        compiled = compile_region(*args, **kwargs)
        if compiled.tier == 2:
            fast = compiled.fn

            def slow(*a):
                time.sleep(0.002)
                return fast(*a)

            compiled = dataclasses.replace(compiled, fn=slow)
        return compiled

    x = np.random.default_rng(2).standard_normal((8, 8)).astype(np.float32)
    want = interpreted(x)
    COMPILER._use_backend(backend)
    try:
        for _ in range(3):
            chain(x)
        entry = the_entry()
        for _ in range(200_000):
            if entry.status == "compiled":
                break
            chain(x)
        assert entry.tier == 1
        for _ in range(TIER_UP_HITS):
            chain(x)  # the quick code's runs, timed
        assert ms.vm.wait_for_compiles(60) and entry.tier == 2
        for _ in range(3):
            np.testing.assert_allclose(chain(x), want, rtol=1e-5, atol=1e-6)
    finally:
        COMPILER._use_backend(None)
    kinds = [e["kind"] for e in ms.vm.jit_monitor().events() if e["entry"] == entry.name]
    assert kinds[-2:] == ["tier-up", "tier-down"] and entry.tier == 1
    for _ in range(3):
        np.testing.assert_allclose(chain(x), want, rtol=1e-5, atol=1e-6)
    assert ms.vm.wait_for_compiles(60) and entry.tier == 1  # and it never tiers up again
