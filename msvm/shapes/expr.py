"""Symbolic dimensions: integer expressions over named sizes, kept in a normal form.

Why a normal form: the verifier decides shape agreement by comparing dims and the JIT keys caches on
them, so ``(H*2)//2`` and ``H`` must be the *same value* (equal, equal hashes, same text), not merely
provably equal. A dim is a polynomial with integer coefficients whose atoms are symbols or opaque
terms (floordiv, mod, min, max of normal-form dims). Every rewrite applied holds for all integers,
negative ones included, so evaluating a normal form gives what the original expression gives (except
that a factor multiplied by 0 is dropped along with any division by zero inside it).

Why the parser caches: modules repeat the same spec text many times, and dims are immutable values.

Why the parser is paranoid: shape specs come from ``.msbc`` files and notebook text, so hostile input
must fail with a located ``ShapeSyntaxError``, never a ``RecursionError`` or a multi-second stall.
"""

from __future__ import annotations

import functools
import operator
import re
from collections.abc import Callable, Mapping
from math import gcd

from msvm.errors import ShapeError

MAX_TEXT_LENGTH = 4096
MAX_NESTING = 64
_INT64_BOUND = 2**63
# Arithmetic limits that keep a hostile or runaway expression from growing without bound. Products and
# opaque terms are where text can be amplified (a term is repeated in every monomial it multiplies), so
# they are bounded by ``_size``, roughly the length of the canonical text. Real shapes stay far below.
_MAX_PRODUCT_TERMS = 256
_MAX_DEGREE = 64
_MAX_COEFF_BITS = 256
_MAX_SIZE = 16384

_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def is_symbol_name(name: object) -> bool:
    """Can ``name`` name a size: an identifier that is not one of the shape functions (``min``, ...)."""
    return isinstance(name, str) and _NAME_RE.fullmatch(name) is not None and name not in _FUNC_IMPLS


class ShapeSyntaxError(ValueError):
    """Text that is not a dim or shape spec; ``pos`` is the 0-based offset of the offending character."""

    def __init__(self, reason: str, pos: int, text: str = "") -> None:
        self.reason = reason
        self.pos = pos
        self.text = text
        super().__init__(f"{reason} at position {pos}{_excerpt(text, pos)}")


def _excerpt(text: str, pos: int) -> str:
    if not text:
        return ""
    start = max(0, pos - 30)
    window = text[start : pos + 30].replace("\n", " ").replace("\t", " ").replace("\r", " ")
    return f"\n  {window}\n  {' ' * (pos - start)}^"


class _Term:
    """An opaque atom (``a//b``, ``a%b``, ``min(a,b)``, ``max(a,b)``) identified by its canonical text.

    The text is computed once, bottom-up, so equality, hashing and ordering are string operations and
    no walk ever recurses through the whole expression. Symbols (plain ``str`` atoms) sort first.
    """

    __slots__ = ("_hash", "args", "op", "size", "text")

    def __init__(self, op: str, a: Dim, b: Dim) -> None:
        self.size = 1 + _size(a) + _size(b)
        if self.size > _MAX_SIZE:
            raise ShapeError(f"{op} term exceeds size {_MAX_SIZE}", code="E-SHAPE-TOO-COMPLEX")
        self.op = op
        self.args = (a, b)
        self.text = f"{op}({a},{b})" if op in ("min", "max") else f"{_operand(a)}{op}{_operand(b)}"
        self._hash = hash(self.text)

    def __eq__(self, other: object) -> bool:
        return self.text == other.text if isinstance(other, _Term) else NotImplemented

    def __hash__(self) -> int:
        return self._hash

    def __lt__(self, other: _Term | str) -> bool:
        return False if isinstance(other, str) else self.text < other.text

    def __gt__(self, other: _Term | str) -> bool:
        return True if isinstance(other, str) else self.text > other.text

    @property
    def free_symbols(self) -> frozenset[str]:
        return self.args[0].free_symbols | self.args[1].free_symbols

    def evaluate(self, bindings: Mapping[str, int]) -> int:
        a, b = self.args
        x, y = a.evaluate(bindings), b.evaluate(bindings)
        if self.op == "min":
            return min(x, y)
        if self.op == "max":
            return max(x, y)
        if y == 0:
            raise ShapeError(f"division by zero in {self.text}: {b} = 0", code="E-SHAPE-ZERODIV")
        return x // y if self.op == "//" else x % y

    def substitute(self, mapping: Mapping[str, Dim]) -> Dim:
        a, b = self.args
        return _APPLY[self.op](a.substitute(mapping), b.substitute(mapping))


