"""A user's own operators in the engine graph: the public lowering API.

    import torch, airgraph

    @torch.library.custom_op("mylib::scaled_gelu", mutates_args=())
    def scaled_gelu(x: torch.Tensor, scale: float) -> torch.Tensor: ...

    @airgraph.register_lowering(torch.ops.mylib.scaled_gelu.default)
    def _(b, x, scale):              # b: a Builder; x: an engine Value; scale: a Python float
        if x.dtype != torch.float32:
            raise airgraph.Decline("float32 only")   # this node falls back to PyTorch
        return b.op("gelu", x, approximate="tanh") * scale

A lowering receives the FX node's arguments with every tensor replaced by an engine `Value`
(lists of tensors by lists of Values; other arguments as PyTorch traced them, sizes in the
binding being compiled) and returns the node's result: a Value, or a tuple/list of Values for
an op with several results. It builds that result from engine ops (`airgraph.ops()` lists them;
a C++ plugin's ops too, `airgraph.load_library`) with `Builder.op`, `Builder.const` and the
arithmetic operators of `Value`. The row is one more entry of the table the built-in lowerings
fill (lowering/__init__.py, LOWERINGS): torch.compile, cache_compile, airgraph.export and
dynamic shapes all go through it. The result's dtype and shape are checked against what
PyTorch traced for the node, as for a built-in op.

`raise airgraph.Decline(reason)` leaves this one node to PyTorch (the reason shows in
airgraph.explain). Any other error raised by the lowering, or by the engine while building the
node (an op that does not exist, shapes that do not fit), fails the compile with an
`airgraph.LoweringError` naming the op, the FX node, the lowering function and the user's
source line.
"""
from __future__ import annotations

import hashlib
import inspect
import os
import traceback

import torch
import torch.fx

from . import lowering as _lowering
from ._core import C, EngineError
from .lowering import (LOWERINGS, LowerCtx, Unsupported, engine_dtype, source_line, torch_dtype)
from .lowering.sizes import NotSymbolic

__all__ = ["Builder", "Decline", "LoweringError", "Value", "register_lowering"]


class Decline(Unsupported):
    """Raised by a user lowering: this call of the op falls back to PyTorch (for this node only)."""


class LoweringError(EngineError):
    """A user lowering failed (its own error, or the engine's while it built a node)."""


class Value:
    """An engine value inside a lowering: its dtype and shape, and arithmetic that emits engine
    ops (a Python number becomes a 0-d constant of the value's dtype)."""

    __slots__ = ("_b", "id")

    def __init__(self, builder: "Builder", vid: int):
        self._b, self.id = builder, vid

    @property
    def dtype(self) -> torch.dtype:
        return torch_dtype(self._b._ctx.dtype(self.id))

    @property
    def shape(self) -> tuple:
        """Sizes: ints, or (lowering once for every size of a dynamic graph) symbolic sizes that
        behave as ints in arithmetic."""
        return tuple(self._b._ctx.shape(self.id))

    @property
    def ndim(self) -> int:
        return len(self._b._ctx.value_type(self.id)[1])

    def __repr__(self) -> str:
        return f"airgraph.Value(%{self.id}: {self._b._ctx.dtype(self.id)}{list(self._b._ctx.value_type(self.id)[1])})"

    def _bin(self, op: str, other, swap: bool = False) -> "Value":
        b = self._b
        if isinstance(other, Value):
            dt = torch.promote_types(self.dtype, other.dtype)
            x, y = b.cast(self, dt), b.cast(other, dt)
        elif isinstance(other, (bool, int, float)):
            x, y = self, b.const(other, self.dtype)
        else:
            return NotImplemented
        return b.op(op, y, x) if swap else b.op(op, x, y)

    def __add__(self, o): return self._bin("add", o)
    def __radd__(self, o): return self._bin("add", o, True)
    def __sub__(self, o): return self._bin("sub", o)
    def __rsub__(self, o): return self._bin("sub", o, True)
    def __mul__(self, o): return self._bin("mul", o)
    def __rmul__(self, o): return self._bin("mul", o, True)
    def __truediv__(self, o): return self._bin("div", o)
    def __rtruediv__(self, o): return self._bin("div", o, True)
    def __neg__(self): return self._b.op("neg", self)


