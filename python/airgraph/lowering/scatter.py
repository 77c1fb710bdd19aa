"""Lowerings: scatters (scatter, scatter_add, scatter_reduce, index_add,
index_copy, index_fill, index_reduce, put) and take.

All scatters are one engine op (csrc/kernels/scatter.cpp):
  scatter(self, index, src){dim, reduce, include_self, index_1d, wrap, alpha}
with reduce one of none/sum/prod/mean/amax/amin; index_1d for the index_*
family (a 1-D index along dim); src is a tensor or a 0-d value. Indices are
range-checked at run time.
"""
import torch

from . import Unsupported, aten, lowering, static_shape
from .shape import reshape

_IDX = {"int64", "int32"}


def _int(v, what="dim"):
    if isinstance(v, torch.fx.Node) or isinstance(v, bool) or not isinstance(v, int):
        raise Unsupported(f"{what} {v!r} is not a static int")
    return int(v)


def _index(ctx, idx):
    v = ctx.value(idx)
    if ctx.dtype(v) not in _IDX:
        raise Unsupported(f"index of dtype {ctx.dtype(v)}")
    return v


def _dim(ctx, v, dim):
    d = _int(dim)
    r = max(ctx.rank(v), 1)
    if not -r <= d < r:
        raise Unsupported(f"dim {d} out of range for rank {ctx.rank(v)}")
    return d % r


def _src(ctx, src, dtype):
    if isinstance(src, torch.fx.Node):
        return ctx.cast(ctx.value(src), dtype)
    if isinstance(src, (bool, int, float)):
        if dtype == "bool":
            src = bool(src)
        elif dtype not in ("float32", "float64", "bfloat16", "float16"):
            if isinstance(src, float) and not src.is_integer():
                raise Unsupported("non-integral value scattered into an integer tensor")
            src = int(src)
        return ctx.const(src, dtype)
    raise Unsupported(f"scatter source {src!r}")


def _scatter(ctx, x, dim, index, src, reduce="none", include_self=True, index_1d=False, alpha=1.0, fill=False):
    v = ctx.value(x)
    dt = ctx.dtype(v)
    if reduce != "none" and dt == "bool":
        raise Unsupported(f"scatter reduce={reduce} on bool")
    d = _dim(ctx, v, dim)
    i = _index(ctx, index)
    s = _src(ctx, src, dt)
    xs = ctx.shape(v) or [1]
    ss, ishape = ctx.shape(s), ctx.shape(i)
    if index_1d and ctx.rank(v) == 0:
        # a 0-d self is a 1-element vector indexed by a 1-element index
        if _numel(ishape) != 1 or _numel(ss) != 1:
            raise Unsupported("index_* on a 0-d tensor with more than one index")
        out = ctx.emit("scatter", [reshape(ctx, v, [1]), reshape(ctx, i, [1]), reshape(ctx, s, [1] if ss or not fill else [])],
                       {"dim": 0, "reduce": reduce, "include_self": bool(include_self), "index_1d": True,
                        "wrap": False, "alpha": float(alpha)})
        return reshape(ctx, out, [])
    if index_1d:
        if len(ishape) > 1:
            raise Unsupported("index_* with an index of more than one dimension")
        want = list(xs)
        want[d] = 1 if not ishape else ishape[0]
        if not (fill and not ss) and ss != want:
            raise Unsupported(f"source shape {ss} is not the indexed shape {want}")
    else:
        if len(ishape) != ctx.rank(v) or (ss and len(ss) != len(ishape)):
            raise Unsupported("scatter: index/src rank differs from self")
        for k, n in enumerate(ishape):
            if (ss and n > ss[k]) or (k != d and n > xs[k]):
                raise Unsupported("scatter: index larger than src/self")
    attrs = {"dim": d, "reduce": reduce, "include_self": bool(include_self), "index_1d": index_1d,
             "wrap": False, "alpha": float(alpha)}
    return ctx.emit("scatter", [v, i, s], attrs)


_OLD = {"add": "sum", "multiply": "prod"}


@lowering(aten.scatter.src, aten.scatter.value)
def _scatter_src(ctx, node, x, dim, index, src):
    return _scatter(ctx, x, dim, index, src)