def _operand(d: Dim) -> str:
    """``d`` as an operand of ``//`` or ``%``: bare only when it is a single atom or a constant >= 0."""
    poly = d._poly
    if not poly:
        return "0"
    if len(poly) == 1:
        ((mono, k),) = poly.items()
        if not mono and k > 0:
            return str(k)
        if k == 1 and len(mono) == 1 and (isinstance(mono[0], str) or mono[0].op in ("min", "max")):
            return str(d)
    return f"({d})"


_setattr = object.__setattr__
_new = object.__new__


def _is_const(poly: dict) -> bool:
    return not poly or (len(poly) == 1 and () in poly)


class Dim:
    """One dimension of a shape spec: a constant, a symbol, an integer expression, or ``?``.

    Immutable; ``==`` and ``hash`` are structural on the normal form, and a constant dim equals (and
    hashes like) the ``int`` it holds. ``Dim("H*2")`` parses; ``Dim(3)`` is a constant.
    """

    __slots__ = ("_free", "_hash", "_poly", "_size", "_str")
    _poly: dict[tuple, int] | None  # monomial (sorted tuple of atoms) -> non-zero coefficient; None is ?

    def __new__(cls, spec: Dim | int | str) -> Dim:
        return as_dim(spec)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Dim is immutable")

    def __reduce__(self) -> tuple:
        return (Dim, (str(self),))

    @staticmethod
    def const(v: int) -> Dim:
        if isinstance(v, bool):
            raise TypeError("a dim is an integer, not a bool")
        return _const(operator.index(v))

    @staticmethod
    def sym(name: str) -> Dim:
        if not is_symbol_name(name):
            raise ValueError(f"not a valid symbol name: {name!r}")
        return _make({(name,): 1})

    # -- inspection -------------------------------------------------------------------------------------
    @property
    def is_unknown(self) -> bool:
        return self._poly is None

    @property
    def is_const(self) -> bool:
        poly = self._poly
        return poly is not None and _is_const(poly)

    @property
    def value(self) -> int:
        if not self.is_const:
            raise ValueError(f"dim {self} is not a constant")
        return self._poly.get((), 0)

    @property
    def is_symbol(self) -> bool:
        poly = self._poly
        if poly is None or len(poly) != 1:
            return False
        ((mono, k),) = poly.items()
        return k == 1 and len(mono) == 1 and isinstance(mono[0], str)

    @property
    def name(self) -> str:
        if not self.is_symbol:
            raise ValueError(f"dim {self} is not a plain symbol")
        return next(iter(self._poly))[0]

    @property
    def terms(self) -> tuple[tuple[int, tuple[str | tuple[str, Dim, Dim], ...]], ...]:
        """The normal form as a sum of ``(coefficient, factors)``, each factor a symbol name or
        ``(op, a, b)`` for ``a//b``, ``a%b``, ``min(a,b)``, ``max(a,b)``: what a code generator walks
        (reparsing the text would need a parser, and ``ast`` is not safe off the main thread on 3.11)."""
        if self._poly is None:
            raise ShapeError("'?' has no terms: it is known only at run time", code="E-SHAPE-UNKNOWN")
        return tuple(
            (k, tuple(a if isinstance(a, str) else (a.op, *a.args) for a in mono))
            for mono, k in sorted(self._poly.items(), key=_print_order)
        )

    @property
    def free_symbols(self) -> frozenset[str]:
        try:
            return self._free
        except AttributeError:  # not computed yet
            pass
        names: set[str] = set()
        for mono in self._poly or ():
            for atom in mono:
                if isinstance(atom, str):
                    names.add(atom)
                else:
                    names |= atom.free_symbols
        free = frozenset(names)
        _setattr(self, "_free", free)
        return free

    # -- evaluation -------------------------------------------------------------------------------------
    def evaluate(self, bindings: Mapping[str, int]) -> int:
        poly = self._poly
        if poly is None:
            raise ShapeError("cannot evaluate '?': it is known only at run time", code="E-SHAPE-UNKNOWN")
        total = 0
        for mono, k in poly.items():
            for atom in mono:
                if isinstance(atom, str):
                    try:
                        k *= bindings[atom]
                    except KeyError:
                        raise ShapeError(
                            f"symbol {atom} is not bound (evaluating {self})", code="E-SHAPE-UNBOUND"
                        ) from None
                else:
                    k *= atom.evaluate(bindings)
            total += k
        return total

    def substitute(self, mapping: Mapping[str, Dim | int]) -> Dim:
        poly = self._poly
        if poly is None or self.free_symbols.isdisjoint(mapping):
            return self
        subs = {name: as_dim(v) for name, v in mapping.items()}
        total = ZERO
        for mono, k in poly.items():
            term = _const(k)
            for atom in mono:
                if isinstance(atom, str):
                    term = _mul(term, subs[atom] if atom in subs else _make({(atom,): 1}))
                else:
                    term = _mul(term, atom.substitute(subs))
            total = _add(total, term, 1)
        return total

    # -- identity and text ------------------------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        if isinstance(other, Dim):
            return self._poly == other._poly
        if isinstance(other, int) and not isinstance(other, bool):
            return self.is_const and self.value == other
        return NotImplemented

    def __hash__(self) -> int:
        try:
            return self._hash
        except AttributeError:  # not computed yet
            pass
        poly = self._poly
        if poly is None:
            h = hash("?")
        elif _is_const(poly):
            h = hash(poly.get((), 0))
        else:
            h = hash(frozenset(poly.items()))
        _setattr(self, "_hash", h)
        return h

    def __str__(self) -> str:
        try:
            return self._str
        except AttributeError:  # not computed yet
            pass
        s = _format(self._poly)
        _setattr(self, "_str", s)
        return s

    def __repr__(self) -> str:
        return f"Dim({str(self)!r})"

    # -- arithmetic -------------------------------------------------------------------------------------
    def __add__(self, other: Dim | int) -> Dim:
        if type(other) is int:
            return _add_const(self, other)
        o = _coerce(other)
        return NotImplemented if o is None else _add(self, o, 1)

    __radd__ = __add__

    def __sub__(self, other: Dim | int) -> Dim:
        if type(other) is int:
            return _add_const(self, -other)
        o = _coerce(other)
        return NotImplemented if o is None else _add(self, o, -1)

    def __rsub__(self, other: Dim | int) -> Dim:
        o = _coerce(other)
        return NotImplemented if o is None else _add(o, self, -1)

    def __mul__(self, other: Dim | int) -> Dim:
        if type(other) is int:
            return _scale(self, other)
        o = _coerce(other)
        return NotImplemented if o is None else _mul(self, o)

    __rmul__ = __mul__

    def __floordiv__(self, other: Dim | int) -> Dim:
        if type(other) is int:
            return _floordiv_by(self, other)
        o = _coerce(other)
        return NotImplemented if o is None else _floordiv(self, o)

    def __rfloordiv__(self, other: Dim | int) -> Dim:
        o = _coerce(other)
        return NotImplemented if o is None else _floordiv(o, self)

    def __mod__(self, other: Dim | int) -> Dim:
        if type(other) is int:
            return _mod_by(self, other)
        o = _coerce(other)
        return NotImplemented if o is None else _mod(self, o)

    def __rmod__(self, other: Dim | int) -> Dim:
        o = _coerce(other)
        return NotImplemented if o is None else _mod(o, self)

    def __neg__(self) -> Dim:
        return _scale(self, -1)


