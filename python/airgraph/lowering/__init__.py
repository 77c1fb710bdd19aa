"""Lowering of ATen FX nodes into the C++ graph builder.

Each op family has one file here with one table row per ATen overload:

    @lowering(aten.relu.default)
    def _relu(ctx, node, x):
        return ctx.emit("relu", [ctx.value(x)])

A lowering receives the FX node's args (FX nodes for tensors, Python values for
the rest) and kwargs, and returns the engine value id of the node's result (or
a list of ids for a node with several outputs). It raises Unsupported(reason)
when the engine cannot take this particular use of the op (an unsupported dtype,
say); the partitioner then leaves that node to PyTorch. ctx.emit attaches the FX
node name and the user's source line to every engine node it creates.
"""
from __future__ import annotations

import contextlib
import re
import threading
from typing import Any, Callable

import sympy
import torch
import torch.fx

from .._core import C
from .sizes import NotSymbolic, SymSize, recorder

aten = torch.ops.aten

LOWERINGS: dict[Any, Callable] = {}


class Unsupported(Exception):
    """This node cannot run on the engine; it will fall back to PyTorch."""


def lowering(*targets):
    def deco(fn):
        for t in targets:
            if t in LOWERINGS:
                raise RuntimeError(f"two lowerings for {t}")
            LOWERINGS[t] = fn
        return fn

    return deco


_DTYPES = {
    torch.float32: "float32",
    torch.float64: "float64",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
    torch.int64: "int64",
    torch.int32: "int32",
    torch.int16: "int16",
    torch.int8: "int8",
    torch.uint8: "uint8",
    torch.bool: "bool",
}
_TORCH_DTYPES = {v: k for k, v in _DTYPES.items()}


def engine_dtype(dt: torch.dtype) -> str:
    if dt not in _DTYPES:
        raise Unsupported(f"dtype {dt} is not supported by the engine")
    return _DTYPES[dt]


def torch_dtype(name: str) -> torch.dtype:
    return _TORCH_DTYPES[name]


def source_line(node: torch.fx.Node) -> str:
    """'model.py:42 in forward: x = self.fc(x)' from the FX node's stack trace (parsed once per node)."""
    src = node.meta.get("_airgraph_source")
    if src is None:
        st = node.meta.get("stack_trace") or ""
        frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)\n\s*(.*)', st)
        src = ""
        if frames:
            f, line, fn, code = frames[-1]
            src = f"{f}:{line} in {fn}: {code.strip()}"
        node.meta["_airgraph_source"] = src
    return src


# ---- symbolic sizes ---------------------------------------------------------------------
#
# A graph traced with dynamic shapes carries SymInts (sympy expressions of symbols s0, s1, ...
# from Dynamo's ShapeEnv) in its FakeTensor metadata and as FX nodes in the arguments (sizes
# of views, slice bounds). An engine program is lowered for one binding of those symbols
# (compiler.SymbolicEngineGraph makes one per size); inside `bound_sizes(env)` every symbolic
# size evaluates to its value in that binding. Never int() a SymInt here: that would add a
# guard to Dynamo's ShapeEnv and return the size of the trace, not of this binding.

_SIZES = threading.local()
_SYM_TYPES = (torch.SymInt, torch.SymFloat, torch.SymBool)


def sympy_binding(env: dict) -> dict:
    """Symbol -> int as Symbol -> sympy Integer, what expr.xreplace evaluates with."""
    return {s: sympy.Integer(v) for s, v in env.items()}


@contextlib.contextmanager
def bound_sizes(env: dict):
    """Lower for one binding of the symbols: sympy Symbol -> int."""
    prev = getattr(_SIZES, "env", None)
    _SIZES.env, _SIZES.memo = sympy_binding(env), {}
    try:
        yield
    finally:
        _SIZES.env, _SIZES.memo = prev, {}


def is_symbolic(v) -> bool:
    return isinstance(v, _SYM_TYPES)


