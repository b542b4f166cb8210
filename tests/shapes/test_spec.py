"""Shape specs: text round trip, matching concrete shapes, unification and broadcasting."""

from __future__ import annotations

import copy
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from msvm.errors import ShapeError
from msvm.shapes import (
    UNKNOWN,
    Dim,
    ShapeSpec,
    ShapeSyntaxError,
    Unification,
    broadcast_dims,
    broadcast_shapes,
    match_shape,
    parse_dim,
    parse_shape,
    unify,
)

H, W, N = Dim.sym("H"), Dim.sym("W"), Dim.sym("N")


# -- construction and text ------------------------------------------------------------------------------


def test_of_mixes_ints_strings_and_dims():
    spec = ShapeSpec.of(["N", 3, "H*2", "?", W])
    assert spec == (N, 3, H * 2, UNKNOWN, W)
    assert all(isinstance(d, Dim) for d in spec)
    assert str(spec) == "[N, 3, H*2, ?, W]"
    assert repr(spec) == "ShapeSpec('[N, 3, H*2, ?, W]')"


def test_parse_shape_round_trip():
    spec = parse_shape("[N, 3, H*2, ?]")
    assert spec == ShapeSpec.of(["N", 3, "H*2", "?"])
    assert str(spec) == "[N, 3, H*2, ?]"
    assert parse_shape(str(spec)) == spec
    assert parse_shape("  [ N ,3,(W + 1)//2 ]  ") == ShapeSpec.of([N, 3, "ceildiv(W, 2)"])
    assert parse_shape("[]") == ShapeSpec() and parse_shape("[ ]").rank == 0
    assert str(ShapeSpec()) == "[]"


def test_specs_are_hashable_values():
    assert hash(parse_shape("[N, 3]")) == hash(ShapeSpec.of([N, 3]))
    assert {parse_shape("[2, 3]"): 1}[ShapeSpec.of([2, 3])] == 1
    assert ShapeSpec.of([2, 3]) == (2, 3)
    with pytest.raises(AttributeError):
        parse_shape("[N]").extra = 1


def test_spec_from_text_and_slices():
    spec = ShapeSpec("[N, 3, H*2]")
    assert spec == parse_shape("[N, 3, H*2]")
    assert eval(repr(spec), {"ShapeSpec": ShapeSpec}) == spec
    assert spec[0] == N and isinstance(spec[1:], ShapeSpec) and str(spec[1:]) == "[3, H*2]"
    assert ShapeSpec([*spec[:1], "W", 2]) == parse_shape("[N, W, 2]")


def test_specs_copy_and_pickle():
    spec = parse_shape("[N, (W+1)//2, ?]")
    assert copy.deepcopy(spec) == spec
    assert pickle.loads(pickle.dumps(spec)) == spec
    assert pickle.loads(pickle.dumps(UNKNOWN)) is UNKNOWN


@pytest.mark.parametrize(
    ("text", "pos", "fragment"),
    [
        ("N, 3]", 0, "expected '['"),
        ("[N, 3", 5, "expected ',' or ']'"),
        ("[N,]", 3, "expected a dim"),
        ("[N 3]", 3, "expected ',' or ']'"),
        ("[N] x", 4, "unexpected 'x'"),
        ("[N, H/2]", 5, "//"),
        ("", 0, "expected '['"),
        ("[" + "(" * 100 + "H" + ")" * 100 + "]", 65, "nesting deeper than 64"),
        ("[" + "N, " * 2000 + "N]", 4096, "limit is 4096"),
        ("[99999999999999999999]", 1, "int64"),
    ],
)
def test_parse_shape_errors(text, pos, fragment):
    with pytest.raises(ShapeSyntaxError) as err:
        parse_shape(text)
    assert err.value.pos == pos
    assert fragment in str(err.value)


