"""Host facts for the capability database: plain JSON, plausible values."""

from __future__ import annotations

import json

from msvm.native import host


def test_facts_without_measurements_are_json() -> None:
    facts = json.loads(json.dumps(host.host_facts(measure=False)))
    assert facts["cpu"]["name"] and facts["cpu"]["vector_bits"] in (128, 256, 512)
    assert facts["cores"]["logical"] >= 1 and facts["cores"]["usable"] >= 1
    assert facts["target"]["triple"] == facts["cpu"]["triple"]
    for cache in facts["caches"]:
        assert cache["level"] >= 1 and cache["size_bytes"] > 0
    assert "libraries" in facts["blas"]


def test_quick_rates_are_plausible_and_cached() -> None:
    quick = host.quick_rates()
    assert quick["sgemm_gflops"] > 0 and quick["bandwidth_gbps"] > 0
    assert host.quick_rates() is quick


def test_measured_facts_record_the_blas_choice() -> None:
    facts = json.loads(json.dumps(host.host_facts(measure=True)))
    choice = facts["blas"]["choice"]["float32"]
    assert choice["reason"] and choice["entry"] == facts["blas"]["best"]["float32"]


def test_memory_bandwidth_is_measured_and_cached() -> None:
    first = host.memory_bandwidth()
    assert first["copy_gbs"] > 0 and first["triad_gbs"] > 0
    assert host.memory_bandwidth() is first
