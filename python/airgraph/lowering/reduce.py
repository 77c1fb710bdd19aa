"""Lowerings: reductions (sum, mean, prod, amax/amin, var, any/all, argmax/argmin,
max/min with indices), softmax / log_softmax and cumsum.

Engine ops (csrc/kernels/reduce.cpp, softmax.cpp):
  sum / prod {dims, keepdim, dtype?}  floating -> same dtype, ints/bool -> int64
  mean {dims, keepdim}                floating only
  amax / amin {dims, keepdim}         same dtype, NaN propagates
  any / all {dims, keepdim, empty_is_all} -> bool
  var {dims, keepdim, correction}     floating only
  argmax / argmin {dim?, keepdim}     -> int64 (no dim: the flattened tensor)
  softmax / log_softmax {dim}         floating only
  cumsum {dim, dtype?}
An empty `dims` list means all dims (except for any/all with empty_is_all=False).
Output dtype requests the engine op cannot take directly are done as a convert first,
which is what PyTorch does (the input is cast to `dtype`, then reduced).
"""
import torch

from . import Unsupported, aten, engine_dtype, lowering

_FLOATS = ("float32", "float64", "bfloat16", "float16")


def _dims(dim, rank):
    """A dim argument (None, int or list) as a list of ints; [] = all."""
    if dim is None:
        return []
    if isinstance(dim, int):
        return [dim]
    dims = list(dim)
    if not all(isinstance(d, int) for d in dims):
        raise Unsupported(f"non-constant reduction dims {dim}")
    return dims


def _prep_dtype(ctx, x, dtype):
    """Input value, cast to `dtype` first when torch would (sum/prod/mean/cumsum with dtype=)."""
    v = ctx.value(x)
    if dtype is None:
        return v, None
    d = engine_dtype(dtype)
    if d == "bool":
        raise Unsupported("reducing into bool")
    return ctx.cast(v, d), d


def _sum_like(op, ctx, x, dim, keepdim, dtype):
    v, d = _prep_dtype(ctx, x, dtype)
    attrs = {"dims": _dims(dim, ctx.rank(v)), "keepdim": bool(keepdim)}
    if d is not None:
        attrs["dtype"] = d
    return ctx.emit(op, [v], attrs)


@lowering(aten.sum.dim_IntList)
def _sum_dim(ctx, node, x, dim=None, keepdim=False, *, dtype=None):
    return _sum_like("sum", ctx, x, dim, keepdim, dtype)


@lowering(aten.sum.default)
def _sum_all(ctx, node, x, *, dtype=None):
    return _sum_like("sum", ctx, x, None, False, dtype)


@lowering(aten.prod.dim_int)
def _prod_dim(ctx, node, x, dim, keepdim=False, *, dtype=None):
    return _sum_like("prod", ctx, x, dim, keepdim, dtype)


@lowering(aten.prod.default)
def _prod_all(ctx, node, x, *, dtype=None):
    return _sum_like("prod", ctx, x, None, False, dtype)


def _mean(ctx, x, dim, keepdim, dtype):
    v, d = _prep_dtype(ctx, x, dtype)
    if ctx.dtype(v) not in _FLOATS:
        raise Unsupported(f"mean of {ctx.dtype(v)}")
    return ctx.emit("mean", [v], {"dims": _dims(dim, ctx.rank(v)), "keepdim": bool(keepdim)})


@lowering(aten.mean.dim)
def _mean_dim(ctx, node, x, dim=None, keepdim=False, *, dtype=None):
    return _mean(ctx, x, dim, keepdim, dtype)


@lowering(aten.mean.default)
def _mean_all(ctx, node, x, *, dtype=None):
    return _mean(ctx, x, None, False, dtype)


@lowering(aten.amax.default)
def _amax(ctx, node, x, dim=(), keepdim=False):
    return ctx.emit("amax", [ctx.value(x)], {"dims": _dims(dim, 0), "keepdim": bool(keepdim)})


@lowering(aten.amin.default)
def _amin(ctx, node, x, dim=(), keepdim=False):
    return ctx.emit("amin", [ctx.value(x)], {"dims": _dims(dim, 0), "keepdim": bool(keepdim)})


@lowering(aten.max.default)
def _max_all(ctx, node, x):
    return ctx.emit("amax", [ctx.value(x)], {"dims": [], "keepdim": False})


@lowering(aten.min.default)
def _min_all(ctx, node, x):
    return ctx.emit("amin", [ctx.value(x)], {"dims": [], "keepdim": False})


def _val_idx(ctx, node, x, dim, keepdim, vop, iop):
    v = ctx.value(x)
    if not isinstance(dim, int):
        raise Unsupported(f"non-constant dim {dim}")
    vals = ctx.emit(vop, [v], {"dims": [dim], "keepdim": bool(keepdim)})
    idx = ctx.emit(iop, [v], {"dim": dim, "keepdim": bool(keepdim)})
    return [vals, idx]


@lowering(aten.max.dim)
def _max_dim(ctx, node, x, dim, keepdim=False):
    return _val_idx(ctx, node, x, dim, keepdim, "amax", "argmax")


@lowering(aten.min.dim)
def _min_dim(ctx, node, x, dim, keepdim=False):
    return _val_idx(ctx, node, x, dim, keepdim, "amin", "argmin")