def test_properties():
    spec = parse_shape("[N, 3, H*2, ?]")
    assert spec.rank == 4
    assert spec.free_symbols == {"N", "H"}
    assert not spec.is_static and parse_shape("[2, 3]").is_static and ShapeSpec().is_static
    assert parse_shape("[N, 3, H*2]").evaluate({"N": 2, "H": 5}) == (2, 3, 10)
    with pytest.raises(ShapeError) as err:
        spec.evaluate({"N": 2, "H": 5})
    assert err.value.code == "E-SHAPE-UNKNOWN"


dim_texts = st.sampled_from(["N", "H", "W", "3", "1", "?", "H*2", "(W+1)//2", "min(H,W)", "H*W-1", "-N"])


@settings(max_examples=200, deadline=None)
@given(st.lists(dim_texts, max_size=6))
def test_round_trip_property(texts):
    spec = ShapeSpec.of(texts)
    text = str(spec)
    assert parse_shape(text) == spec
    assert str(parse_shape(text)) == text
    assert spec == ShapeSpec.of([parse_dim(t) for t in texts])


# -- matching concrete shapes ---------------------------------------------------------------------------


def test_match_binds_symbols():
    bindings: dict[str, int] = {}
    assert match_shape(parse_shape("[N, 3, H, W]"), (2, 3, 5, 7), bindings) == []
    assert bindings == {"N": 2, "H": 5, "W": 7}
    assert match_shape(parse_shape("[N, H*W, ?]"), (2, 35, 99), bindings) == []


def test_match_messages():
    spec = parse_shape("[N, 3, H, W]")
    assert match_shape(spec, (2, 5, 7), {}) == ["rank: expected 4 dims [N, 3, H, W], got 3 dims (2, 5, 7)"]
    assert match_shape(parse_shape("[N]"), (), {}) == ["rank: expected 1 dim [N], got 0 dims ()"]
    assert match_shape(spec, (2, 4, 5, 7), {}) == ["dim 1: expected 3, got 4"]
    assert match_shape(parse_shape("[N, 3, H, H]"), (2, 3, 5, 6), {}) == [
        "dim 3: H is bound to 5 (by an earlier dim or input), got 6"
    ]
    assert match_shape(parse_shape("[N, H]"), (2, 6), {"H": 5}) == [
        "dim 1: H is bound to 5 (by an earlier dim or input), got 6"
    ]
    assert match_shape(parse_shape("[N, 3, H, H*2]"), (1, 3, 5, 11), {}) == ["dim 3: H*2 = 10, got 11"]


def test_match_reports_every_mismatch():
    problems = match_shape(parse_shape("[2, 3, H, H+1]"), (1, 3, 4, 4), {})
    assert problems == ["dim 0: expected 2, got 1", "dim 3: H+1 = 5, got 4"]


def test_match_unbound_expression_symbols():
    problems = match_shape(parse_shape("[N, K*2]"), (2, 6), {})
    assert len(problems) == 1
    assert problems[0].startswith("dim 1: cannot check K*2: K is unbound")


def test_match_division_by_zero_is_reported():
    problems = match_shape(parse_shape("[W, H, W//H]"), (1, 0, 3), {})
    assert len(problems) == 1 and "division by zero" in problems[0]


def test_match_unknown_and_numpy_shapes():
    np = pytest.importorskip("numpy")
    bindings: dict[str, int] = {}
    assert match_shape(parse_shape("[?, N]"), np.zeros((4, 2)).shape, bindings) == []
    assert bindings == {"N": 2} and type(bindings["N"]) is int


# -- unification ----------------------------------------------------------------------------------------


def test_unify_agreeing_shapes():
    result = unify(parse_shape("[N, H*2]"), parse_shape("[N, H+H]"))
    assert result == Unification()
    assert result.ok and str(result) == "shapes agree"


def test_unify_conflicts_and_constraints():
    result = unify(parse_shape("[N, 3, H, H+1, ?]"), parse_shape("[N, 4, W, H, 5]"))
    assert not result.ok
    assert result.conflicts == ((1, Dim.const(3), Dim.const(4)), (3, H + 1, H))
    assert result.constraints == ((2, H, W), (4, UNKNOWN, Dim.const(5)))
    text = str(result)
    assert "2 conflict(s): axis 1: 3 vs 4; axis 3: H+1 vs H" in text
    assert "2 run-time check(s): axis 2: H == W; axis 4: ? == 5" in text


