"""Cache keys: buckets, adaptive buckets, entry names, and what an entry's region function is built from."""

import pytest

from msvm.bytecode import ModuleBuilder, RegRef
from msvm.interpreter import Program
from msvm.msjit.cache import ADAPTIVE_GROWTH, CachePolicy, bucket_of, plan_keys
from msvm.msjit.regions import analyze_executable, def_use, region_io
from msvm.options import JitOptions


@pytest.mark.parametrize(("value", "bucket"), [(1, (1, 8)), (8, (1, 8)), (9, (9, 16)), (16, (9, 16)),
                                               (17, None), (0, None)])
def test_boundaries_make_buckets_and_pin_values_outside_them(value: int, bucket: tuple | None) -> None:
    assert bucket_of(value, (8, 16)) == bucket


@pytest.mark.parametrize(("value", "bucket"), [(1, (1, 1)), (2, (2, 2)), (3, (3, 4)), (5, (5, 8)),
                                               (1000, (513, 1024))])
def test_power_of_two_buckets_have_no_last_boundary(value: int, bucket: tuple) -> None:
    assert bucket_of(value, None) == bucket


def policy_for(mode: str, boundaries: tuple[int, ...] | None = None) -> CachePolicy:
    mb = ModuleBuilder("m")
    f = mb.function("f", ["x", "y", "h"])
    x = f.tensor_input(0, "[N, C]", "float32")
    y = f.tensor_input(1, "[N, C]", "float32")
    h = f.scalar_arg(2, "h")
    s = f.call("slice", [f.call("add", [x, y])], {"axes": (0,), "starts": (0,), "stops": (RegRef(h),)})
    f.ret(s)
    exe = Program(mb.build(), {"jit": False}).function("f")
    (region,) = analyze_executable(exe).regions
    plan = plan_keys(region_io(region, exe.info, def_use(exe.info)), exe.info)
    return CachePolicy(JitOptions(cache_mode=mode, bucket_boundaries=boundaries), plan)


def test_the_key_reads_each_symbol_once() -> None:
    policy = policy_for("exact")
    assert policy.plan.key_expr() == "(r0.shape, r2)"  # y's shape adds nothing x's did not
    assert policy.plan.symbols == ("N", "C", "h")


def test_exact_and_bucket_names_and_parameters() -> None:
    key = ((5, 3), 4)
    exact = policy_for("exact")
    assert exact.cache_key(key) == key
    assert exact.name("f", 0, "0123abcd", key, key) == "jit_cache_f_r0_exact_0123abcd_N5_C3_h4"
    specs, scalars, bounds = exact.parameters(key, key)
    assert [str(s) for s in specs] == ["[5, 3]", "[5, 3]"] and scalars == [4] and bounds == {}
    bucket = policy_for("bucket", (4, 8))
    ck = bucket.cache_key(key)
    assert bucket.cache_key(((6, 2), 3)) == ck  # other sizes in the same buckets share the entry
    assert bucket.name("f", 0, "0123abcd", ck, key) == "jit_cache_f_r0_bucket_0123abcd_N5-8_C1-4_h1-4"
    specs, scalars, bounds = bucket.parameters(ck, key)
    assert [str(s) for s in specs] == ["[N, C]", "[N, C]"] and scalars == ["h"]
    assert bounds == {"N": 8, "C": 4, "h": 4}
    big = ((50, 3), 4)  # N above the last boundary: pinned
    specs, scalars, bounds = bucket.parameters(bucket.cache_key(big), big)
    assert [str(s) for s in specs] == ["[50, C]", "[50, C]"] and bounds == {"C": 4, "h": 4}


@pytest.mark.parametrize(("value", "bucket"), [(1, (1, 1)), (3, (2, 4)), (5, (5, 16)), (16, (5, 16)),
                                               (200, (65, 256))])
def test_adaptive_buckets_grow_by_four(value: int, bucket: tuple) -> None:
    assert bucket_of(value, None, ADAPTIVE_GROWTH) == bucket


def test_adaptive_learns_power_of_four_buckets_for_symbols_that_vary_once_keys_pass_the_budget() -> None:
    policy = policy_for("adaptive")
    keys = (((2, 3), 1), ((3, 3), 1), ((5, 3), 1))
    assert [policy.observe(key, budget=2) for key in (*keys, keys[0])] == [False, False, True, True]
    assert all(policy.cache_key(key) == key for key in keys)  # exact until it learns
    assert policy.learn() == {"N": (4, 16)}  # C and h took one value: they stay exact
    ck = policy.cache_key(((6, 3), 1))
    assert policy.name("f", 0, "0123abcd", ck, ((6, 3), 1)) == "jit_cache_f_r0_adaptive_0123abcd_N5-16_C3_h1"
    assert policy.cache_key(((300, 3), 1)) != ck  # a size beyond the values seen gets its own bucket


def _digest_of(weight) -> str:
    from msvm.msjit.cache import region_digest

    mb = ModuleBuilder("m")
    f = mb.function("f", ["x"])
    f.ret(f.call("add", [f.tensor_input(0, "[N]", "float32"), f.load_const(weight)]))
    module = mb.build()
    exe = Program(module, {"jit": False}).function("f")
    (region,) = analyze_executable(exe).regions
    return region_digest(region, region_io(region, exe.info, def_use(exe.info)), exe.info, module)


def test_the_digest_tells_constants_apart_and_samples_large_ones() -> None:
    import numpy as np

    from msvm.msjit.cache import DIGEST_SAMPLE

    small = np.arange(100, dtype=np.float32)
    assert _digest_of(small) == _digest_of(small.copy())
    assert _digest_of(small) != _digest_of(small + np.float32(1))
    big = np.arange(4 * DIGEST_SAMPLE, dtype=np.float32)  # a large constant: its digest reads a sample
    changed = big.copy()
    changed[4] += 1  # on the sample (every 4th element)
    assert _digest_of(big) == _digest_of(big.copy()) != _digest_of(changed)
    unread = big.copy()
    unread[1] += 1  # between samples: the digest names the region, it does not vouch for every weight
    assert _digest_of(unread) == _digest_of(big)
    assert _digest_of(big) != _digest_of(big.reshape(2, -1)[0])  # size and shape count
