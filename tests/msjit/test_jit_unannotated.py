"""Unannotated arrays: the annotation the SCD analysis and the region report tell the user to write, the
shapes a version records for it, and cache entry names that list only what tells entries apart."""

# ms.Tensor[8, 3, 3, 3] with string dims reads to linters as forward references: noise here.
# ruff: noqa: F821

import numpy as np

import msvm as ms
import msvm.nn.functional as F
from msvm.bytecode import ModuleBuilder, RegRef
from msvm.frontend import Tensor, jit
from msvm.frontend.jitfunction import SHAPES_KEPT
from msvm.interpreter import Program
from msvm.msjit.cache import CachePolicy, plan_keys
from msvm.msjit.regions import analyze_executable, def_use, region_io
from msvm.msjit.scd import suggest_annotations
from msvm.options import JitOptions

RNG = np.random.default_rng(0)
W1 = (RNG.standard_normal((8, 3, 3, 3)) * 0.1).astype(np.float32)
B1 = np.zeros(8, np.float32)


def frame(h: int, w: int) -> np.ndarray:
    return RNG.standard_normal((2, 3, h, w)).astype(np.float32)


@jit
def small_cnn(x, w1, b1):
    return F.max_pool2d(F.relu(F.conv2d(x, w1, b1, 1, 1)), 2)


@jit
def small_cnn_annotated(x: Tensor[2, 3, "H", "W"], w1: Tensor[8, 3, 3, 3], b1: Tensor[8]):
    return F.max_pool2d(F.relu(F.conv2d(x, w1, b1, 1, 1)), 2)


def test_fixed_dims_become_literals_and_changing_ones_get_their_ranks_letter() -> None:
    frames = [(2, 3, 16, 16), (2, 3, 32, 24)]
    seen = {"x": frames, "w1": [(8, 3, 3, 3)] * 2, "y": frames}
    assert suggest_annotations(seen) == {"x": 'ms.Tensor[2, 3, "H", "W"]', "w1": "ms.Tensor[8, 3, 3, 3]",
                                         "y": 'ms.Tensor[2, 3, "H", "W"]'}  # the same values: one symbol


def test_a_letter_taken_by_other_values_or_by_the_function_falls_back_to_the_parameters_own_name() -> None:
    seen = {"x": [(4, 16), (5, 32)], "y": [(4, 7), (6, 7)]}
    assert suggest_annotations(seen) == {"x": 'ms.Tensor["N", "D"]', "y": 'ms.Tensor["y_0", 7]'}
    assert suggest_annotations({"x": [(4, 16), (5, 32)]}, taken={"N"}) == {"x": 'ms.Tensor["x_0", "D"]'}


def test_the_analysis_names_the_weight_that_keeps_conv2d_out_of_regions_with_its_annotation() -> None:
    for hw in ((16, 16), (32, 24), (16, 16)):
        small_cnn(frame(*hw), W1, B1)
    a = ms.vm.scd_analysis(small_cnn, frame(16, 16), W1, B1)
    (split,) = [s for s in a.splits if s.opcode == "OP_CALL conv2d"]
    assert split.parameters == ("w1",)
    assert split.reason.endswith("kernel sizes must be constants to generate code; annotate `w1` as "
                                 "`ms.Tensor[8, 3, 3, 3]`")
    first, *others = a.annotations
    assert first["parameter"] == "w1" and first["blocks"] == [split.address]
    assert {n["parameter"]: n["annotation"] for n in others} == {"x": 'ms.Tensor[2, 3, "H", "W"]',
                                                                 "b1": "ms.Tensor[8]"}
    assert others[0]["blocks"] == [] and "from the 2 shapes its calls brought" in others[0]["message"]
    assert "annotate `w1` as `ms.Tensor[8, 3, 3, 3]`" in a.text()
    # The advice is right: written out, conv2d joins a region.
    fixed = ms.vm.scd_analysis(small_cnn_annotated, frame(16, 16), W1, B1)
    assert not [s for s in fixed.splits if "conv2d" in s.opcode] and fixed.annotations == []


def test_without_the_shapes_seen_the_split_still_names_the_parameter_to_annotate() -> None:
    program, name, args = small_cnn.program_for(frame(16, 16), W1, B1)
    a = ms.vm.scd_analysis(program.function(name), *args)  # an Executable: no call history
    (split,) = [s for s in a.splits if s.opcode == "OP_CALL conv2d"]
    assert split.reason.endswith("; annotate `w1` with constant sizes") and a.annotations == []


def test_a_version_records_its_unannotated_arrays_shapes_until_it_knows_enough() -> None:
    @jit
    def scale(x, k: Tensor[1]):
        return x * k

    k = np.ones(1, np.float32)
    for n in range(1, SHAPES_KEPT + 6):
        scale(np.ones((n, 3), np.float32), k)
    (version,) = scale._versions.values()
    assert version.watched == (0,) and len(version.shapes) == SHAPES_KEPT  # then it stopped recording
    seen = scale.shapes_seen(np.ones((2, 3), np.float32), k)
    assert list(seen) == ["x"] and seen["x"][-1] == (2, 3) and (SHAPES_KEPT, 3) in seen["x"]


def made_up_policy() -> CachePolicy:
    """A region keyed by an unannotated ``x`` (dims ``x_0``, ``x_1``) and an ``ms.mutable`` ``h``."""
    mb = ModuleBuilder("m")
    f = mb.function("f", ["x", "h"])
    x = f.tensor_input(0, "[x_0, x_1]", "float32")
    h = f.scalar_arg(1, "h")
    f.ret(f.call("slice", [f.call("relu", [x])], {"axes": (0,), "starts": (0,), "stops": (RegRef(h),)}))
    exe = Program(mb.build(), {"jit": False}).function("f")
    (region,) = analyze_executable(exe).regions
    plan = plan_keys(region_io(region, exe.info, def_use(exe.info)), exe.info)
    return CachePolicy(JitOptions(cache_mode="exact"), plan)


def test_names_show_user_symbols_always_and_made_up_ones_only_where_they_differ_from_the_first() -> None:
    policy = made_up_policy()
    assert policy.plan.made_up == {"x_0", "x_1"}
    names = [policy.name("f", 0, "0123abcd", key, key) for key in (((5, 3), 4), ((7, 3), 4), ((5, 3), 2))]
    assert names == ["jit_cache_f_r0_exact_0123abcd_h4", "jit_cache_f_r0_exact_0123abcd_x_0v7_h4",
                     "jit_cache_f_r0_exact_0123abcd_h2"]


def test_entries_of_an_unannotated_function_have_short_distinct_names() -> None:
    for hw in ((16, 16), (32, 24)):
        for _ in range(4):
            small_cnn(frame(*hw), W1, B1)
    ms.vm.wait_for_compiles(60)
    names = [e["name"] for e in ms.vm.jit_info() if e["function"] == "small_cnn"]
    assert names and len(set(names)) == len(names)
    assert all(n.startswith("jit_cache_small_cnn_r") and "_exact_" in n and "w1_" not in n for n in names)