def _make(poly: dict | None) -> Dim:
    d = _new(Dim)
    _setattr(d, "_poly", poly)  # the caches (_free, _hash, _str) are filled on first use
    return d


def _const(v: int) -> Dim:
    return _make({(): v} if v else {})


UNKNOWN = _make(None)
ZERO = _const(0)


def _coerce(x: object) -> Dim | None:
    if isinstance(x, Dim):
        return x
    if isinstance(x, bool):
        return None
    try:
        return _const(operator.index(x))
    except TypeError:
        return None


def as_dim(x: Dim | int | str) -> Dim:
    """Accept what users write: a ``Dim``, an integer, or dim text such as ``"H*2"`` or ``"?"``."""
    if isinstance(x, str):
        return parse_dim(x)
    d = _coerce(x)
    if d is None:
        raise TypeError(f"cannot make a Dim from {type(x).__name__} {x!r}")
    return d


# -- normal-form arithmetic -----------------------------------------------------------------------------


def _check_coeff(k: int) -> int:
    if k.bit_length() > _MAX_COEFF_BITS:
        raise ShapeError(f"coefficient exceeds {_MAX_COEFF_BITS} bits", code="E-SHAPE-TOO-COMPLEX")
    return k


def _add_const(a: Dim, k: int) -> Dim:
    poly = a._poly
    if poly is None:
        return UNKNOWN
    if not k:
        return a
    out = dict(poly)
    s = out.get((), 0) + k
    if s:
        out[()] = s
    else:
        del out[()]
    return _make(out)