def test_unify_rank_mismatch():
    result = unify(parse_shape("[N, 3]"), parse_shape("[N, 3, 1]"))
    assert result.conflicts == ((-1, Dim.const(2), Dim.const(3)),)
    assert result.constraints == ()
    assert "rank 2 vs 3" in str(result)


def test_unify_unknown_is_never_proven():
    assert unify(parse_shape("[?]"), parse_shape("[?]")).constraints == ((0, UNKNOWN, UNKNOWN),)


# -- broadcasting ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "result", "guard"),
    [
        (1, "H", "H", None),
        ("H", 1, "H", None),
        (3, 3, 3, None),
        ("H*2", "H+H", "H*2", None),
        ("H", "W", "H", "W"),
        ("H", 3, 3, "H"),
        (3, "H", 3, "H"),
        ("?", "H", "H", "?"),
        ("H", "?", "H", "?"),
        ("?", "?", "?", "?"),  # the first operand is the result
        ("?", 1, "?", None),
        ("H", "H+1", "H", "H+1"),
    ],
)
def test_broadcast_dims(a, b, result, guard):
    got_result, got_guard = broadcast_dims(Dim(a), Dim(b))
    assert got_result == Dim(result)
    assert got_guard == (None if guard is None else Dim(guard))


def test_broadcast_dims_conflict():
    with pytest.raises(ShapeError) as err:
        broadcast_dims(3, 4)
    assert err.value.code == "E-SHAPE-BROADCAST"


def test_broadcast_shapes():
    result, guards = broadcast_shapes(parse_shape("[N, 1, W]"), parse_shape("[H, 1]"), parse_shape("[1]"))
    assert result == parse_shape("[N, H, W]")
    assert guards == []
    result, guards = broadcast_shapes(parse_shape("[N, 3]"), parse_shape("[M, K, ?]"))
    assert result == parse_shape("[M, N, 3]")
    assert guards == [(N, Dim("K")), (Dim.const(3), UNKNOWN)]
    assert broadcast_shapes() == (ShapeSpec(), [])
    assert broadcast_shapes(parse_shape("[N]")) == (parse_shape("[N]"), [])


def test_broadcast_shapes_conflict_names_the_axis():
    with pytest.raises(ShapeError) as err:
        broadcast_shapes(parse_shape("[N, 3]"), parse_shape("[N, 4]"))
    assert err.value.code == "E-SHAPE-BROADCAST"
    assert "[N, 3] with [N, 4]: axis -1 is 3 vs 4" in err.value.message


def _numpy_broadcast(x: int, y: int) -> int | None:
    if x == y or y == 1:
        return x
    return y if x == 1 else None


SMALL_DIMS = ["1", "3", "H", "W", "?", "H+1"]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(SMALL_DIMS), st.sampled_from(SMALL_DIMS), *[st.integers(0, 4)] * 4)
def test_broadcast_guard_is_sound(a, b, h, w, size_a, size_b):
    """Whenever ``guard in (result, 1)`` holds at run time, the static result is numpy's result."""
    env = {"H": h, "W": w}
    x = size_a if a == "?" else Dim(a).evaluate(env)
    y = size_b if b == "?" else Dim(b).evaluate(env)
    try:
        result, guard = broadcast_dims(Dim(a), Dim(b))
    except ShapeError:
        assert _numpy_broadcast(x, y) is None
        return
    if guard is None:
        expected = _numpy_broadcast(x, y)
        assert expected is not None
        assert expected == (result.evaluate(env) if not result.is_unknown else x if b == "1" else y)
        return
    # A "?" result is the first operand ("?" vs "?"); a "?" guard is the "?" operand that is not the result.
    result_size = x if result.is_unknown else result.evaluate(env)
    if not guard.is_unknown:
        guard_size = guard.evaluate(env)
    else:
        guard_size = y if result.is_unknown or a != "?" else x
    if guard_size in (result_size, 1):
        assert _numpy_broadcast(x, y) == result_size
