"""Every CompileError kind: its code, and the file, line and column of the offending code.

Each case marks the offending line with a comment (``# <- CODE``); the error must point at the given
snippet on that line, quote the line with a caret, and carry a hint.
"""

# ms.Tensor["N", 3] reads to linters as string forward references: F821 is noise here. No
# `from __future__ import annotations` either: with it, ruff's UP037 "fix" unquotes the symbols.
# ruff: noqa: F821

import numpy as np
import pytest
from frontend_helpers import assert_compile_error

import msvm as ms
import msvm.ops
from msvm.errors import CompileError
from msvm.frontend import Tensor, jit

HERE = __file__
X = np.ones((4, 3), dtype=np.float32)


def compile_error(build, *args):
    """The CompileError raised by decorating (``build()``) or by the first call with ``args``."""
    with pytest.raises(CompileError) as info:
        fn = build()
        fn(*args)
    return info.value


def test_while() -> None:
    def build():
        @jit
        def f(x):
            while x.ndim > 5:  # <- E-COMPILE-WHILE
                x = x + 1
            return x
        return f

    assert_compile_error(compile_error(build), "E-COMPILE-WHILE", HERE, "# <- E-COMPILE-WHILE", "while")


def test_try() -> None:
    def build():
        @jit
        def f(x):
            try:  # <- E-COMPILE-TRY
                y = x
            except ValueError:
                y = x
            return y
        return f

    assert_compile_error(compile_error(build), "E-COMPILE-TRY", HERE, "# <- E-COMPILE-TRY", "try")


def test_comprehension() -> None:
    def build():
        @jit
        def f(x):
            parts = [x * i for i in range(3)]  # <- E-COMPILE-COMPREHENSION
            return parts[0]
        return f

    err = compile_error(build)
    assert_compile_error(err, "E-COMPILE-COMPREHENSION", HERE, "# <- E-COMPILE-COMPREHENSION",
                         "[x * i")


def test_unknown_name() -> None:
    def build():
        @jit
        def f(x):
            return x + undefined_weights  # <- E-COMPILE-UNKNOWN-NAME
        return f

    assert_compile_error(compile_error(build), "E-COMPILE-UNKNOWN-NAME", HERE, "# <- E-COMPILE-UNKNOWN-NAME",
                         "undefined_weights")


def test_unknown_name_is_found_at_decoration_in_a_folded_branch() -> None:
    def build():
        @jit
        def f(x: Tensor["N"]):
            if x.ndim == 3:
                return mistyped_name(x)  # <- UNKNOWN-IN-DEAD-BRANCH
            return x
        return f

    err = compile_error(build)
    assert_compile_error(err, "E-COMPILE-UNKNOWN-NAME", HERE, "# <- UNKNOWN-IN-DEAD-BRANCH", "mistyped_name")


def test_numpy_call_on_a_tensor() -> None:
    def build():
        @jit
        def f(x):
            return np.exp(x)  # <- E-COMPILE-CALL
        return f

    err = compile_error(build, X)
    assert_compile_error(err, "E-COMPILE-CALL", HERE, "# <- E-COMPILE-CALL", "np.exp(x)")
    assert "use ms.ops.exp(" in err.hint


def test_python_helper_call_on_a_tensor() -> None:
    def helper(v):
        return v * 2

    def build():
        @jit
        def f(x):
            return helper(x)  # <- CALL-HELPER
        return f

    err = compile_error(build, X)
    assert_compile_error(err, "E-COMPILE-CALL", HERE, "# <- CALL-HELPER", "helper(x)")
    assert "@ms.jit" in err.hint


def test_data_dependent_if() -> None:
    def build():
        @jit
        def f(x):
            if x.sum() > 0:  # <- E-COMPILE-DATA-DEPENDENT-IF
                return x
            return -x
        return f

    err = compile_error(build, X)
    assert_compile_error(err, "E-COMPILE-DATA-DEPENDENT-IF", HERE, "# <- E-COMPILE-DATA-DEPENDENT-IF",
                         "x.sum()")
    assert "ms.ops.where" in err.hint


def test_data_dependent_conditional_expression() -> None:
    def build():
        @jit
        def f(x):
            return x if x.max() > 1 else -x  # <- DATA-DEPENDENT-IFEXP
        return f

    err = compile_error(build, X)
    assert_compile_error(err, "E-COMPILE-DATA-DEPENDENT-IF", HERE, "# <- DATA-DEPENDENT-IFEXP", "x.max()")


def test_break_and_continue() -> None:
    def build():
        @jit
        def f(x):
            for _ in range(3):
                break  # <- E-COMPILE-BREAK
            return x
        return f

    assert_compile_error(compile_error(build), "E-COMPILE-BREAK", HERE, "# <- E-COMPILE-BREAK", "break")

    def build_continue():
        @jit
        def f(x):
            for _ in range(3):
                continue  # <- CONTINUE
            return x
        return f

    assert_compile_error(compile_error(build_continue), "E-COMPILE-BREAK", HERE, "# <- CONTINUE", "continue")


