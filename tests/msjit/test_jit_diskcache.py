"""The persistent code cache: a later process (or the same one after a reset) runs a key's code from disk
at its first run, and nothing but a good file written by msvm for this region is ever loaded."""

# ruff: noqa: F821, UP037 - ms.Tensor["N", 8] reads to linters as a string forward reference

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import msvm as ms
from msvm import Tensor, jit, ops
from msvm.msjit import diskcache
from msvm.msjit.cache import CACHE
from msvm.native import objcache

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def own_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    folder = tmp_path / "jit"
    monkeypatch.setenv("MSVM_JIT_CACHE", "1")
    monkeypatch.setenv("MSVM_JIT_CACHE_DIR", str(folder))
    return folder


@jit
def affine(x: Tensor["N", 8]):
    return ops.relu(x * 3.0 + 1.0) - x


@jit(cache_mode="bucket", bucket_boundaries=(4, 64))
def bucketed(x: Tensor["N", 8]):
    return ops.tanh(x * 0.5) + x


def compiled(fn, x: np.ndarray) -> dict:
    """Make ``x``'s key hot, wait for its code and return its entry."""
    for _ in range(3):
        fn(x)
    assert ms.vm.wait_for_compiles(60)
    (entry,) = [e for e in ms.vm.jit_info() if e["function"] == fn.__name__]
    assert entry["status"] == "compiled" and entry["source"] == "compiled"
    return entry


def started() -> int:
    return sum(1 for e in ms.vm.jit_monitor().events() if e["kind"] == "started")


@pytest.mark.parametrize("fn", [affine, bucketed], ids=["exact", "bucket"])
def test_after_a_reset_the_first_run_of_a_key_runs_its_code_from_disk(fn, own_cache: Path) -> None:
    x = np.random.default_rng(0).standard_normal((5, 8)).astype(np.float32)
    compiled(fn, x)
    assert len(list(own_cache.glob("*.jit"))) == 1 and oct(own_cache.stat().st_mode & 0o777) == "0o700"
    ms.vm.reset()
    np.testing.assert_allclose(fn(x), fn.py_func(x), rtol=1e-5, atol=1e-6)  # the key's very first run
    (entry,) = [e for e in ms.vm.jit_info() if e["function"] == fn.__name__]
    assert entry["source"] == "disk" and entry["hits"] == 1 and entry["status"] == "compiled"
    assert started() == 0  # nothing compiled
    assert ms.vm.disk_cache_info()["files"] == 1


CHILD = textwrap.dedent("""
    import json, sys
    import numpy as np
    import msvm as ms
    from msvm.msjit.compiler import COMPILER

    @ms.jit(cache_mode=sys.argv[1])
    def layer(x: ms.Tensor["N", 16]):
        return ms.ops.gelu(x * 1.5 + 0.25) * x

    x = np.linspace(-3, 3, 6 * 16, dtype=np.float32).reshape(6, 16)
    y = layer(x)
    first = ms.vm.jit_info()
    for _ in range(3):
        layer(x)
    ms.vm.wait_for_compiles(60)
    ms.set_context(jit_enabled=False)
    want = layer(x)
    print(json.dumps({"first": [{k: e[k] for k in ("source", "hits", "status")} for e in first],
                      "events": [e["kind"] for e in ms.vm.jit_monitor().events()],
                      "worker_starts": COMPILER._worker.starts if COMPILER._worker else 0,
                      "err": float(np.max(np.abs(y - want)))}))
""")


def script(folder: Path) -> Path:
    path = folder.parent / "child.py"  # a file: @ms.jit reads its function's source
    path.write_text(CHILD)
    return path


