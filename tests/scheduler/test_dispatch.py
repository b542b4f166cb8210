"""Shape-aware dispatch: candidates, policies, patches, devices, trace events, threads."""

from __future__ import annotations

import threading
import warnings

import numpy as np
import pytest
from scheduler_helpers import Counting, calibrated, matmul_program, matmul_step, rand

from msvm.context import set_context
from msvm.errors import KernelNotFoundError
from msvm.observe.trace import TRACE
from msvm.ops.registry import REGISTRY
from msvm.scheduler import Dispatcher, autotune, bind_site, load_capability_patch

MATMUL = REGISTRY["matmul"].kernel


def small_and_big():
    small = Counting("matmul", "small", MATMUL, when=lambda s, a: max(*s[0], *s[1]) <= 8)
    big = Counting("matmul", "big", MATMUL, when=lambda s, a: s[0][0] >= 64)
    return small, big


def test_only_applicable_variants_run(fake_variants):
    small, big = small_and_big()
    fake_variants("matmul", [small, big])
    calibrated("matmul", {"small": (1000.0, 0.0), "big": (1000.0, 0.0), "reference": (0.001, 1e6)})
    fn = matmul_program()
    a, b = rand(4, 8), rand(8, 8)
    np.testing.assert_allclose(fn(a, b), a @ b, rtol=1e-6)
    assert (small.calls, big.calls) == (1, 0)
    a, b = rand(64, 16), rand(16, 16)
    np.testing.assert_allclose(fn(a, b), a @ b, rtol=1e-5)
    assert (small.calls, big.calls) == (1, 1)
    a, b = rand(16, 16), rand(16, 16)  # neither applies: the reference, however slow it looks
    np.testing.assert_allclose(fn(a, b), a @ b, rtol=1e-5)
    assert (small.calls, big.calls) == (1, 1)
    choice = matmul_step(fn).choice
    assert choice.variant == "reference" and choice.reason == "only variant"


def test_decision_is_cached_per_shape(fake_variants, monkeypatch):
    small, big = small_and_big()
    fake_variants("matmul", [small, big])
    calibrated("matmul", {"small": (1000.0, 0.0), "big": (1000.0, 0.0), "reference": (1.0, 100.0)})
    decide, seen = Dispatcher.decide, []
    monkeypatch.setattr(Dispatcher, "decide", lambda self, *a: seen.append(a[0]) or decide(self, *a))
    fn = matmul_program()
    a, b = rand(4, 8), rand(8, 8)
    for _ in range(5):
        fn(a, b)
    fn(rand(2, 8), b)
    assert len(seen) == 2 and small.calls == 6
    assert len(matmul_step(fn).dispatcher.decisions) == 2


def test_cost_picks_are_shared_within_a_shape_class(fake_variants, monkeypatch):
    fast = Counting("matmul", "fast", MATMUL, when=lambda s, a: s[0][0] != 100)
    slow = Counting("matmul", "slow", MATMUL)
    fake_variants("matmul", [slow, fast])
    calibrated("matmul", {"fast": (100.0, 1.0), "slow": (1.0, 1.0), "reference": (1.0, 50.0)})
    pick, picked = Dispatcher._pick, []

    def counted(self, shapes, *args):
        picked.append(shapes)
        return pick(self, shapes, *args)

    monkeypatch.setattr(Dispatcher, "_pick", counted)
    fn = matmul_program()
    b = rand(8, 8)
    for m in (65, 90, 128, 100, 129):  # 65..128 are one class; fast does not apply to 100; 129 is the next
        a = rand(m, 8)
        np.testing.assert_allclose(fn(a, b), a @ b, rtol=1e-5)
    assert [shapes[0][0] for shapes in picked] == [65, 100, 129]
    site = matmul_step(fn).dispatcher
    assert len(site.decisions) == 5 and (fast.calls, slow.calls) == (4, 1)
    shared = site.decisions[((90, 8), (8, 8))]
    assert shared.variant == "fast" and shared.reason.endswith("[shape class of 65x8, 8x8]")
    set_context(kernel_policy="autotune")  # measuring is per exact shape: no sharing
    picked.clear()
    for m in (65, 90):
        fn(rand(m, 8), b)
    assert [shapes[0][0] for shapes in picked] == [65, 90]