def _add(a: Dim, b: Dim, sign: int) -> Dim:
    pa, pb = a._poly, b._poly
    if pa is None or pb is None:
        return UNKNOWN
    if not pb:
        return a
    if not pa and sign == 1:
        return b
    out = dict(pa)
    for mono, k in pb.items():
        s = out.get(mono, 0) + sign * k
        if s:
            out[mono] = s
        else:
            del out[mono]
    return _make(out)


def _scale(a: Dim, k: int) -> Dim:
    poly = a._poly
    if poly is None:
        return UNKNOWN
    if k == 1:
        return a
    if k == 0:
        return ZERO
    out = {mono: c * k for mono, c in poly.items()}
    if k.bit_length() > 1:
        for c in out.values():
            _check_coeff(c)
    return _make(out)


def _mul(a: Dim, b: Dim) -> Dim:
    pa, pb = a._poly, b._poly
    if pa is None or pb is None:
        return UNKNOWN
    if _is_const(pb):
        return _scale(a, pb.get((), 0))
    if _is_const(pa):
        return _scale(b, pa.get((), 0))
    if len(pa) * len(pb) > _MAX_PRODUCT_TERMS:
        message = f"product of {len(pa)} and {len(pb)} terms exceeds {_MAX_PRODUCT_TERMS}"
        raise ShapeError(message, code="E-SHAPE-TOO-COMPLEX")
    if len(pb) * _size(a) + len(pa) * _size(b) > _MAX_SIZE:
        raise ShapeError(f"product exceeds size {_MAX_SIZE}", code="E-SHAPE-TOO-COMPLEX")
    out: dict[tuple, int] = {}
    for ma, ka in pa.items():
        for mb, kb in pb.items():
            if not ma:
                mono = mb
            elif not mb:
                mono = ma
            else:
                mono = tuple(sorted(ma + mb))
                if len(mono) > _MAX_DEGREE:
                    raise ShapeError(f"monomial degree exceeds {_MAX_DEGREE}", code="E-SHAPE-TOO-COMPLEX")
            s = out.get(mono, 0) + _check_coeff(ka * kb)
            if s:
                out[mono] = s
            else:
                del out[mono]
    return _make(out)


