"""A region is two LLVM modules: its kernels with loops, optimised, and the entry with the rest, not."""

from __future__ import annotations

import re

from codegen_helpers import check, rand, region

from msvm.msjit.codegen.region import ENTRY_PIPELINE, PIPELINE, SEPARATOR


def _mlp(f, x, w):
    h = f.call("sigmoid", [f.call("matmul", [x, w])])
    return f.call("add", [h, f.call("sum", [x], {"axis": -1, "keepdims": True})])


INPUTS = [("[24, 32]", "float32"), ("[32, 48]", "float32")]


def _defined(ir_text: str) -> set[str]:
    return set(re.findall(r'^define [^@]*@"([^"]+)"', ir_text, re.M))


def test_loops_go_to_the_optimised_module_and_the_rest_is_compiled_as_is():
    r = check(region(_mlp, INPUTS), rand((24, 32)), rand((32, 48)))
    lowered = r.lowered
    entry, loops = _defined(lowered.ir), _defined(lowered.loop_ir)
    assert lowered.entry in entry and f"{lowered.entry}_fast" in entry and not entry & loops
    assert " phi " not in lowered.ir  # nothing in the entry module loops
    whole = {name for name in loops if name.endswith("_whole")}
    assert whole and all(f'declare void @"{name}"' in lowered.ir for name in whole)  # called from the entry
    assert "msvm.sigmoid.f32" in loops and "msvm.sigmoid" not in lowered.ir  # a helper, where its loop is
    assert [options for _, options in lowered.modules()] == [ENTRY_PIPELINE, PIPELINE]
    assert SEPARATOR in r.disassemble("llvm") and SEPARATOR in r.disassemble("asm")


def test_a_region_without_loops_is_one_module():
    def body(f, x, w):
        return f.call("matmul", [x, w])

    r = check(region(body, INPUTS), rand((24, 32)), rand((32, 48)))
    assert r.lowered.loop_ir == "" and len(r.lowered.modules()) == 1