def test_a_program_made_again_reuses_the_picks_of_the_one_before(fake_variants, monkeypatch):
    fast, slow = Counting("matmul", "fast", MATMUL), Counting("matmul", "slow", MATMUL)
    fake_variants("matmul", [slow, fast])
    calibrated("matmul", {"fast": (100.0, 1.0), "slow": (1.0, 1.0), "reference": (1.0, 50.0)})
    pick, picked = Dispatcher._pick, []
    monkeypatch.setattr(Dispatcher, "_pick", lambda self, *a: picked.append(a[0]) or pick(self, *a))
    a, b = rand(40, 8), rand(8, 8)
    first = matmul_program()
    first(a, b)
    again = matmul_program()  # a cell run again: the same site, a new program
    np.testing.assert_allclose(again(rand(50, 8), b), rand(50, 8) @ b, rtol=1e-5)  # 40 and 50: one class
    assert len(picked) == 1 and fast.calls == 2
    assert matmul_step(again).choice.reason == matmul_step(first).dispatcher.classes[((64, 8), (8, 8)), ()][1]
    calibrated("matmul", {"fast": (1.0, 1.0), "slow": (100.0, 1.0), "reference": (1.0, 50.0)})  # new rates
    third = matmul_program()
    third(a, b)
    assert len(picked) == 2 and slow.calls == 1  # picked afresh


class WritesOut(Counting):
    """A fake variant whose kernel can write into a given ``out=`` (so its big outputs are pooled)."""

    def make(self, attrs):
        def kernel(*arrays, out=None):
            self.calls += 1
            result = self.reference(*arrays, **attrs)
            if out is None:
                return result
            out[...] = result
            return out

        return kernel


@pytest.mark.parametrize("variant", [Counting, WritesOut])
def test_a_shape_class_shares_its_choice_unless_the_output_is_pooled(fake_variants, variant):
    fast, slow = variant("matmul", "fast", MATMUL), Counting("matmul", "slow", MATMUL)
    fake_variants("matmul", [slow, fast])
    calibrated("matmul", {"fast": (100.0, 1.0), "slow": (1.0, 1.0), "reference": (1.0, 50.0)})
    fn = matmul_program()
    b = rand(8, 512)
    for m in (65, 90, 128):  # one class; outputs of 130–260 KiB: big enough to pool
        a = rand(m, 8)
        out = fn(a, b)
        assert out.shape == (m, 512)
        np.testing.assert_allclose(out, a @ b, rtol=1e-5)
    site = matmul_step(fn).dispatcher
    later = [site.decisions[((m, 8), (8, 512))] for m in (90, 128)]
    assert all(c.variant == "fast" and "[shape class of 65x8, 8x512]" in c.reason for c in later)
    assert (later[0] is later[1]) == (variant is Counting)  # a pooled call is made for its output shape


def test_dtype_must_match_for_a_variant_to_be_bound(fake_variants):
    only64 = Counting("matmul", "only64", MATMUL, dtypes=("float64",))
    fake_variants("matmul", [only64])
    fn = matmul_program("float32")
    assert matmul_step(fn).dispatcher is None and matmul_step(fn).variant == "reference"
    fn(rand(4, 4), rand(4, 4))
    assert only64.calls == 0
    fn64 = matmul_program("float64")
    assert isinstance(matmul_step(fn64).dispatcher, Dispatcher)


def test_op_without_variants_binds_its_reference_directly():
    op = REGISTRY["neg"]
    binding = bind_site(op, {}, [], [])
    assert binding.kernel is op.kernel and binding.dispatcher is None
    assert binding.reason.startswith("only variant")


