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

import torch
import torch.fx

from .._core import C

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
    import sympy

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


def concrete_arg(a):
    """An FX argument with symbolic scalars (FX nodes whose value is a SymInt, SymInts in lists)
    replaced by their values in the current binding; tensors and the rest unchanged."""
    if getattr(_SIZES, "env", None) is None:
        return a  # a static graph: nothing to substitute
    if isinstance(a, torch.fx.Node):
        v = a.meta.get("val")
        if isinstance(v, _SYM_TYPES):
            try:
                return concrete(v)
            except Unsupported:
                return a  # a symbol no input binds (a float argument): stays an engine input
        return a
    if isinstance(a, (list, tuple)):
        return type(a)(concrete_arg(x) for x in a)
    if isinstance(a, _SYM_TYPES):
        return concrete(a)
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
        return list(self.value_type(vid)[1])

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
        return self.g.add_const(t, name)

    # --- emitting nodes -----------------------------------------------------
    def emit(self, op: str, inputs: list[int], attrs: dict | None = None, nout: int = 1):
        node = self.node
        name = node.name if node is not None else op
        self._counter += 1
        if node is not None and getattr(self, "_emitted", None) is node:
            name = f"{node.name}.{op}{self._counter}"
        self._emitted = node
        src = source_line(node) if node is not None else ""
        outs = self.g.add_node(op, list(inputs), dict(attrs or {}), name, src)
        return outs[0] if nout == 1 else outs

    def cast(self, vid: int, dtype: str | torch.dtype) -> int:
        if isinstance(dtype, torch.dtype):
            dtype = engine_dtype(dtype)
        if self.dtype(vid) == dtype:
            return vid
        return self.emit("convert", [vid], {"dtype": dtype})

    def operand(self, arg, dtype: str) -> int:
        """A tensor argument cast to `dtype`, or a Python scalar as a 0-d constant."""
        if isinstance(arg, torch.fx.Node):
            return self.cast(self.value(arg), dtype)
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


def load_all():
    """Imports every family file so their rows register."""
    from . import families  # noqa: F401
