"""Symbolic dims: normal form, text round trip, evaluation, proofs, and a parser safe on hostile input."""

from __future__ import annotations

import time

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from msvm.errors import ShapeError
from msvm.shapes import (
    UNKNOWN,
    Dim,
    ShapeSyntaxError,
    as_dim,
    ceildiv,
    dmax,
    dmin,
    parse_dim,
    parse_shape,
    prove_equal,
)

H, W, N = Dim.sym("H"), Dim.sym("W"), Dim.sym("N")


# -- normal form ----------------------------------------------------------------------------------------

NORMAL_FORM_EQUALITIES = [
    ("(H*2)//2 == H", lambda: (H * 2) // 2, lambda: H),
    ("H+H == 2*H", lambda: H + H, lambda: 2 * H),
    ("(W+1)//2 == ceildiv(W,2)", lambda: (W + 1) // 2, lambda: ceildiv(W, 2)),
    ("H*W == W*H", lambda: H * W, lambda: W * H),
    ("(H+1)-1 == H", lambda: (H + 1) - 1, lambda: H),
    ("0*H == 0", lambda: 0 * H, lambda: 0),
    ("H*1 == H", lambda: H * 1, lambda: H),
    ("(H*6)//3 == H*2", lambda: (H * 6) // 3, lambda: H * 2),
    ("(H*4+2)//2 == H*2+1", lambda: (H * 4 + 2) // 2, lambda: H * 2 + 1),
    ("(H*4)%2 == 0", lambda: (H * 4) % 2, lambda: 0),
    ("min(3,5) == 3", lambda: dmin(3, 5), lambda: 3),
    ("max(H,H) == H", lambda: dmax(H, H), lambda: H),
    ("floordiv(H,1) == H", lambda: H // 1, lambda: H),
    ("constant folding", lambda: (Dim.const(7) * 3 - 1) // 4 % 3 + dmax(2, 9), lambda: 5 % 3 + 9),
    ("ceildiv folds", lambda: ceildiv(7, 2), lambda: 4),
    ("ceildiv by negative", lambda: ceildiv(W, -2), lambda: ceildiv(-W, 2)),
    ("nested floordiv", lambda: ((H + 1) // 2) // 3, lambda: (H + 1) // 6),
    ("gcd in floordiv", lambda: (H * 2) // 4, lambda: H // 2),
    ("gcd in mod", lambda: (H * 2) % 4, lambda: (H % 2) * 2),
    ("mod of mod", lambda: (H % 6) % 3, lambda: H % 3),
    ("min with constant gap", lambda: dmin(H + 1, H), lambda: H),
    ("max with constant gap", lambda: dmax(H + 1, H), lambda: H + 1),
    ("min commutes", lambda: dmin(W, H), lambda: dmin(H, W)),
    ("split floordiv", lambda: (H * 3 + 5) // 3, lambda: H + 1),
    ("divisor sign", lambda: W // (-H), lambda: (-W) // H),
]


@pytest.mark.parametrize(
    ("name", "left", "right"), NORMAL_FORM_EQUALITIES, ids=[e[0] for e in NORMAL_FORM_EQUALITIES]
)
def test_normal_form_equalities(name, left, right):
    a, b = as_dim(left()), as_dim(right())
    assert a == b
    assert hash(a) == hash(b)
    assert str(a) == str(b)


def test_parsed_equalities_from_the_issue():
    assert parse_dim("(H*2)//2") == parse_dim("H")
    assert parse_dim("H+H") == parse_dim("2*H")
    assert parse_dim("(W+1)//2") == parse_dim("ceildiv(W,2)") == ceildiv(W, 2)


def test_const_dims_equal_and_hash_like_ints():
    assert Dim.const(3) == 3 and hash(Dim.const(3)) == hash(3)
    assert Dim.const(0) == 0 and hash(Dim.const(0)) == hash(0)
    assert {Dim.const(4): "x"}[4] == "x"
    assert H != 3 and H != "H"


@pytest.mark.parametrize(
    ("dim", "text"),
    [
        (H * 2, "H*2"),
        (W * H, "H*W"),
        (3 * W * H, "H*W*3"),
        (H * W + H + 1, "H*W+H+1"),
        (H - 1, "H-1"),
        (3 - H, "-H+3"),
        (-H * 2, "-H*2"),
        ((W + 1) // 2, "(W+1)//2"),
        ((H + 1) % 4, "(H+1)%4"),
        (dmin(W, H), "min(H,W)"),
        (dmax(H, W) * 2, "max(H,W)*2"),
        (-(W // 2), "-(W//2)"),
        ((W // 2) * 3, "(W//2)*3"),
        (H - (W // 2) * 2, "H-(W//2)*2"),
        (W // (H * 2), "W//(H*2)"),
        ((H % 3) // W, "(H%3)//W"),
        (Dim.const(-4), "-4"),
        (Dim.const(0), "0"),
        (H * H, "H*H"),
        (UNKNOWN, "?"),
    ],
)
def test_canonical_text(dim, text):
    assert str(dim) == text
    assert parse_dim(text) == dim
    assert str(parse_dim(text)) == text


def test_repr_and_constructor():
    assert repr(H * 2) == "Dim('H*2')"
    assert Dim("H*2") == H * 2
    assert Dim(5) == 5
    assert Dim(H) is H


def test_dim_is_immutable():
    with pytest.raises(AttributeError):
        H._poly = {}


def test_unknown_absorbs_arithmetic():
    for d in (
        UNKNOWN + 1,
        H * UNKNOWN,
        UNKNOWN // 2,
        3 % UNKNOWN,
        dmin(H, UNKNOWN),
        ceildiv(UNKNOWN, 2),
        -UNKNOWN,
    ):
        assert d.is_unknown
    assert UNKNOWN == UNKNOWN  # structurally; but never provably equal
    assert prove_equal(UNKNOWN, UNKNOWN) is None
    assert parse_dim("H+?").is_unknown


def test_properties():
    assert Dim.const(3).is_const and Dim.const(3).value == 3
    assert not H.is_const
    with pytest.raises(ValueError):
        _ = H.value
    assert H.is_symbol and H.name == "H"
    assert not (H * 2).is_symbol and not Dim.const(1).is_symbol and not UNKNOWN.is_symbol
    with pytest.raises(ValueError):
        _ = (H + 1).name
    assert ((W + 1) // N + dmin(H, 3)).free_symbols == {"H", "W", "N"}
    assert UNKNOWN.free_symbols == frozenset()
    assert UNKNOWN.is_unknown and not H.is_unknown


def test_symbol_names_are_validated():
    for bad in ("", "1H", "H-1", "min", "ceildiv", "a b"):
        with pytest.raises(ValueError):
            Dim.sym(bad)


def test_as_dim():
    assert as_dim(3) == 3 and as_dim(H) is H and as_dim("H*2") == H * 2 and as_dim("?").is_unknown
    with pytest.raises(TypeError):
        as_dim(1.5)
    with pytest.raises(TypeError):
        as_dim(True)
    with pytest.raises(TypeError):
        Dim.const(True)


def test_numpy_integers_are_accepted():
    np = pytest.importorskip("numpy")
    assert H * np.int64(2) == H * 2
    assert as_dim(np.int32(3)) == 3


# -- evaluation and substitution ------------------------------------------------------------------------


def test_evaluate():
    d = parse_dim("H*W+(W+1)//2-min(H,3)%2")
    assert d.evaluate({"H": 5, "W": 7}) == 35 + 4 - 1
    assert (H // 2).evaluate({"H": -3}) == -2
    assert ceildiv(H, 2).evaluate({"H": -3}) == -1
    assert (H % 4).evaluate({"H": -3}) == 1


def test_evaluate_errors():
    with pytest.raises(ShapeError) as err:
        (H * W).evaluate({"H": 2})
    assert err.value.code == "E-SHAPE-UNBOUND" and "W" in err.value.message
    for d in (H // W, H % W, H // 0, parse_dim("mod(H, 0)")):
        with pytest.raises(ShapeError) as err:
            d.evaluate({"H": 3, "W": 0})
        assert err.value.code == "E-SHAPE-ZERODIV"
    with pytest.raises(ShapeError) as err:
        UNKNOWN.evaluate({})
    assert err.value.code == "E-SHAPE-UNKNOWN"


def test_substitute():
    d = (W + 1) // 2 + H
    assert d.substitute({"W": 5}) == H + 3
    assert d.substitute({"W": H * 2}) == H * 2
    assert d.substitute({"N": 3}) is d
    assert dmin(H, W).substitute({"H": 2, "W": 9}) == 2
    assert d.substitute({"H": UNKNOWN}).is_unknown


# -- proofs ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "verdict"),
    [
        (H * 2, H + H, True),
        ((W + 1) // 2, ceildiv(W, 2), True),
        (3, 4, False),
        (H, H + 1, False),
        (H * 2, W * 2 + 1, False),
        (H, W, None),
        (H, 3, None),
        (H * 2, W * 2 + 2, None),
        (UNKNOWN, H, None),
        (H, UNKNOWN, None),
    ],
)
def test_prove_equal(a, b, verdict):
    assert prove_equal(a, b) is verdict
    assert prove_equal(b, a) is verdict


# -- parser errors and hostile input --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "pos", "fragment"),
    [
        ("", 0, "end of input"),
        ("H+", 2, "end of input"),
        ("(W+1", 4, "expected ')'"),
        ("H/2", 1, "//"),
        ("3 4", 2, "unexpected '4'"),
        ("min(H)", 5, "expected ','"),
        ("min H", 4, "expected '('"),
        ("H $", 2, "unexpected character"),
        ("H)", 1, "unexpected ')'"),
        ("H**2", 2, "expected a dim"),
        ("[H]", 0, "expected a dim"),
        ("H é", 2, "unexpected character"),
    ],
)
def test_parse_errors_have_positions(text, pos, fragment):
    with pytest.raises(ShapeSyntaxError) as err:
        parse_dim(text)
    assert err.value.pos == pos
    assert fragment in str(err.value)
    assert isinstance(err.value, ValueError)


def test_parse_accepts_whitespace_and_functions():
    assert parse_dim("  ( W + 1 ) // 2 ") == ceildiv(W, 2)
    assert parse_dim("floordiv(H, 2)") == H // 2
    assert parse_dim("mod(H, 2)") == H % 2
    assert parse_dim("max(H, W) - min(W, H)") == dmax(H, W) - dmin(H, W)
    assert parse_dim("--H") == H
    assert parse_dim("-3") == -3
    assert parse_dim("9223372036854775807") == 2**63 - 1
    assert parse_dim("_x1") == Dim.sym("_x1")


def _rejects_quickly(text, fragment):
    start = time.perf_counter()
    with pytest.raises(ShapeSyntaxError) as err:
        parse_dim(text)
    assert time.perf_counter() - start < 1.0
    assert fragment in str(err.value)
    return err.value


def test_hostile_inputs_are_rejected_quickly():
    _rejects_quickly("H+" * 3000 + "1", "limit is 4096")
    err = _rejects_quickly("(" * 2000 + "H" + ")" * 2000, "nesting deeper than 64")
    assert err.pos == 64
    _rejects_quickly("min(" * 100 + "H" + ",1)" * 100, "nesting deeper than 64")
    _rejects_quickly("9223372036854775808", "does not fit in int64")
    _rejects_quickly("-9223372036854775808", "does not fit in int64")
    _rejects_quickly("9" * 4000, "does not fit in int64")
    _rejects_quickly("*".join(f"(A{i}+B{i})" for i in range(20)), "too complex")
    _rejects_quickly("*".join(["H"] * 200), "too complex")
    _rejects_quickly("*".join(["9223372036854775807"] * 20), "too complex")
    product = "*".join(f"(A{i}+B{i})" for i in range(8))  # 256 monomials from 48 characters
    _rejects_quickly(f"(({product})//2)*({product})", "too complex")  # would print 1.5 MB, then 400 MB


def test_what_parses_prints_as_text_that_parses_again():
    """A short text may expand: 8 binomials multiplied are 71 characters whose normal form has 6143."""
    product = "*".join(f"(a{i}+b{i})" for i in range(8))
    _rejects_quickly(product, "normal form is 6143 characters long; the limit is 4096")
    with pytest.raises(ShapeSyntaxError, match="normal form"):
        parse_shape(f"[{product}]")
    with pytest.raises(ShapeSyntaxError, match="normal form"):  # each dim fits, the spec does not
        parse_shape("[" + ", ".join(["*".join(f"(a{i}+b{i})" for i in range(7))] * 2) + "]")
    largest = "*".join(f"(a{i}+b{i})" for i in range(7))
    assert parse_dim(str(parse_dim(largest))) == parse_dim(largest)


def test_deep_but_legal_input():
    assert parse_dim("(" * 64 + "H" + ")" * 64) == H
    assert parse_dim("-" * 4000 + "H") == H
    assert parse_dim("+".join(["H"] * 2000)) == H * 2000


def test_non_string_input():
    with pytest.raises(TypeError):
        parse_dim(3)


# -- property tests -------------------------------------------------------------------------------------

SYMBOLS = ("A", "B", "C")
BINARY_OPS = ("add", "sub", "mul", "floordiv", "ceildiv", "mod", "min", "max")

trees = st.recursive(
    st.sampled_from(SYMBOLS) | st.integers(-6, 6),
    lambda children: (
        st.tuples(st.sampled_from(BINARY_OPS), children, children) | st.tuples(st.just("neg"), children)
    ),
    max_leaves=12,
)
bindings = st.fixed_dictionaries({name: st.integers(-7, 7) for name in SYMBOLS})


def eval_tree(tree, env: dict[str, int]) -> int:
    """The reference semantics: plain Python ints (raises ZeroDivisionError)."""
    if isinstance(tree, int):
        return tree
    if isinstance(tree, str):
        return env[tree]
    if tree[0] == "neg":
        return -eval_tree(tree[1], env)
    op, x, y = tree[0], eval_tree(tree[1], env), eval_tree(tree[2], env)
    return {
        "add": lambda: x + y,
        "sub": lambda: x - y,
        "mul": lambda: x * y,
        "floordiv": lambda: x // y,
        "ceildiv": lambda: -((-x) // y),
        "mod": lambda: x % y,
        "min": lambda: min(x, y),
        "max": lambda: max(x, y),
    }[op]()


def build(tree) -> Dim | int:
    """The same tree through the Dim API, leaving int leaves as ints to exercise the reflected operators."""
    if isinstance(tree, int):
        return tree
    if isinstance(tree, str):
        return Dim.sym(tree)
    if tree[0] == "neg":
        return -as_dim(build(tree[1]))
    op, x, y = tree[0], build(tree[1]), build(tree[2])
    if isinstance(x, int) and isinstance(y, int):
        x = Dim.const(x)
    return {
        "add": lambda: x + y,
        "sub": lambda: x - y,
        "mul": lambda: x * y,
        "floordiv": lambda: x // y,
        "ceildiv": lambda: ceildiv(x, y),
        "mod": lambda: x % y,
        "min": lambda: dmin(x, y),
        "max": lambda: dmax(x, y),
    }[op]()


def reference(tree, env):
    try:
        return eval_tree(tree, env)
    except ZeroDivisionError:
        return None


@settings(max_examples=400, deadline=None)
@given(trees, st.lists(bindings, min_size=1, max_size=5))
def test_normal_form_evaluates_like_the_tree(tree, envs):
    dim = as_dim(build(tree))
    for env in envs:
        expected = reference(tree, env)
        if expected is None:
            continue  # a zero divisor: skipped, as the normal form may have dropped it (0 * (x//0))
        assert dim.evaluate(env) == expected, (tree, str(dim), env)


@settings(max_examples=400, deadline=None)
@given(trees)
def test_text_round_trip(tree):
    dim = as_dim(build(tree))
    text = str(dim)
    again = parse_dim(text)
    assert again == dim and hash(again) == hash(dim)
    assert str(again) == text
    assert " " not in text


@settings(max_examples=400, deadline=None)
@given(trees, trees, st.lists(bindings, min_size=1, max_size=8))
def test_prove_equal_is_sound(left, right, envs):
    verdict = prove_equal(as_dim(build(left)), as_dim(build(right)))
    pairs = [(reference(left, env), reference(right, env)) for env in envs]
    pairs = [(a, b) for a, b in pairs if a is not None and b is not None]
    assume(pairs)
    if verdict is True:
        assert all(a == b for a, b in pairs)
    elif verdict is False:
        assert all(a != b for a, b in pairs)


@settings(max_examples=200, deadline=None)
@given(trees, st.dictionaries(st.sampled_from(SYMBOLS), trees, max_size=2), bindings)
def test_substitute_evaluates_like_composition(tree, mapping, env):
    dim = as_dim(build(tree))
    inner = {name: reference(sub, env) for name, sub in mapping.items()}
    assume(all(v is not None for v in inner.values()))
    composed_env = {**env, **inner}
    expected = reference(tree, composed_env)
    assume(expected is not None)
    substituted = dim.substitute({name: build(sub) for name, sub in mapping.items()})
    assert substituted.evaluate(env) == expected


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="HW0123()+-*/%?, minax", max_size=40))
def test_parser_never_raises_anything_else(text):
    try:
        dim = parse_dim(text)
    except ShapeSyntaxError as err:
        assert 0 <= err.pos <= len(text)
    else:
        assert parse_dim(str(dim)) == dim


def test_terms_expose_the_normal_form_in_print_order():
    d = Dim("min(H,N)*3 - W//2 + 1")
    assert str(d) == "-(W//2)+min(H,N)*3+1"
    (k1, (f1,)), (k2, (f2,)), (k3, ()) = d.terms
    assert (k1, f1[0], str(f1[1]), str(f1[2])) == (-1, "//", "W", "2")
    assert (k2, f2[0], str(f2[1]), str(f2[2])) == (3, "min", "H", "N")
    assert k3 == 1
    assert Dim("H*H*2").terms == ((2, ("H", "H")),)
    assert Dim(0).terms == ()
    with pytest.raises(ShapeError, match="known only at run time"):
        _ = Dim("?").terms