class Builder:
    """Builds engine nodes for one FX node (the node a lowering was called for): every node it
    makes carries that FX node's name and the user's source line."""

    def __init__(self, ctx: LowerCtx, node: torch.fx.Node):
        self._ctx, self.node = ctx, node

    def op(self, name: str, *inputs: Value, nout: int = 1, **attrs):
        """One engine node: `name` an engine op (airgraph.ops()), `inputs` Values, `attrs` its
        attributes (numbers, bools, strings, lists of numbers, torch dtypes). Returns its result,
        or a tuple of `nout` results."""
        ids = []
        for i, v in enumerate(inputs):
            if not isinstance(v, Value):
                raise TypeError(f"input {i} of engine op {name!r} is a {type(v).__name__}, not an airgraph.Value "
                                "(make numbers constants with b.const)")
            ids.append(v.id)
        attrs = {k: engine_dtype(v) if isinstance(v, torch.dtype) else v for k, v in attrs.items()}
        out = self._ctx.emit(name, ids, attrs, nout=nout)
        return Value(self, out) if nout == 1 else tuple(Value(self, o) for o in out)

    def const(self, value, dtype: torch.dtype | None = None, shape: list[int] | None = None) -> Value:
        """A constant: a Python number (0-d, or filled to `shape`) or a tensor (copied)."""
        if dtype is None:
            dtype = value.dtype if isinstance(value, torch.Tensor) else torch.tensor(value).dtype
        return Value(self, self._ctx.const(value, dtype, shape))

    def cast(self, x: Value, dtype: torch.dtype) -> Value:
        return Value(self, self._ctx.cast(x.id, dtype))


def _wrap(b: Builder, a):
    """An FX argument as the user lowering sees it: tensors become Values."""
    if isinstance(a, torch.fx.Node):
        if a in b._ctx.env:
            v = b._ctx.env[a]
            return [None if x is None else Value(b, x) for x in v] if isinstance(v, list) else Value(b, v)
        return a
    if isinstance(a, (list, tuple)):
        return type(a)(_wrap(b, x) for x in a)
    return a


def _unwrap(res):
    if isinstance(res, Value):
        return res.id
    if isinstance(res, (list, tuple)) and all(isinstance(r, Value) or r is None for r in res):
        return [None if r is None else r.id for r in res]
    raise TypeError(f"returned {type(res).__name__}; a lowering returns an airgraph.Value (or a tuple of them)")


def _where(fn) -> str:
    try:
        return f"{inspect.getsourcefile(fn)}:{inspect.getsourcelines(fn)[1]}"
    except (OSError, TypeError):
        return getattr(fn, "__qualname__", repr(fn))


def _user_frame(e: BaseException, fn) -> str:
    """The deepest frame of the traceback inside the lowering's own file ('file:line: code')."""
    src = inspect.getsourcefile(fn) if inspect.isfunction(fn) else None
    best = ""
    for fr in traceback.extract_tb(e.__traceback__):
        if src and fr.filename == src:
            best = f"{fr.filename}:{fr.lineno}: {(fr.line or '').strip()}"
    return best


def _overloads(target) -> list:
    """OpOverloads of a registration target: an OpOverload, an OpOverloadPacket (all of its
    overloads) or a torch.library.custom_op object."""
    if isinstance(target, torch._ops.OpOverload):
        return [target]
    if isinstance(target, torch._ops.OpOverloadPacket):
        return [getattr(target, o) for o in target.overloads()]
    op = getattr(target, "_opoverload", None)  # torch.library.custom_op's CustomOpDef
    if isinstance(op, torch._ops.OpOverload):
        return [op]
    raise TypeError(f"register_lowering: {target!r} is not a torch op (torch.ops.ns.op[.overload] or a "
                    "torch.library.custom_op)")


_USER: dict = {}  # OpOverload -> the user function (for the compile cache's key)


