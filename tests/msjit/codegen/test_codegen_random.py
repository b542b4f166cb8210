"""Random straight-line programs (valid by construction), compiled and compared with the interpreter.

A program is a list of steps over a growing pool of values; shapes are tracked by running the ops'
own reference kernels on zeros, so every generated call is well-typed. The same program is also
compiled in bucket mode (the leading dim a symbol) and called with two sizes.
"""

from dataclasses import dataclass, field

import numpy as np
from codegen_helpers import assert_close, compiled, interpret, rand, region
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from msvm.errors import ShapeError
from msvm.ops import REGISTRY

UNARY = ["tanh", "sigmoid", "relu", "abs", "neg", "sin", "silu", "gelu", "exp"]
BINARY = ["add", "sub", "mul", "maximum", "minimum"]
REDUCE = ["sum", "mean", "max", "min"]


@dataclass
class Program:
    inputs: list[tuple[int, ...]]
    steps: list[tuple] = field(default_factory=list)  # (op, value indices, attrs, const or None)
    outputs: list[int] = field(default_factory=list)
    shapes: list[tuple[int, ...]] = field(default_factory=list)


def _broadcastable(a, b):
    try:
        np.broadcast_shapes(a, b)
        return True
    except ValueError:
        return False


@st.composite
def programs(draw):
    rank = draw(st.integers(1, 3))
    base = tuple(draw(st.lists(st.integers(2, 5), min_size=rank, max_size=rank)))
    inputs = [base]
    for _ in range(draw(st.integers(0, 2))):
        keep = draw(st.lists(st.booleans(), min_size=rank, max_size=rank))
        inputs.append(tuple(d if k else 1 for d, k in zip(base, keep)))
    prog = Program(inputs, shapes=list(inputs))
    for _ in range(draw(st.integers(1, 7))):
        vals = prog.shapes
        i = draw(st.integers(0, len(vals) - 1))
        shape = vals[i]
        kind = draw(
            st.sampled_from(
                [
                    "unary",
                    "binary",
                    "binary",
                    "reduce",
                    "softmax",
                    "transpose",
                    "slice",
                    "flatten",
                    "unsqueeze",
                    "layer_norm",
                    "matmul",
                    "concat",
                ]
            )
        )
        const = None
        if kind == "unary":
            step = (draw(st.sampled_from(UNARY)), [i], {})
        elif kind == "binary":
            partners = [j for j, s in enumerate(vals) if _broadcastable(shape, s)]
            step = (draw(st.sampled_from(BINARY)), [i, draw(st.sampled_from(partners))], {})
        elif kind == "reduce" and shape:
            axis = draw(st.one_of(st.none(), st.integers(0, len(shape) - 1)))
            ops = REDUCE if 0 not in shape else ["sum", "mean"]  # numpy's max/min of nothing raise
            step = (draw(st.sampled_from(ops)), [i], {"axis": axis, "keepdims": draw(st.booleans())})
        elif kind == "softmax" and shape:
            step = (draw(st.sampled_from(["softmax", "log_softmax"])), [i], {"axis": -1})
        elif kind == "transpose" and len(shape) > 1:
            step = ("transpose", [i], {"axes": None})
        elif kind == "slice" and shape:
            axis = draw(st.integers(0, len(shape) - 1))
            step = (
                "slice",
                [i],
                {
                    "axes": (axis,),
                    "starts": (draw(st.integers(-3, 2)),),
                    "stops": (draw(st.sampled_from([2**63 - 1, -1, 4])),),
                    "steps": (1,),
                },
            )
        elif kind == "flatten":
            step = ("reshape", [i], {"shape": (-1,)})
        elif kind == "unsqueeze":
            step = ("unsqueeze", [i], {"axis": draw(st.integers(0, len(shape)))})
        elif kind == "layer_norm" and shape:
            step = ("layer_norm", [i], {"normalized_shape": (shape[-1],)})
        elif kind == "matmul" and shape:
            n = draw(st.integers(1, 6))
            const = (shape[-1], n)
            step = ("matmul", [i], {})
        elif kind == "concat" and shape:
            step = ("concat", [i, i], {"axis": draw(st.integers(0, len(shape) - 1))})
        else:
            step = ("neg", [i], {})
        op, args, attrs = step
        zeros = [np.zeros(vals[j], np.float32) for j in args]
        if const is not None:
            zeros.append(np.zeros(const, np.float32))
        prog.steps.append((op, args, attrs, const))
        prog.shapes.append(np.asarray(REGISTRY[op].kernel(*zeros, **REGISTRY[op].check_attrs(attrs))).shape)
    n_values = len(prog.shapes)
    prog.outputs = sorted(set(draw(st.lists(st.integers(len(inputs), n_values - 1), min_size=1, max_size=2))))
    return prog


def build(prog: Program, specs: list[str]):
    def body(f, *regs):
        values = list(regs)
        rng = np.random.default_rng(7)
        for op, args, attrs, const in prog.steps:
            srcs = [values[j] for j in args]
            if const is not None:
                srcs.append(f.load_const(rng.uniform(-0.5, 0.5, const).astype(np.float32)))
            values.append(f.call(op, srcs, attrs))
        return tuple(values[k] for k in prog.outputs)

    return region(body, [(s, "float32") for s in specs])


def _spec(shape):
    return "[" + ", ".join(map(str, shape)) + "]"


def _bucket_spec(shape, base):
    if len(shape) == len(base) and shape and shape[0] == base[0]:
        return "[" + ", ".join(["N", *map(str, shape[1:])]) + "]"
    return _spec(shape)


SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))


@SETTINGS
@given(programs(), st.integers(0, 2**31))
def test_random_programs_exact(prog, seed):
    m = build(prog, [_spec(s) for s in prog.inputs])
    rng = np.random.default_rng(seed)
    args = [rand(s, rng=rng) for s in prog.inputs]
    r = compiled(m, mem_optimize=bool(seed % 2))
    assert_close(r.fn(*args), interpret(m, *args), rtol=1e-3, atol=1e-4)


@SETTINGS
@given(programs(), st.integers(0, 2**31))
def test_random_programs_bucket(prog, seed):
    base = prog.inputs[0]
    specs = [_bucket_spec(s, base) for s in prog.inputs]
    m = build(prog, specs)
    r = compiled(m, mem_optimize=True, bounds={"N": 8})
    rng = np.random.default_rng(seed)
    for n in sorted({base[0], 7}):
        shapes = [(n, *s[1:]) if spec.startswith("[N") else s for s, spec in zip(prog.inputs, specs)]
        args = [rand(s, rng=rng) for s in shapes]
        try:
            want = interpret(m, *args)
        except Exception:  # a size this program cannot take (e.g. a reshape guard): skip it
            continue
        try:
            got = r.fn(*args)
        except ShapeError as exc:  # a verifier guard the interpreter does not enforce: the runtime falls back
            assert exc.code == "E-SHAPE-GUARD" and "run-time check failed" in exc.message, exc
            continue
        assert_close(got, want, rtol=1e-3, atol=1e-4)
