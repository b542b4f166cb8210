"""The capability database document and its patches: schema, merging, and errors with JSON paths."""

from __future__ import annotations

import json

import pytest

from msvm.scheduler import CapabilityPatchError, capability_db, dump_capability_db, load_capability_patch
from msvm.scheduler.capability import DB, SCHEMA_VERSION, Rates


def test_document_lists_devices_variants_and_host():
    db = capability_db(measure=False)
    assert db["schema"] == "msvm-capability-db" and db["version"] == SCHEMA_VERSION
    cpu = db["devices"]["cpu"]
    assert {"cpu", "cores", "caches", "blas"} <= set(cpu["host"])
    names = {(v["op"], v["name"]) for v in cpu["variants"]}
    assert ("conv2d", "reference") in names and ("matmul", "reference") in names
    assert all(v["constraints"] and v["dtypes"] and v["kind"] for v in cpu["variants"])


def test_measured_document_has_the_cost_model(tmp_path):
    DB.record_calibration("cpu", "matmul", {"reference": Rates(12.0, 3.0, "calibrated")},
                          {"reference": [[2e6, 1e5, 1e-4]]})
    path = dump_capability_db(tmp_path / "caps.json", calibrate=False)
    db = json.loads(path.read_text())
    model = db["devices"]["cpu"]["cost_model"]
    assert model["bandwidth_gbps"] > 0 and model["sgemm_gflops"] > 0
    assert model["variants"]["matmul/reference"] == {"rate_gflops": 12.0, "overhead_us": 3.0,
                                                     "source": "calibrated", "points": [[2e6, 1e5, 1e-4]]}
    assert set(model["kinds"]) == {"blas", "native", "numpy"}
    assert db["devices"]["cpu"]["host"]["memory"]["triad_gbs"] > 0


def test_patch_overrides_show_in_the_document(tmp_path):
    patch = {
        "version": SCHEMA_VERSION,
        "devices": {"cpu": {
            "bandwidth_gbps": 12.5,
            "kinds": {"blas": {"rate_gflops": 150, "overhead_us": 5}},
            "variants": {"matmul/reference": {"overhead_us": 2}},
            "ops": {"matmul": {"force": "reference"}, "conv2d": {"forbid": ["im2col_gemm"]}},
        }},
    }
    file = tmp_path / "patch.json"
    file.write_text(json.dumps(patch))
    load_capability_patch(file)
    assert DB.bandwidth_gbps("cpu") == 12.5
    assert DB.kind_rates("cpu", "blas").rate_gflops == 150 and DB.kind_rates("cpu", "blas").source == "patch"
    cpu = capability_db()["devices"]["cpu"]
    assert cpu["cost_model"]["bandwidth_gbps"] == 12.5
    assert cpu["cost_model"]["variants"]["matmul/reference"]["overhead_us"] == 2
    assert cpu["rules"]["matmul"]["force"] == [{"variant": "reference"}]
    assert cpu["rules"]["conv2d"]["forbid"] == ["im2col_gemm"]
    assert capability_db(measure=False)["patches"][0]["devices"]["cpu"]["bandwidth_gbps"] == 12.5


def cpu(entry: dict) -> dict:
    return {"devices": {"cpu": entry}}


def mm(rules: dict) -> dict:
    return cpu({"ops": {"matmul": rules}})


def test_later_patch_replaces_a_key_and_keeps_the_rest():
    load_capability_patch(mm({"force": "reference", "forbid": ["small"]}))
    load_capability_patch(mm({"forbid": ["blas"]}))
    rules = DB.rules("cpu", "matmul")
    assert rules.forbid == {"blas"} and rules.force[0].variant == "reference"


MM = "$.devices.cpu.ops.matmul"


