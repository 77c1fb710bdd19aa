"""Lowerings: sorting and selection (sort, topk, kthvalue, median, nanmedian).

Engine ops (csrc/kernels/sort.cpp) return (values, int64 indices):
  sort {dim, descending, stable}
  topk {k, dim, largest, sorted}
  kthvalue {k, dim, keepdim}
  median {dim, keepdim, ignore_nan}
Bool inputs fall back (PyTorch supports only sort for bool); so do empty inputs
of the ops PyTorch refuses them for, so that eager raises its own error.
"""
import torch

from . import Unsupported, aten, lowering
from .shape import reshape

_OK = {"float32", "float64", "bfloat16", "float16", "int64", "int32", "int16", "int8", "uint8"}


def _int(v, what):
    if isinstance(v, torch.fx.Node) or isinstance(v, bool) or not isinstance(v, int):
        raise Unsupported(f"{what} {v!r} is not a static int")
    return int(v)


def _input(ctx, x, op, allow_bool=False):
    v = ctx.value(x)
    dt = ctx.dtype(v)
    if dt not in _OK and not (allow_bool and dt == "bool"):
        raise Unsupported(f"{op} on {dt}")
    return v


def _dim(ctx, v, dim):
    d = _int(dim, "dim")
    r = max(ctx.rank(v), 1)
    if not -r <= d < r:
        raise Unsupported(f"dim {d} out of range for rank {ctx.rank(v)}")
    return d % r


def _size(ctx, v, d):
    return ctx.shape(v)[d] if ctx.rank(v) else 1


@lowering(aten.sort.default)
def _sort(ctx, node, x, dim=-1, descending=False):
    v = _input(ctx, x, "sort", allow_bool=True)
    return ctx.emit("sort", [v], {"dim": _dim(ctx, v, dim), "descending": bool(descending), "stable": False}, nout=2)


@lowering(aten.sort.stable)
def _sort_stable(ctx, node, x, *, stable=None, dim=-1, descending=False):
    v = _input(ctx, x, "sort", allow_bool=True)
    return ctx.emit("sort", [v], {"dim": _dim(ctx, v, dim), "descending": bool(descending),
                                  "stable": bool(stable)}, nout=2)


@lowering(aten.topk.default)
def _topk(ctx, node, x, k, dim=-1, largest=True, sorted=True):
    v = _input(ctx, x, "topk")
    d, k = _dim(ctx, v, dim), _int(k, "k")
    if not 0 <= k <= _size(ctx, v, d):
        raise Unsupported(f"topk: k {k} out of range")
    return ctx.emit("topk", [v], {"k": k, "dim": d, "largest": bool(largest), "sorted": bool(sorted)}, nout=2)


@lowering(aten.kthvalue.default)
def _kthvalue(ctx, node, x, k, dim=-1, keepdim=False):
    v = _input(ctx, x, "kthvalue")
    d, k = _dim(ctx, v, dim), _int(k, "k")
    if 0 in ctx.shape(v) or not 1 <= k <= _size(ctx, v, d):
        raise Unsupported("kthvalue: k out of range or empty input")
    return ctx.emit("kthvalue", [v], {"k": k, "dim": d, "keepdim": bool(keepdim)}, nout=2)


def _median_dim(ctx, x, dim, keepdim, ignore_nan):
    v = _input(ctx, x, "median")
    d = _dim(ctx, v, dim)
    if _size(ctx, v, d) == 0:
        raise Unsupported("median of an empty dimension")
    return ctx.emit("median", [v], {"dim": d, "keepdim": bool(keepdim), "ignore_nan": ignore_nan}, nout=2)


def _median_all(ctx, x, ignore_nan):
    v = _input(ctx, x, "median")
    n = 1
    for s in ctx.shape(v):
        n *= s
    if n == 0:
        raise Unsupported("median of an empty tensor")
    flat = reshape(ctx, v, [n])
    return ctx.emit("median", [flat], {"dim": 0, "keepdim": False, "ignore_nan": ignore_nan}, nout=2)[0]


@lowering(aten.median.dim)
def _median_d(ctx, node, x, dim, keepdim=False):
    return _median_dim(ctx, x, dim, keepdim, False)


@lowering(aten.nanmedian.dim)
def _nanmedian_d(ctx, node, x, dim, keepdim=False):
    return _median_dim(ctx, x, dim, keepdim, True)


@lowering(aten.median.default)
def _median(ctx, node, x):
    return _median_all(ctx, x, False)


@lowering(aten.nanmedian.default)
def _nanmedian(ctx, node, x):
    return _median_all(ctx, x, True)


# ---- scans (csrc/kernels/scan.cpp): cumprod{dim}, cummax/cummin{dim} -> (values, indices),
# logcumsumexp{dim}; cumsum is in reduce.py -------------------------------------------------
@lowering(aten.cumprod.default)
def _cumprod(ctx, node, x, dim, *, dtype=None):
    v = ctx.cast(ctx.value(x), ctx.out_dtype())
    return ctx.emit("cumprod", [v], {"dim": _dim(ctx, v, dim)})


@lowering(aten.cummax.default, aten.cummin.default)
def _cumext(ctx, node, x, dim):
    v = _input(ctx, x, "cummax/cummin")
    op = "cummax" if node.target is aten.cummax.default else "cummin"
    return ctx.emit(op, [v], {"dim": _dim(ctx, v, dim)}, nout=2)


@lowering(aten.logcumsumexp.default)
def _logcumsumexp(ctx, node, x, dim):
    v = ctx.value(x)
    if ctx.dtype(v) not in ("float32", "float64", "bfloat16", "float16"):
        raise Unsupported(f"logcumsumexp on {ctx.dtype(v)}")
    return ctx.emit("logcumsumexp", [v], {"dim": _dim(ctx, v, dim)})


@lowering(aten.mode.default)
def _mode(ctx, node, x, dim=-1, keepdim=False):
    v = _input(ctx, x, "mode", allow_bool=True)
    d = _dim(ctx, v, dim)
    if _size(ctx, v, d) == 0:
        raise Unsupported("mode of an empty dimension")
    return ctx.emit("mode", [v], {"dim": d, "keepdim": bool(keepdim)}, nout=2)
