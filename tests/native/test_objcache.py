"""Kernel object code on disk: compiled once per machine, never loaded when damaged, switchable off."""

from __future__ import annotations

import ctypes
import os

import pytest

from msvm.native import objcache

IR = """
define void @answer(i64* %out) {
  store i64 42, i64* %out
  ret void
}
"""


@pytest.fixture(autouse=True)
def own_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("MSVM_KERNEL_CACHE", raising=False)


class Builds:
    """``build_ir`` that counts how often the IR had to be generated."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> str:
        self.count += 1
        return IR


def answer(lib) -> int:
    out = ctypes.c_int64(0)
    lib.ctypes_function("answer", None, [ctypes.c_void_p])(ctypes.addressof(out))
    return out.value


def test_a_second_process_loads_the_kernel_without_generating_or_compiling_it():
    builds = Builds()
    assert answer(objcache.cached_library(("answer", 1), builds, "answer")) == 42
    path = objcache.object_path(("answer", 1))
    assert path.is_file() and path.parent == objcache.cache_dir() / "kernels"
    assert answer(objcache.cached_library(("answer", 1), builds, "answer")) == 42
    assert builds.count == 1
    assert objcache.object_path(("answer", 2)) != path  # another key, another file


def test_damaged_files_in_one_folder_warn_once(tmp_path):
    objcache._warned.clear()
    for name in ("a.o", "b.o"):
        assert objcache.write_sealed(tmp_path / name, b"code")
        (tmp_path / name).write_bytes(b"planted")
    with pytest.warns(RuntimeWarning) as seen:
        assert objcache.read_sealed(tmp_path / "a.o") is None
        assert objcache.read_sealed(tmp_path / "b.o") is None
    assert len(seen) == 1


DAMAGE = [lambda b: b[:-7], lambda b: b[:40] + bytes([b[40] ^ 1]) + b[41:], lambda b: b""]


@pytest.mark.parametrize("damage", DAMAGE, ids=["truncated", "flipped bit", "empty"])
def test_a_damaged_file_is_compiled_again_not_loaded(damage):
    builds = Builds()
    objcache.cached_library(("answer", 1), builds, "answer")
    path = objcache.object_path(("answer", 1))
    path.write_bytes(damage(path.read_bytes()))
    objcache._warned.clear()
    with pytest.warns(RuntimeWarning, match="seal does not check"):
        assert answer(objcache.cached_library(("answer", 1), builds, "answer")) == 42
    assert builds.count == 2
    assert answer(objcache.cached_library(("answer", 1), builds, "answer")) == 42  # and it was repaired
    assert builds.count == 2


def test_the_cache_can_be_switched_off(monkeypatch):
    monkeypatch.setenv("MSVM_KERNEL_CACHE", "0")
    builds = Builds()
    for _ in range(2):
        assert answer(objcache.cached_library(("answer", 1), builds, "answer")) == 42
    assert builds.count == 2 and not objcache.object_path(("answer", 1)).exists()


def test_an_unwritable_cache_only_costs_a_compile(monkeypatch, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))  # a file where the directory should be
    builds = Builds()
    assert answer(objcache.cached_library(("answer", 1), builds, "answer")) == 42


def test_the_folder_keeps_the_most_recent_files(monkeypatch):
    monkeypatch.setattr(objcache, "MAX_FILES", 3)
    builds = Builds()
    for n in range(5):
        objcache.cached_library(("answer", n), builds, "answer")
        path = objcache.object_path(("answer", n))
        os.utime(path, (1000 + n, 1000 + n))  # written one after another

    def kept() -> set[int]:
        return {n for n in range(6) if objcache.object_path(("answer", n)).exists()}

    assert kept() == {2, 3, 4}
    objcache.cached_library(("answer", 5), builds, "answer")
    assert kept() == {3, 4, 5}


def test_a_kernel_compiled_with_its_own_pipeline_is_cached_apart(monkeypatch):
    """``pipeline`` reaches ``build_object`` (conv_nchwc compiles at O2 without the unroller) and the
    object is stored under its own name, so a change of pipeline never loads the other's code."""
    seen: list[dict] = []
    real = objcache.build_object

    def spy(ir, name, **options):
        seen.append(options)
        return real(ir, name, **options)

    monkeypatch.setattr(objcache, "build_object", spy)
    builds = Builds()
    pipeline = {"opt_level": 2, "unroll": False, "slp": False}
    assert answer(objcache.cached_library(("answer", 3), builds, "answer", pipeline)) == 42
    assert answer(objcache.cached_library(("answer", 3), builds, "answer")) == 42
    assert builds.count == 2 and {**seen[0], **pipeline} == seen[0] and "opt_level" not in seen[1]
    assert answer(objcache.cached_library(("answer", 3), builds, "answer", pipeline)) == 42
    assert builds.count == 2  # loaded from the cache


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="giving a file away needs root")
def test_a_file_of_another_user_is_refused_with_a_warning():
    builds = Builds()
    objcache.cached_library(("answer", 7), builds, "answer")
    path = objcache.object_path(("answer", 7))
    os.chown(path, 65534, 65534)
    with pytest.warns(RuntimeWarning, match="owned by another user"):
        assert answer(objcache.cached_library(("answer", 7), builds, "answer")) == 42
    assert builds.count == 2 and path.stat().st_uid == os.geteuid()  # compiled again, and replaced


def test_a_file_sealed_under_another_key_is_not_loaded(tmp_path, monkeypatch):
    """A valid file from another user's or machine's cache — a restored CI cache, a shared folder —
    fails the seal: the key is the user's own and lives outside every cache folder."""
    builds = Builds()
    objcache.cached_library(("answer", 8), builds, "answer")
    assert not any(p.name.endswith(".key") for p in objcache.cache_dir().rglob("*"))  # no key in the cache
    monkeypatch.setenv("MSVM_CACHE_KEY", str(tmp_path / "another user" / "cache.key"))
    assert answer(objcache.cached_library(("answer", 8), builds, "answer")) == 42
    assert builds.count == 2  # compiled again, not loaded
    key = objcache.key_file()
    assert oct(key.stat().st_mode & 0o777) == "0o600" and oct(key.parent.stat().st_mode & 0o777) == "0o700"


def test_a_key_others_may_read_is_refused_with_a_warning(tmp_path, monkeypatch):
    key = tmp_path / "keys" / "cache.key"
    monkeypatch.setenv("MSVM_CACHE_KEY", str(key))
    builds = Builds()
    objcache.cached_library(("answer", 9), builds, "answer")
    os.chmod(key, 0o644)
    with pytest.warns(RuntimeWarning, match="may be read or written by other users"):
        assert answer(objcache.cached_library(("answer", 9), builds, "answer")) == 42
    assert builds.count == 2