def test_reference_policy_always_runs_the_reference(fake_variants):
    small, big = small_and_big()
    fake_variants("matmul", [small, big])
    set_context(kernel_policy="reference")
    fn = matmul_program()
    step = matmul_step(fn)
    assert step.dispatcher is None
    assert step.choice.variant == "reference" and step.choice.reason == "reference policy"
    fn(rand(4, 8), rand(8, 8))
    assert small.calls == 0


def test_changing_the_policy_rebinds_a_prepared_function(fake_variants):
    small, big = small_and_big()
    fake_variants("matmul", [small, big])
    calibrated("matmul", {"small": (1000.0, 0.0), "big": (1000.0, 0.0), "reference": (1.0, 100.0)})
    fn = matmul_program()
    a, b = rand(4, 8), rand(8, 8)
    fn(a, b)
    set_context(kernel_policy="reference")
    fn(a, b)
    assert small.calls == 1
    set_context(kernel_policy="cost")
    fn(a, b)
    assert small.calls == 2


def test_cost_policy_picks_the_cheapest_estimate_and_says_why(fake_variants):
    fast = Counting("matmul", "fast", MATMUL)
    slow = Counting("matmul", "slow", MATMUL)
    fake_variants("matmul", [slow, fast])
    calibrated("matmul", {"fast": (100.0, 1.0), "slow": (1.0, 1.0), "reference": (1.0, 50.0)})
    fn = matmul_program()
    fn(rand(32, 32), rand(32, 32))
    assert (fast.calls, slow.calls) == (1, 0)
    choice = matmul_step(fn).choice
    assert choice.variant == "fast" and choice.device == "cpu"
    assert choice.reason.startswith("cost: ") and " est vs " in choice.reason and "slow" in choice.reason


def test_autotune_measures_once_per_shape_and_remembers_the_winner(fake_variants):
    fast = Counting("matmul", "fast", MATMUL)
    slow = Counting("matmul", "slow", MATMUL, delay=0.002)
    fake_variants("matmul", [slow, fast])
    set_context(kernel_policy="autotune")
    a, b = rand(16, 16), rand(16, 16)
    fn = matmul_program()
    np.testing.assert_allclose(fn(a, b), a @ b, rtol=1e-5)
    choice = matmul_step(fn).choice
    assert choice.variant in ("fast", "reference") and choice.reason.startswith("autotuned: ")
    measured = slow.calls
    assert measured >= 2  # warm-up + timed runs
    assert len(autotune.winners()) == 1
    other = matmul_program()  # another site, same key: no new measurement
    other(a, b)
    assert slow.calls == measured and len(autotune.winners()) == 1
    other(rand(8, 16), b)  # a new shape class is measured
    assert slow.calls > measured and len(autotune.winners()) == 2


def test_patch_forces_a_variant(fake_variants):
    fast = Counting("matmul", "fast", MATMUL)
    slow = Counting("matmul", "slow", MATMUL)
    fake_variants("matmul", [slow, fast])
    calibrated("matmul", {"fast": (100.0, 1.0), "slow": (1.0, 1.0), "reference": (1.0, 50.0)})
    fn = matmul_program()
    a, b = rand(8, 8), rand(8, 8)
    fn(a, b)
    load_capability_patch({"devices": {"cpu": {"ops": {"matmul": {"force": "slow"}}}}})
    fn(a, b)  # the patch makes every site forget its decisions
    assert (fast.calls, slow.calls) == (1, 1)
    assert matmul_step(fn).choice.reason == "forced by patch"


