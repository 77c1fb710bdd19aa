"""Sizes while lowering a symbolic graph once for every size.

A graph traced with symbolic sizes is lowered once, at the sizes it was traced with (the hint
binding), into an engine graph that records where sizes are expressions of the symbols: input
dims, size attributes (a view's shape, a slice's bounds), and the shape every FX node's result
must have. `Graph.instantiate(sizes)` (C++) replays that graph for any other binding, with no
Python lowering.

Inside `recording(rec)`, symbolic sizes reach the lowerings as SymSize: an integer that carries
its expression (sympy, over Dynamo's symbols) and its value at the hint binding. Arithmetic
(+, -, *, //, %) keeps the expression. A comparison answers with the hint's result and records
a guard (the relation and its outcome): the recorded graph serves a binding only where every
guard holds, because the lowering took the same decisions there. Everything that would lose
the expression (int(), float(), indexing, hashing, true division) raises, so a size can never
leave the recording as a plain number: such a lowering makes the graph fall back to lowering
per size (see compiler.SymbolicEngineGraph).
"""
from __future__ import annotations

import operator
import threading

import sympy
from torch.utils._sympy import functions as F

_REC = threading.local()


class NotSymbolic(Exception):
    """This graph cannot be lowered once for every size (it is lowered per size instead)."""


def _floordiv(a, b):
    return F.FloorDiv(a, b)


def _mod(a, b):
    return F.PythonMod(a, b)


def _recorder() -> "Recorder":
    rec = getattr(_REC, "rec", None)
    if rec is None:
        raise NotSymbolic("a symbolic size was used outside the recording")
    return rec


def _parts(x):
    if isinstance(x, SymSize):
        return x.expr, x.hint
    if isinstance(x, bool) or not isinstance(x, int):
        raise NotSymbolic(f"a symbolic size combined with {type(x).__name__} {x!r}")
    return sympy.Integer(x), x


def _make(expr, hint: int):
    return int(hint) if expr.is_number else SymSize(expr, int(hint))


class SymSize:
    """A size that depends on the symbols: its expression and its value at the hint binding."""

    __slots__ = ("expr", "hint")

    def __init__(self, expr, hint: int):
        self.expr, self.hint = expr, hint

    def __repr__(self):
        return f"{self.expr}(={self.hint})"

    # arithmetic keeps the expression
    def _bin(self, other, sym, num, swap=False):
        (a, ha), (b, hb) = _parts(self), _parts(other)
        if swap:
            (a, ha), (b, hb) = (b, hb), (a, ha)
        return _make(sym(a, b), num(ha, hb))

    def __add__(self, o): return self._bin(o, operator.add, operator.add)
    def __radd__(self, o): return self._bin(o, operator.add, operator.add, True)
    def __sub__(self, o): return self._bin(o, operator.sub, operator.sub)
    def __rsub__(self, o): return self._bin(o, operator.sub, operator.sub, True)
    def __mul__(self, o): return self._bin(o, operator.mul, operator.mul)
    def __rmul__(self, o): return self._bin(o, operator.mul, operator.mul, True)
    def __floordiv__(self, o): return self._bin(o, _floordiv, operator.floordiv)
    def __rfloordiv__(self, o): return self._bin(o, _floordiv, operator.floordiv, True)
    def __mod__(self, o): return self._bin(o, _mod, operator.mod)
    def __rmod__(self, o): return self._bin(o, _mod, operator.mod, True)
    def __neg__(self): return _make(-self.expr, -self.hint)
    def __pos__(self): return self

    # comparisons answer for the hint and record a guard
    def _cmp(self, other, rel, num):
        # any other operand (a float, None) refuses: Python's fallback would answer False unguarded
        (a, ha), (b, hb) = _parts(self), _parts(other)
        r = rel(a, b)
        result = num(ha, hb)
        if r not in (sympy.true, sympy.false):
            _recorder().guard(r, result)
        elif bool(r) != result:
            raise NotSymbolic(f"{a} vs {b}: the hint disagrees with the expression")
        return result

    def __eq__(self, o): return self._cmp(o, sympy.Eq, operator.eq)
    def __ne__(self, o): return self._cmp(o, sympy.Ne, operator.ne)
    def __lt__(self, o): return self._cmp(o, sympy.Lt, operator.lt)
    def __le__(self, o): return self._cmp(o, sympy.Le, operator.le)
    def __gt__(self, o): return self._cmp(o, sympy.Gt, operator.gt)
    def __ge__(self, o): return self._cmp(o, sympy.Ge, operator.ge)

    def __bool__(self):
        return self._cmp(0, sympy.Ne, operator.ne)

    # anything that would turn it into a plain number refuses
    def _refuse(self, *_):
        raise NotSymbolic(f"symbolic size {self.expr} used where a plain number is needed")

    __index__ = __int__ = __float__ = __hash__ = __truediv__ = __rtruediv__ = _refuse


