"""Vectorisable exp, expm1, log, tanh, erf and sigmoid as llvmlite IR, for float32 and float64 (and GELU
for float32).

LLVM here has no vector math library: a call to libm's ``tanhf`` keeps a loop scalar (≈10× slower
than numpy's SIMD tanh). These builders emit straight-line IR — polynomials after range
reduction, integer tricks for 2^n and exponent extraction, and ``select`` instead of branches
for special cases — so the loop vectoriser keeps them in SIMD registers. Every builder works on
a scalar or a vector of ``float``/``double``.

Accuracy (``tests/native/test_mathlib.py`` checks the bounds over dense grids of ~350k points per
function, extremes included; float32 in ulp of the float64 numpy/``math`` value, float64 relative,
normal results):

| function | float32 (bound; measured) | float64 (bound; measured) | special values |
| --- | --- | --- | --- |
| exp | 2 ulp; 1.0 | 3e-16; 2.2e-16 rel | +inf past overflow, 0 past underflow, subnormals kept, NaN → NaN |
| expm1 | 2 ulp; 1.4 | 4e-16; 2.6e-16 rel | −1 for very negative x, +inf past overflow, −0 kept, NaN → NaN |
| log | 2 ulp; 0.9 | 3e-16; 2.2e-16 rel | log 0 = −inf, log(x<0) = NaN, log inf = inf, subnormals, NaN → NaN |
| tanh | 3 ulp; 2.1 | 5e-16; 4.3e-16 rel | ±1 at ±inf, −0 kept, NaN → NaN |
| sigmoid | 3 ulp; 2.4 | 5e-16; 4.4e-16 rel | 1 at +inf, 0 at −inf, accurate in both tails, NaN → NaN |
| erf | 3 ulp; 2.3 (abs ≤ 1.4e-7) | 1e-15; 3.3e-16 rel | ±1 at ±inf, −0 kept, NaN → NaN |
| gelu (``emit_gelu_f32``: the kernels' and JIT's GELU tests) | abs ≤ 5e-7 | – | inf at inf, NaN at −inf |

Subnormal results are within 4 subnormal steps of the true value.

Methods: exp reduces x = n·ln2 + r (|r| ≤ ln2/2, Cody–Waite split ln2) and evaluates the Taylor
polynomial of e^r − 1, scaling by 2^n as two exponent-built factors (so overflow and subnormal
results come out right); expm1 keeps e^r − 1 unrounded-by-one; log splits off the exponent,
takes m ∈ [√½, √2) and sums the atanh series of s = f/(2+f); tanh(x) = expm1(2|x|)/(expm1(2|x|)+2)
with the sign restored; sigmoid = 1/(1+e^-|x|) (times e^-|x| for x < 0); erf is x·P(x²) for
|x| < 2 and 1 − e^(−x²)·Q(1/|x|)/|x| above, where P and Q are Chebyshev fits (mpmath, 40 digits)
of erf(x)/x on x² ∈ [0, 4] and erfc(x)·x·e^(x²) on 1/x ∈ [1/4, 1/2] (float32) or [1/6, 1/2]
(float64), stored as monomials in the interval's [-1, 1] variable.

No fast-math flags are used here: the code relies on IEEE inf/NaN behaviour.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from llvmlite import ir

from .irhelpers import F32, F64, I32, I64, const, fma, internal_function, intrinsic

# Coefficients of erf(x)/x as a polynomial in v = (x² − 2)/2, for |x| < 2.
ERF_SMALL_F32 = (0.6749332411831943, -0.2611118617645137, 0.1194788815580855, -0.04866273580327166,
                 0.01713039573002872, -0.0052352082672187834, 0.001399380623101401, -0.0003342172711907846,
                 7.824543701867648e-05, -1.4993335737590241e-05)
ERF_SMALL_F64 = (0.674933236039655, -0.2611118609312454, 0.11947913860985163, -0.04866277744915509,
                 0.017128344571823145, -0.005234875836158027, 0.0014050914235853634, -0.0003351435335293146,
                 7.180100878143417e-05, -1.3946273727597251e-05, 2.475801058763217e-06,
                 -4.045094947367635e-07, 6.11973590542225e-08, -8.617665144205791e-09, 1.1331611787961273e-09,
                 -1.401554063331593e-10, 1.7218858155484183e-11, -1.8874163743967482e-12)
# Coefficients of erfc(x)·x·exp(x²) as a polynomial in v = (1/x − c)/h, for |x| ≥ 2.
ERFC_LARGE_F32 = (0.5308603730635327, -0.01894819494254628, -0.0014385520171132477, 0.0003462940969978292,
                  -2.7253444566751892e-05, -1.3343949221727304e-06)
ERFC_LARGE_F64 = (0.5370034535441776, -0.023826556739808085, -0.003204801317857595, 0.0009059268986183067,
                  -7.918367793455131e-05, -1.2430258097140358e-05, 5.915564871044045e-06,
                  -1.017260477170476e-06, 1.1448038853581961e-08, 4.7909594170343825e-08,
                  -1.614672865771998e-08, 2.581349150682464e-09, 2.975466495872023e-10,
                  -2.222876066851261e-10)


class _Format:
    """Constants of one floating-point format."""

    def __init__(self, double: bool) -> None:
        self.double = double
        self.int_bits = 64 if double else 32
        self.mant_bits = 52 if double else 23
        self.bias = 1023 if double else 127
        # Cody–Waite: LN2_HI has trailing zero bits, so n·LN2_HI is exact.
        self.ln2_hi = 6.93147180369123816490e-01 if double else 0.693359375
        self.ln2_lo = 1.90821492927058770002e-10 if double else -2.12194440e-4
        self.exp_hi = 709.782712893384 if double else 88.72283172607422  # largest x with finite e^x
        self.exp_lo = -746.0 if double else -104.0  # e^x rounds to 0 below
        self.expm1_hi = 709.0 if double else 88.0  # 2^n still representable as one factor
        self.expm1_lo = -40.0 if double else -30.0  # expm1 = -1 below
        self.tanh_sat = 20.0 if double else 10.0  # tanh rounds to ±1 beyond
        self.erf_sat = 6.0 if double else 4.0  # erf rounds to ±1 beyond
        self.min_normal = 2.2250738585072014e-308 if double else 1.1754943508222875e-38
        self.expm1_terms = 12 if double else 6  # Taylor terms of (e^r − 1 − r)/r²
        self.log_terms = 11 if double else 6  # terms of the atanh series
        self.erf_small = ERF_SMALL_F64 if double else ERF_SMALL_F32
        self.erfc_large = ERFC_LARGE_F64 if double else ERFC_LARGE_F32
        self.erfc_center, self.erfc_half = ((1 / 3, 1 / 6) if double else (0.375, 0.125))


class _Emitter:
    """Type-generic arithmetic for one value type (scalar or vector float/double)."""

    def __init__(self, builder: ir.IRBuilder, typ: ir.Type) -> None:
        elem = typ.element if isinstance(typ, ir.VectorType) else typ
        if elem not in (F32, F64):
            raise TypeError(f"mathlib: expected float/double (or vectors of them), got {typ}")
        self.b = builder
        self.t = typ
        self.f = _Format(elem == F64)
        ielem = I64 if self.f.double else I32
        self.it = ir.VectorType(ielem, typ.count) if isinstance(typ, ir.VectorType) else ielem

    def c(self, value: float) -> ir.Value:
        return const(self.t, value)

    def ci(self, value: int) -> ir.Value:
        return const(self.it, value)

    def call(self, name: str, *args: ir.Value) -> ir.Value:
        fn = intrinsic(self.b.module, f"llvm.{name}.{_suffix(self.t)}", self.t, [self.t] * len(args))
        return self.b.call(fn, list(args))

    def fma(self, a: ir.Value, b: ir.Value, c: ir.Value) -> ir.Value:
        return fma(self.b, a, b, c)

    def poly(self, x: ir.Value, coeffs: Sequence[float]) -> ir.Value:
        """Σ coeffs[i]·x^i by Horner's rule with FMAs."""
        acc = self.c(coeffs[-1])
        for coeff in reversed(coeffs[:-1]):
            acc = self.fma(acc, x, self.c(coeff))
        return acc

    def where(self, cond: ir.Value, a: ir.Value, b: ir.Value) -> ir.Value:
        return self.b.select(cond, a, b)

    def cmp(self, op: str, a: ir.Value, b: ir.Value) -> ir.Value:
        return self.b.fcmp_ordered(op, a, b)

    def is_nan(self, x: ir.Value) -> ir.Value:
        return self.b.fcmp_unordered("uno", x, x)

    def clamp(self, x: ir.Value, lo: float, hi: float) -> ir.Value:
        """x limited to [lo, hi]; NaN becomes lo (callers select NaN back in)."""
        return self.call("minnum", self.call("maxnum", x, self.c(lo)), self.c(hi))

    def pow2(self, n: ir.Value) -> ir.Value:
        """2^n for an integer vector n in the normal exponent range, built from its bits."""
        biased = self.b.add(n, self.ci(self.f.bias))
        return self.b.bitcast(self.b.shl(biased, self.ci(self.f.mant_bits)), self.t)

    def reduce(self, x: ir.Value) -> tuple[ir.Value, ir.Value]:
        """(n as an integer, r) with x = n·ln2 + r, |r| ≤ ln2/2."""
        n = self.call("rint", self.b.fmul(x, self.c(1.4426950408889634)))
        r = self.fma(n, self.c(-self.f.ln2_hi), x)
        r = self.fma(n, self.c(-self.f.ln2_lo), r)
        return self.b.fptosi(n, self.it), r

    def expm1_reduced(self, r: ir.Value) -> ir.Value:
        """e^r − 1 for |r| ≤ ln2/2: r + r²·(1/2! + r/3! + …)."""
        coeffs, fact = [], 2.0
        for k in range(self.f.expm1_terms):
            coeffs.append(1.0 / fact)
            fact *= k + 3
        q = self.poly(r, coeffs)
        return self.fma(self.b.fmul(r, r), q, r)

    def exp_finite(self, x: ir.Value) -> ir.Value:
        """e^x for x already clamped to [exp_lo, exp_hi]."""
        n, r = self.reduce(x)
        p = self.b.fadd(self.expm1_reduced(r), self.c(1.0))
        half = self.b.ashr(n, self.ci(1))
        return self.b.fmul(self.b.fmul(p, self.pow2(half)), self.pow2(self.b.sub(n, half)))

    def expm1_finite(self, x: ir.Value) -> ir.Value:
        """e^x − 1 for x already clamped to [expm1_lo, expm1_hi]."""
        n, r = self.reduce(x)
        scale = self.pow2(n)
        return self.fma(scale, self.expm1_reduced(r), self.b.fsub(scale, self.c(1.0)))


