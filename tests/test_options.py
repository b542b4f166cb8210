"""JIT options: one validated definition that survives the trip through a program's options dict."""

import pytest

from msvm.options import JitOptions, jit_enabled, parse_options


def test_options_round_trip_through_a_program_dict():
    options = JitOptions(cache_mode="bucket", bucket_boundaries=[8, 16], mem_optimize=True, hot_threshold=2)
    program_dict = {**options.as_dict(), "name": "f", "jit": True}  # a program keeps keys of its own
    assert JitOptions.of(program_dict) == options
    assert options.bucket_boundaries == (8, 16)
    assert JitOptions.of({}) == JitOptions()


def test_jit_can_be_switched_off_per_program():
    assert jit_enabled({}) and jit_enabled({"jit": True}) and not jit_enabled({"jit": False})


@pytest.mark.parametrize(("options", "error", "words"), [
    ({"cache_mode": "lru"}, ValueError, "cache_mode must be one of"),
    ({"bucket_boundaries": [16, 8]}, ValueError, "strictly increasing"),
    ({"scd_threshold": 1.5}, ValueError, "[0, 1]"),
    ({"hot_threshold": 0}, ValueError, ">= 1"),
    ({"mem_optimize": "yes"}, TypeError, "True or False"),
    ({"hot_treshold": 3}, TypeError, "unknown @ms.jit option(s) hot_treshold"),
])
def test_bad_options_fail_where_they_are_written(options, error, words):
    with pytest.raises(error) as exc:
        parse_options(options)
    assert words in str(exc.value)