def _atom(op: str, a: Dim, b: Dim) -> Dim:
    return _make({(_Term(op, a, b),): 1})


def _size(d: Dim) -> int:
    """Roughly the length of ``str(d)`` (cached): name lengths, one per monomial and per term operator."""
    try:
        return d._size
    except AttributeError:  # not computed yet
        pass
    n = 0
    for mono in d._poly:
        n += 1
        for atom in mono:
            n += len(atom) if isinstance(atom, str) else atom.size
    _setattr(d, "_size", n)
    return n


def _print_order(item: tuple[tuple, int]) -> tuple:
    return (-len(item[0]), item[0])


def _leading_coeff(poly: dict) -> int:
    return min(poly.items(), key=_print_order)[1]


def _single_term(poly: dict, op: str) -> _Term | None:
    """The term if ``poly`` is exactly ``1 * (x op c)`` with a positive constant ``c``."""
    if len(poly) != 1:
        return None
    ((mono, k),) = poly.items()
    if k != 1 or len(mono) != 1 or isinstance(mono[0], str):
        return None
    term = mono[0]
    return term if term.op == op and term.args[1].is_const and term.args[1].value > 0 else None


def _floordiv(a: Dim, b: Dim) -> Dim:
    pa, pb = a._poly, b._poly
    if pa is None or pb is None:
        return UNKNOWN
    if _is_const(pb):
        return _floordiv_by(a, pb.get((), 0))
    if _leading_coeff(pb) < 0:  # a//(-b) == (-a)//b
        a, b = _scale(a, -1), _scale(b, -1)
    return _atom("//", a, b)