def test_subscript_assignment() -> None:
    def build():
        @jit
        def f(x):
            x[0] = 1.0  # <- E-COMPILE-SUBSCRIPT-ASSIGN
            return x
        return f

    err = compile_error(build)
    assert_compile_error(err, "E-COMPILE-SUBSCRIPT-ASSIGN", HERE, "# <- E-COMPILE-SUBSCRIPT-ASSIGN", "x[0]")
    assert "immutable" in err.message

    def build_augmented():
        @jit
        def f(x):
            x[:, 0] += 1.0  # <- SUBSCRIPT-AUGASSIGN
            return x
        return f

    err = compile_error(build_augmented)
    assert_compile_error(err, "E-COMPILE-SUBSCRIPT-ASSIGN", HERE, "# <- SUBSCRIPT-AUGASSIGN", "x[:, 0]")


def test_variable_first_assigned_in_a_loop() -> None:
    def build():
        @jit
        def f(x):
            for i in range(x.shape[0]):
                row = x[i]
            return row  # <- E-COMPILE-LOOP-VAR
        return f

    err = compile_error(build, X)
    assert_compile_error(err, "E-COMPILE-LOOP-VAR", HERE, "# <- E-COMPILE-LOOP-VAR", "row")
    assert "initialise row before the loop" in err.hint


def test_recursion() -> None:
    def build():
        @jit
        def f(x: Tensor["N"]):
            return f(x)  # <- E-COMPILE-RECURSION
        return f

    assert_compile_error(compile_error(build), "E-COMPILE-RECURSION", HERE, "# <- E-COMPILE-RECURSION", "f")


pong = None  # bound before `ping` is decorated: names must exist at decoration


@jit
def ping(x, n):
    if n > 0:
        return pong(x, n - 1)
    return x


@jit
def pong(x, n):  # noqa: F811
    return ping(x, n)  # <- MUTUAL-RECURSION


def test_mutual_recursion() -> None:
    err = compile_error(lambda: ping, X, 3)
    assert_compile_error(err, "E-COMPILE-RECURSION", HERE, "# <- MUTUAL-RECURSION", "ping(x, n)")
    assert "ping -> pong -> ping" in err.message


def test_op_rejects_its_arguments() -> None:
    def build():
        @jit
        def f(x: Tensor["N", 3]):
            return ms.ops.reshape(x, shape=(5, 5))  # <- E-COMPILE-OP
        return f

    err = compile_error(build)
    assert_compile_error(err, "E-COMPILE-OP", HERE, "# <- E-COMPILE-OP", "ms.ops.reshape")
    assert "element count" in err.message


def test_operator_shape_mismatch_is_an_op_error() -> None:
    def build():
        @jit
        def f(x: Tensor["N", 3], y: Tensor["N", 4]):
            return x + y  # <- BROADCAST
        return f

    assert_compile_error(compile_error(build), "E-COMPILE-OP", HERE, "# <- BROADCAST", "x + y")


def test_unsupported_constructs() -> None:
    def build_lambda():
        @jit
        def f(x):
            g = lambda v: v  # <- LAMBDA  # noqa: E731
            return g(x)
        return f

    assert_compile_error(compile_error(build_lambda), "E-COMPILE-UNSUPPORTED", HERE, "# <- LAMBDA", "lambda")

    def build_with():
        @jit
        def f(x):
            with np.errstate():  # <- WITH
                return x
        return f

    assert_compile_error(compile_error(build_with), "E-COMPILE-UNSUPPORTED", HERE, "# <- WITH", "with")

    def build_dict():
        @jit
        def f(x):
            d = {"x": x}  # <- DICT
            return d
        return f

    assert_compile_error(compile_error(build_dict), "E-COMPILE-UNSUPPORTED", HERE, "# <- DICT", "{")

    def build_tensor_floordiv():
        @jit
        def f(x):
            return x // 2  # <- FLOORDIV
        return f

    err = compile_error(build_tensor_floordiv, X)
    assert_compile_error(err, "E-COMPILE-UNSUPPORTED", HERE, "# <- FLOORDIV",
                         "x // 2")


def test_maybe_unbound_and_merge_errors() -> None:
    def build():
        @jit
        def f(x):
            if x.shape[0] > 2:
                y = x
            return y  # <- MAYBE-UNBOUND
        return f

    assert_compile_error(compile_error(build, X), "E-COMPILE-MAYBE-UNBOUND", HERE, "# <- MAYBE-UNBOUND", "y")

    def build_merge():
        @jit
        def f(x):
            if x.shape[0] > 2:  # <- MERGE
                y = x
            else:
                y = x.sum()
            return y
        return f

    err = compile_error(build_merge, X)
    assert_compile_error(err, "E-COMPILE-MERGE", HERE, "# <- MERGE", "if")
    assert "rank" in err.message


def test_returns_must_agree() -> None:
    def build():
        @jit
        def f(x):
            if x.shape[0] > 2:
                return x, x
            return x  # <- RETURN-ARITY
        return f

    assert_compile_error(compile_error(build, X), "E-COMPILE-RETURN", HERE, "# <- RETURN-ARITY", "return x")