def register_lowering(target, *, override: bool = False):
    """Decorator: `fn(builder, *args, **kwargs)` lowers every call of `target` (a torch op: an
    OpOverload such as torch.ops.mylib.my_op.default, an OpOverloadPacket, or the object
    torch.library.custom_op returns) into engine ops. See the module's text. `override=True`
    replaces an earlier lowering of the same op (a built-in one included)."""
    ops = _overloads(target)

    def deco(fn):
        for op in ops:
            if op in LOWERINGS and not override:
                prev = f"a lowering at {_where(_USER[op])}" if op in _USER else "a built-in lowering"
                raise ValueError(f"register_lowering: {op} already has {prev} (override=True replaces it)")
            LOWERINGS[op] = _make_row(op, fn)
            _USER[op] = fn
        return fn

    return deco


def _make_row(op, fn):
    op_name = str(op)

    def row(ctx: LowerCtx, node: torch.fx.Node, *args, **kwargs):
        b = Builder(ctx, node)
        try:
            res = fn(b, *[_wrap(b, a) for a in args], **{k: _wrap(b, v) for k, v in kwargs.items()})
            return _unwrap(res)
        except (Unsupported, NotSymbolic):  # Decline, and the front's own (another size, a dtype it lacks)
            raise
        except Exception as e:
            where = _user_frame(e, fn)
            src = source_line(node)
            msg = str(e).split("\n")[0]  # (the engine's own lines name the model's line: said below once)
            raise LoweringError(
                f"lowering of {op_name} failed for FX node {node.name}: {type(e).__name__}: {msg}\n"
                f"  in the lowering {getattr(fn, '__qualname__', fn)} ({where or _where(fn)})"
                + (f"\n  called from the model at {src}" if src else "")) from e

    row.__airgraph_user__ = fn
    return row


def key_text() -> str:
    """What the compile cache's keys add for the user's ops: every user lowering's op and the hash
    of its code, and the loaded plugins with their versions (another lowering, another graph)."""
    parts = []
    for op, fn in sorted(_USER.items(), key=lambda kv: str(kv[0])):
        code = getattr(fn, "__code__", None)
        text = code.co_code + repr(code.co_consts).encode() if code is not None else repr(fn).encode()
        parts.append(f"{op}={hashlib.blake2b(text, digest_size=8).hexdigest()}")
    parts.extend(f"plugin {n}={v} {ops}" for n, v, ops in sorted(C.loaded_plugins()))
    return ";".join(parts)


# ---- C++ plugins ---------------------------------------------------------------------------------
def load_library(path) -> dict:
    """Loads an op plugin (a shared library built against include/airgraph/op_plugin.h; see
    cmake_dir()) into the engine: its ops join the registry beside the built-in ones, for lowerings
    (b.op("mylib::my_op", ...)) and for airgraph.load of files that use them. Returns
    {"name", "version", "ops"}. Loading the same plugin twice is a no-op; another version of a loaded
    plugin is refused (EngineError naming the file)."""
    name, version, ops = C.load_library(os.fspath(path))
    _lowering._ELEMENTWISE = None  # (the elementwise ops' names, read once: a plugin may add some)
    return {"name": name, "version": version, "ops": list(ops)}


def cmake_dir() -> str:
    """The folder of airgraph's CMake package (airgraphConfig.cmake): a plugin's CMakeLists.txt does
    find_package(airgraph CONFIG REQUIRED) with -Dairgraph_DIR=<this> and links airgraph::plugin
    (the public headers; a plugin links nothing of airgraph's)."""
    here = os.path.dirname(os.path.abspath(__file__))
    for d in (os.path.join(here, "cmake"), os.path.join(here, "..", "..", "cmake")):  # installed; source tree
        if os.path.isfile(os.path.join(d, "airgraphConfig.cmake")):
            return os.path.normpath(d)
    raise FileNotFoundError(f"airgraphConfig.cmake is not installed beside {here}")


def include_dir() -> str:
    """The folder that holds airgraph/op_plugin.h (for a build without CMake: -I<this>)."""
    return os.path.normpath(os.path.join(cmake_dir(), "..", "include"))