def concrete(v):
    """A SymInt/SymFloat/SymBool's value in the current binding (Unsupported outside one);
    anything else unchanged."""
    if not isinstance(v, _SYM_TYPES):
        return v
    expr = v.node.expr
    rec = recorder()
    if rec is not None:  # lowering once for every size: the size keeps its expression
        if not isinstance(v, torch.SymInt):
            raise NotSymbolic(f"symbolic {type(v).__name__} {expr}")
        return rec.size(expr)
    env = getattr(_SIZES, "env", None)
    if env is None:
        raise Unsupported(f"symbolic size {v} outside a size binding")
    memo = _SIZES.memo
    r = memo.get(expr)
    if r is None:
        r = expr.xreplace(env)
        if not r.is_number:
            raise Unsupported(f"size {expr} depends on {sorted(map(str, r.free_symbols))}, which no input binds "
                              "(a data-dependent size)")
        r = bool(r) if isinstance(v, torch.SymBool) else int(r) if isinstance(v, torch.SymInt) else float(r)
        memo[expr] = r
    return r


class BoundSize(int):
    """A symbolic size's value in the current binding, as an FX argument: lowerings that use a
    size as a number (x + n) build it the way the graph lowered once for every size does
    (LowerCtx.size_scalar), so that the two lowerings can be compared."""


def _arg_size(v):
    r = concrete(v)
    if type(r) is int and isinstance(v, torch.SymInt) and not v.node.expr.is_number:
        return BoundSize(r)
    return r


def concrete_arg(a):
    """An FX argument with symbolic scalars (FX nodes whose value is a SymInt, SymInts in lists)
    replaced by their values in the current binding; tensors and the rest unchanged."""
    if getattr(_SIZES, "env", None) is None and recorder() is None:
        return a  # a static graph: nothing to substitute
    if isinstance(a, torch.fx.Node):
        v = a.meta.get("val")
        if isinstance(v, _SYM_TYPES):
            try:
                return _arg_size(v)
            except (Unsupported, NotSymbolic):
                if recorder() is not None and isinstance(v, torch.SymInt):
                    raise
                return a  # a symbol no input binds (a float argument): stays an engine input
        return a
    if isinstance(a, (list, tuple)):
        return type(a)(concrete_arg(x) for x in a)
    if isinstance(a, _SYM_TYPES):
        return _arg_size(a)
    return a


def static_shape(t) -> list[int]:
    """The sizes of a (Fake)Tensor in the current binding."""
    shape = t.shape
    if all(type(s) is int for s in shape):
        return list(shape)
    return [s if isinstance(s, int) else concrete(s) for s in shape]


