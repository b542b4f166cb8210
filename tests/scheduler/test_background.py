"""Calibration never blocks a call: quick first decisions, background calibration, the on-disk cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from scheduler_helpers import Counting, matmul_program, matmul_step, rand

from msvm.native.objcache import read_sealed, write_sealed
from msvm.ops.registry import REGISTRY
from msvm.scheduler import background, capability_db, persist, wait_for_calibration
from msvm.scheduler.capability import DB, CapabilityDB, Rates, variant_names

ROOT = Path(__file__).resolve().parents[2]
MATMUL = REGISTRY["matmul"].kernel


def test_first_decision_uses_priors_and_calibration_runs_in_the_background(fake_variants, monkeypatch):
    fake_variants("matmul", [Counting("matmul", "one", MATMUL), Counting("matmul", "two", MATMUL)])
    release, started = threading.Event(), threading.Event()

    def calibrate_and_save(device: str, op: str) -> None:  # stands in for seconds of measurement
        started.set()
        release.wait(10)
        DB.record_calibration(device, op, {"one": Rates(1.0, 1.0, "calibrated"),
                                           "two": Rates(100.0, 1.0, "calibrated"),
                                           "reference": Rates(1.0, 50.0, "calibrated")}, {})

    monkeypatch.setattr(background, "calibrate_and_save", calibrate_and_save)
    monkeypatch.setattr(background.CALIBRATOR, "enabled", True)
    fn = matmul_program()
    a, b = rand(32, 32), rand(32, 32)
    t0 = time.perf_counter()
    np.testing.assert_allclose(fn(a, b), a @ b, rtol=1e-5)
    assert time.perf_counter() - t0 < 1.0  # decided while the calibration is still "measuring"
    assert started.wait(5)
    choice = matmul_step(fn).choice
    assert "prior rates: calibrating in the background" in choice.reason
    status = capability_db(measure=False)["calibration"]
    assert status["calibrating"] == "matmul on cpu"
    release.set()
    assert wait_for_calibration(10)
    fn(a, b)  # the DB changed: the site decides again, now on calibrated rates
    choice = matmul_step(fn).choice
    assert choice.variant == "two" and "prior" not in choice.reason
    fn(a, b)
    assert background.CALIBRATOR.status()["queued"] == []


def test_calibration_is_requested_once_per_op(monkeypatch):
    calls = []
    monkeypatch.setattr(background, "calibrate_and_save", lambda device, op: calls.append(op))
    monkeypatch.setattr(background.CALIBRATOR, "enabled", True)
    for _ in range(3):
        background.CALIBRATOR.request("cpu", "linear")
    assert wait_for_calibration(10)
    assert calls == ["linear"]


def test_a_failed_calibration_keeps_the_priors_and_is_reported(monkeypatch):
    def broken(device: str, op: str) -> None:
        raise RuntimeError("no BLAS today")

    monkeypatch.setattr(background, "calibrate_and_save", broken)
    monkeypatch.setattr(background.CALIBRATOR, "enabled", True)
    monkeypatch.setattr(background.CALIBRATOR, "errors", [])
    background.CALIBRATOR.request("cpu", "conv2d")
    assert wait_for_calibration(10)
    assert not DB.is_calibrated("cpu", "conv2d")
    errors = capability_db(measure=False)["calibration"]["errors"]
    assert errors == ["conv2d on cpu: RuntimeError: no BLAS today"]


def test_host_rates_are_quick_until_measured():
    db = CapabilityDB()
    quick = db.host_rates()
    assert quick["source"] == "quick" and quick["sgemm_gflops"] > 0 and quick["bandwidth_gbps"] > 0
    db.host(measure=True)
    assert db.host_rates()["source"] == "measured"


@pytest.fixture(autouse=True)
def quiet_machine(monkeypatch):
    """These tests save calibrations: they must not depend on how busy the test machine is (a saved
    calibration is refused above a load average of cores + 1; the saturation test sets its own)."""
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))


def fake_calibration() -> dict[str, Rates]:
    names = variant_names("matmul", "cpu")
    rates = {name: Rates(10.0 + i, 2.0 + i, "calibrated") for i, name in enumerate(names)}
    DB.record_calibration("cpu", "matmul", rates, {name: [[1e6, 1e5, 1e-4]] for name in rates}, measured=True)
    DB.record_gemm_curve("cpu", {"m": 3.0, "n": 4.0, "k": 5.0})
    return rates


def test_calibration_saved_on_disk_is_loaded_at_first_use():
    rates = fake_calibration()
    persist.save_db()
    assert DB.cache_state.startswith("saved to ") and persist.cache_file().exists()
    DB.reset()  # as a new process would start
    assert not DB.device("cpu").calibrated
    assert DB.is_calibrated("cpu", "matmul")  # first use reads the cache
    assert DB.cache_state.startswith("loaded from ")
    for name, r in rates.items():
        assert DB.variant_rates("cpu", "matmul", name, "native") == Rates(r.rate_gflops, r.overhead_us,
                                                                           "calibrated")
    assert DB.gemm_half("cpu") == {"m": 3.0, "n": 4.0, "k": 5.0}
    assert DB.device("cpu").calibration_points["matmul/reference"] == [[1e6, 1e5, 1e-4]]


def test_a_fresh_process_starts_calibrated_from_the_cache(tmp_path, monkeypatch):
    env = {**os.environ, "XDG_CACHE_HOME": os.environ["XDG_CACHE_HOME"], "PYTHONPATH": str(ROOT)}
    # saved under a fresh process's host identity: earlier tests may leave this one's BLAS pool resized
    ask = "import json; from msvm.scheduler import persist; print(json.dumps(persist.identity()))"
    fresh = subprocess.run([sys.executable, "-c", ask], cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=120, check=True)
    identity = json.loads(fresh.stdout.strip().splitlines()[-1])
    monkeypatch.setattr(persist, "identity", lambda: identity)
    fake_calibration()
    persist.save_db()
    code = ("import json; from msvm.scheduler.capability import DB; "
            "print(json.dumps([DB.is_calibrated('cpu', 'matmul'), DB.cache_state, "
            "DB.variant_rates('cpu', 'matmul', 'reference', 'numpy').rate_gflops]))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=120, check=True)
    calibrated, state, reference_rate = json.loads(out.stdout.strip().splitlines()[-1])
    assert calibrated and state.startswith("loaded from "), (DB.cache_state, state)
    assert reference_rate == DB.variant_rates("cpu", "matmul", "reference", "numpy").rate_gflops


def test_cache_lives_under_xdg_cache_home_and_is_keyed_by_the_host():
    key = persist.identity()
    assert {"msvm", "target", "blas"} == set(key) and key["target"]["cpu"]
    path = persist.cache_file()
    assert path.parent == Path(os.environ["XDG_CACHE_HOME"]) / "msvm"
    other = {**key, "msvm": "0.0.0-other"}
    assert persist.cache_file(other) != path


def read_cache() -> dict:
    return json.loads(read_sealed(persist.cache_file()))


def write_cache(doc: object) -> Path:
    """Write ``doc`` (text or JSON) sealed, as msvm would: what is tested is its validation."""
    path = persist.cache_file()
    text = doc if isinstance(doc, (str, bytes)) else json.dumps(doc)
    assert write_sealed(path, text if isinstance(text, bytes) else text.encode(), suffix=persist.SUFFIX)
    return path


@pytest.mark.parametrize("mutate, words", [
    (lambda doc: "{not json", "ignored"),
    (lambda doc: {**doc, "identity": {**doc["identity"], "msvm": "9.9"}}, "another host"),
    (lambda doc: {**doc, "version": 99}, "version"),
    (lambda doc: {**doc, "host_rates": {"sgemm_gflops": -1, "bandwidth_gbps": 1}}, "host_rates.sgemm_gflops"),
    (lambda doc: {**doc, "devices": {"cpu": {"ops": {"matmul": {"variants": "blas"}}}}}, "variants"),
    (lambda doc: "[" * 100_000 + "]" * 100_000, "RecursionError"),
    (lambda doc: {**doc, "jit": {"launch_overhead_ns": "fast"}}, "jit.launch_overhead_ns"),
])
def test_a_bad_or_foreign_cache_file_is_ignored(mutate, words):
    fake_calibration()
    persist.save_db()
    write_cache(mutate(read_cache()))
    DB.reset()
    assert not DB.is_calibrated("cpu", "matmul")
    assert DB.cache_state.startswith("ignored") and words in DB.cache_state


def test_a_cache_file_that_is_not_utf8_is_ignored():
    fake_calibration()
    persist.save_db()
    write_cache(b"\xff\xfe{" * 10)
    DB.reset()
    assert not DB.is_calibrated("cpu", "matmul")
    assert DB.cache_state.startswith("ignored") and "UnicodeDecodeError" in DB.cache_state


def test_a_valid_cache_file_msvm_did_not_seal_is_ignored(monkeypatch, tmp_path):
    fake_calibration()
    persist.save_db()
    doc = read_cache()
    persist.cache_file().write_text(json.dumps(doc))  # planted in plain JSON, every number valid
    DB.reset()
    assert not DB.is_calibrated("cpu", "matmul") and "not sealed" in DB.cache_state
    own_key = os.environ["MSVM_CACHE_KEY"]
    monkeypatch.setenv("MSVM_CACHE_KEY", str(tmp_path / "other.key"))  # sealed by another user's key
    write_cache(doc)
    monkeypatch.setenv("MSVM_CACHE_KEY", own_key)
    DB.reset()
    assert not DB.is_calibrated("cpu", "matmul") and "not sealed" in DB.cache_state


def test_a_group_writable_cache_folder_is_not_used(monkeypatch, tmp_path):
    folder = tmp_path / "shared"
    (folder / "msvm").mkdir(parents=True)
    (folder / "msvm").chmod(0o777)
    monkeypatch.setenv("XDG_CACHE_HOME", str(folder))
    fake_calibration()
    with pytest.warns(RuntimeWarning, match="group/world-writable"):
        persist.save_db()
    assert DB.cache_state.startswith("not saved") and not persist.cache_file().exists()


def test_the_jit_launch_overhead_is_kept_with_the_rest_as_it_is_on_disk():
    fake_calibration()
    persist.save_db()
    before = read_cache()
    assert persist.save_launch_overhead(1234).startswith("saved to ")
    after = read_cache()
    assert after["jit"] == {"launch_overhead_ns": 1234} and after["devices"] == before["devices"]
    DB.reset()
    DB.ensure_loaded()
    assert DB.jit_launch_overhead_ns == 1234


def test_an_op_whose_variants_changed_is_calibrated_again(fake_variants):
    fake_calibration()
    persist.save_db()
    DB.reset()
    fake_variants("matmul", [Counting("matmul", "new_kernel", MATMUL)])
    assert not DB.is_calibrated("cpu", "matmul")
    assert DB.has_gemm_curve("cpu")  # what does not depend on the variants is still used


def test_only_measured_calibrations_are_saved():
    DB.record_calibration("cpu", "linear", {"reference": Rates(1.0, 1.0, "calibrated")}, {})  # made up
    fake_calibration()
    assert set(DB.snapshot()["devices"]["cpu"]["ops"]) == {"matmul"}


def test_an_unwritable_cache_dir_only_costs_a_recalibration(monkeypatch, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))  # a file where the directory should be
    fake_calibration()
    persist.save_db()
    assert DB.cache_state.startswith("not saved")


def test_a_calibration_on_a_saturated_machine_is_used_but_not_saved(monkeypatch):
    monkeypatch.setattr(os, "getloadavg", lambda: (9.5, 9.0, 8.0))
    fake_calibration()
    persist.save_db()
    assert DB.cache_state.startswith("not saved (load average 9.5")
    assert DB.is_calibrated("cpu", "matmul") and not persist.cache_file().exists()


def test_stop_ends_the_calibration_at_its_next_checkpoint(monkeypatch):
    calibrator = background.Calibrator()
    calibrator.enabled = True
    monkeypatch.setattr(background, "CALIBRATOR", calibrator)
    started = threading.Event()

    def endless(device: str, op: str) -> None:  # a calibration that would never finish on its own
        started.set()
        while True:
            background.checkpoint()
            time.sleep(0.001)

    monkeypatch.setattr(background, "calibrate_and_save", endless)
    calibrator.request("cpu", "conv2d")
    calibrator.request("cpu", "matmul")
    assert started.wait(5)
    background.checkpoint()  # other threads are never stopped by it
    t0 = time.perf_counter()
    calibrator.stop(timeout=5)
    assert time.perf_counter() - t0 < 2 and calibrator.wait(0)
    assert calibrator.status()["queued"] == [] and calibrator.errors == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice values are Linux's")
def test_the_calibration_thread_is_a_low_priority_daemon(monkeypatch):
    seen = []
    monkeypatch.setattr(background.CALIBRATOR, "enabled", True)
    monkeypatch.setattr(background, "calibrate_and_save", lambda device, op: seen.append(
        (os.getpriority(os.PRIO_PROCESS, threading.get_native_id()), threading.current_thread().daemon)))
    background.CALIBRATOR.request("cpu", "tanh")
    assert wait_for_calibration(10)
    assert seen == [(19, True)] and os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) != 19


EXIT_WHILE_CALIBRATING = """
import numpy as np
from msvm.bytecode import ModuleBuilder
from msvm.interpreter import Program
mb = ModuleBuilder("m")
f = mb.function("f", ["x"])
f.ret(f.call("gelu", [f.tensor_input(0, "[N, 1024]", "float32")]))
Program(mb.build(), {"jit": False}).function("f")(np.ones((64, 1024), np.float32))
"""  # the first gelu starts the background calibration; the interpreter exits at once


def test_exiting_while_calibrating_does_not_hang():
    """OpenBLAS's exit handler used to wait forever for a pool a frozen daemon thread left busy."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for _ in range(3):
        subprocess.run([sys.executable, "-c", EXIT_WHILE_CALIBRATING], cwd=ROOT, env=env, timeout=60,
                       check=True, capture_output=True)