def test_index_out_of_range() -> None:
    def build():
        @jit
        def f(x: Tensor["N", 3]):
            return x[:, 3]  # <- INDEX
        return f

    assert_compile_error(compile_error(build), "E-COMPILE-INDEX", HERE, "# <- INDEX", "x[:, 3]")


def test_errors_inside_an_inlined_callee_point_into_the_callee() -> None:
    err = compile_error(lambda: uses_bad_helper, X)
    assert_compile_error(err, "E-COMPILE-DATA-DEPENDENT-IF", HERE, "# <- IN-CALLEE", "v.min()")


@jit
def bad_helper(v):
    if v.min() < 0:  # <- IN-CALLEE
        return -v
    return v


@jit
def uses_bad_helper(x):
    return bad_helper(x)


def test_error_text_quotes_the_line_with_a_caret() -> None:
    def build():
        @jit
        def f(x):
            return np.tanh(x)  # <- QUOTED
        return f

    err = compile_error(build, X)
    text = str(err)
    assert text.startswith("[E-COMPILE-CALL] at ")
    assert "return np.tanh(x)  # <- QUOTED\n" in text
    assert "\n           ^" in text  # under `np`, after the 4-space margin
    assert "hint: use ms.ops.tanh(" in text


def test_more_error_kinds() -> None:
    def build_static_eval():
        @jit
        def f(x):
            return x * (1 // 0)  # <- STATIC-EVAL
        return f

    err = compile_error(build_static_eval, X)
    assert_compile_error(err, "E-COMPILE-STATIC-EVAL", HERE, "# <- STATIC-EVAL", "1 // 0")

    def build_unpack():
        @jit
        def f(x):
            a, b = x.shape[0], 1, 2  # <- UNPACK
            return x * a + b
        return f

    assert_compile_error(compile_error(build_unpack, X), "E-COMPILE-UNPACK", HERE, "# <- UNPACK", "a, b")

    def build_assert():
        @jit
        def f(x):
            assert x.ndim == 3, "needs NCW"  # <- ASSERT
            return x
        return f

    err = compile_error(build_assert, X)
    assert_compile_error(err, "E-COMPILE-ASSERT", HERE, "# <- ASSERT", "assert")
    assert "needs NCW" in err.message

    def build_zero_division():
        @jit
        def f(x):
            return x[: x.shape[0] // 0]  # <- ZERO-DIVISION
        return f

    err = compile_error(build_zero_division, X)
    assert_compile_error(err, "E-COMPILE-ZERO-DIVISION", HERE, "# <- ZERO-DIVISION", "x.shape[0] // 0")


def test_bare_tensor_annotation() -> None:
    def build():
        @jit
        def f(x: Tensor):  # <- ANNOTATION
            return x
        return f

    assert_compile_error(compile_error(build), "E-COMPILE-ANNOTATION", HERE, "# <- ANNOTATION", "x: Tensor")


def test_size_expression_annotation_with_an_unbound_symbol() -> None:
    """Nothing binds H: a CompileError at the parameter at decoration, not a VerifyError at the bytecode."""

    def build():
        @jit
        def f(x: Tensor["H*2", 3]):  # <- UNBOUND-IN-ANNOTATION
            return x + 1.0
        return f

    with pytest.raises(CompileError) as info:
        build()
    err = info.value
    assert_compile_error(err, "E-COMPILE-ANNOTATION", HERE, "# <- UNBOUND-IN-ANNOTATION", "x: Tensor")
    assert "H*2" in err.message and "nothing binds H" in err.message
    assert err.hint.startswith("name the dimension with a plain symbol, e.g. 'H2', or bind H with another "
                               "parameter's dimension")


def test_size_expression_symbols_bound_elsewhere_compile() -> None:
    @jit
    def by_dimension(y: Tensor["H", 3], x: Tensor["H*2", 3]):
        return x
    x, y = np.ones((4, 3), np.float32), np.ones((2, 3), np.float32)
    assert by_dimension(y, x).shape == (4, 3)

    def build():
        @jit
        def by_scalar(x: Tensor["H*2", 3], H):  # <- NOT-MUTABLE
            return x
        return by_scalar

    by_scalar = build()
    assert by_scalar(x, ms.mutable(2)).shape == (4, 3)  # an ms.mutable parameter binds its name
    err = compile_error(build, x, 2)  # a plain int is folded: nothing binds H in that version
    assert_compile_error(err, "E-COMPILE-ANNOTATION", HERE, "# <- NOT-MUTABLE", "x: Tensor")
    assert "ms.mutable" in err.hint


def test_function_without_source() -> None:
    namespace = {"jit": jit}
    exec("def f(x):\n    return x\n", namespace)
    with pytest.raises(CompileError) as info:
        jit(namespace["f"])
    assert info.value.code == "E-COMPILE-SOURCE" and info.value.hint


def test_misspelled_op() -> None:
    def build():
        @jit
        def f(x):
            return ms.ops.relux(x)  # <- MISSPELLED-OP
        return f

    err = compile_error(build, X)
    assert_compile_error(err, "E-COMPILE-UNKNOWN-NAME", HERE, "# <- MISSPELLED-OP", "ms.ops.relux")
    assert "'relu'" in err.hint