def child(mode: str, folder: Path) -> dict:
    env = {**os.environ, "MSVM_JIT_CACHE": "1", "MSVM_JIT_CACHE_DIR": str(folder)}
    out = subprocess.run([sys.executable, str(script(folder)), mode], env=env, capture_output=True,
                         text=True, timeout=180, cwd=ROOT, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.parametrize("mode", ["exact", "bucket"])
def test_a_second_process_runs_the_code_from_disk_at_the_keys_first_call_without_compiling(mode, own_cache):
    a = child(mode, own_cache)
    assert a["first"] == [] and "installed" in a["events"] and a["err"] < 1e-5
    b = child(mode, own_cache)
    assert b["first"] == [{"source": "disk", "hits": 1, "status": "compiled"}]
    assert "started" not in b["events"] and "loaded" in b["events"]  # no compile, no LLVM
    assert b["err"] < 1e-5  # the interpreter's result


def the_file(folder: Path) -> Path:
    (path,) = folder.glob("*.jit")
    return path


DAMAGE = {
    "truncated": lambda b: b[: len(b) // 2],
    "flipped bit": lambda b: b[:-9] + bytes([b[-9] ^ 4]) + b[-8:],
    "empty": lambda b: b"",
    "a seal that does not match": lambda b: b[:8] + bytes(32) + b[40:],
}


@pytest.mark.parametrize("damage", list(DAMAGE), ids=list(DAMAGE))
def test_a_damaged_file_is_never_loaded_and_the_key_compiles_again(damage, own_cache: Path) -> None:
    x = np.ones((5, 8), np.float32)
    compiled(affine, x)
    path = the_file(own_cache)
    path.write_bytes(DAMAGE[damage](path.read_bytes()))
    ms.vm.reset()
    np.testing.assert_allclose(affine(x), affine.py_func(x))
    assert ms.vm.wait_for_compiles(60)
    (entry,) = [e for e in ms.vm.jit_info() if e["function"] == "affine"]
    assert entry["source"] == "compiled" and entry["status"] == "compiled" and started() == 1
    assert objcache.read_sealed(path) is not None  # replaced by a good file


@pytest.mark.parametrize("what", ["target", "module", "bounds", "gemm"])
def test_a_well_sealed_file_made_from_something_else_is_not_used(what, own_cache, monkeypatch) -> None:
    """Another CPU or LLVM (``target``), other constants than the region digest sampled (``module``),
    other bounds, another BLAS: the file names the same key, but what it was made from differs."""
    x = np.ones((5, 8), np.float32)
    compiled(affine, x)
    real = diskcache._content

    def other(module, bounds):
        content = real(module, bounds)
        content[what] = {"target": {"cpu": "another"}, "module": "0" * 64, "bounds": {"N": 1},
                         "gemm": {"float32": None}}[what]
        return content

    monkeypatch.setattr(diskcache, "_content", other)
    (entry,) = [e for e in CACHE.all() if e.function == "affine"]
    assert diskcache.store(entry, entry.module, entry.bounds, *entry.compiled.wire)
    monkeypatch.setattr(diskcache, "_content", real)
    ms.vm.reset()
    np.testing.assert_allclose(affine(x), affine.py_func(x))
    assert ms.vm.wait_for_compiles(60)
    (info,) = [e for e in ms.vm.jit_info() if e["function"] == "affine"]
    assert info["source"] == "compiled" and started() == 1


def test_another_version_of_the_code_generator_or_host_names_another_file(monkeypatch) -> None:
    x = np.ones((5, 8), np.float32)
    compiled(affine, x)
    (entry,) = [e for e in CACHE.all() if e.function == "affine"]
    name = diskcache.file_name(entry.owner, entry.cache_key)
    monkeypatch.setattr(diskcache, "code_version", lambda: "another msvm")
    assert diskcache.file_name(entry.owner, entry.cache_key) != name
    monkeypatch.undo()
    monkeypatch.setattr(diskcache, "host", lambda: "another CPU")
    assert diskcache.file_name(entry.owner, entry.cache_key) != name


def test_two_writers_of_one_key_leave_a_good_file(own_cache: Path) -> None:
    x = np.ones((5, 8), np.float32)
    compiled(affine, x)
    (entry,) = [e for e in CACHE.all() if e.function == "affine"]
    wire = entry.compiled.wire

    def write() -> None:
        for _ in range(25):
            assert diskcache.store(entry, entry.module, entry.bounds, *wire)

    threads = [threading.Thread(target=write) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [p.name for p in own_cache.iterdir()] == [the_file(own_cache).name]  # no temporary files left
    assert diskcache.load(entry.owner, entry.cache_key, entry.module, entry.bounds) == wire


def test_two_processes_compiling_one_key_at_once_both_end_with_a_good_file(own_cache: Path) -> None:
    env = {**os.environ, "MSVM_JIT_CACHE": "1", "MSVM_JIT_CACHE_DIR": str(own_cache)}
    procs = [subprocess.Popen([sys.executable, str(script(own_cache)), "exact"], env=env, cwd=ROOT, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
    for p in procs:
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0, err
        assert json.loads(out.strip().splitlines()[-1])["err"] < 1e-5
    assert child("exact", own_cache)["first"] == [{"source": "disk", "hits": 1, "status": "compiled"}]


def test_the_folder_stays_within_its_bound_and_the_least_recently_used_file_goes_first(own_cache) -> None:
    own_cache.mkdir(mode=0o700)
    for n in range(4):
        path = own_cache / f"{n}.jit"
        path.write_bytes(bytes(1000))
        os.utime(path, (1000 + n, 1000 + n))
    os.utime(own_cache / "0.jit", (2000, 2000))  # used most recently (a load touches its file)
    diskcache._prune(own_cache, 2500)
    assert sorted(p.name for p in own_cache.glob("*.jit")) == ["0.jit", "3.jit"]


def test_a_load_marks_its_file_used(own_cache: Path) -> None:
    x = np.ones((5, 8), np.float32)
    compiled(affine, x)
    path = the_file(own_cache)
    os.utime(path, (1000, 1000))
    (entry,) = [e for e in CACHE.all() if e.function == "affine"]
    assert diskcache.load(entry.owner, entry.cache_key, entry.module, entry.bounds) is not None
    assert path.stat().st_mtime > 1000


def test_the_bound_is_a_setting(own_cache: Path) -> None:
    try:
        ms.set_context(jit_disk_cache_max_mb=0)
        compiled(affine, np.ones((5, 8), np.float32))
        assert list(own_cache.glob("*.jit")) == []  # kept nothing: nothing fits in 0 MB
    finally:
        ms.set_context(jit_disk_cache_max_mb=512)


def test_clear_disk_cache_and_switching_it_off(own_cache: Path, monkeypatch) -> None:
    x = np.ones((5, 8), np.float32)
    compiled(affine, x)
    assert ms.vm.clear_disk_cache() == 1 and list(own_cache.glob("*.jit")) == []
    ms.vm.reset()
    monkeypatch.setenv("MSVM_JIT_CACHE", "0")
    compiled(affine, x)
    assert list(own_cache.glob("*.jit")) == [] and not ms.vm.disk_cache_info()["enabled"]


def test_a_folder_others_may_write_to_is_refused_with_a_warning(own_cache: Path) -> None:
    own_cache.mkdir(mode=0o700)
    os.chmod(own_cache, 0o777)
    with pytest.warns(RuntimeWarning, match="group/world-writable"):
        compiled(affine, np.ones((5, 8), np.float32))
    assert list(own_cache.glob("*.jit")) == []


def test_a_demoted_entry_leaves_no_file(own_cache: Path) -> None:
    x = np.ones((5, 8), np.float32)
    compiled(affine, x)
    (entry,) = [e for e in CACHE.all() if e.function == "affine"]
    diskcache.forget(entry)
    assert list(own_cache.glob("*.jit")) == [] and not diskcache.has(entry.owner, entry.cache_key)


def test_the_compiler_thread_loads_a_file_written_after_the_key_was_first_seen(own_cache: Path) -> None:
    """Another process may write the file while this one interprets the key: its compile then loads it."""
    x = np.ones((5, 8), np.float32)
    compiled(affine, x)
    saved = the_file(own_cache).read_bytes()
    ms.vm.reset()
    diskcache.clear()
    affine(x)  # first run: nothing on disk yet
    (region,) = [r for r in CACHE.regions() if r.exe_name == "affine" and r.states]
    path = own_cache / diskcache.file_name(region, next(iter(region.states)))
    path.write_bytes(saved)
    diskcache._names(own_cache).add(path.name)
    for _ in range(2):
        affine(x)
    assert ms.vm.wait_for_compiles(60)
    (entry,) = [e for e in ms.vm.jit_info() if e["function"] == "affine"]
    assert entry["source"] == "disk" and "disk" in entry["phase_ms"] and started() == 1


def make_affine():
    @jit
    def affine_again(x: Tensor["N", 8]):
        return ops.relu(x * 3.0 + 1.0) - x

    return affine_again


def test_a_function_being_prepared_loads_its_code_from_disk_before_its_first_call(own_cache: Path) -> None:
    x = np.ones((5, 8), np.float32)
    compiled(make_affine(), x)
    ms.vm.reset()
    again = make_affine()  # decorated: its region's files are loaded in the background
    assert ms.vm.wait_for_compiles(60)
    (entry,) = [e for e in ms.vm.jit_info() if e["function"] == "affine_again"]
    assert entry["source"] == "disk" and entry["hits"] == 0 and entry["status"] == "compiled"
    np.testing.assert_allclose(again(x), again.py_func(x))
    (entry,) = [e for e in ms.vm.jit_info() if e["function"] == "affine_again"]
    assert entry["hits"] == 1 and started() == 0


def test_a_sealed_file_whose_code_does_not_load_is_compiled_over_never_a_fallback(own_cache: Path) -> None:
    x = np.ones((5, 8), np.float32)
    compiled(affine, x)
    (entry,) = [e for e in CACHE.all() if e.function == "affine"]
    reply, payload = entry.compiled.wire
    assert diskcache.store(entry, entry.module, entry.bounds, {**reply, "object_lens": [7]}, payload[:50])
    ms.vm.reset()
    for _ in range(3):  # its first run: the file does not load, and the key compiles at once
        np.testing.assert_allclose(affine(x), affine.py_func(x))
    assert ms.vm.wait_for_compiles(60)
    (info,) = [e for e in ms.vm.jit_info() if e["function"] == "affine"]
    assert info["status"] == "compiled" and info["source"] == "compiled" and started() == 1
    assert diskcache.load_code(entry.owner, entry.cache_key, entry.module, entry.bounds, "again") is not None


CONSTS = [np.full((8, 8), 0.9 + i / 100, np.float32) for i in range(30)]


@jit
def chain(x: Tensor[8, 8]):
    for c in CONSTS:  # a long loop module over small tensors: quick code first
        x = ops.maximum(x * c + 0.1, x - 0.05)
    return x


def test_quick_code_loaded_from_disk_still_gets_its_optimised_tier(own_cache: Path) -> None:
    x = np.ones((8, 8), np.float32)
    for _ in range(200_000):  # no wait: that would compile the tier-up too, and keep it on disk
        chain(x)
        entries = [e for e in CACHE.all() if e.function == "chain"]
        if entries and entries[0].status == "compiled":
            break
    assert entries[0].tier == 1 and entries[0].hit_count < 3  # its tier-up is not due yet
    for _ in range(500):  # the compiler thread keeps the quick code right after installing it
        if list(own_cache.glob("*.jit")):
            break
        time.sleep(0.01)
    ms.vm.reset()
    want = chain.py_func(x)
    for _ in range(3):
        np.testing.assert_allclose(chain(x), want, rtol=1e-5, atol=1e-6)  # quick code, from disk
    (entry,) = [e for e in CACHE.all() if e.function == "chain"]
    assert entry.source == "disk"
    assert ms.vm.wait_for_compiles(60) and entry.tier == 2
    np.testing.assert_allclose(chain(x), want, rtol=1e-5, atol=1e-6)
