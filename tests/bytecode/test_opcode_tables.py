"""The opcode property sets and the SCALAR_OP/CMP operator rows: each meaning a row declares agrees with
the others, and the layers that read them (frontend folding, verifier, interpreter) use the same row."""

from __future__ import annotations

import itertools

import pytest

from msvm.bytecode.module import make_instruction
from msvm.bytecode.opcodes import (
    OPCODES,
    PHIS,
    PREDICATE_INFO,
    SCALAR_OP_INFO,
    SCALAR_OPS,
    TERMINATORS,
    Kind,
)
from msvm.frontend.emitter import Emitter
from msvm.shapes import Dim

INTS = range(-7, 8)


def _pairs(divides: bool):
    return [(a, b) for a, b in itertools.product(INTS, INTS) if not (divides and b == 0)]


@pytest.mark.parametrize("name", SCALAR_OPS)
def test_scalar_op_integer_dim_and_source_meanings_agree(name):
    info = SCALAR_OP_INFO[name]
    source = eval(f"lambda a, b: {info.python('a', 'b')}")  # the interpreter's spelling, compiled
    for a, b in _pairs(info.divides):
        want = info.ints(a, b)
        assert source(a, b) == want, (name, a, b)
        assert info.dims(Dim.const(a), Dim.const(b)) == Dim.const(want), (name, a, b)
        symbolic = info.dims(Dim.sym("A"), Dim.sym("B")).evaluate({"A": a, "B": b})
        assert symbolic == want, (name, a, b)


@pytest.mark.parametrize("name", SCALAR_OPS)
def test_frontend_folds_every_scalar_op_by_its_row(name):
    # Folding used a table of its own that lacked ceildiv: folding one raised KeyError.
    emitter = Emitter("m", "f", [])
    info = SCALAR_OP_INFO[name]
    assert emitter.scalar_op(name, 7, -2) == info.ints(7, -2)


@pytest.mark.parametrize("name", SCALAR_OPS)
def test_frontend_refuses_a_constant_zero_divisor_exactly_for_dividing_ops(name):
    emitter = Emitter("m", "f", [])
    if SCALAR_OP_INFO[name].divides:
        with pytest.raises(Exception, match="by zero"):
            emitter.scalar_op(name, 7, 0)
    else:
        assert emitter.scalar_op(name, 7, 0) == SCALAR_OP_INFO[name].ints(7, 0)


@pytest.mark.parametrize("pred", PREDICATE_INFO)
def test_predicate_integer_meaning_matches_its_python_operator(pred):
    info = PREDICATE_INFO[pred]
    source = eval(f"lambda a, b: a {info.infix} b")
    for a, b in itertools.product(INTS, INTS):
        assert source(a, b) == info.ints(a, b)


def test_phis_are_exactly_the_opcodes_with_a_phi_operand_and_none_terminates():
    assert {"TENSOR_PHI", "SCALAR_PHI"} == PHIS
    assert all(any(o.kind is Kind.PHI for o in info.operands) == (info.name in PHIS) for info in OPCODES)
    assert not PHIS & TERMINATORS


def test_instruction_label_names_the_op_of_an_op_call_only():
    call = make_instruction("OP_CALL", "relu", (1,), (0,), {})
    assert call.label == "OP_CALL relu"
    assert make_instruction("RET", (0,)).label == "RET"