class Recorder:
    """The state of one recording: the symbols (in the engine graph's order), the hint binding,
    the guards, and the engine graph's size expressions (sympy -> id)."""

    def __init__(self, symbols: list, hints: list[int], names: dict | None = None):
        self.symbols = list(symbols)
        self.index = {s: i for i, s in enumerate(self.symbols)}
        self.hints = [int(h) for h in hints]
        self.hint_env = {s: sympy.Integer(h) for s, h in zip(self.symbols, self.hints)}
        self.guards: dict = {}  # sympy relation -> its outcome at the hint
        self._ids: dict = {}
        self._graph = None  # the graph the guards were added to (compile_guards)
        # Symbol -> the name messages give it (an exported model's torch.export.Dim names)
        self.names = {s: sympy.Symbol(n) for s, n in (names or {}).items()}

    def size(self, expr):
        """A SymInt's expression as an int (constant) or a SymSize."""
        h = expr.xreplace(self.hint_env)
        if not h.is_number:
            raise NotSymbolic(f"size {expr} depends on symbols no input binds")
        return _make(expr, int(h))

    def guard(self, rel, outcome: bool):
        self.guards[rel] = outcome

    def compile_guards(self, g):
        """Adds the guards to graph `g` (engine expressions of lhs - rhs): its instantiate() then
        refuses a binding where the lowering would decide otherwise, and files keep them."""
        for rel, outcome in self.guards.items():
            d = self.size(rel.lhs - rel.rhs)
            if type(d) is int:
                continue  # decided whatever the sizes (sympy left it unevaluated)
            g.add_guard(self.expr_id(g, d), type(rel).__name__, outcome, str(rel.xreplace(self.names)))
        self._graph = g

    def holds_at(self, sizes: list[int]) -> bool:
        """Do the recorded decisions hold for these sizes (in the symbols' order)? Evaluated by the
        engine; compile_guards first."""
        return self._graph.failed_guard(list(sizes)) is None

    def expr_id(self, g, x: SymSize) -> int:
        """The engine graph's id of a size expression (added once), checked at the hint."""
        i = self._ids.get(x.expr)
        if i is None:
            i = g.add_expr(_code(x.expr, self.index), str(x.expr.xreplace(self.names)))
            if g.eval_expr(i, self.hints) != x.hint:
                raise NotSymbolic(f"size expression {x.expr} evaluates to {g.eval_expr(i, self.hints)} in the "
                                  f"engine but {x.hint} in Python")
            self._ids[x.expr] = i
        return i


# postfix codes of csrc/ir/size_expr.h
_CONST, _SYM, _ADD, _MUL, _FLOORDIV, _MOD, _MAX, _MIN, _NEG = range(9)


# (torch's shape environment writes max and min as its own classes, sympy's may come from elsewhere)
_MAXES = tuple(c for c in (sympy.Max, getattr(F, "Max", None)) if c is not None)
_MINS = tuple(c for c in (sympy.Min, getattr(F, "Min", None)) if c is not None)
_FOLDS = ((sympy.Add, _ADD), (sympy.Mul, _MUL), (_MAXES, _MAX), (_MINS, _MIN))


def _code(e, index: dict) -> list[int]:
    if e.is_Integer:
        return [_CONST, int(e)]
    if e.is_Symbol:
        if e not in index:
            raise NotSymbolic(f"symbol {e} is bound by no input")
        return [_SYM, index[e]]
    for cls, op in _FOLDS:
        if isinstance(e, cls):
            code = _code(e.args[0], index)
            for a in e.args[1:]:
                code += _code(a, index) + [op]
            return code
    if isinstance(e, sympy.Pow) and e.exp.is_Integer and int(e.exp) >= 1:
        base = _code(e.base, index)
        code = list(base)
        for _ in range(int(e.exp) - 1):
            code += base + [_MUL]
        return code
    if isinstance(e, (F.FloorDiv, getattr(F, "CleanDiv", F.FloorDiv))):
        return _code(e.args[0], index) + _code(e.args[1], index) + [_FLOORDIV]
    if isinstance(e, (F.PythonMod, F.Mod, sympy.Mod)):
        return _code(e.args[0], index) + _code(e.args[1], index) + [_MOD]
    raise NotSymbolic(f"size expression {e} ({type(e).__name__}) has no engine form")


def known_equal(a, b) -> bool:
    """a == b for sizes or lists of sizes, answered without a guard: True for equal plain ints or
    the same expression, False otherwise (sizes that are equal at some bindings only). For the
    lowerings' shortcuts whose False branch is right at every size (a reshape that may be the
    identity is kept, say): a guard there would only narrow the sizes a recorded graph serves."""
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b) and \
            all(known_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, SymSize) or isinstance(b, SymSize):
        return isinstance(a, SymSize) and isinstance(b, SymSize) and (a.expr - b.expr) == 0
    return a == b


def known_one(d) -> bool:
    """d == 1 answered without a guard (a symbolic size is taken as not 1; see known_equal)."""
    return not isinstance(d, SymSize) and d == 1


def recorder() -> Recorder | None:
    return getattr(_REC, "rec", None)


class recording:
    """Lower with symbolic sizes kept as SymSize (see the module docstring)."""

    def __init__(self, rec: Recorder):
        self.rec = rec

    def __enter__(self):
        self.prev = getattr(_REC, "rec", None)
        _REC.rec = self.rec
        return self.rec

    def __exit__(self, *exc):
        _REC.rec = self.prev