class LowerCtx:
    """State while lowering one FX graph into one engine graph."""

    def __init__(self, graph: "C.Graph"):
        self.g = graph
        self.env: dict[torch.fx.Node, Any] = {}  # fx node -> value id (or list of ids)
        self.node: torch.fx.Node | None = None
        self._counter = 0
        self._types: dict[int, tuple] = {}
        # Lowering once for every size (sizes.recording): each engine value's shape with SymSize
        # dims, where it is known for every binding; a lowering that reads another value's
        # shape makes the graph fall back to lowering per size.
        self.rec = recorder()
        self.sym_shapes: dict[int, list] = {}
        if self.rec is not None:
            for sym in self.rec.symbols:
                graph.add_symbol(str(self.rec.names.get(sym, sym)))

    def add_input(self, dtype: str, shape: list, name: str) -> int:
        """A graph input; its dims may be SymSize (lowering once for every size)."""
        vid = self.g.add_input(dtype, [getattr(d, "hint", d) for d in shape], name)
        if self.rec is not None:
            self.set_sym_shape(vid, shape)
        return vid

    def add_const(self, t: torch.Tensor, name: str, weights: bool = False) -> int:
        """A contiguous tensor as a constant of the graph; `weights`: one of the caller's parameters
        or buffers (bound per process: never written into the compile cache by value)."""
        vid = self.g.add_const(t, name, weights)
        if self.rec is not None:
            self.sym_shapes[vid] = list(t.shape)
        return vid

    # --- values -------------------------------------------------------------
    def value(self, arg) -> int:
        """Engine value id of an FX node argument (tensors only)."""
        if isinstance(arg, torch.fx.Node):
            v = self.env.get(arg)
            if v is None:
                raise Unsupported(f"input {arg.name} is not a tensor the engine holds")
            if isinstance(v, list):
                raise Unsupported(f"input {arg.name} is a tuple; expected a tensor")
            return v
        raise Unsupported(f"expected a tensor argument, got {type(arg).__name__}")

    def is_tensor(self, arg) -> bool:
        return isinstance(arg, torch.fx.Node) and isinstance(arg.meta.get("val"), torch.Tensor)

    def value_type(self, vid: int) -> tuple[str, list[int]]:
        """(dtype, shape) of an engine value; values never change type, so each is read once."""
        t = self._types.get(vid)
        if t is None:
            t = self._types[vid] = self.g.value_type(vid)
        return t

    def dtype(self, vid: int) -> str:
        return self.value_type(vid)[0]

    def shape(self, vid: int) -> list[int]:
        if self.rec is not None:
            s = self.sym_shapes.get(vid)
            if s is None:
                raise NotSymbolic(f"the shape of engine value {vid} ({self.node.name if self.node else ''}) "
                                  "is not known for every size")
            return list(s)
        return list(self.value_type(vid)[1])

    def set_sym_shape(self, vid: int, shape: list):
        """Records the shape (with SymSize dims) of an engine value; symbolic dims become a check
        that every instantiated size infers exactly this shape."""
        self.sym_shapes[vid] = list(shape)
        ids = [self.rec.expr_id(self.g, d) if isinstance(d, SymSize) else -1 for d in shape]
        if any(i >= 0 for i in ids):
            self.g.set_dim_exprs(vid, ids)

    def _sym_attrs(self, attrs: dict) -> tuple[dict, dict, list]:
        """Attributes with their sizes at the hint binding; the same with SymSize sizes; and
        (key, index, expression id) for every size that depends on the symbols."""
        out, sym, syms = {}, {}, []
        for k, v in attrs.items():
            if isinstance(v, torch.SymInt):
                v = concrete(v)
            if isinstance(v, SymSize):
                syms.append((k, -1, self.rec.expr_id(self.g, v)))
                sym[k], v = v, v.hint
            elif isinstance(v, (list, tuple)) and any(isinstance(x, (SymSize, torch.SymInt)) for x in v):
                vals = [concrete(x) if isinstance(x, torch.SymInt) else x for x in v]
                for i, x in enumerate(vals):
                    if isinstance(x, SymSize):
                        syms.append((k, i, self.rec.expr_id(self.g, x)))
                sym[k] = vals
                v = [x.hint if isinstance(x, SymSize) else x for x in vals]
            else:
                sym[k] = v
            out[k] = v
        return out, sym, syms

    def _infer_sym_shapes(self, op: str, inputs: list[int], attrs: dict, syms: list, outs: list[int]):
        """The symbolic shapes of a node's outputs where the op's semantics give them."""
        ins = [self.sym_shapes.get(v) for v in inputs]
        if not syms and all(s is not None and not any(isinstance(d, SymSize) for d in s) for s in ins):
            for o in outs:  # no size depends on the symbols: the inferred shape holds for all
                self.sym_shapes[o] = list(self.value_type(o)[1])
            return
        if len(outs) != 1 or any(s is None for s in ins):
            return
        shape = None
        if op == "reshape" and "shape" in attrs and not any(type(d) is int and d < 0 for d in attrs["shape"]):
            shape = list(attrs["shape"])
        elif op in _elementwise_ops():
            shape = _broadcast(ins)
        if shape is not None and [d.hint if isinstance(d, SymSize) else d for d in shape] == \
                list(self.value_type(outs[0])[1]):
            self.sym_shapes[outs[0]] = shape


    def rank(self, vid: int) -> int:
        return len(self.shape(vid))

    def out_meta(self, i: int | None = None) -> torch.Tensor:
        """The FakeTensor PyTorch traced for the current node's output."""
        val = self.node.meta.get("val")
        if i is not None:
            val = val[i]
        return val

    def out_dtype(self, i: int | None = None) -> str:
        return engine_dtype(self.out_meta(i).dtype)

    def const(self, value, dtype: str | torch.dtype, shape: list[int] | None = None) -> int:
        """A constant: a Python scalar (0-d, or filled to `shape`) or a tensor."""
        if isinstance(dtype, torch.dtype):
            dtype = engine_dtype(dtype)
        if isinstance(value, torch.Tensor):
            t = value.detach().to(torch_dtype(dtype)).contiguous()
        else:
            t = torch.full(shape or [], value, dtype=torch_dtype(dtype))
        self._counter += 1
        name = f"{self.node.name if self.node is not None else 'c'}_const{self._counter}"
        return self.add_const(t, name)

    # --- emitting nodes -----------------------------------------------------
    def emit(self, op: str, inputs: list[int], attrs: dict | None = None, nout: int = 1):
        node = self.node
        name = node.name if node is not None else op
        self._counter += 1
        if node is not None and getattr(self, "_emitted", None) is node:
            name = f"{node.name}.{op}{self._counter}"
        self._emitted = node
        src = source_line(node) if node is not None else ""
        if self.rec is None:
            outs = self.g.add_node(op, list(inputs), dict(attrs or {}), name, src)
        else:
            plain, sym, syms = self._sym_attrs(dict(attrs or {}))
            outs = self.g.add_node(op, list(inputs), plain, name, src, syms)
            self._infer_sym_shapes(op, list(inputs), sym, syms, outs)
        return outs[0] if nout == 1 else outs

    def cast(self, vid: int, dtype: str | torch.dtype) -> int:
        if isinstance(dtype, torch.dtype):
            dtype = engine_dtype(dtype)
        if self.dtype(vid) == dtype:
            return vid
        return self.emit("convert", [vid], {"dtype": dtype})

    def size_scalar(self, v, dtype: str) -> int:
        """A 0-d tensor holding a symbolic size (a size used as a number: x + x.shape[0]): a
        one-element arange from the size, so that every instance computes its own value."""
        r = self.emit("arange", [], {"start": v, "end": v + 1, "step": 1, "dtype": "int64"})
        return self.cast(self.emit("reshape", [r], {"shape": []}), dtype)

    def operand(self, arg, dtype: str) -> int:
        """A tensor argument cast to `dtype`, or a Python scalar as a 0-d constant."""
        if isinstance(arg, torch.fx.Node):
            return self.cast(self.value(arg), dtype)
        if isinstance(arg, (SymSize, BoundSize)):
            return self.size_scalar(arg, dtype)
        if isinstance(arg, (bool, int, float)):
            return self.const(arg, dtype)
        raise Unsupported(f"unsupported operand {arg!r}")

    def promote(self, *args) -> str:
        """torch's type promotion over tensor args (FX nodes) and Python scalars."""
        vals = []
        for a in args:
            if isinstance(a, torch.fx.Node):
                vals.append(a.meta["val"])
            elif isinstance(a, (bool, int, float)):
                vals.append(a)
            elif isinstance(a, SymSize):
                vals.append(0)  # an int for type promotion
            elif a is None:
                continue
            else:
                raise Unsupported(f"unsupported operand {a!r}")
        if len(vals) == 1:
            v = vals[0]
            return engine_dtype(v.dtype if isinstance(v, torch.Tensor) else torch.tensor(v).dtype)
        dt = vals[0]
        res = torch.result_type(vals[0], vals[1])
        for v in vals[2:]:
            res = torch.promote_types(res, v.dtype if isinstance(v, torch.Tensor) else torch.tensor(v).dtype)
        del dt
        return engine_dtype(res)


_ELEMENTWISE: set | None = None


def _elementwise_ops() -> set:
    global _ELEMENTWISE
    if _ELEMENTWISE is None:
        _ELEMENTWISE = set(C.elementwise_ops())
    return _ELEMENTWISE


def _broadcast(shapes: list[list]) -> list | None:
    """Broadcast of shapes with SymSize dims, or None where it depends on the sizes."""
    rank = max(len(s) for s in shapes)
    out = []
    for i in range(rank):
        dims = [s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0]
        dims = [d for d in dims if not (isinstance(d, int) and d == 1)]
        if not dims:
            out.append(1)
            continue
        first = dims[0]
        key = first.expr if isinstance(first, SymSize) else first
        if any((d.expr if isinstance(d, SymSize) else d) != key for d in dims[1:]):
            return None
        out.append(first)
    return out