def _suffix(typ: ir.Type) -> str:
    if isinstance(typ, ir.VectorType):
        return f"v{typ.count}{_suffix(typ.element)}"
    return "f64" if typ == F64 else "f32"


def emit_exp(builder: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """e^x."""
    m = _Emitter(builder, x.type)
    y = m.exp_finite(m.clamp(x, m.f.exp_lo, m.f.exp_hi))
    y = m.where(m.cmp(">", x, m.c(m.f.exp_hi)), m.c(float("inf")), y)
    y = m.where(m.cmp("<", x, m.c(m.f.exp_lo)), m.c(0.0), y)
    return m.where(m.is_nan(x), x, y)


def emit_expm1(builder: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """e^x − 1, accurate for small |x|."""
    m = _Emitter(builder, x.type)
    y = m.expm1_finite(m.clamp(x, m.f.expm1_lo, m.f.expm1_hi))
    big = m.exp_finite(m.clamp(x, m.f.expm1_hi, m.f.exp_hi))  # e^x − 1 rounds to e^x up there
    y = m.where(m.cmp(">", x, m.c(m.f.expm1_hi)), big, y)
    y = m.where(m.cmp(">", x, m.c(m.f.exp_hi)), m.c(float("inf")), y)
    y = m.where(m.cmp("==", x, m.c(0.0)), x, y)  # keeps the sign of -0
    return m.where(m.is_nan(x), x, y)


def emit_log(builder: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """Natural logarithm."""
    m = _Emitter(builder, x.type)
    b, f = builder, m.f
    tiny = m.cmp("<", x, m.c(f.min_normal))
    shift = f.mant_bits + 2
    xs = m.where(tiny, b.fmul(x, m.c(2.0**shift)), x)
    bits = b.bitcast(xs, m.it)
    e = b.sub(b.lshr(bits, m.ci(f.mant_bits)), m.ci(f.bias))
    e = b.sub(e, b.select(tiny, m.ci(shift), m.ci(0)))
    mant = b.or_(b.and_(bits, m.ci((1 << f.mant_bits) - 1)), m.ci(f.bias << f.mant_bits))
    mf = b.bitcast(mant, m.t)  # in [1, 2)
    big = m.cmp(">", mf, m.c(1.4142135623730951))
    mf = m.where(big, b.fmul(mf, m.c(0.5)), mf)
    e = b.add(e, b.select(big, m.ci(1), m.ci(0)))
    fr = b.fsub(mf, m.c(1.0))  # exact (Sterbenz)
    s = b.fdiv(fr, b.fadd(fr, m.c(2.0)))
    z = b.fmul(s, s)
    # log(1+f) = 2·atanh(s) = f − s·(f − 2R), 2R = 2z/3 + 2z²/5 + …
    two_r = b.fmul(z, m.poly(z, [2.0 / (2 * k + 3) for k in range(f.log_terms)]))
    log1p = b.fsub(fr, b.fmul(s, b.fsub(fr, two_r)))
    ef = b.sitofp(e, m.t)
    y = b.fadd(b.fmul(ef, m.c(f.ln2_hi)), m.fma(ef, m.c(f.ln2_lo), log1p))
    y = m.where(m.cmp("==", x, m.c(0.0)), m.c(float("-inf")), y)
    y = m.where(m.cmp("<", x, m.c(0.0)), m.c(float("nan")), y)
    y = m.where(m.cmp("==", x, m.c(float("inf"))), x, y)
    return m.where(m.is_nan(x), x, y)


def emit_tanh(builder: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """Hyperbolic tangent."""
    m = _Emitter(builder, x.type)
    b = builder
    a = m.call("minnum", m.call("fabs", x), m.c(m.f.tanh_sat))
    em = m.expm1_finite(b.fmul(a, m.c(2.0)))
    t = b.fdiv(em, b.fadd(em, m.c(2.0)))
    return m.where(m.is_nan(x), x, m.call("copysign", t, x))


def emit_sigmoid(builder: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """The logistic function 1/(1 + e^-x), accurate in both tails."""
    m = _Emitter(builder, x.type)
    b = builder
    neg_abs = b.fneg(m.call("fabs", x))
    e = m.exp_finite(m.call("maxnum", neg_abs, m.c(m.f.exp_lo)))
    r = b.fdiv(m.c(1.0), b.fadd(m.c(1.0), e))
    y = m.where(m.cmp(">=", x, m.c(0.0)), r, b.fmul(e, r))
    return m.where(m.is_nan(x), x, y)


def emit_erf(builder: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """The error function. The erfc branch (a division, a polynomial and an exp) is computed only when
    some lane needs it: activations rarely reach |x| ≥ 2, and evaluating both branches for every
    vector made erf, and so exact GELU, twice as expensive as it needs to be. Leaves ``builder`` in a
    new block (the callers' loops close over ``builder.block``)."""
    m = _Emitter(builder, x.type)
    b, f = builder, m.f
    a = m.call("fabs", x)
    z = b.fmul(x, x)
    small = b.fmul(x, m.poly(m.fma(z, m.c(0.5), m.c(-1.0)), f.erf_small))
    in_small = m.cmp("<", a, m.c(2.0))  # false for NaN: a NaN lane takes the erfc branch
    before = b.block
    large_block = b.append_basic_block("erf.large")
    join = b.append_basic_block("erf.join")
    b.cbranch(_all_lanes(b, in_small), join, large_block)
    b.position_at_end(large_block)
    inv = b.fdiv(m.c(1.0), a)
    v = b.fmul(b.fsub(inv, m.c(f.erfc_center)), m.c(1.0 / f.erfc_half))
    zc = m.call("minnum", z, m.c(-f.exp_lo))
    erfc = b.fmul(b.fmul(m.poly(v, f.erfc_large), inv), m.exp_finite(b.fneg(zc)))
    large = m.call("copysign", b.fsub(m.c(1.0), erfc), x)
    mixed = m.where(in_small, small, large)
    mixed = m.where(m.cmp(">=", a, m.c(f.erf_sat)), m.call("copysign", m.c(1.0), x), mixed)
    mixed = m.where(m.is_nan(x), x, mixed)
    after_large = b.block
    b.branch(join)
    b.position_at_end(join)
    y = b.phi(x.type)
    y.add_incoming(small, before)
    y.add_incoming(mixed, after_large)
    return y


# GELU in float32: x·(1/2 + erf(x/√2)/2) with erf(u) ≈ u·P(u²)/Q(u²) on [-4, 4] (Eigen's float erf, as
# used by XLA/TensorFlow): absolute error ≤ 5e-7, which is what GELU needs (standalone erf keeps its
# ≤ 3 ulp). The 1/√2 and the 1/2 are folded into the coefficients (u² = x²/2 scales them by powers of
# two, exactly) and both polynomials are evaluated in pairs (Estrin), so the dependent chain is short:
# 10 FMAs and one division per element. W5's row kernel against erf(x/√2) first and Horner's rule
# (minimum of alternating rounds, same process): 94–96 vs 100–102 µs at 128×1024 on one thread, 1.67
# vs 1.74–1.78 ms at 4096×1024. (A reciprocal estimate plus Newton steps instead of the division
# measured slower on Zen 4, and one step alone is not accurate enough where 1/2 + erf/2 cancels.)
_GELU_INV_SQRT2 = 0.7071067811865476
_ERF_P = (
    -1.60960333262415e-02,
    -2.95459980854025e-03,
    -7.34990630326855e-04,
    -5.69250639462346e-05,
    -2.10102402082508e-06,
    2.77068142495902e-08,
    -2.72614225801306e-10,
)
_ERF_Q = (
    -1.42647390514189e-02,
    -7.37332916720468e-03,
    -1.68282697438203e-03,
    -2.13374055278905e-04,
    -1.45660718464996e-05,
)
_GELU_P = tuple(p * _GELU_INV_SQRT2 * 0.5 ** (k + 1) for k, p in enumerate(_ERF_P))
_GELU_Q = tuple(q * 0.5**k for k, q in enumerate(_ERF_Q))
_GELU_CLAMP = 4.0 / _GELU_INV_SQRT2  # where x/√2 reaches the approximation's bound


def emit_gelu_f32(builder: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """Exact-form GELU of a float32 scalar or vector, to 5e-7 absolute (NaN stays NaN through the
    clamp's selects; -inf gives NaN, as the exact form does). The JIT's fused loops and the
    interpreter's native GELU both use it, so they agree to the bit."""
    b = builder
    lo, hi = const(x.type, -_GELU_CLAMP), const(x.type, _GELU_CLAMP)
    xc = b.select(b.fcmp_ordered(">", lo, x), lo, x)  # max and min against constants: a NaN x is kept
    xc = b.select(b.fcmp_ordered("<", hi, xc), hi, xc)
    s = b.fmul(xc, xc)
    s2 = b.fmul(s, s)

    def poly(coeffs: Sequence[float]) -> ir.Value:
        pairs = [fma(b, s, const(x.type, coeffs[i + 1]), const(x.type, coeffs[i])) if i + 1 < len(coeffs)
                 else const(x.type, coeffs[i]) for i in range(0, len(coeffs), 2)]
        acc = pairs[-1]
        for pair in reversed(pairs[:-1]):
            acc = fma(b, s2, acc, pair)
        return acc

    r = b.fdiv(b.fmul(xc, poly(_GELU_P)), poly(_GELU_Q))
    return b.fmul(x, b.fadd(const(x.type, 0.5), r))


def _all_lanes(builder: ir.IRBuilder, flags: ir.Value) -> ir.Value:
    """One i1: every lane of ``flags`` (an i1 or a vector of i1) is true."""
    if not isinstance(flags.type, ir.VectorType):
        return flags
    bits = ir.IntType(flags.type.count)
    every = ir.Constant(bits, (1 << flags.type.count) - 1)
    return builder.icmp_unsigned("==", builder.bitcast(flags, bits), every)


EMITTERS: dict[str, Callable[[ir.IRBuilder, ir.Value], ir.Value]] = {
    "exp": emit_exp, "expm1": emit_expm1, "log": emit_log, "tanh": emit_tanh, "sigmoid": emit_sigmoid,
    "erf": emit_erf,
}


def emit(builder: ir.IRBuilder, name: str, x: ir.Value) -> ir.Value:
    """``name(x)`` inline, for ``name`` in ``EMITTERS``."""
    try:
        return EMITTERS[name](builder, x)
    except KeyError:
        raise KeyError(f"mathlib has no {name!r}; it has {', '.join(EMITTERS)}") from None


def math_function(module: ir.Module, name: str, typ: ir.Type) -> ir.Function:
    """An internal, always-inlined ``msvm.<name>.<type>`` function in ``module`` (defined once)."""
    symbol = f"msvm.{name}.{_suffix(typ)}"
    existing = module.globals.get(symbol)
    if existing is not None:
        return existing
    fn, builder = internal_function(module, symbol, typ, [typ])
    builder.ret(emit(builder, name, fn.args[0]))
    return fn
