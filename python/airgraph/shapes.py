"""Symbolic sizes: what the backend knows of them beyond the ATen graph (`ShapeSpec`: gears, value
inputs, the user's names), how each symbol is read from a call's arguments (`symbol_rules`), and
the generated key function that turns a call's arguments into its size binding (`key_function`).

A graph traced with symbolic sizes (dynamic=True, Dynamo's automatic dynamic shapes after a
second size, mark_dynamic, set_dim_gears, torch.export's Dims) is traced once. Each call binds the
symbols from its inputs' sizes (a few attribute reads); the first call with a new binding builds a
static engine program for it (symbolic.py, programs.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import sympy
import torch
import torch.fx

from .lowering import is_symbolic


@dataclass
class ShapeSpec:
    """What the backend knows beyond the ATen graph: gears (Symbol -> allowed sizes, from
    set_dim_gears) and value inputs (argument position -> example value: Python floats that Dynamo
    passes as 0-d tensors under dynamic=True, such as a norm's eps; each program binds their value as
    a constant, so that folding and fusion see them, and a new value builds a new program)."""

    gears: dict = field(default_factory=dict)
    values: dict = field(default_factory=dict)
    names: dict = field(default_factory=dict)  # argument position -> the user's name (input_ids), for messages
    # Symbol -> the user's name of that size (torch.export.Dim's), for the graph's symbols and messages
    symbol_names: dict = field(default_factory=dict)


def symbol_rules(gm: torch.fx.GraphModule, names: dict | None = None):
    """How each symbol is read from the arguments: [(position, dim or -1 for a scalar, Symbol, hint)],
    the first place it appears as a whole size, or else (torch.export's derived Dims: 2 * n, n + 1)
    the first input dim that is a * symbol + b with no other symbol; every placeholder's expected
    sizes [(position, name, dim, expr)]; Symbol -> the first tensor dim it sizes, for messages; and
    Symbol -> (a, b) for the symbols read from a derived dim."""
    rules, seen, expected, where, derived = [], set(), [], {}, []
    names = names or {}
    for i, n in enumerate(n for n in gm.graph.nodes if n.op == "placeholder"):
        val = n.meta.get("val")
        name = names.get(i)
        label = name or f"input {i} ({n.name})"
        name = name or n.name
        if isinstance(val, torch.SymInt):
            sizes = [(-1, val)]
        elif isinstance(val, torch.Tensor):
            sizes = list(enumerate(val.shape))
        else:
            continue
        for d, s in sizes:
            if not isinstance(s, torch.SymInt):
                continue
            e = s.node.expr
            if e.is_Symbol and e not in seen:
                seen.add(e)
                rules.append((i, d, e, _hint(s)))
            expected.append((i, label, d, e))
            if e.is_Symbol and d >= 0 and e not in where:
                where[e] = f"{label} dim {d}"
            if not e.is_Symbol and d >= 0:
                derived.append((i, label, d, e, s))
    affine = {}
    for i, label, d, e, s in derived:
        free = e.free_symbols
        sym = next(iter(free)) if len(free) == 1 else None
        if sym is None or sym in seen:
            continue
        ab = _affine(e, sym)
        if ab is None:
            continue
        seen.add(sym)
        h = _hint(s)
        rules.append((i, d, sym, None if h is None else (h - ab[1]) // ab[0]))
        affine[sym] = ab
        where[sym] = f"{label} dim {d} ({e})"
    for _, _, e, _ in rules:
        where.setdefault(e, "")
    return rules, expected, where, affine


def _affine(e, sym) -> tuple[int, int] | None:
    """(a, b) when e is a * sym + b with integers a != 0 and b, else None."""
    try:
        p = sympy.Poly(e, sym)
    except sympy.PolynomialError:
        return None
    if p.degree() != 1:
        return None
    a, b = p.coeff_monomial(sym), p.coeff_monomial(1)
    if not (a.is_Integer and b.is_Integer) or a == 0:
        return None
    return int(a), int(b)


def _hint(s: torch.SymInt) -> int | None:
    h = getattr(s.node, "hint", None)
    if h is None:
        h = s.node.shape_env.var_to_val.get(s.node.expr)
    return None if h is None else int(h)


def graph_symbols(gm: torch.fx.GraphModule) -> bool:
    """Does the graph carry symbolic sizes?"""
    for n in gm.graph.nodes:
        v = n.meta.get("val")
        if is_symbolic(v) or (isinstance(v, torch.Tensor) and any(not isinstance(s, int) for s in v.shape)):
            return True
    return False


def hint_sizes(gm: torch.fx.GraphModule) -> dict:
    """The binding of the sizes the graph was traced with."""
    return {sym: h for _, _, sym, h in symbol_rules(gm)[0] if h is not None}


def key_function(getters, values):
    """args -> a symbolic graph's binding key (each symbol's value, read from an int argument or an
    input's dim, or solved from a dim a * symbol + b (floor division: a dim that is no such size
    fails the program's input check), then each value input's number), as one generated lambda: no
    generator or loop on the per-call path. Every number in its text is an int."""
    parts = []
    for i, d, *ab in getters:
        p = f"args[{int(i)}]" if d < 0 else f"args[{int(i)}].shape[{int(d)}]"
        if ab and tuple(ab) != (1, 0):
            p = f"(({p} - ({int(ab[1])})) // ({int(ab[0])}))"
        parts.append(p)
    parts += [f"args[{int(i)}].item()" for i in values]
    return eval("lambda args: (" + "".join(p + ", " for p in parts) + ")")  # noqa: S307 (ints only)