def _floordiv_by(a: Dim, c: int) -> Dim:
    if a._poly is None:
        return UNKNOWN
    if c == 0:
        return _atom("//", a, ZERO)  # evaluation raises E-SHAPE-ZERODIV
    if c < 0:  # a//(-c) == (-a)//c
        a, c = _scale(a, -1), -c
    poly = a._poly
    if _is_const(poly):
        return _const(poly.get((), 0) // c)
    if c == 1:
        return a
    # (c*P + Q)//c == P + Q//c for integer P; take Q's coefficients in [1, c).
    quot: dict[tuple, int] = {}
    rem: dict[tuple, int] = {}
    for mono, k in poly.items():
        q, r = divmod(k, c)
        if q:
            quot[mono] = q
        if r:
            rem[mono] = r
    result = _make(quot)
    if not rem or (len(rem) == 1 and () in rem):  # 0 <= Q < c, so Q//c == 0
        return result
    g = gcd(c, *rem.values())
    if g > 1:  # (g*Q)//(g*c) == Q//c
        rem = {mono: k // g for mono, k in rem.items()}
        c //= g
    inner = _single_term(rem, "//")
    if inner is not None:  # (x//d)//c == x//(d*c) for d, c > 0
        x, d = inner.args
        return _add(result, _floordiv_by(x, d.value * c), 1)
    return _add(result, _atom("//", _make(rem), _const(c)), 1)


def _mod(a: Dim, b: Dim) -> Dim:
    pa, pb = a._poly, b._poly
    if pa is None or pb is None:
        return UNKNOWN
    if _is_const(pb):
        return _mod_by(a, pb.get((), 0))
    if _leading_coeff(pb) < 0:  # a%(-b) == -((-a)%b)
        return _scale(_atom("%", _scale(a, -1), _scale(b, -1)), -1)
    return _atom("%", a, b)


def _mod_by(a: Dim, c: int) -> Dim:
    if a._poly is None:
        return UNKNOWN
    if c == 0:
        return _atom("%", a, ZERO)  # evaluation raises E-SHAPE-ZERODIV
    if c < 0:  # a%(-c) == -((-a)%c)
        return _scale(_mod_by(_scale(a, -1), -c), -1)
    poly = a._poly
    if _is_const(poly):
        return _const(poly.get((), 0) % c)
    # (c*P + Q) % c == Q % c; take Q's coefficients in [1, c).
    rem = {mono: k % c for mono, k in poly.items() if k % c}
    if not rem or (len(rem) == 1 and () in rem):
        return _const(rem.get((), 0))
    g = gcd(c, *rem.values())
    if g > 1:  # (g*Q) % (g*c) == g*(Q % c)
        return _scale(_mod_by(_make({mono: k // g for mono, k in rem.items()}), c // g), g)
    inner = _single_term(rem, "%")
    if inner is not None:
        x, d = inner.args
        if d.value % c == 0:  # (x%d)%c == x%c when c divides d
            return _mod_by(x, c)
        if c % d.value == 0:  # 0 <= x%d < d <= c
            return _make(rem)
    return _atom("%", _make(rem), _const(c))


def _minmax(op: str, a: Dim, b: Dim) -> Dim:
    if a._poly is None or b._poly is None:
        return UNKNOWN
    diff = _add(a, b, -1)
    if diff.is_const:
        first = diff.value <= 0 if op == "min" else diff.value >= 0
        return a if first else b
    if str(b) < str(a):
        a, b = b, a
    return _atom(op, a, b)


_APPLY: dict[str, Callable[[Dim, Dim], Dim]] = {
    "//": _floordiv,
    "%": _mod,
    "min": lambda a, b: _minmax("min", a, b),
    "max": lambda a, b: _minmax("max", a, b),
}  # how an opaque term is rebuilt from new arguments, by its op


def ceildiv(a: Dim | int, b: Dim | int) -> Dim:
    """``-((-a)//b)``; by a positive constant ``c`` it is ``(a+c-1)//c``, so both spellings are equal."""
    a, b = as_dim(a), as_dim(b)
    if b.is_const and b.value != 0:
        c = b.value
        if c < 0:  # ceil(a/c) == ceil((-a)/(-c))
            a, c = _scale(a, -1), -c
        return _floordiv_by(_add_const(a, c - 1), c)
    return _scale(_floordiv(_scale(a, -1), b), -1)


def dmin(a: Dim | int, b: Dim | int) -> Dim:
    return _minmax("min", as_dim(a), as_dim(b))


def dmax(a: Dim | int, b: Dim | int) -> Dim:
    return _minmax("max", as_dim(a), as_dim(b))


def prove_equal(a: Dim | int, b: Dim | int) -> bool | None:
    """True/False when ``a == b`` holds/fails for every integer value of the symbols; None if undecided.

    ``?`` is never provably anything. Besides constant differences, a difference ``sum(k_i*m_i) + c``
    whose constant is not a multiple of ``gcd(k_i)`` can never be zero (e.g. ``H*2`` vs ``W*2+1``).
    """
    a, b = as_dim(a), as_dim(b)
    if a._poly is None or b._poly is None:
        return None
    diff = _add(a, b, -1)._poly
    if not diff:
        return True
    c = diff.get((), 0)
    coeffs = [k for mono, k in diff.items() if mono]
    if not coeffs or c % gcd(*coeffs):
        return False
    return None


# -- text -----------------------------------------------------------------------------------------------


def _format(poly: dict | None) -> str:
    if poly is None:
        return "?"
    if not poly:
        return "0"
    if len(poly) == 1:
        ((mono, k),) = poly.items()
        body = _format_monomial(mono, abs(k), leading_minus=k < 0)
        return "-" + body if k < 0 else body
    parts = []
    for i, (mono, k) in enumerate(sorted(poly.items(), key=_print_order)):
        body = _format_monomial(mono, abs(k), leading_minus=(i == 0 and k < 0))
        parts.append(("-" if k < 0 else "" if i == 0 else "+") + body)
    return "".join(parts)


def _format_monomial(mono: tuple, k: int, leading_minus: bool) -> str:
    if not mono:
        return str(k)
    # ``//`` and ``%`` bind like ``*`` and unary minus binds tighter, so such an atom is bare only alone.
    bare = len(mono) == 1 and k == 1 and not leading_minus
    factors = [_format_atom(atom, bare) for atom in mono]
    if k != 1:
        factors.append(str(k))
    return "*".join(factors)


def _format_atom(atom: str | _Term, bare: bool) -> str:
    if isinstance(atom, str):
        return atom
    return atom.text if bare or atom.op in ("min", "max") else f"({atom.text})"


_TOKEN_RE = re.compile(r"([0-9]+)|([A-Za-z_][A-Za-z0-9_]*)|(//)|([-+*%(),?\[\]])|[ \t\r\n]+|(.)", re.DOTALL)
_TOKEN_KINDS = (None, "int", "name", "//", "punct", "bad")


def _tokenize(text: str) -> list[tuple[str, str, int]]:
    """(kind, text, pos) triples; kind is "int", "name", "end" or the punctuation itself."""
    tokens = []
    for m in _TOKEN_RE.finditer(text):
        kind = _TOKEN_KINDS[m.lastindex or 0]
        if kind is None:  # whitespace
            continue
        tok, pos = m.group(), m.start()
        if kind == "bad":
            hint = " (use // for floor division)" if tok == "/" else ""
            raise ShapeSyntaxError(f"unexpected character {tok!r}{hint}", pos, text)
        tokens.append((tok if kind == "punct" else kind, tok, pos))
    tokens.append(("end", "", len(text)))
    return tokens


class _Parser:
    """Recursive descent over a token list; nesting is bounded, unary minus and operator chains loop."""

    def __init__(self, text: str) -> None:
        if not isinstance(text, str):
            raise TypeError(f"shape text must be str, not {type(text).__name__}")
        if len(text) > MAX_TEXT_LENGTH:
            raise ShapeSyntaxError(
                f"text is {len(text)} characters long; the limit is {MAX_TEXT_LENGTH}", MAX_TEXT_LENGTH, ""
            )
        self.text = text
        self.tokens = _tokenize(text)
        self.i = 0
        self.depth = 0

    def error(self, reason: str, pos: int) -> ShapeSyntaxError:
        return ShapeSyntaxError(reason, pos, self.text)

    def peek(self) -> str:
        return self.tokens[self.i][0]

    def take(self) -> tuple[str, str, int]:
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def expect(self, kind: str) -> None:
        got, text, pos = self.take()
        if got != kind:
            raise self.error(f"expected {kind!r}, got {_describe(got, text)}", pos)

    def end(self) -> None:
        got, text, pos = self.take()
        if got != "end":
            raise self.error(f"unexpected {_describe(got, text)} after a complete expression", pos)

    def apply(self, fn: Callable[[Dim, Dim], Dim], a: Dim, b: Dim, pos: int) -> Dim:
        try:
            return fn(a, b)
        except ShapeError as err:
            raise self.error(f"expression too complex: {err.message}", pos) from None

    def expr(self) -> Dim:
        left = self.term()
        while self.peek() in ("+", "-"):
            op, _, pos = self.take()
            right = self.term()
            left = self.apply(operator.add if op == "+" else operator.sub, left, right, pos)
        return left

    def term(self) -> Dim:
        left = self.unary()
        while self.peek() in ("*", "//", "%"):
            op, _, pos = self.take()
            right = self.unary()
            left = self.apply(_BINARY[op], left, right, pos)
        return left

    def unary(self) -> Dim:
        negate = False
        while self.peek() == "-":
            self.take()
            negate = not negate
        d = self.atom()
        return -d if negate else d

    def open(self, pos: int) -> None:
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise self.error(f"nesting deeper than {MAX_NESTING} levels", pos)

    def atom(self) -> Dim:
        kind, text, pos = self.take()
        if kind == "int":
            if len(text) > 19 or int(text) >= _INT64_BOUND:
                shown = text if len(text) <= 24 else text[:20] + "..."
                raise self.error(f"integer {shown} does not fit in int64", pos)
            return _const(int(text))
        if kind == "?":
            return UNKNOWN
        if kind == "(":
            self.open(pos)
            d = self.expr()
            self.expect(")")
            self.depth -= 1
            return d
        if kind == "name":
            if text not in _FUNC_IMPLS:
                return _make({(text,): 1})
            if self.peek() != "(":
                raise self.error(f"expected '(' after {text}", self.tokens[self.i][2])
            self.open(self.take()[2])
            a = self.expr()
            self.expect(",")
            b = self.expr()
            self.expect(")")
            self.depth -= 1
            return self.apply(_FUNC_IMPLS[text], a, b, pos)
        raise self.error(f"expected a dim (integer, name, '?' or '('), got {_describe(kind, text)}", pos)

    def dim_list(self) -> list[Dim]:
        self.expect("[")
        dims: list[Dim] = []
        if self.peek() == "]":
            self.take()
            return dims
        while True:
            dims.append(self.expr())
            kind, text, pos = self.take()
            if kind == "]":
                return dims
            if kind != ",":
                raise self.error(f"expected ',' or ']', got {_describe(kind, text)}", pos)


def _describe(kind: str, text: str) -> str:
    return "end of input" if kind == "end" else repr(text)


_BINARY: dict[str, Callable[[Dim, Dim], Dim]] = {"*": _mul, "//": _floordiv, "%": _mod}
# The functions shape-spec text may call; their names are not symbol names.
_FUNC_IMPLS: dict[str, Callable[[Dim, Dim], Dim]] = {
    "ceildiv": ceildiv,
    "floordiv": _floordiv,
    "mod": _mod,
    "min": dmin,
    "max": dmax,
}


def _parse_dim(text: str) -> Dim:
    parser = _Parser(text)
    d = parser.expr()
    parser.end()
    _check_printable(text, len(str(d)))
    return d


def _parse_dim_list(text: str) -> tuple[Dim, ...]:
    parser = _Parser(text)
    dims = parser.dim_list()
    parser.end()
    _check_printable(text, sum(len(str(d)) + 2 for d in dims))
    return tuple(dims)


def _check_printable(text: str, length: int) -> None:
    """Refuse a text whose normal form is longer than the parser reads: ``(a+b)*(c+d)*...`` expands,
    and what parses must print as text that parses again (the text and binary formats rely on it)."""
    if length > MAX_TEXT_LENGTH:
        raise ShapeSyntaxError(
            f"its normal form is {length} characters long; the limit is {MAX_TEXT_LENGTH}", 0, text
        )


# Only short texts are cached: real specs are short, and a cache of long hostile texts would hold memory.
_CACHED_TEXT_LENGTH = 256
_parse_dim_cached = functools.lru_cache(maxsize=4096)(_parse_dim)
_parse_dim_list_cached = functools.lru_cache(maxsize=4096)(_parse_dim_list)


def parse_dim(text: str) -> Dim:
    """Parse one dim: ``3``, ``N``, ``(W+1)//2``, ``min(H,W)``, ``?``; inverse of ``str(dim)``."""
    if isinstance(text, str) and len(text) <= _CACHED_TEXT_LENGTH:
        return _parse_dim_cached(text)
    return _parse_dim(text)


def parse_dim_list(text: str) -> tuple[Dim, ...]:
    """Parse a bracketed, comma-separated list of dims (``[N, 3, H*2]``); the grammar of shape specs."""
    if isinstance(text, str) and len(text) <= _CACHED_TEXT_LENGTH:
        return _parse_dim_list_cached(text)
    return _parse_dim_list(text)


__all__ = [
    "MAX_NESTING",
    "MAX_TEXT_LENGTH",
    "UNKNOWN",
    "Dim",
    "ShapeSyntaxError",
    "as_dim",
    "ceildiv",
    "dmax",
    "dmin",
    "parse_dim",
    "parse_dim_list",
    "prove_equal",
]