def test_patch_force_rule_with_dtype_and_shape_condition(fake_variants):
    fast = Counting("matmul", "fast", MATMUL)
    slow = Counting("matmul", "slow", MATMUL)
    fake_variants("matmul", [slow, fast])
    calibrated("matmul", {"fast": (100.0, 1.0), "slow": (1.0, 1.0), "reference": (1.0, 50.0)})
    rule = {"variant": "slow", "dtype": "float32", "shapes": [[None, 4], [4, None]]}
    load_capability_patch({"devices": {"cpu": {"ops": {"matmul": {"force": [rule]}}}}})
    fn = matmul_program()
    fn(rand(3, 4), rand(4, 5))
    fn(rand(3, 5), rand(5, 5))
    assert (slow.calls, fast.calls) == (1, 1)


def test_patch_forbids_a_variant(fake_variants):
    fast = Counting("matmul", "fast", MATMUL)
    slow = Counting("matmul", "slow", MATMUL)
    fake_variants("matmul", [slow, fast])
    calibrated("matmul", {"fast": (100.0, 1.0), "slow": (10.0, 1.0), "reference": (1.0, 50.0)})
    load_capability_patch({"devices": {"cpu": {"ops": {"matmul": {"forbid": ["fast"]}}}}})
    fn = matmul_program()
    fn(rand(16, 16), rand(16, 16))
    assert (fast.calls, slow.calls) == (0, 1)


def test_forced_variant_that_does_not_apply_is_noted_and_skipped(fake_variants):
    small, big = small_and_big()
    fake_variants("matmul", [small, big])
    calibrated("matmul", {"small": (1000.0, 0.0), "big": (1000.0, 0.0), "reference": (1.0, 100.0)})
    load_capability_patch({"devices": {"cpu": {"ops": {"matmul": {"force": "big"}}}}})
    fn = matmul_program()
    fn(rand(4, 8), rand(8, 8))
    assert (small.calls, big.calls) == (1, 0)
    assert "forced big does not apply" in matmul_step(fn).choice.reason


def test_patch_rates_change_the_cost_decision(fake_variants):
    one = Counting("matmul", "one", MATMUL)
    two = Counting("matmul", "two", MATMUL)
    fake_variants("matmul", [one, two])
    calibrated("matmul", {"one": (100.0, 1.0), "two": (50.0, 1.0), "reference": (1.0, 50.0)})
    load_capability_patch({"devices": {"cpu": {"variants": {"matmul/two": {"rate_gflops": 1000}}}}})
    fn = matmul_program()
    fn(rand(32, 32), rand(32, 32))
    assert (one.calls, two.calls) == (0, 1)


# -- devices -----------------------------------------------------------------------------------------


def test_kernel_not_found_on_a_device_without_kernels_when_fallback_is_off():
    set_context(device="cuda:0", fallback=False)
    with pytest.raises(KernelNotFoundError) as info:
        matmul_program()
    err = info.value
    assert err.code == "E-KERNEL-NOT-FOUND" and err.address is not None
    assert "Kernel not found for op matmul on device cuda:0" in str(err)
    assert "devices with kernels for matmul: cpu (" in err.hint and "reference" in err.hint


def test_fallback_warns_once_per_op_and_device():
    set_context(device="cuda:0", fallback=True)
    a, b = rand(4, 4), rand(4, 4)
    with pytest.warns(RuntimeWarning, match="no kernel for op matmul") as caught:
        fn = matmul_program()
        other = matmul_program()
    assert len([w for w in caught if "matmul" in str(w.message)]) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_allclose(fn(a, b), a @ b, rtol=1e-6)
        other(a, b)
    choice = matmul_step(fn).choice
    assert choice.variant == "reference" and choice.reason.startswith("fallback: no kernel on cuda:0")


def test_switching_the_device_rebinds_and_back():
    fn = matmul_program()
    a, b = rand(4, 4), rand(4, 4)
    fn(a, b)
    set_context(device="cuda:1", fallback=False)
    with pytest.raises(KernelNotFoundError):
        fn(a, b)
    set_context(device="cpu")
    np.testing.assert_allclose(fn(a, b), a @ b, rtol=1e-6)