@pytest.mark.parametrize(
    ("patch", "path", "words"),
    [
        ({"devices": {}, "bogus": 1}, "$.bogus", ["unknown key 'bogus'", "version, devices"]),
        ({"devices": {"cuda:0": {}}}, "$.devices.cuda:0", ["unknown device 'cuda:0'", "cpu"]),
        (cpu({"speed": 1}), "$.devices.cpu.speed", ["bandwidth_gbps, gemm_half, kinds, variants, ops"]),
        (cpu({"gemm_half": {"q": 1}}), "$.devices.cpu.gemm_half.q", ["allowed here: m, n, k"]),
        (cpu({"ops": {"matmull": {}}}), "$.devices.cpu.ops.matmull", ["did you mean matmul"]),
        (mm({"force": "turbo"}), f"{MM}.force[0].variant",
         ["no variant 'turbo' of matmul on cpu", "reference"]),
        (mm({"forbid": ["reference"]}), f"{MM}.forbid[0]", ["cannot be forbidden"]),
        (mm({"prefer": "blas"}), f"{MM}.prefer", ["allowed here: force, forbid"]),
        (mm({"force": [{"variant": "blas", "shape": []}]}), f"{MM}.force[0].shape",
         ["variant, dtype, shapes"]),
        (mm({"force": [{"variant": "blas", "shapes": [[1, "N"]]}]}), f"{MM}.force[0].shapes",
         ["null for any size"]),
        (mm({"force": [{"variant": "blas", "dtype": "f32"}]}), f"{MM}.force[0].dtype",
         ["unknown dtype 'f32'"]),
        (cpu({"kinds": {"gpu": {}}}), "$.devices.cpu.kinds.gpu", ["unknown kind 'gpu'", "blas"]),
        (cpu({"kinds": {"blas": {"rate_gflops": 0}}}), "$.devices.cpu.kinds.blas.rate_gflops",
         ["must be a number > 0"]),
        (cpu({"variants": {"matmul/fast": {}}}), "$.devices.cpu.variants.matmul/fast",
         ["no variant 'fast' of matmul"]),
        (cpu({"bandwidth_gbps": "fast"}), "$.devices.cpu.bandwidth_gbps", ["number > 0"]),
        ({"version": 99, "devices": {}}, "$.version", ["unsupported version 99"]),
        ([], "$", ["must be an object"]),
    ],
)
def test_patch_errors_name_the_json_path(patch, path, words):
    with pytest.raises(CapabilityPatchError) as info:
        load_capability_patch(patch)
    err = info.value
    assert isinstance(err, ValueError) and err.path == path
    assert f"at {path}:" in str(err)
    for word in words:
        assert word in str(err)


def test_an_invalid_patch_changes_nothing():
    good = {"ops": {"matmul": {"force": "reference"}}}
    with pytest.raises(CapabilityPatchError):
        load_capability_patch({"devices": {"cpu": {**good, "bandwidth_gbps": -1}}})
    assert DB.rules("cpu", "matmul").force == ()


def test_patch_file_that_is_not_json(tmp_path):
    file = tmp_path / "broken.json"
    file.write_text("{devices: ")
    with pytest.raises(CapabilityPatchError, match="not valid JSON"):
        load_capability_patch(file)


def test_ms_vm_entry_points(tmp_path):
    import msvm as ms

    normalised = ms.vm.load_capability_patch(mm({"forbid": ["small"]}))
    assert normalised["devices"]["cpu"]["ops"]["matmul"]["forbid"] == ["small"]
    assert DB.rules("cpu", "matmul").forbid == frozenset({"small"})
    doc = json.loads(ms.vm.dump_capability_db(tmp_path / "caps.json", calibrate=False).read_text())
    assert doc["schema"] == "msvm-capability-db" and doc["patches"] == [normalised]
    assert {"cache_file", "cache", "background", "calibrating", "queued", "errors"} <= set(doc["calibration"])
    assert doc["devices"]["cpu"]["host"]["blas"]["choice"]["float32"]["reason"]
    assert all(ms.vm.__dict__[name].__doc__ for name in ("dump_capability_db", "load_capability_patch",
                                                         "memory_stats", "jit_info"))


def test_a_bad_patch_is_an_msvm_error_with_its_code():
    import msvm as ms

    with pytest.raises(ms.MsvmError) as info:
        ms.vm.load_capability_patch({"version": "x"})
    assert info.value.code == "E-CAPABILITY-PATCH" and isinstance(info.value, ValueError)