def _arg(op, ctx, x, dim, keepdim):
    attrs = {"keepdim": bool(keepdim)}
    if dim is not None:
        if not isinstance(dim, int):
            raise Unsupported(f"non-constant dim {dim}")
        attrs["dim"] = dim
    return ctx.emit(op, [ctx.value(x)], attrs)


@lowering(aten.argmax.default)
def _argmax(ctx, node, x, dim=None, keepdim=False):
    return _arg("argmax", ctx, x, dim, keepdim)


@lowering(aten.argmin.default)
def _argmin(ctx, node, x, dim=None, keepdim=False):
    return _arg("argmin", ctx, x, dim, keepdim)


def _var(ctx, x, dim, correction, keepdim):
    v = ctx.value(x)
    if ctx.dtype(v) not in _FLOATS:
        raise Unsupported(f"var of {ctx.dtype(v)}")
    if correction is None:
        correction = 1
    if not isinstance(correction, (int, float)) or isinstance(correction, bool):
        raise Unsupported(f"correction {correction!r}")
    return ctx.emit("var", [v], {"dims": _dims(dim, ctx.rank(v)), "keepdim": bool(keepdim),
                                 "correction": float(correction)})


@lowering(aten.var.correction)
def _var_correction(ctx, node, x, dim=None, *, correction=None, keepdim=False):
    return _var(ctx, x, dim, correction, keepdim)


@lowering(torch.ops.prims.var.default)
def _prims_var(ctx, node, x, dims, correction=1.0, *, output_dtype=None):
    if output_dtype is not None and output_dtype != node.args[0].meta["val"].dtype:
        raise Unsupported("prims.var with output_dtype")
    return _var(ctx, x, dims if dims is not None else [], correction, False)


@lowering(torch.ops.prims.sum.default)
def _prims_sum(ctx, node, x, dims, *, output_dtype=None):
    v = ctx.value(x)
    want = engine_dtype(output_dtype) if output_dtype is not None else ctx.dtype(v)
    if want != ctx.dtype(v) or want not in _FLOATS:
        raise Unsupported("prims.sum outside floating same-dtype")
    return ctx.emit("sum", [v], {"dims": _dims(dims, ctx.rank(v)), "keepdim": False})


def _anyall(op, ctx, x, dim, keepdim, empty_is_all):
    attrs = {"dims": _dims(dim, 0), "keepdim": bool(keepdim), "empty_is_all": bool(empty_is_all)}
    return ctx.emit(op, [ctx.value(x)], attrs)


@lowering(aten.any.default)
def _any_all(ctx, node, x):
    return _anyall("any", ctx, x, None, False, True)


@lowering(aten.any.dim)
def _any_dim(ctx, node, x, dim, keepdim=False):
    return _anyall("any", ctx, x, [dim], keepdim, True)


@lowering(aten.any.dims)
def _any_dims(ctx, node, x, dim=None, keepdim=False):
    # any.dims with dim=None reduces everything; an explicit [] reduces nothing
    return _anyall("any", ctx, x, dim, keepdim, dim is None)


@lowering(aten.all.default)
def _all_all(ctx, node, x):
    return _anyall("all", ctx, x, None, False, True)


@lowering(aten.all.dim)
def _all_dim(ctx, node, x, dim, keepdim=False):
    return _anyall("all", ctx, x, [dim], keepdim, True)


@lowering(aten.all.dims)
def _all_dims(ctx, node, x, dim=None, keepdim=False):
    return _anyall("all", ctx, x, dim, keepdim, dim is None)


def _softmax_like(op, ctx, node, x, dim, half_to_float):
    if half_to_float:
        raise Unsupported(f"{op} with half_to_float=True")
    v = ctx.value(x)
    if ctx.dtype(v) not in _FLOATS:
        raise Unsupported(f"{op} of {ctx.dtype(v)}")
    return ctx.emit(op, [v], {"dim": int(dim)})


@lowering(aten._softmax.default)
def _softmax(ctx, node, x, dim, half_to_float):
    return _softmax_like("softmax", ctx, node, x, dim, half_to_float)


@lowering(aten._safe_softmax.default)
def _safe_softmax(ctx, node, x, dim, dtype=None):
    # softmax, except that a row whose inputs are all -inf gives 0 (SDPA's math path)
    v = ctx.value(x)
    if dtype is not None:
        v = ctx.cast(v, dtype)
    if ctx.dtype(v) not in _FLOATS:
        raise Unsupported(f"_safe_softmax of {ctx.dtype(v)}")
    sm = ctx.emit("softmax", [v], {"dim": int(dim)})
    dead = ctx.emit("eq", [ctx.emit("amax", [v], {"dims": [int(dim)], "keepdim": True}),
                           ctx.const(float("-inf"), ctx.dtype(v))])
    return ctx.emit("where", [dead, ctx.const(0.0, ctx.dtype(v)), sm])


@lowering(aten._log_softmax.default)
def _log_softmax(ctx, node, x, dim, half_to_float):
    return _softmax_like("log_softmax", ctx, node, x, dim, half_to_float)


@lowering(aten.cumsum.default)
def _cumsum(ctx, node, x, dim, *, dtype=None):
    v, d = _prep_dtype(ctx, x, dtype)
    attrs = {"dim": int(dim)}
    if d is not None:
        attrs["dtype"] = d
    return ctx.emit("cumsum", [v], attrs)