@lowering(aten.scatter.reduce, aten.scatter.value_reduce)
def _scatter_old_reduce(ctx, node, x, dim, index, src, *, reduce):
    if reduce not in _OLD:
        raise Unsupported(f"scatter reduce={reduce!r}")
    return _scatter(ctx, x, dim, index, src, _OLD[reduce])


@lowering(aten.scatter_add.default)
def _scatter_add(ctx, node, x, dim, index, src):
    return _scatter(ctx, x, dim, index, src, "sum")


@lowering(aten.scatter_reduce.two)
def _scatter_reduce(ctx, node, x, dim, index, src, reduce, *, include_self=True):
    if reduce not in ("sum", "prod", "mean", "amax", "amin"):
        raise Unsupported(f"scatter_reduce reduce={reduce!r}")
    return _scatter(ctx, x, dim, index, src, reduce, include_self)


@lowering(aten.index_add.default)
def _index_add(ctx, node, x, dim, index, source, *, alpha=1):
    if isinstance(alpha, torch.fx.Node):
        raise Unsupported("tensor alpha")
    if ctx.dtype(ctx.value(x)) not in ("float32", "float64", "bfloat16", "float16") and not float(alpha).is_integer():
        raise Unsupported("fractional alpha on an integer tensor")
    return _scatter(ctx, x, dim, index, source, "sum", index_1d=True, alpha=alpha)


@lowering(aten.index_copy.default)
def _index_copy(ctx, node, x, dim, index, source):
    return _scatter(ctx, x, dim, index, source, index_1d=True)


@lowering(aten.index_fill.int_Scalar, aten.index_fill.int_Tensor)
def _index_fill(ctx, node, x, dim, index, value):
    if isinstance(value, torch.fx.Node) and ctx.rank(ctx.value(value)) != 0:
        raise Unsupported("index_fill with a non-0-d value tensor")
    return _scatter(ctx, x, dim, index, value, index_1d=True, fill=True)


@lowering(aten.index_reduce.default)
def _index_reduce(ctx, node, x, dim, index, source, reduce, *, include_self=True):
    if reduce not in ("prod", "mean", "amax", "amin"):
        raise Unsupported(f"index_reduce reduce={reduce!r}")
    return _scatter(ctx, x, dim, index, source, reduce, include_self, index_1d=True)


def _numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


@lowering(aten.put.default)
def _put(ctx, node, x, index, source, accumulate=False):
    v = ctx.value(x)
    i = _index(ctx, index)
    s = ctx.cast(ctx.value(source), ctx.dtype(v))
    n, m = _numel(ctx.shape(v)), _numel(ctx.shape(i))
    if accumulate and ctx.dtype(v) == "bool":
        raise Unsupported("put accumulate on bool")
    if _numel(ctx.shape(s)) != m:
        raise Unsupported("put: source and index have different numbers of elements")
    if n == 0:
        raise Unsupported("put into an empty tensor")
    flat = reshape(ctx, v, [n])
    out = ctx.emit("scatter", [flat, reshape(ctx, i, [m]), reshape(ctx, s, [m])],
                   {"dim": 0, "reduce": "sum" if accumulate else "none", "include_self": True, "index_1d": False,
                    "wrap": True, "alpha": 1.0})
    return reshape(ctx, out, ctx.shape(v))


@lowering(aten.take.default)
def _take(ctx, node, x, index):
    v = ctx.value(x)
    i = _index(ctx, index)
    n = _numel(ctx.shape(v))
    if n == 0:
        raise Unsupported("take from an empty tensor")
    return ctx.emit("index", [reshape(ctx, v, [n]), i], {"dims": [0]})


@lowering(aten.masked_scatter.default)
def _masked_scatter(ctx, node, x, mask, source):
    v, m = ctx.value(x), ctx.value(mask)
    if ctx.dtype(m) != "bool":
        raise Unsupported("masked_scatter with a non-bool mask")
    shape = static_shape(ctx.out_meta())
    if ctx.shape(v) != shape:
        v = ctx.emit("expand", [v], {"shape": shape})
    if ctx.shape(m) != shape:
        m = ctx.emit("expand", [m], {"shape": shape})
    s = ctx.cast(ctx.value(source), ctx.dtype(v))
    return ctx.emit("masked_scatter", [v, m, s])