def test_context_accepts_cuda_names_only():
    set_context(device="cuda:3")
    with pytest.raises(ValueError, match="'cpu' or 'cuda:N'"):
        set_context(device="gpu0")


# -- observability --------------------------------------------------------------------------------


def test_trace_events_carry_the_variant_that_ran(fake_variants):
    small, big = small_and_big()
    fake_variants("matmul", [small, big])
    calibrated("matmul", {"small": (1000.0, 0.0), "big": (1000.0, 0.0), "reference": (1.0, 100.0)})
    fn = matmul_program()
    TRACE.clear()
    TRACE.enable(True, path=None)
    try:
        fn(rand(4, 8), rand(8, 8))
        fn(rand(16, 16), rand(16, 16))
    finally:
        TRACE.enable(False)
    calls = [e for e in TRACE.recent() if e.opcode == "OP_CALL"]
    assert [e.variant for e in calls] == ["small", "reference"]


def test_debugger_sees_the_choice_of_a_step(fake_variants):
    small, big = small_and_big()
    fake_variants("matmul", [small, big])
    calibrated("matmul", {"small": (1000.0, 0.0), "big": (1000.0, 0.0), "reference": (1.0, 100.0)})
    fn = matmul_program()
    run = fn.debug(rand(4, 8), rand(8, 8))
    run.continue_()
    step = matmul_step(fn)
    assert step.choice.variant == "small" and step.choice.reason.startswith("cost: ")


# -- threads --------------------------------------------------------------------------------------


def test_two_threads_with_different_shapes_get_correct_results(fake_variants):
    small, big = small_and_big()
    fake_variants("matmul", [small, big])
    calibrated("matmul", {"small": (1000.0, 0.0), "big": (1000.0, 0.0), "reference": (1.0, 100.0)})
    fn = matmul_program()
    errors: list[BaseException] = []
    shapes = [((4, 8), (8, 8)), ((64, 32), (32, 16)), ((16, 16), (16, 16)), ((200, 200), (200, 300))]

    def worker(seed: int) -> None:
        try:
            rng = np.random.default_rng(seed)
            for i in range(40):
                sa, sb = shapes[(seed + i) % len(shapes)]
                a = rng.standard_normal(sa).astype(np.float32)
                b = rng.standard_normal(sb).astype(np.float32)
                np.testing.assert_allclose(fn(a, b), a @ b, rtol=1e-4, atol=1e-4)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_a_unary_op_s_pooled_output_type_is_inferred_once_per_dtype(monkeypatch):
    """A pooled output is sized from the op's shape function; a unary elementwise op's output has its
    input's shape, so at every new shape only the dtype is needed, and that is asked once."""
    from msvm.bytecode import ModuleBuilder
    from msvm.interpreter import Program
    from msvm.scheduler import dispatch

    inferred = []
    real = dispatch._inferred_type
    monkeypatch.setattr(dispatch, "_inferred_type", lambda op, *a: inferred.append(op.name) or real(op, *a))
    monkeypatch.setattr(dispatch, "_UNARY_DTYPES", {})
    for dtype in ("float32", "float64"):
        mb = ModuleBuilder("t")
        f = mb.function("f", ["x"])
        f.ret(f.call("gelu", [f.tensor_input(0, "[N, 1024]", dtype)]))
        fn = Program(mb.build()).function("f")
        for n in (100, 150, 230):  # 400–940 KiB: pooled
            x = np.random.default_rng(n).standard_normal((n, 1024)).astype(dtype)
            out = fn(x)
            assert out.shape == x.shape and out.dtype == x.dtype
            np.testing.assert_allclose(out, REGISTRY["gelu"].kernel(x), rtol=1e-5, atol=1e-6)
        site = next(s for s in fn.steps if s.dispatcher is not None).dispatcher
        assert site.pooled and len(site.decisions) == 3
    assert inferred == ["gelu", "gelu"]
